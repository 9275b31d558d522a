"""snakemake 9.27 with snakemake-executor-plugin-slurm 2.8 (unchanged) against 3 controllers and 2 agents.

The plugin submits each job with `sbatch --parsable --job-name UUID --output .../%j.log --export=ALL
--comment RULE -p PART --mem N --ntasks=1 --cpus-per-task=1 -D DIR --wrap=...` (an array rule once with
`--array=1-N` and `%A_%a.log`), polls `sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State
--starttime T --endtime now --name UUID`, reads `scontrol show config` and `sinfo -o %P`, and inside each
non-array job runs `srun -n1 --cpu-bind=q --cpus-per-task=1 ... python -m snakemake ...`. A status poll that
fails is only logged at debug level and the workflow then waits for ever: the run has a hard deadline.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SNAKEFILE = """
SAMPLES = ["a", "b", "c"]

localrules: all

rule all:
    input: "combined.txt", "broken.txt"

rule make:
    output: "data/{sample}.txt"
    shell: "echo {wildcards.sample} > {output}"

rule combine:
    input: expand("data/{sample}.txt", sample=SAMPLES)
    output: "combined.txt"
    shell: "cat {input} > {output}"

rule broken:
    output: "broken.txt"
    shell: "echo 'failing on purpose' >&2; exit 3"
"""
RUN_SECS = 300
# mem_mb: snakemake's own default; each job holds a snakemake jobstep (about 125 MB resident) and srun, and the
# agents enforce --mem (a 200 MB limit ended the array tasks OUT_OF_MEMORY)


def test_a_workflow_with_an_array_rule_and_a_failing_rule_ends_reporting_the_failure(slurm_site) -> None:
    flow = slurm_site.work / "flow"
    flow.mkdir()
    (flow / "Snakefile").write_text(SNAKEFILE)
    argv = ["-m", "snakemake", "--snakefile", str(flow / "Snakefile"), "--directory", str(flow),
            "--executor", "slurm", "--jobs", "4", "--slurm-array-jobs", "make", "--keep-going",
            "--slurm-init-seconds-before-status-checks", "2", "--default-resources", "runtime=5", "mem_mb=1000",
            "--latency-wait", "10", "--printshellcmds"]  # fmt: skip
    done = slurm_site.client(argv, RUN_SECS, "snakemake's workflow")
    output = done.stdout + done.stderr
    report = f"snakemake exit {done.returncode}\n{output[-8000:]}\n--- refused\n{slurm_site.refusals_text()}"
    assert done.returncode != 0, report  # one rule fails on purpose: the workflow must say so
    assert "Error in rule broken" in output, report
    assert "sbatch failed" not in output, report  # every job was submitted: the failure is the rule's own
    for rule in ("make", "combine"):
        assert f"Error in rule {rule}" not in output, report
    assert (flow / "combined.txt").read_text() == "a\nb\nc\n", report
    assert not (flow / "broken.txt").exists()
    arrays = [c for c in slurm_site.calls_of("sbatch") if any(a.startswith("--array=") for a in c["argv"])]
    assert len(arrays) == 1 and "--array=1-3" in arrays[0]["argv"], report

"""The scripted session captured from Slurm and replayed on Spur: the cluster's shape and the commands, in order.

A Run is one captured command (the first word is Slurm's command; each side runs its own). `{name}` in a command
is the job id that the Run with job="name" printed on the same side (so one text drives both clusters). A Wait
is not captured: it polls the side's own squeue (or any command) until the session may go on, so that each
capture sees the same job and node states on both sides. Submissions whose acceptance may differ between Slurm
and Spur come last, so that job ids agree everywhere before them.
"""

from __future__ import annotations

from dataclasses import dataclass

CLUSTER = "capture"
NODES = ["n1", "n2", "n3", "n4"]
PARTITIONS = {"debug": ["n1", "n2"], "long": ["n3", "n4"]}  # debug is the default; a node is in one partition
DEFAULT_PARTITION = "debug"
CPUS = 4
NODE_ADDR = "127.0.0.1"  # every node's address on both sides; each node has a port of its own
MEMORY_MB = 4096  # Spur's test agents declare 4096 MB; Slurm's nodes are configured alike (config_overrides)
PARTITION_LIMITS = {"debug": "MaxTime=60", "long": "MaxTime=INFINITE"}

FILES = {"steps.sh": "#!/bin/sh\nsrun sleep 600\n"}  # written into the work directory before the session


@dataclass(frozen=True)
class Run:
    name: str
    cmd: str
    job: str | None = None  # remember the job id this command printed under this name


@dataclass(frozen=True)
class Wait:
    what: str
    cmd: str  # polled until its stdout matches `until` (a regular expression), or has no match of `absent`
    until: str | None = None
    absent: str | None = None
    timeout: float = 60.0


def job_in(job: str, *states: str, count: int = 1, timeout: float = 60.0) -> Wait:
    """Wait until at least `count` records of the job (array tasks included) are in one of `states`."""
    alternatives = "|".join(states)
    return Wait(
        f"{job} {'/'.join(states)}",
        f"squeue -h -t all -j {{{job}}} -o %T",
        until=rf"(?s)(^|.*\n)({alternatives})\n" + (rf"(.*\n)?({alternatives})\n" * (count - 1)),
        timeout=timeout,
    )


NO_COMPLETING = Wait("no node completing", "sinfo -h -N -o %T", absent="comp")

SESSION: list[Run | Wait] = [
    # ---------------------------------------------------------------- an idle cluster
    Run("sinfo-idle", "sinfo"),
    Run("sinfo-N-idle", "sinfo -N"),
    Run("sinfo-N-l-idle", "sinfo -N -l"),
    Run("sinfo-s-idle", "sinfo -s"),
    Run("sinfo-e-idle", "sinfo -e"),
    Run("sinfo-R-idle", "sinfo -R"),
    Run("sinfo-o-basic", "sinfo -o '%P %a %l %D %t %N'"),
    Run("sinfo-o-FCGf", "sinfo -o '%P %F %C %G %f'"),
    Run("sinfo-N-o-fields", "sinfo -N -o '%N %c %m %d %w %T %E %z %X %Y %Z %n %o'"),
    Run("sinfo-O-names", "sinfo -O NodeList,CPUs,Memory,StateLong,Partition"),
    Run("sinfo-O-widths", "sinfo -O NodeList:12,CPUsState:15,Reason:20"),
    Run("sinfo-p-long", "sinfo -p long"),
    Run("sinfo-n-list", "sinfo -n n1,n3"),
    Run("sinfo-h-P", "sinfo -h -o %P"),
    Run("sinfo-aho-FC", "sinfo -aho %F/%C"),
    Run("sinfo-t-idle", "sinfo -t idle"),
    Run("sinfo-V", "sinfo -V"),
    Run("squeue-empty", "squeue"),
    Run("squeue-l-empty", "squeue -l"),
    Run("scontrol-show-partition", "scontrol show partition"),
    Run("scontrol-o-show-partition-debug", "scontrol -o show partition debug"),
    Run("scontrol-show-part-o-trailing", "scontrol show part -o"),
    Run("scontrol-show-node-n1-idle", "scontrol show node n1"),
    Run("scontrol-o-show-node-n3", "scontrol -o show node n3"),
    Run("scontrol-show-node-unknown", "scontrol show node nosuchnode"),
    Run("scontrol-ping", "scontrol ping"),
    Run("scontrol-show-config", "scontrol show config"),
    Run("sacct-empty", "sacct"),
    Run("scontrol-show-job-unknown", "scontrol show job 999"),
    Run("scancel-unknown", "scancel 999"),
    Run("squeue-j-unknown", "squeue -j 999"),
    Run("sacct-j-unknown", "sacct -j 999"),
    Run("squeue-bad-state", "squeue -t NOSUCHSTATE"),
    Run("sinfo-bad-option", "sinfo --nosuchoption"),
    # ---------------------------------------------------------------- jobs that finish, run, time out
    Run("sbatch-done", "sbatch -p debug -J done --wrap true", job="done"),
    Run("sbatch-fail", "sbatch -p debug -J fail --wrap 'exit 3'", job="fail"),
    Run("sbatch-timeout", "sbatch -p long -w n3 -J tmo -t 1 --wrap 'sleep 300'", job="tmo"),
    job_in("done", "COMPLETED"),
    job_in("fail", "FAILED"),
    job_in("tmo", "RUNNING"),
    Run("sbatch-parsable-run1", "sbatch --parsable -p debug -w n1 -J run1 --wrap 'sleep 600'", job="run1"),
    Run("sbatch-big", "sbatch -p debug -w n2 -c 4 -J big --wrap 'sleep 600'", job="big"),
    Run("sbatch-steps", "sbatch -p debug -w n1 -J steps steps.sh", job="steps"),
    job_in("run1", "RUNNING"),
    job_in("big", "RUNNING"),
    Wait("step 0 of steps", "squeue -h -s -j {steps} -o %i", until=r"\.0\b"),
    Run("sbatch-array", "sbatch -p long -w n3 --array=0-5%2 -J arr --wrap 'sleep 600'", job="arr"),
    job_in("arr", "RUNNING", count=2),
    Run("sbatch-wait-resources", "sbatch -p debug -c 4 -J waitres --wrap 'sleep 60'", job="waitres"),
    Run("sbatch-wait-priority", "sbatch -p debug -c 4 -J waitprio --wrap 'sleep 60'", job="waitprio"),
    Run("sbatch-held", "sbatch -p debug -H -J held --wrap true", job="held"),
    Run("sbatch-dependency", "sbatch -p debug -d afterok:{run1} -J dep --wrap true", job="dep"),
    Run("sbatch-tocancel", "sbatch -p debug -H -J tocancel --wrap true", job="tocancel"),
    Run("sbatch-cancelrun", "sbatch -p long -w n4 -J cancelrun --wrap 'sleep 600'", job="cancelrun"),
    job_in("cancelrun", "RUNNING"),
    Run("scancel-pending", "scancel {tocancel}"),
    Run("scancel-running", "scancel {cancelrun}"),
    job_in("tocancel", "CANCELLED"),
    job_in("cancelrun", "CANCELLED"),
    NO_COMPLETING,
    # ---------------------------------------------------------------- mixed, allocated, idle nodes; a full queue
    Run("sinfo-busy", "sinfo"),
    Run("sinfo-N-l-busy", "sinfo -N -l"),
    Run("sinfo-o-NTC", "sinfo -N -o '%N %T %C %t'"),
    Run("sinfo-s-busy", "sinfo -s"),
    Run("sinfo-t-mixed", "sinfo -t mixed"),
    Run("squeue-busy", "squeue"),
    Run("squeue-l-busy", "squeue -l"),
    Run("squeue-t-all", "squeue -t all"),
    Run("squeue-t-PD", "squeue -t PD"),
    Run("squeue-t-R-PD-p-debug", "squeue -t R,PD -p debug"),
    Run("squeue-nextflow", "squeue --noheader -o '%i %t' -t all -u root"),
    Run("squeue-u-root", "squeue -u root"),
    Run("squeue-u-nobody", "squeue -u nobody"),
    Run("squeue-n-run1", "squeue -n run1"),
    Run("squeue-name-arr", "squeue --name=arr"),
    Run("squeue-A-root", "squeue -A root"),
    Run("squeue-s", "squeue -s"),
    Run("squeue-s-j-steps", "squeue -s -j {steps}"),
    Run("squeue-array", "squeue --array"),
    Run("squeue-r-j-arr", "squeue -r -j {arr}"),
    Run("squeue-j-arr", "squeue -j {arr}"),
    Run("squeue-start", "squeue --start"),
    Run("squeue-o-basic", "squeue -o '%i %j %u %t %M %l %D %R'"),
    Run("squeue-o-widths", "squeue -o '%.10i %.9P %.8j %.8u %.2t %.10M %.6D %R'"),
    Run("squeue-o-array-fields", "squeue -o '%A %a %F %K %P %C %c %m %N %r %T'"),
    Run("squeue-o-more-fields", "squeue -o '%i|%q|%Q|%p|%v|%w|%x|%y|%z|%h|%H|%I|%J|%k|%o|%f|%E|%g|%G'"),
    Run("squeue-O-names", "squeue -O JobID,Name,State,Reason,NodeList"),
    Run("squeue-O-widths", "squeue -O JobID:8,Partition:10,StateCompact:4,TimeLimit:12"),
    Run("squeue-O-ood", "squeue --all --states=all --noconvert -O 'JobID:|,UserName:|,State:|,Reason:|,NumNodes:|'"),
    Run("squeue-h-j-finished", "squeue -h -j {done}"),
    Run("squeue-h-t-all-j-finished", "squeue -h -t all -j {done},{fail}"),
    Run("squeue-M", "squeue -M capture"),
    Run("squeue-noconvert", "squeue --noconvert -o '%i %m'"),
    Run("squeue-held-state", "squeue -h -o '%T %r' -j {held}"),
    Run("scontrol-show-job-running", "scontrol show job {run1}"),
    Run("scontrol-show-job-held", "scontrol show job {held}"),
    Run("scontrol-show-job-failed", "scontrol show job {fail}"),
    Run("scontrol-show-job-completed", "scontrol show job {done}"),
    Run("scontrol-o-show-job-big", "scontrol -o show job {big}"),
    Run("scontrol-show-job-array", "scontrol show job {arr}"),
    Run("scontrol-show-job-d-steps", "scontrol show job -d {steps}"),
    Run("scontrol-show-step", "scontrol show step {steps}.0"),
    Run("scontrol-show-steps-all", "scontrol show step"),
    Run("scontrol-show-job-resources", "scontrol show job {waitres}"),
    Run("scontrol-show-job-dependency", "scontrol show job {dep}"),
    Run("scontrol-show-job-cancelled", "scontrol show job {tocancel}"),
    Run("scontrol-show-node-mixed", "scontrol show node n1"),
    Run("scontrol-show-node-allocated", "scontrol show node n2"),
    Run("sacct-busy", "sacct"),
    Run("sacct-X", "sacct -X"),
    Run("sacct-P", "sacct -P"),
    Run("sacct-p", "sacct -p -X"),
    Run("sacct-n-X-o", "sacct -n -X -o JobID,JobName,State,ExitCode"),
    Run("sacct-delimiter", "sacct --delimiter=, -P -X -o JobID,State"),
    Run("sacct-j-steps", "sacct -j {steps}"),
    Run("sacct-j-step-0", "sacct -j {steps}.0"),
    Run("sacct-j-batch", "sacct -j {steps}.batch"),
    Run("sacct-j-array", "sacct -j {arr}"),
    Run("sacct-j-array-task", "sacct -j {arr}_0"),
    Run("sacct-o-widths", "sacct -X -o JobID%15,JobName%20,State%12"),
    Run("sacct-s-CD-F", "sacct -X -s CD,F"),
    Run("sacct-s-CA", "sacct -X -s CA"),
    Run("sacct-u-root", "sacct -X -u root"),
    Run("sacct-name", "sacct -X --name=done,fail"),
    Run("sacct-S-relative", "sacct -X -S now-1hours -E now"),
    Run("sacct-units-G", "sacct -X --units=G -o JobID,ReqMem"),
    Run("sacct-noconvert", "sacct -X --noconvert -o JobID,ReqMem"),
    Run("sacct-M", "sacct -X -M capture"),
    Run(
        "sacct-snakemake",
        "sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State "
        "--starttime today --endtime now --name done",
    ),
    Run("sacct-D", "sacct -X -D"),
    Run("sacct-submitit", "sacct -o JobID,State,NodeList --parsable2 -j {arr}_0,{arr}_1"),
    Run("sacct-e", "sacct -e"),
    Run("sacct-j-array-range", "sacct -X -j '{arr}_[0-1]'"),
    Run("sinfo-o-partition-fields", "sinfo -o '%R %A %l %L %s %g %h'"),
    # ---------------------------------------------------------------- draining, drained, down
    Run("scontrol-drain-allocated", "scontrol update NodeName=n2 State=DRAIN Reason=maint"),
    Run("sinfo-N-draining", "sinfo -N"),
    Run("sinfo-R-draining", "sinfo -R"),
    Run("scontrol-show-node-draining", "scontrol show node n2"),
    Run("scontrol-drain-idle", "scontrol update NodeName=n4 State=DRAIN Reason=idle_drain"),
    Run("sinfo-N-drained", "sinfo -N"),
    Run("sinfo-t-drain", "sinfo -t drain"),
    Run("sinfo-o-states-drained", "sinfo -N -o '%N %T %t %E'"),
    Run("scontrol-show-node-drained", "scontrol show node n4"),
    Run("scontrol-down", "scontrol update NodeName=n4 State=DOWN Reason=broken"),
    Run("sinfo-N-l-down", "sinfo -N -l"),
    Run("sinfo-R-down", "sinfo -R"),
    Run("sinfo-down", "sinfo"),
    Run("scontrol-show-node-down", "scontrol show node n4"),
    Run("sinfo-FC-down", "sinfo -o '%P %F %C'"),
    Run("scontrol-update-bad-state", "scontrol update NodeName=n4 State=NOSUCHSTATE"),
    # ---------------------------------------------------------------- hold, release, suspend, update, signal
    Run("scontrol-hold", "scontrol hold {waitprio}"),
    Run("squeue-after-hold", "squeue -j {waitprio} -o '%i %t %r'"),
    Run("scontrol-release-waitprio", "scontrol release {waitprio}"),
    Run("squeue-after-release", "squeue -j {waitprio} -o '%i %t %r'"),
    Run("scontrol-suspend", "scontrol suspend {run1}"),
    Run("squeue-suspended", "squeue -j {run1} -o '%i %t %T %r'"),
    Run("scontrol-resume", "scontrol resume {run1}"),
    Run("squeue-resumed", "squeue -j {run1} -o '%i %t %T'"),
    Run("scontrol-update-timelimit", "scontrol update JobId={waitres} TimeLimit=30"),
    Run("squeue-updated-timelimit", "squeue -j {waitres} -o '%i %l'"),
    Run("scontrol-update-unknown-job", "scontrol update JobId=999 TimeLimit=30"),
    Run("scontrol-hold-finished", "scontrol hold {done}"),
    Run("scancel-signal-finished", "scancel --signal=USR1 {done}"),
    Run("scancel-finished", "scancel {done}"),
    Run("scancel-Q-unknown", "scancel -Q 999"),
    Run("scancel-A-no-match", "scancel -A nosuchaccount"),
    Run("scancel-f-signal-0", "scancel -f -s 0 {run1}"),
    Run("scancel-b-signal-0", "scancel -b -s 0 {run1}"),
    Run("scancel-by-name", "scancel -n waitprio"),
    Run("scancel-v", "scancel -v {waitres}"),
    job_in("waitprio", "CANCELLED"),
    job_in("waitres", "CANCELLED"),
    Run("scontrol-release-held", "scontrol release {held}"),
    job_in("held", "COMPLETED"),
    Run("scancel-array-task", "scancel {arr}_5"),
    Run("scancel-array-range", "scancel '{arr}_[3-4]'"),
    Run("squeue-array-after-cancel", "squeue --array -j {arr}"),
    Run("scontrol-resume-down", "scontrol update NodeName=n4 State=RESUME"),
    Run("scontrol-resume-draining", "scontrol update NodeName=n2 State=RESUME"),
    Wait("every node responding", "sinfo -h -N -o %t", absent=r"\*", timeout=150),
    Run("sinfo-N-resumed", "sinfo -N"),
    Run("scancel-t-p", "scancel -t PENDING -p debug"),
    job_in("dep", "CANCELLED"),
    # ---------------------------------------------------------------- the timed-out job
    job_in("tmo", "TIMEOUT", timeout=200),
    Run("scontrol-show-job-timeout", "scontrol show job {tmo}"),
    Run("squeue-t-all-timeout", "squeue -t all -j {tmo}"),
    Run("sacct-j-timeout", "sacct -j {tmo}"),
    Run("sacct-s-TO", "sacct -X -s TO"),
    Run("scontrol-requeue-running", "scontrol requeue {big}"),
    Run("squeue-after-requeue", "squeue -j {big} -o '%i %T %r'"),
    # ---------------------------------------------------------------- submissions that may be refused
    Run("sbatch-invalid-partition", "sbatch -p nosuchpart --wrap true"),
    Run("sbatch-too-many-nodes", "sbatch -p debug -N 5 --wrap true", job="toomany"),
    Run("sbatch-default-partition", "sbatch -J nopart --wrap true", job="nopart"),
    Run("sbatch-bad-option", "sbatch --nosuchoption --wrap true"),
    Run("sbatch-bad-time", "sbatch -p debug -t nonsense --wrap true"),
    Run("squeue-pending-reasons", "squeue -t PD -o '%i %j %r'"),
    # ---------------------------------------------------------------- the end: everything cancelled
    Run("scancel-u-root", "scancel -u root"),
    job_in("run1", "CANCELLED"),
    job_in("steps", "CANCELLED"),
    job_in("big", "CANCELLED"),
    NO_COMPLETING,
    Run("squeue-end", "squeue"),
    Run("squeue-t-all-end", "squeue -t all -o '%i %j %T %r'"),
    Run("sacct-X-end", "sacct -X"),
    Run("sacct-j-run1-end", "sacct -j {run1}"),
    Run("sinfo-end", "sinfo"),
]


def runs() -> list[Run]:
    return [s for s in SESSION if isinstance(s, Run)]


def capture_names_of(steps: list) -> list[str]:
    """NNN-name of each Run of a session (its Waits are not captures), in session order."""
    return [f"{i:03d}-{r.name}" for i, r in enumerate((s for s in steps if isinstance(s, Run)), 1)]


def capture_names() -> list[str]:
    return capture_names_of(SESSION)


def slurm_node_lines() -> str:
    """slurm.conf NodeName and PartitionName lines for the peer ({port:NAME}: that node's slurmd port)."""
    lines = [f"NodeName={n} NodeAddr={NODE_ADDR} Port={{port:{n}}} CPUs={CPUS} RealMemory={MEMORY_MB}" for n in NODES]
    for part, nodes in PARTITIONS.items():
        default = " Default=YES" if part == DEFAULT_PARTITION else ""
        lines.append(f"PartitionName={part} Nodes={','.join(nodes)}{default} {PARTITION_LIMITS[part]} State=UP")
    return "\n".join(lines) + "\n"

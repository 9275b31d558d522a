"""The preemption session captured from Slurm 22.05 with preempt/qos and slurmdbd (what Spur's qos_priority follows).

One node with 2 CPUs; QOS high (Priority=100, Preempt=low,lowrq) outranks low and lowrq (Priority=10; lowrq has
PreemptMode=requeue, low the cluster's CANCEL). A low job fills the node and a high one preempts it: it ends
PREEMPTED; a lowrq job goes back to the queue instead and runs again. (Slurm 22.05's preempt/qos reads no
partition PreemptMode, which only preempt/partition_prio uses: Spur's qos_priority does, see docs/controller.md.)
squeue, scontrol show job and sacct are captured at each point. Run as root:

    python -m tools.slurm_capture.preempt_session [--out DIR] [--no-install]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tools.slurm_capture.runner import Side, run_steps
from tools.slurm_capture.session import Run, Wait, capture_names_of, job_in

CLUSTER = "capture"
NODES = ["n1"]
SLURM_CONF = "\n".join(["SlurmdParameters=config_overrides", "PreemptType=preempt/qos", "PreemptMode=CANCEL"])
OUT = "--output=/dev/null --chdir=/tmp"
GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "slurm-22.05-preempt"


def node_lines() -> str:
    return (
        "NodeName=n1 NodeAddr=127.0.0.1 Port={port:n1} CPUs=2 RealMemory=4096\n"
        "PartitionName=work Nodes=n1 Default=YES MaxTime=INFINITE State=UP\n"
    )


def sacct_shows(job: str, state: str) -> Wait:
    return Wait(f"sacct shows {job} {state}", f"sacct -n -X -j {{{job}}} -o State", until=state, timeout=60)


PREEMPT_SESSION: list[Run | Wait] = [
    Run("sacctmgr-add-qos-low", "sacctmgr -i add qos low Priority=10"),
    Run("sacctmgr-add-qos-lowrq", "sacctmgr -i add qos lowrq Priority=10 PreemptMode=requeue"),
    Run("sacctmgr-add-qos-high", "sacctmgr -i add qos high Priority=100 Preempt=low,lowrq"),
    Run("sacctmgr-root-qos", "sacctmgr -i modify user root set qos=normal,low,lowrq,high"),
    Run("sacctmgr-show-qos", "sacctmgr show qos format=Name,Priority,Preempt,PreemptMode"),
    Run("scontrol-show-partition", "scontrol show partition"),
    Run("sinfo-preemptmode", "sinfo -o '%P %M'"),
    # ---------------------------------------------------------------- cancel: the victim ends PREEMPTED
    Run(
        "sbatch-low", "sbatch --qos=low -n 2 -J lowc --chdir=/tmp --output=/tmp/lowc.out --wrap 'sleep 300'", job="lowc"
    ),
    job_in("lowc", "RUNNING"),
    Run("sbatch-high", f"sbatch --qos=high -n 2 -J highc {OUT} --wrap 'sleep 3'", job="highc"),
    job_in("lowc", "PREEMPTED"),
    Run("squeue-preempted", "squeue -t all -j {lowc},{highc}"),
    Run("squeue-preempted-long", "squeue -t all -l -j {lowc}"),
    Run("scontrol-show-job-preempted", "scontrol show job {lowc}"),
    sacct_shows("lowc", "PREEMPTED"),
    Run("sacct-preempted", "sacct -j {lowc}"),
    Run("sacct-preempted-X", "sacct -X -j {lowc} -o JobID,State,ExitCode,Reason%20"),
    Run("sacct-s-PR", "sacct -X -s PR -o JobID,JobName,State"),
    job_in("highc", "COMPLETED"),
    # ---------------------------------------------------------------- requeue: the victim runs again
    Run("cat-preempted-output", "cat /tmp/lowc.out"),
    Run("sbatch-lowrq", f"sbatch --qos=lowrq -n 2 -J lowr {OUT} --wrap 'sleep 300'", job="lowr"),
    job_in("lowr", "RUNNING"),
    Run("sbatch-high-again", f"sbatch --qos=high -n 2 -J highr {OUT} --wrap 'sleep 3'", job="highr"),
    job_in("highr", "RUNNING", "COMPLETED"),
    Run("squeue-requeued", "squeue -t all -j {lowr},{highr}"),
    Run("scontrol-show-job-requeued", "scontrol show job {lowr}"),
    Wait("sacct has the requeued run", "sacct -n -X -D -j {lowr} -o State", until="PREEMPTED|REQUEUED", timeout=60),
    Run("sacct-requeued", "sacct -X -D -j {lowr} -o JobID,State,ExitCode"),
    job_in("lowr", "RUNNING", timeout=240),  # a requeued job waits out BeginTime: cred_expire, 120 s + 1
    Run("scontrol-show-job-rerun", "scontrol show job {lowr}"),
    Run("scancel-all", "scancel -u root"),
]


def capture_names() -> list[str]:
    return capture_names_of(PREEMPT_SESSION)


def run_preempt_session(side: Side, wait_timeout=None, strict: bool = True) -> list[dict]:
    """Every Run of PREEMPT_SESSION on `side`, in order (runner.run_steps)."""
    return run_steps(side, PREEMPT_SESSION, wait_timeout, strict)


def main(argv: list[str] | None = None) -> int:
    from tools.slurm_capture.__main__ import capture
    from tools.slurm_capture.peer import PeerShape

    parser = argparse.ArgumentParser(prog="python -m tools.slurm_capture.preempt_session", description=__doc__)
    parser.add_argument("--out", type=Path, default=GOLDEN, help=f"where the captures go (default {GOLDEN})")
    parser.add_argument("--no-install", action="store_true", help="never run apt-get; fail when a package is missing")
    opts = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("it runs Slurm's daemons as root (SlurmUser=root): run it as root")
    shape = PeerShape(CLUSTER, NODES, node_lines(), SLURM_CONF, True)
    return capture(opts.out, not opts.no_install, run_preempt_session, {}, shape)


if __name__ == "__main__":
    sys.exit(main())

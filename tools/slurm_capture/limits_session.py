"""The limits session captured from Slurm 22.05 with slurmdbd and AccountingStorageEnforce=limits (capture-limits).

root runs jobs in accounts phys and chem and with the QOS one (MaxJobsPerUser=1) and short (MaxWall=1): a job over
phys's GrpTRES cpu=2 pends with AssocGrpCpuLimit and starts once the running job ends; the user's second job in QOS
one pends with QOSMaxJobsPerUserLimit; a job over short's MaxWall pends with QOSMaxWallDurationPerJobLimit, and one
without -t gets the MaxWall as its time limit; MaxSubmitJobs=1 in chem refuses the next submission, as does a job
over MaxWall once short has DenyOnLimit. tests/integration/test_limits_cluster.py checks Spur's lines against
these.
"""

from __future__ import annotations

from tools.slurm_capture.runner import Side, run_as_user, run_steps
from tools.slurm_capture.session import Run, Wait, capture_names_of, job_in

CLUSTER = "capture"
NODES = ["n1"]
SLURM_CONF = "SlurmdParameters=config_overrides\nAccountingStorageEnforce=limits"
FILES: dict[str, str] = {}
OUT = "--output=/dev/null --chdir=/tmp"


def node_lines() -> str:
    return (
        "NodeName=n1 NodeAddr=127.0.0.1 Port={port:n1} CPUs=4 RealMemory=4096\n"
        "PartitionName=debug Nodes=n1 Default=YES MaxTime=INFINITE State=UP\n"
    )


def reason_of(job: str, reason: str, timeout: float = 60.0) -> Wait:
    """Wait until squeue shows the job pending with `reason` (slurmctld sets it on a scheduling pass)."""
    squeue = f"squeue -h -j {{{job}}} -o '%t %r'"
    return Wait(f"{job} pending on {reason}", squeue, until=rf"^PD {reason}\n", timeout=timeout)


LIMITS_SESSION: list[Run | Wait] = [
    Run("sacctmgr-add-accounts", "sacctmgr -i add account phys,chem"),
    Run("sacctmgr-add-user", "sacctmgr -i add user root account=phys,chem"),
    Run("sacctmgr-add-qos-one", "sacctmgr -i add qos one MaxJobsPerUser=1"),
    Run("sacctmgr-add-qos-short", "sacctmgr -i add qos short MaxWall=1"),
    Run("sacctmgr-user-qos", "sacctmgr -i modify user root set qos=normal,one,short"),
    Run("sacctmgr-phys-grptres", "sacctmgr -i modify account phys set GrpTRES=cpu=2"),
    # GrpTRES: the second job waits for the first one's CPUs
    Run("sbatch-phys-first", f"sbatch -A phys -n 2 -J first {OUT} --wrap 'sleep 300'", job="first"),
    job_in("first", "RUNNING"),
    Run("sbatch-phys-second", f"sbatch -A phys -n 1 -J second {OUT} --wrap 'sleep 300'", job="second"),
    reason_of("second", "AssocGrpCpuLimit"),
    Run("squeue-grptres", "squeue -h -j {second} -o '%t %r'"),
    Run("scontrol-show-job-grptres", "scontrol show job {second}"),
    Wait("slurmdbd has the waiting job", "sacct -n -X -j {second} -o JobID", until=r"\d"),
    Run("sacct-eligible-grptres", "sacct -n -X -j {second} -o JobID,Eligible%19,State,Reason%20"),
    Run("scancel-phys-first", "scancel {first}"),
    job_in("second", "RUNNING"),
    Run("squeue-grptres-freed", "squeue -h -j {second} -o '%t %r'"),
    Run("scancel-phys-second", "scancel {second}"),
    # QOS MaxJobsPerUser
    Run("sbatch-one-first", f"sbatch -A chem --qos=one -J one1 {OUT} --wrap 'sleep 300'", job="one1"),
    job_in("one1", "RUNNING"),
    Run("sbatch-one-second", f"sbatch -A chem --qos=one -J one2 {OUT} --wrap 'sleep 300'", job="one2"),
    reason_of("one2", "QOSMaxJobsPerUserLimit"),
    Run("squeue-maxjobsperuser", "squeue -h -j {one2} -o '%t %r'"),
    Run("scontrol-show-job-maxjobsperuser", "scontrol show job {one2}"),
    Wait("slurmdbd has the second job of QOS one", "sacct -n -X -j {one2} -o JobID", until=r"\d"),
    Run("sacct-eligible-maxjobsperuser", "sacct -n -X -j {one2} -o JobID,Eligible%19,State,Reason%25"),
    Run("scancel-one", "scancel {one1} {one2}"),
    # QOS MaxWall: a longer job waits; one without -t gets the MaxWall
    Run("sbatch-short-longer", f"sbatch -A chem --qos=short -t 5 -J longer {OUT} --wrap true", job="longer"),
    reason_of("longer", "QOSMaxWallDurationPerJobLimit"),
    Run("squeue-maxwall", "squeue -h -j {longer} -o '%t %r'"),
    Run("scontrol-show-job-maxwall", "scontrol show job {longer}"),
    Run("sbatch-short-plain", f"sbatch -A chem --qos=short -H -J plain {OUT} --wrap true", job="plain"),
    Run("squeue-maxwall-default", "squeue -h -j {plain} -o '%l'"),
    Run("scancel-short", "scancel {longer} {plain}"),
    # MaxSubmitJobs: refused at submit
    Run("sacctmgr-chem-maxsubmit", "sacctmgr -i modify user root where account=chem set MaxSubmitJobs=1"),
    Run("sbatch-chem-held", f"sbatch -A chem -H -J held {OUT} --wrap true", job="held"),
    Run("sbatch-chem-refused", f"sbatch -A chem -J refused {OUT} --wrap true"),
    Run("scancel-chem-held", "scancel {held}"),
    Run("sacctmgr-chem-maxsubmit-clear", "sacctmgr -i modify user root where account=chem set MaxSubmitJobs=-1"),
    # DenyOnLimit: a job over MaxWall is refused instead of pending
    Run("sacctmgr-short-deny", "sacctmgr -i modify qos short set Flags=DenyOnLimit"),
    Run("sbatch-short-denied", f"sbatch -A chem --qos=short -t 5 -J denied {OUT} --wrap true"),
    Run("scancel-all", "scancel -u root"),
]


def capture_names() -> list[str]:
    return capture_names_of(LIMITS_SESSION)


def run_limits_session(side: Side, wait_timeout=None, strict: bool = True) -> list[dict]:
    """Every Run of LIMITS_SESSION on `side`, in order (runner.run_steps; `as:USER:` commands as that user)."""
    return run_steps(side, LIMITS_SESSION, wait_timeout, strict, run=run_as_user)

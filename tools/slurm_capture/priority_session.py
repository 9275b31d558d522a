"""The sprio / sshare session captured from Slurm 22.05 with priority/multifactor and slurmdbd (capture-priority).

Two users with equal shares in one account (daemon and nobody in phys); daemon runs a 4-CPU job first, so its
usage (and so its fair-share factor) differs once slurmdbd's decay thread has charged it. A root job then fills
both nodes, and pending jobs of both users (one with --nice, one with a QOS of a higher priority) wait behind it
while sprio and sshare are captured in their formats. A Run whose command starts with `as:USER:` runs as USER.
"""

from __future__ import annotations

from tools.slurm_capture.runner import Side, run_as_user, run_steps
from tools.slurm_capture.session import Run, Wait, capture_names_of, job_in

CLUSTER = "capture"
NODES = ["n1", "n2"]
CPUS = 4
MEMORY_MB = 4096
# The weights both sides run with (Spur's [scheduler] priority_weight_* keys take the same numbers).
WEIGHTS = {"Age": 1000, "Fairshare": 10000, "JobSize": 1000, "Partition": 1000, "QOS": 2000}
SLURM_CONF = "\n".join(
    [
        "SlurmdParameters=config_overrides",
        "PriorityType=priority/multifactor",
        "PriorityDecayHalfLife=7-0",
        "PriorityMaxAge=7-0",
        "PriorityCalcPeriod=1",
        "AccountingStorageEnforce=associations",
        *(f"PriorityWeight{k}={v}" for k, v in WEIGHTS.items()),
    ]
)
FILES: dict[str, str] = {}
OUT = "--output=/dev/null --chdir=/tmp"


def node_lines() -> str:
    lines = [f"NodeName={n} NodeAddr=127.0.0.1 Port={{port:{n}}} CPUs={CPUS} RealMemory={MEMORY_MB}" for n in NODES]
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


PRIORITY_SESSION: list[Run | Wait] = [
    Run("sacctmgr-add-account", "sacctmgr -i add account phys Description=physics Organization=sci"),
    Run("sacctmgr-add-users", "sacctmgr -i add user daemon,nobody Account=phys"),
    Run("sacctmgr-add-qos", "sacctmgr -i add qos high Priority=100"),
    Run("sacctmgr-users-qos", "sacctmgr -i modify user daemon,nobody set qos=normal,high"),
    Run("sshare-new", "sshare"),
    Run("sshare-a-new", "sshare -a"),
    Run("sprio-empty", "sprio"),
    # slurmctld's decay thread charges a running job's usage every PriorityCalcPeriod (one minute here)
    Run("sbatch-daemon-used", f"as:daemon:sbatch -A phys -n 4 -J used {OUT} --wrap 'sleep 300'", job="used"),
    job_in("used", "RUNNING"),
    Wait("daemon's usage charged", "sshare -n -P -u daemon -o User,RawUsage", until=r"daemon\|[1-9]", timeout=200),
    Run("scancel-daemon-used", "scancel {used}"),
    job_in("used", "CANCELLED"),
    Run("sbatch-root-blocker", f"sbatch -n 8 -J blocker {OUT} --wrap 'sleep 600'", job="blocker"),
    job_in("blocker", "RUNNING"),
    Run("sbatch-nobody-1", f"as:nobody:sbatch -A phys -n 2 -J nob1 {OUT} --wrap true", job="nob1"),
    Run("sbatch-daemon-1", f"as:daemon:sbatch -A phys -n 2 -J dae1 {OUT} --wrap true", job="dae1"),
    Run("sbatch-nobody-nice", f"as:nobody:sbatch -A phys -n 1 --nice=100 -J nice {OUT} --wrap true", job="nice"),
    Run("sbatch-daemon-qos", f"as:daemon:sbatch -A phys -n 8 --qos=high -J hiq {OUT} --wrap true", job="hiq"),
    Run("sbatch-root-pending", f"sbatch -n 1 -J rootpd {OUT} --wrap true", job="rootpd"),
    job_in("rootpd", "PENDING"),
    Run("sprio", "sprio"),
    Run("sprio-l", "sprio -l"),
    Run("sprio-n", "sprio -n"),
    Run("sprio-w", "sprio -w"),
    Run("sprio-h", "sprio -h"),
    Run("sprio-j", "sprio -j {nob1},{dae1}"),
    Run("sprio-u", "sprio -u nobody"),
    Run("sprio-o", "sprio -o '%.15i %9r %.10Y %.10A %.10F %.10J %.10P %.10Q %.6N %u'"),
    Run("sprio-format", "sprio --format='%i|%u|%Y|%y|%F|%f|%Q|%q|%a|%A|%J|%j|%P|%p|%N|%r|%c|%o'"),
    Run("sprio-l-n", "sprio -l -n"),
    Run("sprio-j-unknown", "sprio -j 99999"),
    Run("scontrol-show-config", "scontrol show config"),  # the Priority* keys priority/multifactor adds
    Run("sprio-bad-option", "sprio --bogus"),
    Run("sshare", "sshare"),
    Run("sshare-a", "sshare -a"),
    Run("sshare-l", "sshare -l"),
    Run("sshare-a-l", "sshare -a -l"),
    Run("sshare-u", "sshare -u nobody"),
    Run("sshare-u-daemon-nobody", "sshare -u daemon,nobody"),
    Run("sshare-A", "sshare -A phys"),
    Run("sshare-A-a", "sshare -A phys -a"),
    Run("sshare-P", "sshare -a -P"),
    Run("sshare-p", "sshare -a -p"),
    Run("sshare-n", "sshare -a -n"),
    Run("sshare-o", "sshare -a -o Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,LevelFS"),
    Run("sshare-o-widths", "sshare -a -o Account%20,User%5,FairShare%12"),
    Run("sshare-A-unknown", "sshare -A nosuch"),
    Run("sshare-bad-option", "sshare --bogus"),
    Run("nobody-sshare", "as:nobody:sshare"),
    Run("nobody-sprio", "as:nobody:sprio"),
    Run("scancel-all", "scancel -u root"),
    Run("scancel-daemon", "scancel -u daemon"),
    Run("scancel-nobody", "scancel -u nobody"),
]


def capture_names() -> list[str]:
    return capture_names_of(PRIORITY_SESSION)


def run_priority_session(side: Side, wait_timeout=None, strict: bool = True) -> list[dict]:
    """Every Run of PRIORITY_SESSION on `side`, in order (runner.run_steps; `as:USER:` commands as that user)."""
    return run_steps(side, PRIORITY_SESSION, wait_timeout, strict, run=run_as_user)

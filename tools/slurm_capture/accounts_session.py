"""The sacctmgr session captured from Slurm 22.05 with slurmdbd (capture-accounts) and replayed on Spur.

Accounts, users and QOS added, shown in every layout (default columns, withassoc, format= with widths, -n, -p,
-P), changed and removed, with and without -i (the commit question answered y or n on stdin), and the refusals
sacctmgr prints. Open OnDemand's and snakemake's command lines are here as they run them. A Run with `stdin`
feeds that text to the command; `as:USER:CMD` runs CMD as USER (priority_session.run_as).
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from tools.slurm_capture.runner import COMMAND_TIMEOUT_SECS, Side, run_as_user

CLUSTER = "capture"
NODES = ["n1"]
SLURM_CONF = "SlurmdParameters=config_overrides\nPriorityType=priority/multifactor"
FILES: dict[str, str] = {}


def node_lines() -> str:
    return (
        "NodeName=n1 NodeAddr=127.0.0.1 Port={port:n1} CPUs=4 RealMemory=4096\n"
        "PartitionName=debug Nodes=n1 Default=YES MaxTime=INFINITE State=UP\n"
    )


@dataclass(frozen=True)
class Run:
    name: str
    cmd: str
    stdin: str | None = None  # the answer to "Would you like to commit changes?"; None: stdin is /dev/null


WHO_SAYS_NO = "n\n"
WHO_SAYS_YES = "y\n"

ACCOUNTS_SESSION: list[Run] = [
    # ---------------------------------------------------------------- a new cluster's store
    Run("show-cluster-format", "sacctmgr show cluster format=cluster,rpc,share,qos,defaultqos"),
    Run("show-account-new", "sacctmgr show account"),
    Run("show-user-new", "sacctmgr show user"),
    Run("show-qos-new", "sacctmgr show qos"),
    Run("show-assoc-new", "sacctmgr show assoc"),
    Run("show-user-withassoc-new", "sacctmgr show user withassoc"),
    # ---------------------------------------------------------------- adding
    Run(
        "add-accounts",
        "sacctmgr -i add account phys,chem parent=root description=Physics organization=Sci fairshare=10",
    ),
    Run("add-account-defaults", "sacctmgr -i add account bio"),
    Run(
        "add-account-limits",
        "sacctmgr -i add account sub parent=phys maxjobs=4 grptres=cpu=4 qos=normal defaultqos=normal",
    ),
    Run("add-account-exists", "sacctmgr -i add account phys"),
    Run("add-account-answer-no", "sacctmgr add account geo", stdin=WHO_SAYS_NO),
    Run("show-account-after-no", "sacctmgr -n show account geo"),
    Run("add-account-answer-yes", "sacctmgr add account geo", stdin=WHO_SAYS_YES),
    Run("show-account-after-yes", "sacctmgr -n show account geo"),
    Run("add-user", "sacctmgr -i add user alice account=phys"),
    Run("add-user-default-admin", "sacctmgr -i add user bob account=phys,chem defaultaccount=chem adminlevel=operator"),
    Run("add-user-limits", "sacctmgr -i add user carol account=bio maxjobs=3 fairshare=2"),
    Run("add-user-second-account", "sacctmgr -i add user alice account=chem"),
    Run("add-user-exists", "sacctmgr -i add user alice account=phys"),
    Run(
        "add-qos",
        "sacctmgr -i add qos high priority=100 preempt=normal preemptmode=requeue maxwall=1-00:00:00 "
        "grptres=cpu=8,mem=16G",
    ),
    Run("add-qos-defaults", "sacctmgr -i add qos low"),
    Run("add-qos-exists", "sacctmgr -i add qos low"),
    Run("add-quiet", "sacctmgr -Q -i add account quiet"),
    Run(
        "add-account-tres-wall",
        "sacctmgr -i add account lab parent=bio grptres=mem=1500,cpu=2 maxwall=90 maxsubmitjobs=20 grpjobs=6 "
        "maxtres=node=1 priority=5",
    ),
    Run("add-user-partition", "sacctmgr -i add user dan account=lab partition=debug"),
    Run(
        "add-qos-limits",
        "sacctmgr -i add qos big maxjobsperuser=2 maxsubmitjobsperuser=4 maxtresperjob=cpu=4 maxtresperuser=cpu=8 "
        "grpjobs=10 grpsubmitjobs=20 usagefactor=2 flags=DenyOnLimit description=Big",
    ),
    Run(
        "show-qos-limits",
        "sacctmgr -P show qos big format=name,maxjobspu,maxsubmitpu,maxtres,maxtrespu,grpjobs,"
        "grpsubmit,usagefactor,flags,descr",
    ),
    Run("show-assoc-lab", "sacctmgr show assoc where account=lab"),
    Run("show-assoc-lab-P", "sacctmgr -P show assoc where account=lab"),
    # ---------------------------------------------------------------- showing
    Run("show-account", "sacctmgr show account"),
    Run("list-accounts", "sacctmgr list accounts"),
    Run("show-user", "sacctmgr show user"),
    Run("show-qos", "sacctmgr show qos"),
    Run("show-assoc", "sacctmgr show assoc"),
    Run("show-user-withassoc", "sacctmgr show user withassoc"),
    Run("show-account-withassoc", "sacctmgr show account withassoc"),
    Run("show-assoc-format-P", "sacctmgr show assoc format=account,user,fairshare,maxjobs,qos -P"),
    Run("show-assoc-format-p", "sacctmgr -p show assoc format=account,user,fairshare,maxjobs,qos"),
    Run("show-assoc-format-n", "sacctmgr -n show assoc format=account,user,fairshare,maxjobs,qos"),
    Run("show-user-widths", "sacctmgr show user format=user%20,defaultaccount%-15,adminlevel"),
    Run("show-assoc-widths", "sacctmgr show assoc format=account%-12,user%3,partition,share%4"),
    Run("show-qos-format", "sacctmgr show qos format=name,priority,preempt,preemptmode,maxwall,grptres"),
    Run("show-account-format", "sacctmgr show account format=account,description,organization -P"),
    Run("ondemand-user-qos", "sacctmgr -nP show users withassoc format=account,qos where user=alice"),
    Run("snakemake-accounts", "sacctmgr -n -s list user alice format=account%256"),
    Run("show-user-nosuch", "sacctmgr show user where name=nosuch"),
    Run("show-user-bare-name", "sacctmgr show user bob"),
    Run("show-assoc-where-account", "sacctmgr show assoc where account=phys format=account,user"),
    Run("show-assoc-where-user", "sacctmgr -P show assoc where user=bob format=account,user,share"),
    Run("list-account-names", "sacctmgr -P list account where name=phys,chem"),
    Run("show-assoc-tree", "sacctmgr -P show assoc format=cluster,account,user,parentname"),
    Run("show-assoc-tree-display", "sacctmgr show assoc tree format=account,user,share"),
    Run("show-assoc-tree-display-P", "sacctmgr -P show assoc tree format=account,user"),
    Run("commands-on-stdin", "sacctmgr", stdin="show user format=user\nlist qos format=name\n"),
    # ---------------------------------------------------------------- changing
    Run("modify-user-assoc", "sacctmgr -i modify user alice set maxjobs=5 fairshare=3"),
    Run("modify-user-admin", "sacctmgr -i modify user where name=alice set adminlevel=admin"),
    Run("modify-account", "sacctmgr -i modify account where name=chem set description=Chemistry"),
    Run("modify-account-assoc", "sacctmgr -i modify account bio set maxjobs=10"),
    Run("modify-qos", "sacctmgr -i modify qos high set priority=200 maxwall=2:00:00"),
    Run("modify-qos-answer-no", "sacctmgr modify qos low set priority=5", stdin=WHO_SAYS_NO),
    Run("modify-qos-answer-yes", "sacctmgr modify qos where name=low set priority=7", stdin=WHO_SAYS_YES),
    Run("show-qos-priorities", "sacctmgr -P show qos format=name,priority"),
    Run("modify-qos-nosuch", "sacctmgr -i modify qos nosuch set priority=1"),
    Run("modify-user-nosuch", "sacctmgr -i modify user nosuch set maxjobs=1"),
    Run("modify-user-unknown-key", "sacctmgr -i modify user alice set bogus=1"),
    Run("modify-user-qos-add", "sacctmgr -i modify user alice set qos+=high"),
    Run("show-assoc-qos", "sacctmgr -P show assoc where user=alice format=account,user,qos,defaultqos,maxjobs,share"),
    Run("show-user-after-modify", "sacctmgr show user"),
    Run("modify-user-qos-remove", "sacctmgr -i modify user alice set qos-=high"),
    Run("modify-user-default-account", "sacctmgr -i modify user where name=alice set defaultaccount=chem"),
    Run("modify-user-both", "sacctmgr -i modify user bob set adminlevel=none maxsubmitjobs=9"),
    Run("modify-user-clear", "sacctmgr -i modify user carol set maxjobs=-1"),
    Run("modify-account-parent", "sacctmgr -i modify account lab set parent=phys"),
    Run("modify-qos-junk-then-yes", "sacctmgr modify qos big set priority=3", stdin="x\ny\n"),
    Run(
        "show-assoc-after-modify",
        "sacctmgr -P show assoc format=account,user,partition,parentname,share,maxjobs,maxsubmit,qos",
    ),
    Run("show-user-withassoc-account", "sacctmgr show user withassoc where account=chem"),
    Run("show-user-s-format", "sacctmgr -s show user alice format=user,account,qos%30,defaultaccount"),
    Run("show-qos-n-name", "sacctmgr -n list qos format=name"),
    Run("show-unknown-field", "sacctmgr show user format=bogus"),
    Run("show-cluster", "sacctmgr -P show cluster format=cluster,share,qos,defaultqos,grpjobs,maxjobs"),
    # ---------------------------------------------------------------- removing
    Run("delete-user-assoc", "sacctmgr -i delete user bob where account=phys"),
    Run("delete-qos-answer-no", "sacctmgr delete qos low", stdin=WHO_SAYS_NO),
    Run("delete-qos", "sacctmgr -i delete qos low"),
    Run("delete-account-nosuch", "sacctmgr -i delete account nosuch"),
    Run("delete-account-root", "sacctmgr -i delete account root"),
    Run("delete-user", "sacctmgr -i delete user carol"),
    Run("delete-account", "sacctmgr -i remove account quiet"),
    Run("delete-user-partition", "sacctmgr -i delete user dan where partition=debug"),
    Run("show-assoc-end", "sacctmgr -P show assoc format=account,user,share,qos"),
    # ---------------------------------------------------------------- refusals
    Run("bad-verb", "sacctmgr frob account"),
    Run("bad-entity", "sacctmgr show frob"),
    Run("add-account-no-name", "sacctmgr -i add account"),
    Run("add-account-bad-parent", "sacctmgr -i add account x parent=nosuch"),
    Run("add-user-no-account", "sacctmgr -i add user dave"),
    Run("bad-short-option", "sacctmgr -x show user"),
    Run("bad-long-option", "sacctmgr --bogus show user"),
    Run("add-user-bad-account", "sacctmgr -i add user eve account=nosuch"),
    Run("add-qos-no-name", "sacctmgr -i add qos"),
    Run("add-account-bad-fairshare", "sacctmgr -i add account phys2 parent=phys fairshare=abc"),
    Run("modify-user-bad-qos", "sacctmgr -i modify user alice set qos=nosuch"),
    Run("modify-user-bad-wall", "sacctmgr -i modify user alice set maxwall=bogus"),
    Run("modify-user-no-assoc-there", "sacctmgr -i modify user alice where account=nosuch set maxjobs=2"),
    Run("modify-qos-preempt-suspend", "sacctmgr -i modify qos high set preemptmode=suspend"),
    Run("show-assoc-bad-condition", "sacctmgr show assoc where bogus=1"),
    Run("delete-user-nosuch", "sacctmgr -i delete user nosuch"),
    Run("delete-qos-nosuch", "sacctmgr -i delete qos nosuch"),
    Run("nobody-show-user", "as:nobody:sacctmgr show user"),
    Run("nobody-modify-user", "as:nobody:sacctmgr -i modify user alice set maxjobs=1"),
    Run("nobody-delete-qos", "as:nobody:sacctmgr -i delete qos high"),
    Run("nobody-add-account", "as:nobody:sacctmgr -i add account evil"),
    Run("show-account-end", "sacctmgr show account"),
    # last: Slurm removes an account with its users' associations (a user whose default it was keeps none)
    Run("delete-account-with-users", "sacctmgr -i delete account chem"),
    Run("show-user-after-account-delete", "sacctmgr -P show user withassoc format=user,defaultaccount,account"),
]


def capture_names() -> list[str]:
    """NNN-name of each capture, in session order."""
    return [f"{i:03d}-{r.name}" for i, r in enumerate(ACCOUNTS_SESSION, 1)]


def run_one(side: Side, step: Run) -> subprocess.CompletedProcess:
    """One command on `side`, its stdin the Run's answer (or /dev/null)."""
    if step.stdin is None:
        return run_as_user(side, step.cmd)
    argv = shlex.split(side.resolve(step.cmd))
    argv[0] = str(side.bin_dir / argv[0])
    return subprocess.run(
        argv, cwd=side.work, env=side.env, input=step.stdin.encode(), capture_output=True, timeout=COMMAND_TIMEOUT_SECS
    )


def run_accounts_session(side: Side, wait_timeout=None, strict: bool = True) -> list[dict]:
    """Every Run of ACCOUNTS_SESSION on `side`, in order (wait_timeout, strict: as the other sessions take them)."""
    results = []
    for name, step in zip(capture_names(), ACCOUNTS_SESSION, strict=True):
        proc = run_one(side, step)
        results.append(
            {
                "capture": name,
                "cmd": step.cmd,
                "stdin": step.stdin,
                "rc": proc.returncode,
                "stdout": proc.stdout.decode(errors="surrogateescape"),
                "stderr": proc.stderr.decode(errors="surrogateescape"),
            }
        )
    return results

"""spur: one command for users and administrators; most subcommands are the Slurm commands under a name.

  spur nodes | info          = sinfo            spur node show|drain|resume NODES
  spur jobs | queue          = squeue           spur show job ID | show node NAME   = scontrol show
  spur submit SCRIPT         = sbatch           spur cancel ID...                   = scancel
  spur history | acct        = sacct            spur cluster status
  spur cluster deploy|upgrade|health|teardown -i INVENTORY [-e KEY=VALUE] [--check]   (the Ansible playbooks)
  spur version [--check]                        spur self-update | update
  spur admin raft status | add RAFT_ADDR --grpc GRPC_ADDR | remove RAFT_ADDR   (controllers added online)
Every listing takes -o json. --controller ADDRS (before the subcommand) overrides SPUR_CONTROLLER_ADDR.
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli.runner import CliError, run

PROGRAM = "spur"
# subcommand -> (module, attribute, extra leading arguments)
ALIASES: dict[str, tuple[str, str, list[str]]] = {
    "nodes": ("sinfo", "main", []),
    "info": ("sinfo", "main", []),
    "jobs": ("squeue", "main", []),
    "queue": ("squeue", "main", []),
    "submit": ("sbatch", "main", []),
    "cancel": ("scancel", "main", []),
    "kill": ("scancel", "main", []),
    "show": ("scontrol", "main", ["show"]),
    "control": ("scontrol", "main", []),
    "history": ("sacct", "main", []),
    "acct": ("sacct", "main", []),
    "node": ("nodecmd", "main", []),
    "cluster": ("clustercmd", "main", []),
    "admin": ("admincmd", "main", []),
    "version": ("updatecmd", "version_main", []),
    "self-update": ("updatecmd", "self_update_main", []),
    "update": ("updatecmd", "self_update_main", []),
}


def dispatch(argv: list[str]) -> int:
    args = list(argv)
    while args and args[0].startswith("--controller"):
        option = args.pop(0)
        if "=" in option:
            value = option.split("=", 1)[1]
        elif args:
            value = args.pop(0)
        else:
            raise CliError("--controller needs addresses, like --controller 127.0.1.1:6817,127.0.1.2:6817")
        os.environ["SPUR_CONTROLLER_ADDR"] = value
    if not args or args[0] in ("-h", "--help", "help"):
        print(__doc__.strip())
        return 0
    if args[0] in ("-V", "--version"):
        args[0] = "version"
    command, rest = args[0], args[1:]
    if command not in ALIASES:
        raise CliError(f"unknown command '{command}'; run 'spur --help' for the list")
    module_name, attribute, leading = ALIASES[command]
    import importlib

    module = importlib.import_module(f"spur_hpc.cli.{module_name}")
    return getattr(module, attribute)(leading + rest, program=f"{PROGRAM} {command}")


def main(argv: list[str] | None = None) -> int:
    return run(PROGRAM, dispatch, sys.argv[1:] if argv is None else argv)

"""Console entry points of the Slurm-compatible commands.

Each imports only its own command module, so `squeue` never pays for sbatch's or sacct's imports.
Every entry takes an optional argv (tests call them directly) and returns the exit code.
"""

from __future__ import annotations

from spur_hpc.cli.runner import run


def sbatch_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sbatch

    return run(sbatch.PROGRAM, sbatch.main, argv)


def squeue_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import squeue

    return run(squeue.PROGRAM, squeue.main, argv)


def sinfo_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sinfo

    return run(sinfo.PROGRAM, sinfo.main, argv)


def scancel_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import scancel

    return run(scancel.PROGRAM, scancel.main, argv)


def scontrol_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import scontrol

    return run(scontrol.PROGRAM, scontrol.main, argv)


def sacct_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sacct

    return run(sacct.PROGRAM, sacct.main, argv)


def srun_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import srun

    return run(srun.PROGRAM, srun.main, argv)


def salloc_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import salloc

    return run(salloc.PROGRAM, salloc.main, argv)


def sprio_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sprio

    return run(sprio.PROGRAM, sprio.main, argv)


def sshare_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sshare

    return run(sshare.PROGRAM, sshare.main, argv)


def sacctmgr_main(argv: list[str] | None = None) -> int:
    from spur_hpc.cli import sacctmgr

    return run(sacctmgr.PROGRAM, sacctmgr.main, argv)

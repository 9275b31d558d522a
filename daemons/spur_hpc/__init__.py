"""Spur: a Slurm-compatible HPC workload manager."""

__version__ = "0.1.0"

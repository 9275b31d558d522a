"""Capture real Slurm 22.05 output for the replay test (tests/integration/test_slurm_replay.py)."""

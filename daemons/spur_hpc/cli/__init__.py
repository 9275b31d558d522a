"""Command-line tools: `spur` and the Slurm-compatible commands (sbatch, squeue, sinfo, scancel, scontrol, sacct).

Start-up time matters (scripts call squeue in loops), so nothing here imports grpc or protobuf: the
commands talk to the controller through spur_hpc.wire (grpcwire, protocodec), standard library only.
"""

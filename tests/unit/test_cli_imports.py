"""What squeue and sbatch load before they talk to a controller: every module a command imports is start-up time
paid by every call of a script's loop (issue 20), so the heavy ones stay out (checked in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys

# Each of these cost a command 1 to 30 ms when it crept in: re and enum (with functools and collections),
# hashlib and pathlib (buildinfo), socket and selectors, threading, uuid and platform, ipaddress, grpc and
# protobuf (a large answer imports upb itself, only then).
HEAVY = ["re", "enum", "hashlib", "pathlib", "socket", "selectors", "threading", "uuid", "ipaddress", "grpc",
         "google.protobuf", "tomllib", "json"]  # fmt: skip

PROBE = f"""
import sys
from spur_hpc.cli import slurm, squeue, sbatch, jobopts
from spur_hpc.cli.controller import ControllerClient, controller_addresses
from spur_hpc.wire import protocodec
controller_addresses({{"SPUR_CONTROLLER_ADDR": "127.0.0.1:6817"}})
values, positionals = jobopts.parse_job_options("sbatch", ["-Q", "--wrap", "true", "-N", "1"], {{}})
squeue.job_query(squeue.parse("squeue", squeue.OPTIONS, ["-u", "nobody"])[0])
protocodec.encode("ListJobsRequest", {{"brief": True, "users": ["nobody"]}})
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
"""


def test_squeue_and_sbatch_load_none_of_the_heavy_modules() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    loaded = out.stdout.strip()
    assert loaded == "", f"the CLI's start-up now imports {loaded}; import them where they are used"

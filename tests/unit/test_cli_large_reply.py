"""A large answer is decoded by the protobuf runtime, a small one by protocodec: the commands print the same."""

from __future__ import annotations

from spur_hpc.cli import controller, jobview
from spur_hpc.proto import slurm_pb2
from spur_hpc.wire import grpcwire, protocodec


def queue(n: int) -> bytes:
    jobs = []
    for i in range(1, n + 1):
        running = i % 3 == 0
        jobs.append(slurm_pb2.Job(
            job_id=i,
            spec=slurm_pb2.JobSpec(name=f"job-{i}", user="alice" if i % 2 else "bob", partition="debug", nodes=1,
                                   cpus_per_task=2, time_limit_secs=3600, work_dir="/home/alice"),
            state=slurm_pb2.RUNNING if running else slurm_pb2.PENDING,
            reason="None" if running else "Resources",
            submit_time=1000.0 + i, start_time=2000.0 if running else 0.0,
            nodes=[f"node-{i % 7}"] if running else [],
        ))  # fmt: skip
    return slurm_pb2.ListJobsReply(jobs=jobs).SerializeToString()


def test_a_large_answer_prints_what_protocodec_would_print() -> None:
    data = queue(3000)
    assert len(data) > controller.LARGE_REPLY_BYTES
    large = controller._decode("ListJobsReply", data, "127.0.0.1:6817")
    small = protocodec.decode("ListJobsReply", data)
    assert not isinstance(large, protocodec.Message)
    for fmt in (jobview.SQUEUE_DEFAULT_FORMAT, "%i %j %u %t %M %l %D %R %C %Z %V"):
        assert jobview.squeue_lines(list(large.jobs), fmt, True, 5000.0, "squeue") == jobview.squeue_lines(
            list(small.jobs), fmt, True, 5000.0, "squeue"
        )
    assert [protocodec.to_jsonable(j, "Job") for j in large.jobs] == [
        protocodec.to_jsonable(j, "Job") for j in small.jobs
    ]


def test_a_small_answer_stays_with_protocodec() -> None:
    data = queue(3)
    assert isinstance(controller._decode("ListJobsReply", data, "127.0.0.1:6817"), protocodec.Message)


def test_a_truncated_large_answer_is_one_clear_error() -> None:
    data = queue(3000)[:-3]
    try:
        controller._decode("ListJobsReply", data, "127.0.0.1:6817")
    except grpcwire.RpcError as exc:
        assert "the answer of 127.0.0.1:6817 is not a valid ListJobsReply" in str(exc)
    else:
        raise AssertionError("a truncated answer was accepted")


def test_the_runtime_reads_the_descriptor_slurm_pb2_carries_without_importing_it() -> None:
    assert controller.serialized_descriptor() == slurm_pb2.DESCRIPTOR.serialized_pb
    large = controller._decode("ListJobsReply", queue(3000), "127.0.0.1:6817")
    assert type(large) is not slurm_pb2.ListJobsReply, "built from the descriptor, not slurm_pb2's class"
    assert large.jobs[2].spec.name == "job-3" and large.jobs[2].state == slurm_pb2.RUNNING


def test_a_fresh_command_decodes_a_large_answer_without_loading_the_well_known_types(tmp_path) -> None:
    import subprocess
    import sys

    from spur_hpc.wire import protocodec as codec

    proto = open(codec.PROTO_PATH, encoding="utf-8").read()
    assert not [line for line in proto.splitlines() if line.startswith("import ")], "a well-known type needs its module"
    (tmp_path / "reply.bin").write_bytes(queue(3000))
    script = (
        "import sys\nfrom spur_hpc.cli import controller\n"
        f"reply = controller._decode('ListJobsReply', open({str(tmp_path / 'reply.bin')!r}, 'rb').read(), 'x')\n"
        "print(len(reply.jobs), reply.jobs[2].spec.name, 'google.protobuf.internal.well_known_types' in sys.modules)\n"
        "import google.protobuf.internal.well_known_types as w\nprint(hasattr(w, 'Timestamp'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3000", "job-3", "False", "True"], "decoded as before, and a later import gets the real module"

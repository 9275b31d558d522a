"""The shared model: hostlists, addresses, output-path patterns, states."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spur_hpc import model


@pytest.mark.parametrize(
    ("names", "text"),
    [(["n1", "n2", "n3", "n5"], "n[1-3,5]"), (["gpu01", "gpu02", "login"], "gpu[01-02],login"),
     (["a"], "a"), (["n10", "n9", "n11"], "n[9-11]"), (["x1", "y1"], "x1,y1"), ([], "")],
)  # fmt: skip
def test_hostlist_compress(names: list[str], text: str) -> None:
    assert model.compress_hostlist(names) == text


def test_hostlist_expand_round_trips() -> None:
    assert model.expand_hostlist("n[1-3,5],gpu[01-02],login") == ["n1", "n2", "n3", "n5", "gpu01", "gpu02", "login"]
    for expression in ("n[1-3,5]", "gpu[01-02],login", "a"):
        assert model.compress_hostlist(model.expand_hostlist(expression)) == expression


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [("node[1-", "unbalanced brackets"), ("n[3-1]", "runs backwards"), ("n[a-b]", "is not a number"),
     ("n[1-2]x[3]", "one bracket group"), ("pn[1-65537]", "more than 65536 nodes")],
)  # fmt: skip
def test_a_bad_hostlist_is_one_line_naming_it(expression: str, complaint: str) -> None:
    with pytest.raises(model.InvalidValue, match=complaint) as caught:
        model.expand_hostlist(expression)
    assert f"'{expression}'" in str(caught.value) and "\n" not in str(caught.value)


# Every pattern sbatch documents, each alone and mixed, with the expansion slurmstepd gives a batch job.
PATTERNS = [
    ("out-%j.txt", "out-123.txt"),
    ("out-%A.txt", "out-123.txt"),
    ("out-%A_%a.txt", "out-123_4294967294.txt"),
    ("out-%J.txt", "out-123.txt"),
    ("%x-%j.out", "train-123.out"),
    ("%u/%N/%n-%t-%s.log", "alice/n07/0-0-batch.log"),
    ("100%%-%j", "100%-123"),
    ("job%4j.out", "job0123.out"),
    ("job%12j.out", "job0000000123.out"),
    ("%5x", "train"),
    ("a%3zb", "a3zb"),
    ("keep-%q-%", "keep-%q-"),
    ("lit\\%j-%x.out", "lit%j-%x.out"),
    ("", "slurm-123.out"),
    ("/abs/%j.out", "/abs/123.out"),
]


def _job(pattern: str, name: str = "train"):
    from spur_hpc.proto import slurm_pb2 as pb

    spec = pb.JobSpec(name=name, user="alice", uid=1000, work_dir="/work/alice", stdout_path=pattern)
    return pb.Job(job_id=123, nodes=["n07"], spec=spec)


def _stepd_paths(pattern: str, name: str = "train", stderr: str = "") -> tuple[str, str]:
    from spur_hpc.stepd import jobspec

    ident = jobspec.Identity("alice", 1000, 1000, groups=(1000,), home="/home/alice", shell="", switch=False)
    spec = {"name": name, "user": "alice", "work_dir": "/work/alice", "stdout_path": pattern, "stderr_path": stderr}
    return jobspec.output_paths(123, spec, ident, "n07")


def _module_output_path(pattern: str, name: str = "train") -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collection"))
    import collection_helpers  # noqa: F401  (puts ansible_collections.spur.cluster on the import path)
    from ansible_collections.spur.cluster.plugins.module_utils import spur_jobs

    job = {"job_id": 123, "name": name, "user": "alice", "nodes": ["n07"], "work_dir": "/work/alice"}
    return spur_jobs.output_path({**job, "stdout_path": pattern})


@pytest.mark.parametrize(("pattern", "expected"), PATTERNS)
def test_the_file_spurstepd_writes_is_the_path_scontrol_and_the_module_show(pattern: str, expected: str) -> None:
    from spur_hpc.cli import jobview

    path = expected if expected.startswith("/") else f"/work/alice/{expected}"
    assert _stepd_paths(pattern) == (path, path)
    assert jobview.stdout_path(_job(pattern)) == path
    assert jobview.stderr_path(_job(pattern)) == path
    assert _module_output_path(pattern) == path


def test_a_job_without_a_name_writes_and_shows_batch_for_x() -> None:
    from spur_hpc.cli import jobview

    assert _stepd_paths("%x-%j.out", name="")[0] == "/work/alice/batch-123.out"
    assert jobview.stdout_path(_job("%x-%j.out", name="")) == "/work/alice/batch-123.out"
    assert _module_output_path("%x-%j.out", name="") == "/work/alice/batch-123.out"


def test_stderr_has_its_own_pattern_when_given() -> None:
    assert _stepd_paths("out-%j", stderr="err-%A.%x") == ("/work/alice/out-123", "/work/alice/err-123.train")


@pytest.mark.parametrize(
    ("text", "default_port", "address"),
    [("127.0.1.1", 6817, "127.0.1.1:6817"), ("http://ctl1:7000/", None, "ctl1:7000"),
     ("[::1]:6817", None, "[::1]:6817"), ("[::1]", 6821, "[::1]:6821"),
     (" node-1.example:6818 ", None, "node-1.example:6818")],
)  # fmt: skip
def test_addresses_normalise(text: str, default_port: int | None, address: str) -> None:
    assert model.normalize_addr(text, default_port) == address


@pytest.mark.parametrize(
    ("text", "complaint"),
    [("::1:6817", "brackets"), ("h\u00e9te:1", "neither an IP address nor a host name"), ("h:0", "from 1 to 65535"),
     ("h", "missing ':port'"), ("[::1", "unclosed"), ("", "empty address")],
)  # fmt: skip
def test_a_bad_address_names_what_is_wrong(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        model.normalize_addr(text)


def test_with_port_adds_the_default_and_leaves_an_unreadable_address_to_the_connection() -> None:
    assert model.with_port("ctl1", 6817) == "ctl1:6817"
    assert model.with_port("ctl1:7000", 6817) == "ctl1:7000"
    assert model.with_port("[::1]", 6817) == "[::1]:6817"
    assert model.with_port(" not an address ", 6817) == "not an address"


@pytest.mark.parametrize(
    ("address", "host"),
    [("ctl1:6822", "ctl1"), ("http://[::1]:6822/status", "::1"), ("http://10.0.0.1:6822", "10.0.0.1"),
     ("ctl1", "ctl1")],
)  # fmt: skip
def test_address_host(address: str, host: str) -> None:
    assert model.address_host(address) == host


def test_finished_states_are_the_job_states_after_running() -> None:
    assert model.FINISHED_STATES == set(model.JOB_STATES) - {model.PENDING, model.RUNNING}

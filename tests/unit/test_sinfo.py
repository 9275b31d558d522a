"""sinfo and `scontrol show node` against what Slurm 22.05 printed (tests/golden/slurm-22.05): the same nodes and
partitions as protobuf messages, each capture's command line through Spur's parser and formatter, byte for byte
after tools/slurm_capture/normalise.py. The replay test checks the whole path on a cluster; these pin the format."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from spur_hpc.cli import nodeview, sinfo, slurm
from spur_hpc.proto import slurm_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.slurm_capture
from tools.slurm_capture import session  # noqa: E402
from tools.slurm_capture.normalise import Context, normalise  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05"
META = json.loads((GOLDEN / "session.json").read_text())
MAX_TIME = {"debug": 3600, "long": 0}  # session.PARTITION_LIMITS: MaxTime=60 (minutes) and INFINITE
WHEN = 1764590054.0  # any time: the captures' times are normalised away


def capture(number: int) -> dict:
    return json.loads(next(GOLDEN.glob(f"{number:03d}-*.json")).read_text())


def partitions() -> list[nodeview.PartitionView]:
    return [
        nodeview.PartitionView(
            name=name,
            nodes=nodes,
            is_default=name == session.DEFAULT_PARTITION,
            max_time_secs=MAX_TIME[name],
            default_time_secs=0,
            max_nodes=0,
            min_nodes=0,
            state="UP",
            hidden=False,
            priority_tier=1,
            priority_job_factor=1,
        )  # fmt: skip
        for name, nodes in session.PARTITIONS.items()
    ]


def node(name: str, state: int, used: int = 0, reason: str = "", port: int = 6818) -> pb.Node:
    part = next(p for p, names in session.PARTITIONS.items() if name in names)
    drain = state in (pb.DRAINING, pb.DRAINED) or reason in ("broken",)
    return pb.Node(
        name=name, state=state, partition=part, partitions=[part], registered=True, drain=drain,
        resources=pb.NodeResources(cpus=session.CPUS, memory_mb=session.MEMORY_MB),
        allocated=pb.NodeResources(cpus=used), job_ids=[1] if used else [], address=f"127.0.0.1:{port}",
        version=META["slurm_version"], reason=reason, reason_set_by="root" if reason else "",
        reason_time=WHEN if reason else 0.0, arch="x86_64", os=f"Linux {META['kernel']}", sockets=session.CPUS,
        cores_per_socket=1, threads_per_core=1, boot_time=WHEN, agent_started=WHEN, last_busy=WHEN,
    )  # fmt: skip


# the node states each capture saw (session.py's order of events)
IDLE = [node(n, pb.IDLE) for n in session.NODES]
BUSY = [node("n1", pb.MIXED, 2), node("n2", pb.ALLOCATED, 4), node("n3", pb.MIXED, 3), node("n4", pb.IDLE)]
DRAINING = [node("n1", pb.MIXED, 2), node("n2", pb.DRAINING, 4, "maint"), BUSY[2], BUSY[3]]
DRAINED = DRAINING[:3] + [node("n4", pb.DRAINED, 0, "idle_drain")]
DOWN = DRAINING[:3] + [node("n4", pb.DOWN, 0, "broken")]
RESUMED = [node("n1", pb.MIXED, 2), node("n2", pb.ALLOCATED, 4), BUSY[2], node("n4", pb.IDLE)]
SINFO_CAPTURES = {
    **{n: IDLE for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 185)},
    **{n: BUSY for n in (50, 51, 52, 53, 54, 123)},
    **{n: DRAINING for n in (125, 126)},
    **{n: DRAINED for n in (129, 130, 131)},
    **{n: DOWN for n in (134, 135, 136, 138)},
    166: RESUMED,
}
SLURM = Context(hostname=META["hostname"], kernel=META["kernel"], versions=[META["slurm_version"]])


def run_sinfo(args: list[str], nodes: list[pb.Node]) -> str:
    """sinfo.main's path from the parsed options to the lines, on these nodes and the session's partitions."""
    values, _ = sinfo.parse("sinfo", sinfo.OPTIONS, args)
    columns, layout = sinfo.choose_columns(values)
    wanted = sinfo.gather(values["partitions"])
    parts = [p for p in partitions() if not wanted or p.name in wanted]
    lines = nodeview.sinfo_lines(nodes, columns, layout, not values["noheader"], parts, sinfo.node_filter(values))
    if values["long"] and not values["noheader"]:
        lines.insert(0, nodeview.date_line(WHEN))
    return "".join(line + "\n" for line in lines)


@pytest.mark.parametrize("number", sorted(SINFO_CAPTURES))
def test_sinfo_prints_what_slurm_printed(number: int) -> None:
    slurm_side = capture(number)
    assert slurm_side["rc"] == 0
    got = run_sinfo(shlex.split(slurm_side["cmd"])[1:], SINFO_CAPTURES[number])
    assert normalise(got, SLURM) == normalise(slurm_side["stdout"], SLURM), slurm_side["cmd"]


@pytest.mark.parametrize(
    ("number", "shown"),
    [(23, IDLE[0]), (96, BUSY[0]), (127, DRAINING[1]), (132, DRAINED[3]), (137, DOWN[3])],
)
def test_scontrol_show_node_prints_slurms_seventeen_lines(number: int, shown: pb.Node) -> None:
    slurm_side = capture(number)
    # Slurm's n1 listens on SlurmdPort (no Port= line), the others on ports of their own
    slurmd_port = 6818 if "Port=" not in slurm_side["stdout"] else 0
    text = nodeview.show_node_text(shown, slurmd_port=slurmd_port)
    # CPULoad and FreeMem are masked on both sides (Slurm's are measurements; Spur has none and prints N/A)
    assert normalise(text, SLURM) == normalise(slurm_side["stdout"], SLURM)


def test_scontrol_one_line_form_keeps_each_lines_trailing_space() -> None:
    text = nodeview.show_node_text(node("n3", pb.IDLE, port=15142), one_liner=True)
    assert text.startswith("NodeName=n3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=N/A ")
    assert " Port=15142 Version=" in text and text.endswith("ExtSensorsTemp=n/s\n") and text.count("\n") == 1


def test_node_states_are_slurms_base_state_and_flags() -> None:
    draining, drained, down = DRAINING[1], DRAINED[3], DOWN[3]
    assert [nodeview.short_state(n) for n in (draining, drained, down)] == ["drng", "drain", "drain"]
    assert [nodeview.long_state(n) for n in (draining, drained, down)] == ["draining", "drained", "drained"]
    partly = node("n1", pb.DRAINING, 2, "maint")
    assert nodeview.state_complete(nodeview.state_word(partly, mixed_if_draining=True)) == "MIXED+DRAIN"
    assert nodeview.state_complete(nodeview.state_word(partly)) == "ALLOCATED+DRAIN"  # sinfo's view
    lost = pb.Node(name="n9", state=pb.DOWN, registered=False, resources=pb.NodeResources(cpus=4))
    assert nodeview.short_state(lost) == "down*"
    assert nodeview.state_complete(nodeview.state_word(lost)) == "DOWN+NOT_RESPONDING"


def test_sinfo_t_takes_slurms_names_cut_short_and_drain_includes_draining() -> None:
    assert run_sinfo(["-h", "-N", "-o", "%N", "-t", "dr"], DOWN) == "n2\nn4\n"  # drain: any node with the flag
    assert run_sinfo(["-h", "-N", "-o", "%N", "-t", "drng"], DOWN) == "n2\n"
    assert run_sinfo(["-h", "-N", "-o", "%N", "-t", "alloc"], BUSY) == "n1\nn2\nn3\n"  # any node with CPUs in use
    assert run_sinfo(["-h", "-N", "-o", "%N", "-t", "mix&alloc"], BUSY) == "n1\nn3\n"
    # a partition with no node left is still a line, as Slurm's default view shows it
    empty = run_sinfo(["-h", "-t", "down"], IDLE).splitlines()
    assert empty == ["debug*       up    1:00:00      0    n/a ", "long         up   infinite      0    n/a "]


def test_sinfo_refuses_an_unknown_state_with_slurms_two_lines(capsys) -> None:
    assert slurm.sinfo_main(["-t", "sleepy"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == 'sinfo: error: Bad state string: "sleepy"'
    assert err[1].startswith("sinfo: error: valid states: unknown,down,idle,allocated,") and len(err) == 2


def test_an_unknown_option_gets_getopts_two_lines_and_exit_1(capsys) -> None:
    slurm_side = capture(34)
    assert slurm.sinfo_main(["--nosuchoption"]) == slurm_side["rc"] == 1
    assert capsys.readouterr().err == slurm_side["stderr"].replace("/usr/bin/sinfo", "sinfo")
    assert slurm.sinfo_main(["-0"]) == 1
    assert capsys.readouterr().err == "sinfo: invalid option -- '0'\nTry \"sinfo --help\" for more information\n"


def test_unknown_format_letters_are_reported_and_printed_as_written(capsys) -> None:
    columns = nodeview.parse_format("%N %!x")
    assert capsys.readouterr().err == "Invalid node format specification: !\n"
    lines = nodeview.sinfo_lines(IDLE, columns, nodeview.Layout(), header=False)
    assert lines == ["n[1-4] %!x"]


def test_widths_cut_values_and_min_max_cells() -> None:
    mixed_sizes = IDLE[:1] + [pb.Node(name="n2", state=pb.IDLE, registered=True, partition="debug",
                                      resources=pb.NodeResources(cpus=8, memory_mb=100))]  # fmt: skip
    assert run_sinfo(["-h", "-o", "%.3N|%2c|%m"], mixed_sizes) == "n[1|4+|100+\n"
    assert run_sinfo(["-h", "-e", "-o", "%N %c"], mixed_sizes) == "n1 4\nn2 8\n"  # -e: one line per size
    assert run_sinfo(["-h", "-O", "nodelist:4,cpus:.3|"], IDLE) == "n[1-  4|\n"


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    from test_cli_support import fake_cluster

    with fake_cluster(monkeypatch) as fake:
        for shown in IDLE:
            fake.add_node(shown.name, **{f.name: v for f, v in shown.ListFields() if f.name != "name"})
        fake.add_node("s1", partition="secret", partitions=["secret"])
        yield fake


def test_hidden_partitions_show_with_a_or_when_named(cluster, capsys) -> None:
    parts = [pb.Partition(name=p.name, nodes=p.nodes, is_default=p.is_default, max_time_secs=p.max_time_secs,
                          state="UP") for p in partitions()]  # fmt: skip
    cluster.state.partitions = parts + [pb.Partition(name="secret", nodes=["s1"], state="UP", hidden=True)]
    for args, shown in ((["-h", "-o", "%P %N"], "debug* n[1-2]\nlong n[3-4]\n"),
                        (["-a", "-h", "-o", "%P %N"], "debug* n[1-2]\nlong n[3-4]\nsecret s1\n"),
                        (["-a", "--hide", "-h", "-o", "%P"], "debug*\nlong\n"),
                        (["-p", "secret", "-h", "-o", "%R %l"], "secret infinite\n")):  # fmt: skip
        assert slurm.sinfo_main(args) == 0
        assert capsys.readouterr().out == shown, args


def test_a_controller_without_list_partitions_gets_the_nodes_partitions(cluster, capsys) -> None:
    assert cluster.state.partitions is None  # the fake answers UNIMPLEMENTED, as a controller before it
    assert slurm.sinfo_main(["-h", "-o", "%P %N"]) == 0
    assert capsys.readouterr().out == "debug n[1-2]\nlong n[3-4]\nsecret s1\n"  # no Default=YES: no `*`


def test_reason_user_with_uid_and_the_empty_reservation_table(cluster, capsys) -> None:
    assert run_sinfo(["-h", "-R", "-o", "%U|%u|%N"], DRAINING) == "root(0)|root|n2\n"
    assert slurm.sinfo_main(["-T"]) == 0
    assert capsys.readouterr().out == (
        "RESV_NAME     STATE           START_TIME             END_TIME     DURATION  NODELIST\n"
    )
    assert slurm.sinfo_main(["-T", "-h"]) == 0 and capsys.readouterr().out == ""

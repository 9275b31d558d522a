"""sinfo's node-count, feature and gres columns, scontrol show node's gres/feature lines and show partition
(Open OnDemand reads `sinfo -aho %F/%C` and `scontrol show part -o`)."""

from __future__ import annotations

import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import nodeview, slurm
from spur_hpc.proto import slurm_pb2 as pb


def nodes() -> list[pb.Node]:
    gpu = pb.NodeResources(cpus=8, memory_mb=1000, gres={"gpu": 2})
    return [
        pb.Node(name="n1", state=pb.MIXED, resources=pb.NodeResources(cpus=4), allocated=pb.NodeResources(cpus=1)),
        pb.Node(name="n2", state=pb.IDLE, resources=pb.NodeResources(cpus=4)),
        pb.Node(name="n3", state=pb.DRAINED, resources=pb.NodeResources(cpus=4), drain=True, reason="disk"),
        pb.Node(name="g1", state=pb.IDLE, resources=gpu, partition="gpu", features=["a100", "fast"]),
    ]


def sinfo_lines(format_text: str, node_oriented: bool = False) -> list[str]:
    layout = nodeview.Layout(node_oriented=node_oriented)
    return nodeview.sinfo_lines(nodes(), nodeview.parse_format(format_text), layout, header=False)


def test_node_counts_features_and_gres_columns() -> None:
    assert sinfo_lines("%P %F %C") == ["default* 1/1/1/3 1/7/4/12", "gpu 0/1/0/1 0/8/0/8"]
    lines = sinfo_lines("%N %f %G", node_oriented=True)  # sorted by node name, as Slurm's -N is
    assert lines == ["g1 a100,fast gpu:2", "n1 (null) (null)", "n2 (null) (null)", "n3 (null) (null)"]


def test_show_node_names_gres_and_features() -> None:
    lines = nodeview.show_node_lines(nodes()[3])
    assert "   Gres=gpu:2" in lines and "   GresUsed=gpu:0" in lines  # nothing allocated
    assert "   AvailableFeatures=a100,fast" in lines and "   ActiveFeatures=a100,fast" in lines
    assert "   CfgTRES=cpu=8,mem=1000M,billing=8,gres/gpu=2" in lines


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    with fake_cluster(monkeypatch) as fake:
        for node in nodes():
            fake.add_node(node.name, **{f.name: v for f, v in node.ListFields() if f.name != "name"})
        yield fake


def test_scontrol_show_partition_one_line_each(cluster, capsys) -> None:
    assert slurm.scontrol_main(["show", "part", "-o", "-M", "spur"]) == 0  # options after the command, as OOD
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("PartitionName=default AllowGroups=ALL") and out[1].startswith("PartitionName=gpu ")
    assert slurm.scontrol_main(["show", "partition", "nope"]) == 1
    assert capsys.readouterr().out == "Partition nope not found\n"  # on stdout, as Slurm's


def test_show_partition_is_slurms_record_from_the_partitions_limits() -> None:
    from spur_hpc.cli import partview

    part = nodeview.PartitionView(pb.Partition(name="debug", nodes=["n1", "n2"], is_default=True, max_time_secs=3600,
                                               max_nodes=2, state="DRAIN", priority_tier=2))  # fmt: skip
    by_name = {n.name: n for n in nodes()}
    by_name["n2"].resources.memory_mb = 4096
    by_name["n1"].resources.memory_mb = 4096
    assert partview.show_partition_lines(part, by_name) == [
        "PartitionName=debug",
        "   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        "   AllocNodes=ALL Default=YES QoS=N/A",
        "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        "   MaxNodes=2 MaxTime=01:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED",
        "   Nodes=n[1-2]",
        "   PriorityJobFactor=1 PriorityTier=2 RootOnly=NO ReqResv=NO OverSubscribe=NO",
        "   OverTimeLimit=NONE PreemptMode=OFF",
        "   State=DRAIN TotalCPUs=8 TotalNodes=2 SelectTypeParameters=NONE",
        "   JobDefaults=(null)",
        "   DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        "   TRES=cpu=8,mem=8G,node=2,billing=8",
    ]


def test_sinfo_answers_open_ondemands_question(cluster, capsys) -> None:
    assert slurm.sinfo_main(["-aho", "%F/%C"]) == 0
    assert capsys.readouterr().out == "1/2/1/4/1/15/4/20\n"  # without a partition column: the whole cluster


def test_open_ondemands_cluster_questions(cluster, capsys) -> None:
    """ood_core's get_cluster_info: sinfo -aho %A/%D/%C, and sinfo -ahNO ,nodehost,gres:N,gresused:N."""
    assert slurm.sinfo_main(["-aho", "%A/%D/%C"]) == 0
    assert capsys.readouterr().out.strip().split("/") == ["1", "2", "4", "1", "15", "4", "20"]
    assert slurm.sinfo_main(["-ahNO", ",nodehost,gres:12,gresused:12"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["g1", "gpu:2", "(null)"] in lines and len(lines) == 4


def test_open_ondemands_squeue_letters_are_all_known(cluster, capsys) -> None:
    letters = "aABcCdDeEfFgGhHiIjJkKlLmMnNoOqPQrStTuUvVwWxXyYzZb"
    fmt = "\x1e" + "\x1f".join(f"%{letter}" for letter in letters)
    assert slurm.squeue_main(["--all", "--states=all", "--noconvert", "-M", "spur", "-o", fmt]) == 0
    out = capsys.readouterr().out
    records = out.split("\x1e")
    assert records[0] == "CLUSTER: spur\n" and records[1].split("\x1f")[0] == "ACCOUNT"
    assert all(len(r.split("\x1f")) == len(letters) for r in records[1:])


def test_show_partition_tokens_are_all_key_value(cluster, capsys) -> None:
    assert slurm.scontrol_main(["show", "part", "-o"]) == 0
    for line in capsys.readouterr().out.splitlines():
        assert all("=" in token and token.split("=", 1)[1] for token in line.split(" ")), line

"""sacctmgr without a cluster: its command-line grammar, the commit question, format= fields and print_fields."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spur_hpc.cli import assocview, sacctmgr


def parsed(line: str) -> sacctmgr.Command:
    return sacctmgr.parse_command(line.split())


def test_a_modify_takes_names_where_and_set_in_slurms_words():
    cmd = parsed("update Users Name=alice,bob where Account=phys set MaxJobs=5 QOS+=high DefaultQOS=normal")
    assert (cmd.verb, cmd.entity, cmd.names) == ("modify", "user", ["alice", "bob"])
    assert cmd.where == {"account": "phys"}
    assert cmd.set == {"maxjobs": "5", "qos+": "high", "defaultqos": "normal"}


def test_an_add_takes_its_settings_bare():
    cmd = parsed("create account phys,chem Parent=root Description='Physics' fairshare=10")
    assert (cmd.verb, cmd.entity, cmd.names) == ("add", "account", ["phys", "chem"])
    assert cmd.set == {"parent": "root", "description": "Physics", "fairshare": "10"}


def test_show_takes_withassoc_format_and_bare_names():
    cmd = parsed("list assoc format=account,user%20 where user=alice")
    assert (cmd.verb, cmd.entity, cmd.format, cmd.where) == (
        "show",
        "association",
        ["account,user%20"],
        {"user": "alice"},
    )
    cmd = parsed("show user alice withassoc")
    assert (cmd.names, cmd.withassoc) == (["alice"], True)


@pytest.mark.parametrize(
    "line, words",
    [
        ("frob account", "invalid keyword: frob"),
        ("show frob", "No valid entity in list command"),
        ("modify user alice set bogus", " Unknown option: bogus"),
    ],
)
def test_slurms_refusals_of_a_command_line(line, words):
    with pytest.raises(sacctmgr.SlurmMessage) as info:
        parsed(line)
    assert info.value.text.startswith(words)


def test_an_unknown_set_key_is_refused_with_the_word_as_typed():
    cmd = parsed("modify user alice set BoGus=1")
    with pytest.raises(sacctmgr.SlurmMessage) as info:
        sacctmgr.check_keys(cmd)
    assert info.value.text == " Unknown option: BoGus=1\n Use keyword 'where' to modify condition"


def test_a_slurm_entity_spur_keeps_no_store_for_is_named():
    with pytest.raises(sacctmgr.CliError, match="Spur keeps no wckey"):
        parsed("show wckey")


def test_fields_match_as_slurms_prefixes_in_its_order():
    assert [(f.title, f.width) for f in assocview.fields(["acc,user%-5,fairshare,defaultacc,maxw,qos%30"])] == [
        ("Account", 10), ("User", -5), ("Share", 9), ("Def Acct", 10), ("MaxWall", 11), ("QOS", 30),
    ]  # fmt: skip
    with pytest.raises(assocview.UnknownField, match="Unknown field 'ac'"):
        assocview.field("ac")  # shorter than Account's 3 letters


def test_print_fields_pads_cuts_with_a_plus_and_separates_parsable_values():
    columns = assocview.fields(["user%4,admin"])
    rows = [{"user": "alice", "admin_level": "Administrator"}]
    assert assocview.lines(columns, rows, True, "") == ["User     Admin ", "---- --------- ", "ali+ Administ+ "]
    assert assocview.lines(columns, rows, False, "parsable") == ["alice|Administrator|"]
    assert assocview.lines(columns, rows, True, "parsable2") == ["User|Admin", "alice|Administrator"]


def test_values_are_written_as_slurm_writes_them():
    assert assocview.tres_text({"gres/gpu": 2, "mem": 16384, "cpu": 8}) == "cpu=8,mem=16G,gres/gpu=2"
    assert assocview.tres_text({"mem": 1500}) == "mem=1500M"
    assert assocview.wall_text(5400) == "01:30:00" and assocview.wall_text(86400) == "1-00:00:00"
    assert assocview.wall_text(-1) == ""


def answer(text: bytes | None, capsys, patience: float = 5.0) -> tuple[bool, str]:
    read, write = os.pipe()
    if text is not None:
        os.write(write, text)
        os.close(write)
    try:
        result = sacctmgr.ask(read, patience)
    finally:
        os.close(read)
        if text is None:
            os.close(write)
    return result, capsys.readouterr().out


def test_the_commit_question_takes_y_and_nothing_else(capsys):
    question = sacctmgr.QUESTION + "\n(N/y): \n"
    assert answer(b"y\n", capsys) == (True, question)
    assert answer(b"N\n", capsys) == (False, question)
    assert answer(b"\n", capsys) == (False, question)
    assert answer(b"xy", capsys) == (True, question + "Y or N please\n(N/y): \n")


def test_a_closed_stdin_or_no_answer_in_time_is_no(capsys):
    assert answer(b"", capsys) == (False, sacctmgr.QUESTION + "\n(N/y): \n")  # Slurm spins here; Spur stops
    assert answer(None, capsys, patience=0.05) == (False, sacctmgr.QUESTION + "\n(N/y): timeout\n")


# ------------------------------------------------------------------ against the real planner, in process


class StoreClient:
    """ControllerClient's two association calls answered from an in-memory store by the leader's own planner
    (controller/assocplan.py), as the service does: a refusal is INVALID_ARGUMENT, a non-admin PERMISSION_DENIED."""

    def __init__(self, admin: bool = True) -> None:
        from spur_hpc.controller import associations

        self.store = associations.default_store("capture")
        self.admin = admin
        self.last_answered = "127.0.0.1:6817"

    def call(self, method: str, request: dict | None = None, write: bool = False):
        from spur_hpc.controller import associations, assocplan
        from spur_hpc.proto import slurm_pb2
        from spur_hpc.wire.grpcwire import RpcError

        def pb(message, row):
            return message(**{k: v for k, v in row.items() if k in message.DESCRIPTOR.fields_by_name})

        if method == "ListAssociations":
            s = self.store
            return slurm_pb2.ListAssociationsReply(
                cluster=s["cluster"],
                qos=[pb(slurm_pb2.Qos, r) for r in s["qos"].values()],
                accounts=[pb(slurm_pb2.Account, r) for r in s["accounts"].values()],
                users=[pb(slurm_pb2.User, r) for r in s["users"].values()],
                associations=[pb(slurm_pb2.Association, r) for r in s["assocs"].values()],
            )
        if method == "GetClusterInfo":
            return slurm_pb2.ClusterInfo(cluster_name="capture", leader_grpc=self.last_answered, wal_level=5)
        assert method == "ModifyAssociations" and write
        if not self.admin:
            raise RpcError("PERMISSION_DENIED", "user nobody (uid 65534) may not change accounts, users or QOS")
        r = request
        try:
            puts, deletes, affected = assocplan.plan_change(
                self.store, r["verb"], r["entity"], r["names"], dict(r["where"]), dict(r["set"]), "capture"
            )
        except assocplan.PlanError as exc:
            raise RpcError("INVALID_ARGUMENT", str(exc)) from None
        if not puts and not deletes:
            nothing = {"add": "Nothing new added.", "delete": "Nothing deleted"}.get(r["verb"], "Nothing modified")
            return slurm_pb2.ModifyAssociationsReply(message=nothing)
        if not r["dry_run"]:
            assert associations.apply_change(self.store, puts, deletes) is None
        return slurm_pb2.ModifyAssociationsReply(affected=affected, changed=not r["dry_run"])


@pytest.fixture
def store_client(monkeypatch):
    from spur_hpc.cli import controller

    client = StoreClient()
    monkeypatch.setattr(controller, "ControllerClient", lambda: client)
    return client


def sacctmgr_run(line: str | list[str], capsys) -> tuple[int, str, str]:
    from spur_hpc.cli import slurm

    code = slurm.sacctmgr_main(line.split() if isinstance(line, str) else line)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_without_i_the_change_waits_for_yes(store_client, capsys, monkeypatch):
    monkeypatch.setattr(sacctmgr, "ask", lambda: False)
    code, out, _ = sacctmgr_run("add account phys", capsys)
    assert (code, "phys" in store_client.store["accounts"]) == (0, False)
    assert out.startswith(" Adding Account(s)\n  phys\n") and out.endswith(" Changes Discarded\n")
    monkeypatch.setattr(sacctmgr, "ask", lambda: True)
    assert sacctmgr_run("add account phys", capsys)[0] == 0
    assert "phys" in store_client.store["accounts"]
    code, out, _ = sacctmgr_run("modify account phys set maxjobs=3", capsys)
    assert (code, out) == (0, " Modified account associations...\n  C = capture    A = phys of root\n")
    assert store_client.store["assocs"]["phys||"]["max_jobs"] == 3


def test_with_i_it_commits_at_once_and_shows_it(store_client, capsys, monkeypatch):
    monkeypatch.setattr(sacctmgr, "ask", lambda: pytest.fail("-i must not ask"))
    assert sacctmgr_run("-i add account phys", capsys)[0] == 0
    assert sacctmgr_run("-i add user alice account=phys maxjobs=2", capsys)[0] == 0
    code, out, _ = sacctmgr_run("-nP show user withassoc format=account,qos,maxjobs where user=alice", capsys)
    assert (code, out) == (0, "phys|normal|2\n")
    code, out, err = sacctmgr_run("-i modify user alice set bogus=1", capsys)
    assert (code, out, err) == (1, "", " Unknown option: bogus=1\n Use keyword 'where' to modify condition\n")
    code, out, _ = sacctmgr_run("-i delete user alice", capsys)
    assert (code, out, "alice" in store_client.store["users"]) == (0, " Deleting users...\n  alice\n", False)


def test_a_user_who_is_no_administrator_gets_slurms_refusal(store_client, capsys):
    store_client.admin = False
    code, out, err = sacctmgr_run("-i modify qos normal set priority=3", capsys)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "sacctmgr: error: Your user doesn't have privilege to perform this action",
        " Error with request: Access/permission denied",
    ]


sacctmgr_tokens = st.one_of(
    st.sampled_from(["add", "modify", "delete", "show", "list", "update", "remove", "frob", "where", "set"]),
    st.sampled_from(["account", "user", "qos", "assoc", "cluster", "wckey", "withassoc", "-i", "-n", "-P", "-p", "-s"]),
    st.builds(
        lambda k, op, v: f"{k}{op}={v}",
        st.sampled_from(
            [
                "name",
                "account",
                "parent",
                "fairshare",
                "grptres",
                "maxjobs",
                "maxwall",
                "qos",
                "format",
                "defaultaccount",
                "adminlevel",
                "partition",
                "priority",
                "preemptmode",
                "user",
                "bogus",
                "",
            ]
        ),
        st.sampled_from(["", "", "+", "-"]),
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(
                [
                    "-1",
                    "root",
                    "normal",
                    "cpu=4,mem=8G",
                    "1-00:00:00",
                    "account%-5,user%300",
                    "phys,chem",
                    "admin",
                    "a|b",
                ]
            ),
        ),
    ),  # fmt: skip
    st.text(max_size=12),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(sacctmgr_tokens, max_size=8))
def test_any_command_line_ends_in_an_answer_or_one_refusal(store_client, capsys, monkeypatch, words):
    monkeypatch.setattr(sacctmgr, "ask", lambda: True)
    monkeypatch.setattr(sacctmgr, "commands_from_stdin", lambda program, values: 0)  # no command: its own test
    from spur_hpc.cli import slurm

    code = slurm.sacctmgr_main(words)
    out = capsys.readouterr()
    assert code in (0, 1), (words, out)
    assert "Traceback" not in out.err
    if code == 1:
        assert out.err.strip() or out.out.strip(), words


def test_a_value_with_a_newline_cannot_start_a_line_of_its_own(store_client, capsys):
    code, out, err = sacctmgr_run(["-i", "add", "account", "x", "parent=no\nsuch"], capsys)
    assert code == 1 and "\\n" in err and all(line.startswith(" ") for line in err.splitlines())


def test_without_a_command_it_reads_commands_from_stdin(store_client, capsys, monkeypatch):
    read, write = os.pipe()
    os.write(write, b"add qos high\nshow qos format=name\nbogus\nquit\nshow user\n")
    os.close(write)
    with os.fdopen(read) as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        code, out, err = sacctmgr_run(["-i"], capsys)
    assert code == 1  # one command failed; the others ran, and nothing after quit
    assert out.startswith("sacctmgr: add qos high\n Adding QOS(s)\n  high\n")
    listing = "sacctmgr: show qos format=name\n      Name \n---------- \n    normal \n      high \n"
    assert listing + "sacctmgr: bogus\n" in out
    assert out.endswith("sacctmgr: quit\n") and err == "invalid keyword: bogus\n"


def test_on_a_terminal_one_key_answers_without_enter():
    import pty
    import subprocess
    import sys

    code = "from spur_hpc.cli import sacctmgr; import sys; sys.exit(0 if sacctmgr.ask() else 3)"
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    seen = b""
    while b"(N/y): " not in seen:
        seen += os.read(leader, 1024)
    os.write(leader, b"y")  # no newline: canonical mode would hold it back
    assert proc.wait(timeout=10) == 0
    os.close(leader)

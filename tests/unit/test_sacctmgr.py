"""sacctmgr without a cluster: its command-line grammar, the commit question, format= fields and print_fields."""

from __future__ import annotations

import os

import pytest

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

"""The association store's planner (controller/assocplan.py) and the submit-time resolution, against sacctmgr's and
slurmctld's semantics: add / modify / delete of accounts, users and QOS, their refusals, defaults at submit."""

from __future__ import annotations

import re

import pytest

from spur_hpc.controller import associations as A
from spur_hpc.controller import assocplan as P


def change(store, verb, entity, names=(), where=None, set_=None):
    """Plan and apply one sacctmgr command, as the leader and the state machine do."""
    puts, deletes, affected = P.plan_change(store, verb, entity, list(names), where or {}, set_ or {}, "spur")
    assert A.apply_change(store, puts, deletes) is None
    return affected


@pytest.fixture
def store():
    s = A.default_store("spur")
    change(s, "add", "account", ["phys", "chem"], set_={"description": "Physics"})
    change(s, "add", "qos", ["high", "low"], set_={"priority": "100"})
    change(s, "add", "user", ["bob"], set_={"account": "phys,chem"})
    return s


def test_add_account_defaults_and_settings(store):
    phys = store["accounts"]["phys"]
    assert (phys["parent"], phys["description"], phys["organization"]) == ("root", "Physics", "phys")
    affected = change(
        store,
        "add",
        "account",
        ["lab"],
        set_={"parent": "phys", "fairshare": "10", "grptres": "cpu=4,mem=8G,gres/gpu=2"},
    )
    assert affected == ["lab"]
    assoc = store["assocs"][A.assoc_key("lab")]
    assert store["accounts"]["lab"]["organization"] == "phys"  # sacctmgr: the parent's name below root
    assert (assoc["parent_account"], assoc["shares"], assoc["grp_tres"]) == (
        "phys",
        10,
        {"cpu": 4, "mem": 8192, "gres/gpu": 2},
    )
    assert change(store, "add", "account", ["lab"]) == []  # nothing new added


def test_add_user_first_account_is_default_and_lines(store):
    assert store["users"]["bob"]["default_account"] == "phys"
    affected = change(store, "add", "user", ["ann"], set_={"account": "chem", "partition": "debug"})
    assert affected == ["U = ann       A = chem       C = spur       P = debug     "]
    assert store["users"]["ann"]["default_account"] == "chem"
    assert change(store, "add", "user", ["ann"], set_={"account": "chem", "partition": "debug"}) == []


def test_add_user_defaultaccount_without_account_and_refusals(store):
    change(store, "add", "user", ["cy"], set_={"defaultaccount": "chem", "adminlevel": "Operator"})
    assert store["users"]["cy"] == {**store["users"]["cy"], "default_account": "chem", "admin_level": "Operator"}
    with pytest.raises(P.PlanError, match="needs a default account"):
        change(store, "add", "user", ["dee"])
    with pytest.raises(P.PlanError, match="account nope does not exist"):
        change(store, "add", "user", ["dee"], set_={"account": "nope"})
    with pytest.raises(P.PlanError, match="not an admin level"):
        change(store, "add", "user", ["dee"], set_={"account": "chem", "adminlevel": "god"})


def test_modify_user_qos_lists_and_default_qos(store):
    change(store, "modify", "user", ["bob"], set_={"qos": "normal,high", "defaultqos": "high"})
    key = A.assoc_key("phys", "bob")
    assert store["assocs"][key]["qos"] == ["normal", "high"]
    assert A.default_qos(store, key) == "high"
    change(store, "modify", "user", where={"name": "bob", "account": "phys"}, set_={"qos+": "low"})
    assert store["assocs"][key]["qos"] == ["normal", "high", "low"]
    change(store, "modify", "user", where={"name": "bob", "account": "phys"}, set_={"qos": "-low"})
    assert store["assocs"][key]["qos"] == ["normal", "high"]
    with pytest.raises(P.PlanError, match="defaultqos=low is not one of the QOS"):
        change(store, "modify", "user", ["bob"], set_={"defaultqos": "low"})
    with pytest.raises(P.PlanError, match="qos ghost does not exist"):
        change(store, "modify", "user", ["bob"], set_={"qos+": "ghost"})


def test_qos_plus_starts_from_the_inherited_list(store):
    change(store, "modify", "user", where={"name": "bob", "account": "phys"}, set_={"qos+": "high"})
    assert store["assocs"][A.assoc_key("phys", "bob")]["qos"] == ["normal", "high"]
    change(store, "modify", "account", ["chem"], set_={"qos": "low"})
    change(store, "modify", "user", where={"name": "bob", "account": "chem"}, set_={"qos": "-low"})
    assert store["assocs"][A.assoc_key("chem", "bob")]["qos"] == []  # nothing left of its own: inherits again


def test_modify_user_limits_only_where_selected(store):
    affected = change(
        store,
        "modify",
        "user",
        where={"name": "bob", "account": "chem"},
        set_={"maxjobs": "5", "maxwall": "1-00:00:00"},
    )
    assert affected == ["C = spur       A = chem                 U = bob      "]
    chem, phys = store["assocs"][A.assoc_key("chem", "bob")], store["assocs"][A.assoc_key("phys", "bob")]
    assert (chem["max_jobs"], chem["max_wall_secs"], phys["max_jobs"]) == (5, 86400, -1)
    change(store, "modify", "user", where={"name": "bob", "account": "chem"}, set_={"maxjobs": "-1", "maxwall": "90"})
    assert (chem := store["assocs"][A.assoc_key("chem", "bob")])["max_jobs"] == -1 and chem["max_wall_secs"] == 5400
    assert change(store, "modify", "user", ["bob"], set_={"maxjobs": "-1"}) == []  # nothing modified


def test_modify_user_default_account_and_admin_level(store):
    assert change(store, "modify", "user", ["bob"], set_={"defaultaccount": "chem", "adminlevel": "admin"}) == ["bob"]
    assert store["users"]["bob"]["default_account"] == "chem"
    assert A.admin_level(store, "bob") == "Administrator"
    with pytest.raises(P.PlanError, match="no association with account root"):
        change(store, "modify", "user", ["bob"], set_={"defaultaccount": "root"})


def test_tres_values_as_slurm_writes_them(store):
    tres = P.parse_tres("grptres", "cpu=4,mem=8G,node=2,gres/gpu=2", {})
    assert tres == {"cpu": 4, "mem": 8192, "node": 2, "gres/gpu": 2}
    assert P.parse_tres("grptres", "mem=-1", tres) == {"cpu": 4, "node": 2, "gres/gpu": 2}
    assert P.parse_tres("grptres", "-1", tres) == {}
    assert P.parse_tres("grptres", "mem=512K", {}) == {"mem": 1}
    for bad in ("cpu", "disk=4", "cpu=x", "cpu=-5", "gres/=1"):
        with pytest.raises(P.PlanError):
            P.parse_tres("grptres", bad, {})


def test_qos_settings(store):
    affected = change(
        store,
        "modify",
        "qos",
        ["high"],
        set_={
            "preempt": "low",
            "preemptmode": "requeue",
            "grpjobs": "10",
            "maxjobsperuser": "2",
            "maxtresperuser": "cpu=8",
            "usagefactor": "0.5",
            "flags": "DenyOnLimit,nodecay",
            "maxwall": "2:00:00",
        },
    )
    assert affected == ["high"]
    high = store["qos"]["high"]
    assert (high["preempt"], high["preempt_mode"], high["grp_jobs"], high["max_jobs_per_user"]) == (
        ["low"],
        "requeue",
        10,
        2,
    )
    assert (high["max_tres_per_user"], high["usage_factor"], high["flags"]) == (
        {"cpu": 8},
        0.5,
        ["DenyOnLimit", "NoDecay"],
    )
    assert high["max_wall_secs"] == 7200
    change(store, "modify", "qos", ["high"], set_={"flags-": "nodecay", "preemptmode": "-1"})
    assert (store["qos"]["high"]["flags"], store["qos"]["high"]["preempt_mode"]) == (["DenyOnLimit"], "")
    for key, value in (("preemptmode", "suspend"), ("usagefactor", "nan"), ("flags", "Bogus"), ("grpjobs", "-2")):
        with pytest.raises(P.PlanError, match=key):
            change(store, "modify", "qos", ["high"], set_={key: value})


def test_delete_qos_forgets_references(store):
    change(store, "modify", "user", ["bob"], set_={"qos": "normal,low", "defaultqos": "low"})
    change(store, "modify", "qos", ["high"], set_={"preempt": "low"})
    assert change(store, "delete", "qos", ["low"]) == ["low"]
    assert store["assocs"][A.assoc_key("phys", "bob")]["qos"] == ["normal"]
    assert store["assocs"][A.assoc_key("phys", "bob")]["default_qos"] == ""
    assert store["qos"]["high"]["preempt"] == []
    with pytest.raises(P.PlanError, match="QOS normal cannot be deleted"):
        change(store, "delete", "qos", ["normal"])


def test_delete_account_refusals_then_delete(store):
    change(store, "add", "account", ["lab"], set_={"parent": "chem"})
    with pytest.raises(P.PlanError, match="has child accounts"):
        change(store, "delete", "account", ["chem"])
    with pytest.raises(P.PlanError, match=r"^You are not allowed to remove the root account\.$"):  # Slurm's line
        change(store, "delete", "account", ["root"])
    assert {"lab", "chem", "phys"} <= set(store["accounts"])  # every refusal changed nothing
    assert change(store, "delete", "account", ["nosuch"]) == []  # Slurm: Nothing deleted


def test_delete_account_takes_its_users_associations_along(store):
    """As the capture 086 (sacctmgr delete account chem, the default account of two users): the account goes with
    its users' associations; a user whose default it was stays, with no default account (095: Def Acct empty)."""
    assert change(store, "delete", "account", ["phys"]) == ["phys"]
    assert A.assoc_key("phys", "bob") not in store["assocs"] and "bob" in store["users"]
    assert store["users"]["bob"]["default_account"] == ""
    assert A.resolve_job(store, "bob", "", "debug", "", frozenset()) == ("", "")
    change(store, "add", "user", ["bob"], set_={"account": "root"})
    assert store["users"]["bob"]["default_account"] == "root"  # the next account added becomes the default


def test_delete_account_with_its_children_at_once(store):
    change(store, "add", "account", ["lab"], set_={"parent": "chem"})
    change(store, "delete", "user", ["bob"], where={"account": "chem"})
    assert change(store, "delete", "account", ["chem", "lab"]) == ["chem", "lab"]
    assert not {"chem", "lab"} & set(store["accounts"])
    assert A.assoc_key("chem") not in store["assocs"]


def test_delete_user_last_association_deletes_user(store):
    with pytest.raises(P.PlanError, match="default account and the user keeps other associations"):
        change(store, "delete", "user", ["bob"], where={"account": "phys"})
    assert change(store, "delete", "user", ["bob"], where={"account": "chem"}) == [
        "C = spur       A = chem       U = bob      "
    ]
    assert "bob" in store["users"]
    assert change(store, "delete", "user", ["bob"]) == ["bob"]  # sacctmgr: " Deleting users..."
    assert "bob" not in store["users"]
    assert not [k for k in store["assocs"] if A.split_key(k)[1] == "bob"]


def test_move_account_and_refuse_loop(store):
    change(store, "add", "account", ["lab"], set_={"parent": "chem"})
    affected = change(store, "modify", "account", where={"name": "chem"}, set_={"parent": "phys"})
    assert affected == ["C = spur       A = chem of root"]  # the parent it had (capture 070: "lab of bio")
    assert A.account_chain(store, "lab") == ["lab", "chem", "phys", "root"]
    with pytest.raises(P.PlanError, match="cannot move under itself"):
        change(store, "modify", "account", ["phys"], set_={"parent": "lab"})


@pytest.mark.parametrize(
    ("verb", "entity", "names", "where", "set_", "words"),
    [
        ("add", "cluster", ["c2"], {}, {}, "one cluster"),
        ("frob", "user", ["bob"], {}, {}, "unknown verb"),
        ("add", "wckey", ["x"], {}, {}, "unknown entity"),
        ("add", "account", ["x" * 65], {}, {}, "the limit is 64"),
        ("add", "account", ["a\tb"], {}, {}, "holds '\\t'"),
        ("add", "account", [], {}, {}, "name the account"),
        ("modify", "user", ["bob"], {}, {}, "nothing to set"),
        ("modify", "user", ["bob"], {"color": "x"}, {"maxjobs": "1"}, "unknown condition color="),
        ("delete", "user", ["bob"], {}, {"maxjobs": "1"}, "`set` has no meaning"),
        ("modify", "user", ["bob"], {"cluster": "other"}, {"maxjobs": "1"}, "not this cluster"),
        ("modify", "user", ["bob"], {}, {"maxjobs": "99999999999"}, "out of range"),
        ("modify", "user", ["bob"], {}, {"grpjobs+": "1"}, "only works on lists"),
        ("modify", "account", ["phys"], {}, {"description": "a|b"}, "'|'"),
        ("add", "account", ["x"], {}, {"parent": "nope"}, "parent account 'nope' does not exist"),
    ],
)
def test_refusals_name_the_problem(store, verb, entity, names, where, set_, words):
    before = repr(store)
    with pytest.raises(P.PlanError, match=re.escape(words)) as info:
        P.plan_change(store, verb, entity, names, where, set_, "spur")
    assert "\n" not in str(info.value)
    assert repr(store) == before  # planning never changes the store


def test_too_many_names_refused(store):
    with pytest.raises(P.PlanError, match="at most 1000"):
        P.plan_change(store, "add", "account", [f"a{i}" for i in range(1001)], {}, {}, "spur")


# ------------------------------------------------------------------ submit


def test_submit_fills_default_account_and_qos(store):
    none = frozenset()
    assert A.resolve_job(store, "root", "", "debug", "", none) == ("root", "normal")
    assert A.resolve_job(store, "bob", "", "debug", "", none) == ("phys", "normal")
    change(store, "modify", "user", where={"name": "bob", "account": "chem"}, set_={"qos": "high"})
    assert A.resolve_job(store, "bob", "chem", "debug", "", none) == ("chem", "high")  # the only QOS it may use
    assert A.resolve_job(store, "eve", "", "debug", "", none) == ("", "")  # no association, nothing enforced
    assert A.resolve_job(store, "eve", "chem", "debug", "low", none) == ("chem", "low")


def test_submit_enforcement(store):
    enforce = A.enforced(["qos"])
    assert enforce == {"qos", "associations"}
    with pytest.raises(A.Refusal) as info:
        A.resolve_job(store, "eve", "", "debug", "", enforce)
    assert info.value.slurm_error == A.SLURM_INVALID_ACCOUNT
    with pytest.raises(A.Refusal, match="no association with account root"):
        A.resolve_job(store, "bob", "root", "debug", "", enforce)
    with pytest.raises(A.Refusal) as info:
        A.resolve_job(store, "bob", "phys", "debug", "high", enforce)
    assert info.value.slurm_error == A.SLURM_INVALID_QOS
    assert A.resolve_job(store, "bob", "phys", "debug", "high", A.enforced(["associations"])) == ("phys", "high")
    with pytest.raises(A.Refusal, match="QOS ghost does not exist"):
        A.resolve_job(store, "bob", "phys", "debug", "ghost", frozenset())


def test_partition_association(store):
    change(store, "add", "user", ["pat"], set_={"account": "chem", "partition": "gpu"})
    enforce = A.enforced(["associations"])
    assert A.resolve_job(store, "pat", "", "gpu", "", enforce) == ("chem", "normal")
    with pytest.raises(A.Refusal, match="in partition debug"):
        A.resolve_job(store, "pat", "", "debug", "", enforce)


def test_sacctmgr_before_wal_level_5_is_refused_with_the_level_line():
    from spur_hpc.controller import errors, service

    with pytest.raises(errors.Conflict, match="needs WAL level 5 but the cluster runs level 4"):
        service._refuse_below_store_level(4)
    service._refuse_below_store_level(5)


def test_random_commands_are_planned_or_refused_in_one_line():
    """Hostile requests: every command either plans a change every member accepts, or is refused with one
    line; never another exception (a deterministic sample of keys and values, good and bad)."""
    import random

    rng = random.Random(22)
    store = A.default_store("spur")
    change(store, "add", "account", ["phys", "chem"])
    change(store, "add", "qos", ["high"])
    change(store, "add", "user", ["bob"], set_={"account": "phys"})
    keys = [*P.ASSOC_KEYS, *P.QOS_KEYS, "name", "account", "user", "partition", "parent", "cluster", "qos+", "zz"]
    keys += ["defaultaccount", "adminlevel", "description", "organization", "flags+", "preempt-"]
    values = ["-1", "0", "5", "x", "high", "normal", "phys", "+high", "-high", "cpu=4", "mem=1T,cpu=-1", "", "+"]
    values += ["1-00:00:00", "UNLIMITED", "nan", "1e400", "bob", "root", "a|b", "9" * 30, "Admin", "requeue", "\x7f"]
    names = ["phys", "chem", "bob", "high", "normal", "root", "new1", "new2", ""]
    for _ in range(2000):
        verb = rng.choice(["add", "modify", "delete", "remove", "x"])
        entity = rng.choice(["account", "user", "qos", "cluster", "users"])
        chosen = rng.sample(names, rng.randint(0, 2))
        where = {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(0, 2))}
        set_ = {rng.choice(keys): rng.choice(values) for _ in range(rng.randint(0, 3))}
        try:
            puts, deletes, _ = P.plan_change(store, verb, entity, chosen, where, set_, "spur")
        except P.PlanError as exc:
            assert "\n" not in str(exc) and str(exc)
            continue
        assert A.apply_change(store, puts, deletes) is None, (verb, entity, chosen, where, set_)


@pytest.mark.parametrize("value", ["", "+", "-", "+,", "-1"])
@pytest.mark.parametrize(
    ("entity", "name", "key"), [("qos", "high", "flags"), ("qos", "high", "preempt"), ("user", "bob", "qos")]
)
def test_empty_list_values_clear_or_are_refused(store, entity, name, key, value):
    try:
        puts, deletes, _ = P.plan_change(store, "modify", entity, [name], {}, {key: value}, "spur")
    except P.PlanError as exc:
        assert "\n" not in str(exc)
        return
    assert A.apply_change(store, puts, deletes) is None
    rows = store["qos"] if entity == "qos" else {k: r for k, r in store["assocs"].items() if r["user"] == name}
    assert all(not row[key] for row in (rows.values() if entity == "user" else [rows[name]]))


def test_show_config_prints_accounting_storage_enforce_as_slurm(tmp_path):
    """The priority capture's slurm.conf had AccountingStorageEnforce=associations; Slurm prints the implied words
    too (qos -> associations,qos) and none when nothing is enforced."""
    from types import SimpleNamespace

    from spur_hpc import conf
    from spur_hpc.cli import jobcontrol

    path = tmp_path / "spur.conf"
    info = SimpleNamespace(cluster_name="c", next_job_id=1)
    for words, shown in (
        ("[]", "none"),
        ('["qos"]', "associations,qos"),
        ('["safe", "qos"]', "associations,limits,qos,safe"),
    ):
        path.write_text(f"[accounting]\nenforce = {words}\n")
        pairs = dict(jobcontrol.config_pairs(conf.load(str(path)), info, ["h:6817"], str(path)))
        assert pairs["AccountingStorageEnforce"] == shown


def test_names_that_do_not_exist_select_nothing(store):
    """Slurm answers Nothing modified / Nothing deleted (captures 060, 061, 081), not an error."""
    for verb, entity in (("modify", "user"), ("modify", "qos"), ("modify", "account")):
        assert P.plan_change(
            store, verb, entity, ["ghost"], {}, {"maxjobs" if entity != "qos" else "priority": "1"}, "spur"
        ) == ([], [], [])
    for entity in ("user", "qos", "account"):
        assert P.plan_change(store, "delete", entity, ["ghost"], {}, {}, "spur") == ([], [], [])


def test_modify_account_lists_the_users_that_take_the_limit_from_it(store):
    """As the capture 055 (modify account bio set maxjobs=10): bio's own association, then the user associations
    below it that set no MaxJobs themselves (dan in the child account lab, not carol, who has her own)."""
    change(store, "add", "account", ["bio"])
    change(store, "add", "account", ["lab"], set_={"parent": "bio", "maxsubmitjobs": "20"})
    change(store, "add", "account", ["own"], set_={"parent": "bio", "maxjobs": "2"})
    change(store, "add", "user", ["carol"], set_={"account": "bio", "maxjobs": "3"})
    change(store, "add", "user", ["dan"], set_={"account": "lab", "partition": "debug"})
    change(store, "add", "user", ["eve"], set_={"account": "own"})
    affected = change(store, "modify", "account", ["bio"], set_={"maxjobs": "10"})
    assert affected == [
        "C = spur       A = bio of root",
        "C = spur       A = lab                  U = dan       P = debug",
    ]
    assert A.effective(store, A.assoc_key("lab", "dan", "debug"), "max_jobs") == 10
    assert A.effective(store, A.assoc_key("own", "eve"), "max_jobs") == 2  # own sets its own: eve is not listed
    assert change(store, "modify", "account", ["bio"], set_={"grpjobs": "5"}) == ["C = spur       A = bio of root"]


def test_delete_user_by_partition_lists_the_user_left_without_associations(store):
    """As the capture 085: Deleting user associations... then Deleting users (No Associations)... (the names
    after the association lines; cli/sacctmgr.py prints them under that title)"""
    change(store, "add", "user", ["dan"], set_={"account": "chem", "partition": "debug"})
    affected = change(store, "delete", "user", ["dan"], where={"partition": "debug"})
    assert affected == ["C = spur       A = chem       U = dan       P = debug", "dan"]
    assert "dan" not in store["users"]

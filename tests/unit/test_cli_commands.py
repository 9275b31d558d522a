"""The commands against fake controllers: exit codes, what they send, failover, retries with one key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import pytest
from test_cli_support import fake_cluster

from spur_hpc.cli import slurm, spur
from spur_hpc.proto import slurm_pb2 as pb


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch):
    with fake_cluster(monkeypatch) as fake:
        yield fake


def run(entry, argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    code = entry(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- scancel exit codes


def test_scancel_running_job_exits_0_and_cancels_it(cluster, capsys) -> None:
    cluster.add_job(5, state=pb.RUNNING, nodes=["n1"])
    assert run(slurm.scancel_main, ["5"], capsys) == (0, "", "")
    assert cluster.state.jobs[5].state == pb.CANCELLED


def test_scancel_unknown_job_exits_0_silently_as_slurm_22_05(cluster, capsys) -> None:
    assert run(slurm.scancel_main, ["99"], capsys) == (0, "", "")
    assert run(slurm.scancel_main, ["-Q", "99"], capsys) == (0, "", "")


def test_scancel_finished_job_is_silent_but_a_signal_to_it_exits_1(cluster, capsys) -> None:
    cluster.add_job(7, state=pb.COMPLETED)
    assert run(slurm.scancel_main, ["7"], capsys) == (0, "", "")
    assert run(slurm.scancel_main, ["--signal=USR1", "7"], capsys) == (
        1, "", "scancel: error: Kill job error on job id 7: Invalid job id specified\n"
    )
    assert run(slurm.scancel_main, ["-Q", "--signal=USR1", "7"], capsys) == (1, "", "")


def test_scancel_refuses_signal_0_with_slurms_line_before_any_call(cluster, capsys) -> None:
    cluster.add_job(4, state=pb.RUNNING)
    assert run(slurm.scancel_main, ["-f", "-s", "0", "4"], capsys) == (1, "", "Unknown job signal: 0\n")
    assert cluster.state.cancel_signals == [] and cluster.state.jobs[4].state == pb.RUNNING


def test_scancel_signal_goes_to_the_steps_and_with_f_or_b_to_the_batch_shell(cluster, capsys) -> None:
    steps = [pb.Step(step_id="batch", state=pb.RUNNING), pb.Step(step_id="0", state=pb.RUNNING),
             pb.Step(step_id="1", state=pb.COMPLETED)]  # fmt: skip
    cluster.add_job(5, state=pb.RUNNING, steps=steps)
    assert run(slurm.scancel_main, ["-s", "USR1", "5"], capsys) == (0, "", "")
    assert cluster.state.cancel_steps == [(5, "0")]  # the running srun step only: not the shell, not step 1
    cluster.add_job(6, state=pb.RUNNING, steps=steps)
    assert run(slurm.scancel_main, ["-b", "-s", "USR1", "6"], capsys)[0] == 0
    assert cluster.state.cancel_steps[1:] == [(6, "")]  # the batch supervisor alone
    cluster.add_job(7, state=pb.RUNNING, steps=steps)
    assert run(slurm.scancel_main, ["-f", "-s", "USR1", "7"], capsys)[0] == 0
    assert cluster.state.cancel_steps[2:] == [(7, "0"), (7, "")]


def test_scancel_account_and_nodelist_select_among_the_jobs(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.RUNNING, nodes=["n1"], spec=pb.JobSpec(user="alice", account="phys"))
    cluster.add_job(2, state=pb.RUNNING, nodes=["n2"], spec=pb.JobSpec(user="alice", account="chem"))
    cluster.add_job(3, state=pb.RUNNING, nodes=["n3"], spec=pb.JobSpec(user="alice", account="phys"))
    assert run(slurm.scancel_main, ["-A", "nosuchaccount"], capsys) == (0, "", "")
    assert run(slurm.scancel_main, ["-A", "phys", "-w", "n[2-3]"], capsys) == (0, "", "")
    assert [cluster.state.jobs[i].state for i in (1, 2, 3)] == [pb.RUNNING, pb.RUNNING, pb.CANCELLED]


def test_scancel_refused_cancel_exits_1_even_when_quiet(cluster, capsys) -> None:
    cluster.add_job(8, state=pb.RUNNING, spec=pb.JobSpec(user="someone-else"))
    cluster.add_job(9, state=pb.PENDING)
    code, out, err = run(slurm.scancel_main, ["-Q", "8", "9"], capsys)
    assert (code, out, err) == (1, "", "")
    assert cluster.state.jobs[9].state == pb.CANCELLED  # the other job is still cancelled


def test_scancel_by_user_filter_cancels_only_that_users_queued_jobs(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.PENDING, spec=pb.JobSpec(user="alice"))
    cluster.add_job(2, state=pb.RUNNING, spec=pb.JobSpec(user="bob"))
    assert run(slurm.scancel_main, ["-u", "alice"], capsys)[0] == 0
    assert cluster.state.jobs[1].state == pb.CANCELLED and cluster.state.jobs[2].state == pb.RUNNING


def test_scancel_signal_is_sent_as_a_number_and_kill_means_cancel(cluster, capsys) -> None:
    cluster.add_job(3, state=pb.RUNNING)
    cluster.add_job(4, state=pb.RUNNING)
    assert run(slurm.scancel_main, ["-b", "-s", "USR1", "3"], capsys)[0] == 0
    assert run(slurm.scancel_main, ["--signal=SIGKILL", "4"], capsys)[0] == 0
    assert cluster.state.cancel_signals == [10, 0]


# ---------------------------------------------------------------- sbatch


def test_sbatch_fills_the_spec_from_caller_script_and_options(cluster, capsys, tmp_path: Path, monkeypatch) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH -J from-script\n#SBATCH --mem=2G  # comment\n#SBATCH -t 1-00\n\n"
        "echo hi\n#SBATCH --ntasks=99\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPUR_TEST_MARKER", "42")
    code, out, err = run(slurm.sbatch_main, ["-t", "30", "-c", "2", "-o", "out-%j.txt", str(script)], capsys)
    assert (code, err) == (0, "")
    assert out == "Submitted batch job 1\n"
    spec = cluster.state.jobs[1].spec
    assert spec.name == "from-script" and spec.memory_mb == 2048
    assert spec.time_limit_secs == 30 * 60  # the command line wins over #SBATCH
    assert spec.tasks == 1  # #SBATCH after the first command is ignored, as in Slurm
    assert spec.cpus_per_task == 2 and spec.nodes == 1
    assert spec.uid == os.getuid() and spec.gid == os.getgid() and spec.user
    assert spec.work_dir == str(tmp_path) and spec.stdout_path == "out-%j.txt"
    assert spec.environment["SPUR_TEST_MARKER"] == "42"
    assert spec.environment["SLURM_SUBMIT_DIR"] == str(tmp_path)
    assert spec.script == script.read_text()


def test_sbatch_wrap_parsable_prints_only_the_id(cluster, capsys) -> None:
    code, out, _err = run(slurm.sbatch_main, ["--parsable", "--wrap", "echo hi", "-D", "/tmp"], capsys)
    assert (code, out) == (0, "1\n")
    spec = cluster.state.jobs[1].spec
    assert spec.name == "wrap" and "echo hi" in spec.script and spec.script.startswith("#!/bin/sh")
    assert spec.work_dir == "/tmp"


def test_sbatch_error_from_the_controller_is_one_slurm_line(cluster, capsys) -> None:
    cluster.controllers[0].fail_writes_with = grpc.StatusCode.INVALID_ARGUMENT
    code, out, err = run(slurm.sbatch_main, ["--wrap", "true"], capsys)
    assert code == 1 and out == ""
    assert err == "sbatch: error: Batch job submission failed: injected failure\n"


def test_a_submission_retried_after_a_lost_answer_creates_one_job(monkeypatch, capsys) -> None:
    """The first controller stores the job, then answers UNAVAILABLE (the answer is lost); the retry goes to
    the second with the same idempotency key and gets the same job back."""
    with fake_cluster(monkeypatch, count=2) as cluster:
        cluster.controllers[0].lose_next_submit_answer = True
        cluster.controllers[1].role = "leader"  # both accept writes, as a follower forwarding to the leader does
        code, out, _err = run(slurm.sbatch_main, ["--parsable", "--wrap", "true"], capsys)
        assert (code, out) == (0, "1\n")
        keys = cluster.state.submit_keys
        assert len(keys) == 2 and keys[0] == keys[1] and keys[0]
        assert list(cluster.state.jobs) == [1]


def test_two_submissions_get_two_keys(cluster, capsys) -> None:
    run(slurm.sbatch_main, ["--wrap", "true"], capsys)
    run(slurm.sbatch_main, ["--wrap", "true"], capsys)
    assert sorted(cluster.state.jobs) == [1, 2] and len(cluster.state.keys) == 2


# ---------------------------------------------------------------- failover


def test_writes_follow_the_leader_hint_of_a_follower(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=3, leader_index=2) as cluster:
        cluster.add_node("n1")
        code, _out, err = run(slurm.scontrol_main, ["update", "NodeName=n1", "State=DRAIN", "Reason=disk"], capsys)
        assert (code, err) == (0, "")
        writes = [address for address, method in cluster.state.calls if method == "UpdateNode"]
        assert writes == [cluster.addresses[0], cluster.addresses[2]]  # the hint skipped the second follower
        assert cluster.state.nodes["n1"].state == pb.DRAINED


def test_reads_skip_a_dead_controller(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=2) as cluster:
        cluster.add_job(5, state=pb.RUNNING, nodes=["n1"])
        monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "http://127.0.0.1:1," + cluster.addresses[0])
        code, out, _err = run(slurm.squeue_main, ["-h", "-j", "5", "-o", "%i %t"], capsys)
        assert (code, out) == (0, "5 R\n")


def test_no_controller_answering_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SPUR_CONTROLLER_ADDR", "127.0.0.1:1,127.0.0.1:2")
    code, out, err = run(slurm.sinfo_main, [], capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("sinfo: error: no controller could answer ListNodes")
    assert "127.0.0.1:1: Connection refused" in err


def test_addresses_come_from_spur_conf_when_the_environment_has_none(cluster, monkeypatch, capsys, tmp_path) -> None:
    conf = tmp_path / "spur.conf"
    conf.write_text(f'[cluster]\nname = "x"\n\n[controller]\nhosts = [\n  "{cluster.addresses[0]}",  # one\n]\n')
    monkeypatch.delenv("SPUR_CONTROLLER_ADDR")
    monkeypatch.setenv("SPUR_CONF", str(conf))
    cluster.add_node("n1")
    code, out, _err = run(slurm.sinfo_main, ["-h", "-o", "%N %t"], capsys)
    assert (code, out) == (0, "n1 idle\n")


def test_a_missing_spur_conf_is_one_line_with_the_fix(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.delenv("SPUR_CONTROLLER_ADDR", raising=False)
    monkeypatch.setenv("SPUR_CONF", str(tmp_path / "absent.conf"))
    code, _out, err = run(slurm.squeue_main, [], capsys)
    assert code == 1 and err.count("\n") == 1
    assert "absent.conf: file not found" in err and "SPUR_CONTROLLER_ADDR" in err


# ---------------------------------------------------------------- squeue, scontrol, sacct


def test_squeue_hides_finished_jobs_unless_asked(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.RUNNING, nodes=["n1"])
    cluster.add_job(2, state=pb.COMPLETED)
    assert run(slurm.squeue_main, ["-h", "-o", "%i"], capsys)[1] == "1\n"
    # -j of a finished job without -t shows nothing, as in Slurm (the `while [ -n "$(squeue -h -j N)" ]` loop ends)
    assert run(slurm.squeue_main, ["-h", "-o", "%i", "-j", "2"], capsys) == (0, "", "")
    assert run(slurm.squeue_main, ["-h", "-o", "%i", "-j", "2", "-t", "all"], capsys)[1] == "2\n"
    assert run(slurm.squeue_main, ["-h", "-o", "%i", "-t", "all"], capsys)[1] == "2\n1\n"  # CD sorts before R
    assert run(slurm.squeue_main, ["-h", "-o", "%i", "-t", "CD"], capsys)[1] == "2\n"


def test_squeue_unknown_job_id_exits_1(cluster, capsys) -> None:
    code, out, err = run(slurm.squeue_main, ["-j", "404"], capsys)
    assert (code, out) == (1, "")
    assert err == "slurm_load_jobs error: Invalid job id specified\n"  # Slurm's words and exit code
    # several ids: Slurm lists every job and keeps those asked for, so unknown ones are no error
    assert run(slurm.squeue_main, ["-h", "-j", "404,405"], capsys) == (0, "", "")


def test_squeue_names_a_bad_state_in_slurms_two_lines(cluster, capsys) -> None:
    code, out, err = run(slurm.squeue_main, ["-t", "SLEEPING"], capsys)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        "squeue: error: Invalid job state specified: SLEEPING",
        "squeue: error: Valid job states include: PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,"
        "NODE_FAIL,PREEMPTED,BOOT_FAIL,DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,RESV_DEL_HOLD,"
        "REQUEUED,REQUEUE_FED,REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,STOPPED",
        "",
    ]
    # a state Slurm knows but no Spur job is ever in is no error: it matches nothing
    assert run(slurm.squeue_main, ["-h", "-t", "PREEMPTED"], capsys) == (0, "", "")


def test_squeue_json_lists_jobs_with_slurms_state_names(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.PENDING)
    code, out, _err = run(slurm.squeue_main, ["--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["jobs"][0]["job_id"] == 1 and data["jobs"][0]["job_state"] == "PENDING"


def test_scontrol_show_unknown_node_and_job_exit_1(cluster, capsys) -> None:
    # Slurm's texts and streams: an unknown node on stdout, an unknown job id as slurm_load_jobs' error
    assert run(slurm.scontrol_main, ["show", "node", "nope"], capsys) == (1, "Node nope not found\n", "")
    assert run(slurm.scontrol_main, ["show", "job", "77"], capsys) == (
        1, "", "slurm_load_jobs error: Invalid job id specified\n"
    )  # fmt: skip


def test_sacct_on_a_cluster_without_accounting_says_so_as_slurm_does(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.COMPLETED, spec=pb.JobSpec(name="mine", user="root"))
    assert run(slurm.sacct_main, ["-X"], capsys) == (1, "", "Slurm accounting storage is disabled\n")


def test_sacct_asks_for_the_callers_jobs_unless_root_or_all_users(monkeypatch) -> None:
    from spur_hpc.cli import options, sacct

    def users(argv: list[str]) -> list[str]:
        return sacct.build_query(options.parse("sacct", sacct.OPTIONS, argv)[0], 0.0).users

    monkeypatch.setattr("spur_hpc.cli.caller.user_name", lambda: "alice")
    assert (users([]), users(["-a"]), users(["-u", "bob,carol"])) == (["alice"], [], ["bob", "carol"])
    monkeypatch.setattr("spur_hpc.cli.caller.user_name", lambda: "root")
    assert users([]) == []


# ---------------------------------------------------------------- spur


def test_spur_node_drain_reports_each_node_and_fails_on_unknown(cluster, capsys) -> None:
    cluster.add_node("n1")
    cluster.add_node("n2", job_ids=[7])
    code, out, err = run(spur.main, ["node", "drain", "n[1-2],n9", "--reason", "maintenance"], capsys)
    assert code == 1
    assert out.splitlines() == [
        "Node n1 set to drain",
        "  reason: maintenance",
        "Node n2 set to draining (1 running job(s) will finish first)",
        "  reason: maintenance",
    ]
    assert "n9: node n9 not found" in err and "failed on 1 of 3 node(s): n9" in err


def test_spur_node_resume_and_show(cluster, capsys) -> None:
    cluster.add_node("n1", state=pb.DRAINED, drain=True, reason="x")
    assert run(spur.main, ["node", "resume", "n1"], capsys) == (0, "Node n1 resumed\n", "")
    code, out, _err = run(spur.main, ["node", "show", "n1", "-o", "json"], capsys)
    assert code == 0 and json.loads(out)["state"] == "IDLE"


def test_spur_cluster_status_pings_every_member(monkeypatch, capsys) -> None:
    with fake_cluster(monkeypatch, count=3, leader_index=1) as cluster:
        code, out, _err = run(spur.main, ["cluster", "status", "-o", "json"], capsys)
        status = json.loads(out)
        assert code == 0 and status["healthy"] and status["leader"] == cluster.addresses[1]
        assert [m["lag"] for m in status["members"]] == [3, 0, 3]
        assert {m["build"] for m in status["members"]} == {"abc123def456"}
        cluster.servers[2].stop(0)
        code, out, _err = run(spur.main, ["cluster", "status"], capsys)
        assert code == 1
        assert "Leader: " + cluster.addresses[1] in out
        assert f"{cluster.addresses[2]}  -" in out and "down: Connection refused" in out


def test_spur_aliases_reach_the_slurm_commands(cluster, capsys) -> None:
    cluster.add_job(1, state=pb.RUNNING, nodes=["n1"])
    cluster.add_node("n1")
    assert run(spur.main, ["jobs", "-h", "-o", "%i"], capsys)[1] == "1\n"
    assert run(spur.main, ["queue", "-o", "json"], capsys)[1].count('"job_id": 1') == 1
    assert run(spur.main, ["nodes", "-h", "-o", "%N"], capsys)[1] == "n1\n"
    assert run(spur.main, ["show", "job", "1"], capsys)[1].startswith("JobId=1 ")
    assert run(spur.main, ["--controller", cluster.addresses[0], "cancel", "1"], capsys)[0] == 0
    assert run(spur.main, ["submit", "--parsable", "--wrap", "true"], capsys)[1] == "2\n"


def test_environment_that_is_not_utf8_is_left_out_with_a_warning(cluster, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SPUR_BAD_BYTES", os.fsdecode(b"\xff\xfe"))
    code, _out, err = run(slurm.sbatch_main, ["--wrap", "true"], capsys)
    assert code == 0 and err == "sbatch: warning: not passing 'SPUR_BAD_BYTES': it is not UTF-8 text\n"
    assert "SPUR_BAD_BYTES" not in cluster.state.jobs[1].spec.environment

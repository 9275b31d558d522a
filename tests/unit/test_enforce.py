"""Resource enforcement without a host: the controller's exact units (CPUs, gres indices) in the job record,
what spurstepd would install from a launch record, and the [cgroup] / gres_files configuration."""

from __future__ import annotations

from test_conf import agent_toml, load_text, one_line_error
from test_placement import cluster, end, rec, start_planned, submit

from spur_hpc.controller.state import ClusterState
from spur_hpc.protoconv import alloc_from_pb, alloc_to_pb
from spur_hpc.stepd import enforce


def held(s, job_id, node="n1"):
    return s.jobs[job_id]["alloc"]["per_node"][node]


def test_two_one_cpu_jobs_get_different_cpus_and_a_freed_cpu_is_given_again() -> None:
    s = cluster(("n1", 2, {}, ()))
    a, b = submit(s, cpus_per_task=1), submit(s, cpus_per_task=1)
    start_planned(s)
    assert {tuple(held(s, a)["cpu_ids"]), tuple(held(s, b)["cpu_ids"])} == {(0,), (1,)}
    freed = held(s, a)["cpu_ids"]
    end(s, a)
    c = submit(s, cpus_per_task=1)
    start_planned(s)
    assert held(s, c)["cpu_ids"] == freed


def test_gpu_units_are_never_handed_to_two_jobs_even_after_a_snapshot_restore() -> None:
    s = cluster(("n1", 4, {"gpu": 2}, ()))
    first = submit(s, gres="gpu:1")
    start_planned(s)
    assert held(s, first)["gres_ids"] == {"gpu": [0]}
    restored = ClusterState()
    restored.__setstate__(s.__getstate__())  # what a snapshot carries, as a restarted controller loads it
    second = submit(restored, gres="gpu:1")
    start_planned(restored)
    assert held(restored, second)["gres_ids"] == {"gpu": [1]}


def test_a_cluster_at_wal_level_2_chooses_no_units() -> None:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1"], wal_level=2))
    from test_placement import register

    register(s, "n1", 2, {"gpu": 1})
    job = submit(s, gres="gpu:1")
    start_planned(s)
    assert "cpu_ids" not in held(s, job) and "gres_ids" not in held(s, job)
    assert alloc_to_pb(s.jobs[job], "n1").chosen is False


def test_the_allocation_travels_to_the_launch_record_unchanged() -> None:
    s = cluster(("n1", 4, {"gpu": 2}, ()))
    job = submit(s, gres="gpu:2", cpus_per_task=2, memory_mb=100)
    start_planned(s)
    alloc = alloc_from_pb(alloc_to_pb(s.jobs[job], "n1"))
    assert alloc == {"cpus": 2, "memory_mb": 100, "cpu_ids": [0, 1], "gres_ids": {"gpu": [0, 1]}, "chosen": True}


def launch(alloc, files=None, **settings):
    base = {"constrain_ram_space": True, "allowed_ram_percent": 100.0, "constrain_cores": True}
    base.update(settings)
    return {"node": "n1", "enforce": {"cgroup": base, "alloc": alloc, "gres_files": files or {}}}


def test_the_memory_cap_is_the_allocation_times_allowed_ram_percent() -> None:
    alloc = {"cpus": 1, "memory_mb": 64, "cpu_ids": [0], "gres_ids": {}, "chosen": True}
    assert enforce.Plan(launch(alloc)).memory_bytes == 64 * enforce.MIB
    assert enforce.Plan(launch(alloc, allowed_ram_percent=125.0)).memory_bytes == 80 * enforce.MIB
    assert enforce.Plan(launch(alloc, constrain_ram_space=False)).memory_bytes == 0
    assert enforce.Plan(launch(dict(alloc, memory_mb=0))).memory_bytes == 0, "no --mem: no cap"


def test_a_job_sees_the_positions_of_its_own_gpus_only() -> None:
    files = {"gpu": ["/dev/g0", "/dev/g1"], "gpu:a100": ["/dev/a0"]}
    alloc = {"cpus": 1, "memory_mb": 0, "cpu_ids": [0], "gres_ids": {"gpu:a100": [0], "gpu": [1]}, "chosen": True}
    env = enforce.gpu_environment(launch(alloc, files))
    assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"] == env["ROCR_VISIBLE_DEVICES"] == "1,2"
    assert enforce.Plan(launch(alloc, files)).granted == ["/dev/g1", "/dev/a0"]
    assert enforce.gpu_environment(launch(dict(alloc, gres_ids={}), files)) == {}


def test_without_chosen_units_every_gres_file_stays_open() -> None:
    files = {"gpu": ["/dev/g0", "/dev/g1"]}
    plan = enforce.Plan(launch({"cpus": 1, "memory_mb": 0, "chosen": False}, files))
    assert plan.granted == ["/dev/g0", "/dev/g1"] and plan.cpus == []


def test_the_v1_hierarchies_are_read_from_the_mount_table(tmp_path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"
        "cgroup /sys/fs/cgroup/systemd cgroup rw,name=systemd 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    )
    assert enforce.find_v1_mounts(str(mounts)) == {
        "memory": "/sys/fs/cgroup/memory",
        "cpu": "/sys/fs/cgroup/cpu,cpuacct",
    }


def test_a_read_only_v1_hierarchy_is_not_used_and_a_writable_one_mounted_over_it_is(tmp_path) -> None:
    # A systemd-nspawn container (tier 2) sees the host's v1 hierarchies read-only; a writable subtree bound over one
    # of them (tools/testhosts) comes later in the mount table and is what the path shows.
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/memory cgroup ro,nosuid,nodev,noexec,relatime,memory 0 0\n"
        "cgroup /sys/fs/cgroup/cpuset cgroup ro,nosuid,nodev,noexec,relatime,cpuset 0 0\n"
        "cgroup /sys/fs/cgroup/devices cgroup ro,nosuid,nodev,noexec,relatime,devices 0 0\n"
        f"cgroup {unified} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
    )
    layout = enforce.host_layout(str(mounts))
    assert layout["cgroup1_mounts"] == {"memory": "/sys/fs/cgroup/memory"}
    assert layout["cgroup1_read_only"] == ["cpuset", "devices"]
    assert layout["use"] == {"memory": "v1", "cpuset": "none", "cpu": "none", "devices": "v2 BPF"}
    assert "read-only, so unusable: cpuset,devices" in enforce.describe_layout(layout)


def test_on_cgroup_v2_the_limits_are_written_into_the_jobs_cgroup_and_controllers_enabled_above_it(
    tmp_path, monkeypatch
) -> None:
    # Neither test tier has memory or cpuset on cgroup v2 (this kernel binds them to v1): a fake unified tree here.
    mount = tmp_path / "cgroup"
    job = mount / "spur" / "n1-0000" / "job_5_0"
    job.mkdir(parents=True)
    layout = {
        "cgroup2_mount": str(mount),
        "cgroup2_controllers": ["cpu", "cpuset", "memory"],
        "cgroup1_mounts": {},
        "cgroup1_read_only": [],
        "use": {"memory": "v2", "cpuset": "v2", "cpu": "v2", "devices": "v2 BPF"},
    }
    monkeypatch.setattr(enforce, "host_layout", lambda: layout)
    monkeypatch.setattr(enforce, "find_cgroup2_mount", lambda: str(mount))
    monkeypatch.setattr(enforce, "usable_cpus", lambda: [0, 1, 2, 3])
    alloc = {"cpus": 2, "memory_mb": 64, "cpu_ids": [1, 3], "gres_ids": {}, "chosen": True}
    enforcer = enforce.Enforcer(launch(alloc, cpu_quota=True, oom_kill_job=True), str(tmp_path), 5, 0)
    enforcer.install(str(job))
    assert (job / "memory.max").read_text() == (job / "memory.high").read_text() == str(64 * enforce.MIB)
    assert (job / "memory.swap.max").read_text() == "max" and (job / "memory.oom.group").read_text() == "1"
    assert (job / "cpuset.cpus").read_text() == "1,3"
    assert (job / "cpu.max").read_text() == "200000 100000"
    for level in (mount, mount / "spur", mount / "spur" / "n1-0000"):
        assert (level / "cgroup.subtree_control").read_text() == "+memory +cpuset +cpu", level
    (job / "memory.events").write_text("low 0\nhigh 3\nmax 1\noom 1\noom_kill 1\n")
    assert enforcer.oom_kills() == 1


def test_cgroup_keys_have_slurm_like_defaults_and_gres_files_must_match_the_counts(tmp_path) -> None:
    c = load_text(tmp_path, agent_toml(), role="agent")
    assert enforce.cgroup_settings(c.cgroup) == {
        "constrain_cores": True,
        "constrain_ram_space": True,
        "allowed_ram_percent": 100.0,
        "constrain_swap": False,
        "oom_kill_job": True,
        "cpu_quota": False,
        "constrain_devices": True,
        "extra_device_paths": [],
        "required": False,
    }
    message = one_line_error(
        load_text, tmp_path, agent_toml(gres='"gpu=2"', gres_files='["gpu=/dev/nvidia0"]'), role="agent"
    )
    assert "[agent] gres_files" in message and "1 files for gpu, but gres offers 2" in message
    message = one_line_error(load_text, tmp_path, agent_toml(gres_files='["gpu=nvidia0"]'), role="agent")
    assert "gres_files" in message


def test_a_mem_per_cpu_job_is_capped_at_its_memory_per_cpu_times_the_cpus_it_holds() -> None:
    s = cluster(("n1", 4, {}, ()))
    job = submit(s, mem_per_cpu_mb=100, cpus_per_task=2)
    start_planned(s)
    alloc = alloc_from_pb(alloc_to_pb(s.jobs[job], "n1"))
    assert enforce.Plan(launch(alloc)).memory_bytes == 200 * enforce.MIB

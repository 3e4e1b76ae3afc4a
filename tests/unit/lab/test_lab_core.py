"""The lab's core, where it runs without the lab: the play logs' recap, the timed phases, the host's primitives
(atomic writes, background processes by PID file, waiting, podman's settings), the uninstall proof's comparison, the
scenarios' bookkeeping, the image recipes and the command line's usage errors. Real files and real processes; the
lab itself (nodes, engines, plays) is never started."""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab import host, images, nodes, plays, scenarios

_RECAP = """PLAY RECAP *********************************************************************
node-a                     : ok=%d   changed=%d   unreachable=0    failed=0    skipped=4    rescued=0    ignored=0
node-b                     : ok=%d   changed=%d   unreachable=0    failed=0    skipped=2    rescued=0    ignored=0
"""


@pytest.fixture(autouse=True)
def _lab_state_in_tmp(tmp_path, monkeypatch):
    """No test writes the lab's state or podman's settings in the repository."""
    monkeypatch.setattr(host, "STATE", tmp_path / "state")
    monkeypatch.setattr(host, "PODMAN_CONF", tmp_path / "podman" / "containers.conf")


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (a grandchild waits for its reaper)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# -- plays ----------------------------------------------------------------------------------------------------------
def test_recap_changed_sums_the_hosts_of_the_last_recap_only(tmp_path):
    log = tmp_path / "converge.log"
    log.write_text("TASK [x] ***\nchanged: [node-a] => {\"changed=7\": 1}\n" + _RECAP % (10, 5, 9, 4)
                   + "\nPLAY [again] ***\nTASK [y] ***\nok: [node-a] changed=99 in a task line\n"
                   + _RECAP % (12, 2, 11, 3))
    assert plays.recap_changed(log) == 5
    assert plays.recap_lines(log) == _RECAP % (12, 2, 11, 3)


def test_recap_changed_is_0_after_an_idempotent_run(tmp_path):
    log = tmp_path / "converge-2.log"
    log.write_text("PLAY [site] ***\n" + _RECAP % (40, 0, 38, 0))
    assert plays.recap_changed(log) == 0


def test_recap_changed_is_0_without_a_recap_or_a_log(tmp_path):
    log = tmp_path / "failed.log"
    log.write_text("TASK [x] ***\nfatal: [node-a]: FAILED! changed=3\n")
    assert plays.recap_changed(log) == 0
    assert plays.recap_lines(log) == ""
    assert plays.recap_changed(tmp_path / "missing.log") == 0


def test_a_phase_records_its_time_and_returns_the_result(capsys):
    phases = plays.Phases()

    def slow(a, b=0):
        time.sleep(0.6)
        return {"sum": a + b}

    assert phases.run("caches", slow, 2, b=3) == {"sum": 5}
    assert phases.run("nodes", lambda: None) is None
    assert phases.run("bool", lambda: False) is False  # a bool is not an exit status
    assert phases.run("exit 0", lambda: 0) == 0
    assert phases.took == {"caches": 1, "nodes": 0, "bool": 0, "exit 0": 0}
    assert capsys.readouterr().out.splitlines() == [
        "=== lab: caches", "=== lab: caches took 1 s", "=== lab: nodes", "=== lab: nodes took 0 s",
        "=== lab: bool", "=== lab: bool took 0 s", "=== lab: exit 0", "=== lab: exit 0 took 0 s"]


def test_a_phase_that_raises_a_lab_error_fails_saying_so(capsys):
    phases = plays.Phases()
    error = host.LabError("registry: exit 1")

    def fail():
        raise error

    with pytest.raises(host.LabError) as raised:
        phases.run("registry", fail)
    assert raised.value is error
    assert phases.took == {"registry": 0}
    assert capsys.readouterr().out.splitlines() == ["=== lab: registry", "=== lab: registry took 0 s, FAILED"]


def test_a_phase_with_a_non_zero_exit_status_fails(capsys):
    phases = plays.Phases()
    with pytest.raises(host.LabError, match=r"^first converge: exit 2$"):
        phases.run("first converge", lambda: 2)
    assert phases.took == {"first converge": 0}
    assert capsys.readouterr().out.splitlines() == ["=== lab: first converge",
                                                    "=== lab: first converge took 0 s, FAILED"]


def test_a_phase_does_not_catch_other_errors():
    phases = plays.Phases()
    with pytest.raises(ZeroDivisionError):
        phases.run("bug", lambda: 1 / 0)


def test_verdict():
    assert plays.verdict(True) == "target met"
    assert plays.verdict(False) == "target MISSED"


# -- host: files --------------------------------------------------------------------------------------------------
def test_atomic_write_creates_the_folders_and_replaces_the_file(tmp_path):
    path = tmp_path / "a" / "b" / "hub.yml"
    old_umask = os.umask(0o022)
    try:
        host.atomic_write(path, "first\n")
        assert path.read_text() == "first\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        inode = path.stat().st_ino
        host.atomic_write(path, "second\n")
    finally:
        os.umask(old_umask)
    assert path.read_text() == "second\n"
    assert path.stat().st_ino != inode  # renamed over, not rewritten in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["hub.yml"]


def test_atomic_write_applies_the_mode_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "key"
    path.write_text("old key\n")
    path.chmod(0o644)
    host.atomic_write(path, "secret\n", mode=0o600)
    assert path.read_text() == "secret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    host.write_secret(tmp_path / "other", "k\n")
    assert stat.S_IMODE((tmp_path / "other").stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key", "other"]


def test_podman_conf_is_runc_and_cgroupfs_and_written_once(tmp_path):
    path = host.podman_conf()
    assert path == tmp_path / "podman" / "containers.conf"
    text = path.read_text()
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert text.startswith('[containers]\ndefault_ulimits = ["nofile=%d:%d", "nproc=' % (nofile, nofile)), text
    assert text.endswith('\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'), text
    nproc = int(text.split('"nproc=')[1].split(":")[0])
    assert 0 < nproc <= 32768
    before = path.stat()
    assert host.podman_conf() == path
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    path.write_text("[engine]\nruntime = \"crun\"\n")
    host.podman_conf()
    assert path.read_text() == text
    assert host.environ(EXTRA=1)["CONTAINERS_CONF"] == str(path)
    assert host.environ(EXTRA=1)["EXTRA"] == "1"


# -- host: processes ----------------------------------------------------------------------------------------------
def test_spawn_alive_and_stop_pid_with_a_real_process(tmp_path):
    log, pidfile = tmp_path / "logs" / "sleeper.log", tmp_path / "sleeper.pid"
    pid = host.spawn(["sh", "-c", "echo started; exec sleep 60"], log, pidfile)
    assert pidfile.read_text() == "%d\n" % pid
    assert host.pid_of(pidfile) == pid
    assert os.getsid(pid) == pid  # a session of its own
    assert host.wait_for(lambda: "started" in log.read_text(), 10, 0.05, "the sleeper's log") is True
    assert host.alive(pidfile)
    start = time.monotonic()
    host.stop_pid(pidfile)
    assert time.monotonic() - start < 5
    assert not pidfile.exists()
    assert not host.alive(pidfile)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_pid_kills_a_process_that_ignores_sigterm_after_the_grace(tmp_path):
    log, pidfile = tmp_path / "stubborn.log", tmp_path / "stubborn.pid"
    pid = host.spawn([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                      "print('ignoring', flush=True); time.sleep(60)"], log, pidfile)
    host.wait_for(lambda: "ignoring" in log.read_text(), 20, 0.05, "the stubborn process's handler")
    start = time.monotonic()
    host.stop_pid(pidfile, grace=1)
    took = time.monotonic() - start
    assert 1 <= took < 6, took
    assert not pidfile.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_pid_with_group_stops_what_the_process_started(tmp_path):
    log, pidfile = tmp_path / "group.log", tmp_path / "group.pid"
    pid = host.spawn(["sh", "-c", "sleep 60 & echo $!; wait"], log, pidfile)
    child = host.wait_for(lambda: log.read_text().strip(), 10, 0.05, "the grandchild's PID")
    child = int(child)
    assert not _gone(child)
    host.stop_pid(pidfile, group=True, grace=5)
    assert not pidfile.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert host.wait_for(lambda: _gone(child), 5, 0.05, "the grandchild gone")


def test_alive_is_false_for_no_pid_a_bad_pid_file_or_a_process_that_ended(tmp_path):
    pidfile = tmp_path / "x.pid"
    assert not host.alive(pidfile)
    assert host.pid_of(pidfile) is None
    pidfile.write_text("not a pid\n")
    assert not host.alive(pidfile)
    assert host.pid_of(pidfile) is None
    host.stop_pid(pidfile)  # nothing to stop: the file goes
    assert not pidfile.exists()
    host.spawn(["true"], tmp_path / "true.log", pidfile)
    assert host.wait_for(lambda: not host.alive(pidfile), 10, 0.05, "true to end") is True
    host.stop_pid(pidfile)
    assert not pidfile.exists()
    host.stop_pid(tmp_path / "never.pid")  # no file: nothing happens


def test_wait_for_returns_the_probes_first_true_value():
    calls = []

    def probe():
        calls.append(1)
        return {"version": "2.3.0"} if len(calls) == 3 else {}

    assert host.wait_for(probe, 10, 0.01, "the server") == {"version": "2.3.0"}
    assert len(calls) == 3


def test_wait_for_names_what_it_waited_for_after_the_timeout():
    calls = []
    start = time.monotonic()
    with pytest.raises(host.LabError, match=r"^node-a over SSH on 127\.0\.0\.1:2222: not within 1 s$"):
        host.wait_for(lambda: calls.append(1), 1, 0.1, "node-a over SSH on 127.0.0.1:2222")
    assert time.monotonic() - start >= 1
    assert len(calls) >= 2


# -- nodes: the uninstall proof's comparison ----------------------------------------------------------------------
_FRESH = ["group root", "package base-files", "path /etc", "path /etc/hostname", "path /etc/nginx", "user root"]


def test_kept_items_are_counted_not_left_behind():
    kept = ["data /var/lib/pairserve-lab/node-a/hf-cache", "data /var/lib/pairserve-lab/node-a/hf-cache/x",
            "package nginx", "package-file /etc/nginx/mime.types", "path /etc/nginx/nginx.conf",
            "path /var/lib/postgresql/15/main", "path /etc/postgresql-common", "path /var/backups/pairserve/db.dump",
            "user postgres", "group ssl-cert", "path /etc/systemd/system/sockets.target.wants"]
    left, gone, kept_n = nodes.compare(_FRESH, _FRESH + kept)
    assert (left, gone, kept_n) == ([], [], len(kept))


def test_new_items_that_are_not_kept_ones_are_left_behind():
    new = ["path /etc/pairserve/x", "path /etc/nginxfoo", "data /var/lib/pairserve-lab/node-c/hf-cache",
           "data /var/lib/pairserve-lab/node-a/checkpoints", "user pairserve", "group pairserve",
           "enabled pairserve-controller.service", "path /etc/systemd/system/sockets.target.wants/x.socket"]
    now = [line for line in _FRESH if line != "path /etc/hostname"] + new + ["package nginx"]
    left, gone, kept_n = nodes.compare(_FRESH, now)
    assert left == sorted(new)
    assert gone == ["path /etc/hostname"]
    assert kept_n == 1


def test_a_kept_item_the_fresh_node_had_is_not_counted():
    fresh = _FRESH + ["package nginx"]
    assert nodes.compare(fresh, fresh) == ([], [], 0)
    assert nodes.compare(fresh, _FRESH) == ([], ["package nginx"], 0)


def test_uninstall_kept_matches_whole_lines_only():
    assert nodes.UNINSTALL_KEPT.fullmatch("path /etc/nginx/nginx.conf")
    assert nodes.UNINSTALL_KEPT.fullmatch("path /etc/nginx")
    assert nodes.UNINSTALL_KEPT.fullmatch("data /var/lib/pairserve-lab/node-b/hf-cache/models--x/blobs/y")
    assert nodes.UNINSTALL_KEPT.fullmatch("package-running postgresql@15-main.service")
    for line in ("path /etc/nginxfoo", "path /etc/pairserve/x", "xpath /etc/nginx", "path /etc/nginx.d",
                 "user postgres2", "group postgresql", "path /etc/timezone.bak", "enabled nginx.service"):
        assert not nodes.UNINSTALL_KEPT.fullmatch(line), line
    assert nodes.UNINSTALL_KEPT.match("path /etc/nginxfoo")  # why fullmatch: a prefix alone would keep it


# -- scenarios ------------------------------------------------------------------------------------------------------
def test_a_scenarios_steps_are_all_or_core(tmp_path):
    assert scenarios.Scenario("rotate").steps == "all"
    core = scenarios.Scenario("rotate", "core")
    assert (core.name, core.steps, core.dir) == ("rotate", "core", tmp_path / "state" / "rotate")
    assert core.path("rotate.log") == tmp_path / "state" / "rotate" / "rotate.log"
    with pytest.raises(host.LabError, match=r"^scenario steps are 'all' or 'core', not 'some'$"):
        scenarios.Scenario("rotate", "some")


def test_prepare_removes_what_matches_only(tmp_path):
    scenario = scenarios.Scenario("restore")
    scenario.prepare()
    assert scenario.dir.is_dir() and not list(scenario.dir.iterdir())
    for name in ("a.rc", "a.log", "b.log", "load.json", "keep.txt", "backups/one/db.dump", "backups/one/x/y",
                 "backups/two.dump", "keepdir/a.log", "times/1"):
        (scenario.dir / name).parent.mkdir(parents=True, exist_ok=True)
        (scenario.dir / name).write_text("x")
    (scenario.dir / "backups" / "empty").mkdir()
    scenario.prepare("backups", "*.log", "times", "nothing-*")
    remaining = sorted(str(p.relative_to(scenario.dir)) for p in scenario.dir.rglob("*"))
    assert remaining == ["a.rc", "keep.txt", "keepdir", "keepdir/a.log", "load.json"]
    assert (scenario.dir / "a.rc").read_text() == "x"


def test_rc_reads_the_exit_status_of_a_play_run():
    scenario = scenarios.Scenario("maintenance")
    scenario.prepare()
    assert scenario.rc("drain") is None
    (scenario.dir / "drain.rc").write_text("0\n")
    (scenario.dir / "restart.rc").write_text("2\n")
    (scenario.dir / "broken.rc").write_text("not a status\n")
    (scenario.dir / "empty.rc").write_text("")
    assert scenario.rc("drain") == 0
    assert scenario.rc("restart") == 2
    assert scenario.rc("broken") is None
    assert scenario.rc("empty") is None


def test_record_steps_writes_which_steps_ran():
    for steps in ("all", "core"):
        scenario = scenarios.Scenario("upgrade", steps)
        scenario.prepare()
        scenario.record_steps()
        assert (scenario.dir / "steps").read_text() == steps + "\n"


def test_the_scenarios_are_the_folders_with_steps():
    here = host.REPO / "lab" / "scenarios"
    expected = sorted(p.name for p in here.iterdir() if (p / "steps.py").is_file())
    assert scenarios.names() == expected
    assert "default" not in expected and "patch_restart" in expected
    assert scenarios.tests_dir("rotate") == here / "rotate" / "tests"


def test_an_unknown_scenario_is_refused_listing_the_names(tmp_path):
    with pytest.raises(host.LabError) as raised:
        scenarios.run("nope")
    assert str(raised.value) == "no scenario 'nope'; the scenarios: %s" % " ".join(scenarios.names())
    assert not (tmp_path / "state").exists()


# -- images ---------------------------------------------------------------------------------------------------------
def test_the_image_recipes_are_numbers_and_the_vllm_env_strings():
    wanted = images.versions()
    for key in ("node_image_recipe", "vllm_cli_recipe"):
        assert type(wanted[key]) is int, (key, wanted[key])  # pylint: disable=unidiomatic-typecheck
    assert wanted["vllm"], wanted
    for version, entry in wanted["vllm"].items():
        assert isinstance(version, str), version
        for name, value in ((entry or {}).get("env") or {}).items():
            assert isinstance(name, str) and isinstance(value, str), (version, name, value)


def test_replica_image_name():
    assert images.replica_image("1.2.3") == "localhost/pairserve-vllm-cpu:1.2.3"
    assert images.BROKEN_IMAGE == "localhost/pairserve-vllm-cpu:broken"


# -- the command line -----------------------------------------------------------------------------------------------
def _lab(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *args], cwd=host.REPO, capture_output=True, text=True,
                          timeout=60, check=False)


def test_no_command_is_a_usage_error():
    res = _lab()
    assert res.returncode == 2, res.stdout + res.stderr
    assert "usage: python -m lab" in res.stderr
    assert "the following arguments are required: command" in res.stderr


def test_an_unknown_scenario_on_the_command_line_is_a_usage_error():
    res = _lab("scenario", "nope")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "invalid choice: 'nope'" in res.stderr, res.stderr


def test_podman_conf_prints_the_path_it_wrote():
    res = _lab("podman-conf")
    assert res.returncode == 0, res.stdout + res.stderr
    path = Path(res.stdout.strip())
    assert path == host.REPO / ".cache" / "podman" / "containers.conf"
    assert path.is_file()
    assert 'runtime = "runc"' in path.read_text()

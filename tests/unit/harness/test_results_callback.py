"""The test-only callback tests/support/callback_plugins/pairserve_results.py through a real ansible-playbook run on localhost,
and the reader the lab's suites assert with (support.recap.TaskResults, support.lab_suite.results): what each JSON
line holds (host, task, action, status, role, task file, module args, handlers), that what no_log hides stays out
of the file, and that the recap counted from the lines is the PLAY RECAP Ansible printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from support.ansible_runner import run_playbook
from support.lab_suite import results
from support.recap import TaskResults, items, module_args, parse_recap

SECRET = "s3cret-never-in-the-file"

ROLE_TASKS = [
    {"name": "Touch a file", "ansible.builtin.file": {"path": "{{ probe_dir }}/touched", "state": "touch"},
     "notify": "probe handler"},
    {"name": "Use a secret", "ansible.builtin.command": {"argv": ["echo", SECRET]}, "no_log": True,
     "changed_when": False},
    {"name": "Never runs", "ansible.builtin.debug": {"msg": "no"}, "when": False},
    {"name": "Fail, ignored", "ansible.builtin.command": {"argv": ["false"]}, "ignore_errors": True},
]
HANDLERS = [{"name": "The handler", "ansible.builtin.command": {"argv": ["true"]}, "listen": "probe handler"}]
PLAY_TASKS = [
    {"name": "Loop over two items", "ansible.builtin.stat": {"path": "{{ item }}"}, "loop": ["/", "/nonexistent"]},
    {"name": "Set a fact", "ansible.builtin.set_fact": {"probe_fact": {"answer": 42}}},
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("results")
    role = tmp / "roles" / "results_probe"
    (role / "tasks").mkdir(parents=True)
    (role / "handlers").mkdir()
    (role / "tasks" / "main.yml").write_text(yaml.safe_dump(ROLE_TASKS))
    (role / "handlers" / "main.yml").write_text(yaml.safe_dump(HANDLERS))
    book = tmp / "play.yml"
    book.write_text(yaml.safe_dump([{"name": "probe", "hosts": "localhost", "gather_facts": False,
                                     "connection": "local", "vars": {"probe_dir": str(tmp)},
                                     "roles": ["results_probe"], "tasks": PLAY_TASKS}]))
    result = run_playbook(book, timeout=240)
    assert result.rc == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def task_results(run):
    return TaskResults(run.results)


def test_each_line_names_host_task_action_status_role_and_task_file(task_results):
    touched = task_results.where(task="Touch a file")
    assert len(touched) == 1
    record = touched[0]
    assert record["_host"] == "localhost" and record["_action"] == "ansible.builtin.file"
    assert record["_status"] == "ok" and record["changed"] is True and record["_ignored"] is False
    assert record["_role"] == "results_probe"
    assert record["_task_path"].rsplit(":", 1)[0].endswith("roles/results_probe/tasks/main.yml")
    assert module_args(record)["state"] == "touch"
    play_task = task_results.where(task="Set a fact")[0]
    assert play_task["_role"] is None and play_task["_task_path"].rsplit(":", 1)[0].endswith("play.yml")


def test_handlers_skips_ignored_failures_and_loops_are_recorded(task_results):
    handler = task_results.where(role="results_probe", task_file="results_probe/handlers/main.yml")
    assert [(r["_task"], r["_action"], r["changed"]) for r in handler] == [
        ("The handler", "ansible.builtin.command", True)]
    assert task_results.where(task="Never runs")[0]["_status"] == "skipped"
    failed = task_results.where(task="Fail, ignored")[0]
    assert failed["_status"] == "failed" and failed["_ignored"] is True and failed["rc"] == 1
    loop = task_results.where(action="stat")[0]
    assert [module_args(i)["path"] for i in items(loop)] == ["/", "/nonexistent"]
    assert [i["stat"]["exists"] for i in items(loop)] == [True, False]


def test_what_no_log_hides_is_not_in_the_file(run, task_results):
    hidden = task_results.where(task="Use a secret")[0]
    assert "censored" in hidden and "cmd" not in hidden and "stdout" not in hidden, hidden
    assert SECRET not in json.dumps(run.results)


def test_the_recap_from_the_results_is_the_play_recap(run, task_results):
    printed = parse_recap(run.stdout)
    counted = task_results.recap()
    keys = ("ok", "changed", "failed", "skipped", "ignored", "unreachable")
    assert {h: {k: c[k] for k in keys} for h, c in counted.items()} == \
        {h: {k: c[k] for k in keys} for h, c in printed.items()}, (counted, run.stdout[-1500:])
    assert counted["localhost"]["ignored"] == 1 and counted["localhost"]["failed"] == 0


def test_facts_are_read_by_host(task_results):
    assert task_results.facts("localhost", "probe_fact") == [{"answer": 42}]
    assert task_results.facts("elsewhere", "probe_fact") == []


RECORDS = [
    {"_host": "node-a", "_task": "Drain", "_action": "pairserve.llm.gpustack_route", "_status": "ok", "changed": True,
     "_role": "pairserve.llm.maintenance", "_task_path": "/c/roles/maintenance/tasks/weights.yml:8",
     "results": [{"changed": True, "invocation": {"module_args": {"name": "qwen", "drain": ["qwen-node-a"]}}}]},
    {"_host": "node-b", "_task": "Restart", "_action": "systemd_service", "_status": "ok", "changed": True,
     "_role": "maintenance", "_task_path": "/c/roles/maintenance/handlers/main.yml:2",
     "invocation": {"module_args": {"name": "gpustack-worker", "state": "restarted"}}},
    {"_host": "node-b", "_task": "Include", "_action": "ansible.builtin.include_tasks", "_status": "ok"},
    {"_host": "node-b", "_task": "Broken", "_action": "command", "_status": "failed", "_ignored": False},
]


def test_where_matches_actions_and_roles_short_or_qualified():
    found = TaskResults(RECORDS)
    assert [r["_task"] for r in found.where(action="gpustack_route")] == ["Drain"]
    assert [r["_task"] for r in found.where(action="ansible.builtin.systemd_service", host="node-b")] == ["Restart"]
    assert found.where(action="ansible.builtin.systemd_service", host="node-a") == []
    assert found.where(action="other.collection.gpustack_route") == []
    assert [r["_task"] for r in found.where(role="maintenance")] == ["Drain", "Restart"]
    weights = found.where(role="pairserve.llm.maintenance", task_file="tasks/weights.yml")
    assert [r["_task"] for r in weights] == ["Drain"]
    assert found.where(task_file="s/weights.yml") == []
    assert [r["_task"] for r in found.where(status="failed")] == ["Broken"]
    assert [r["_task"] for r in found.where(changed=True, host="node-b")] == ["Restart"]
    assert found.hosts() == {"node-a", "node-b"}


def test_recap_counts_changed_and_failed_per_host_without_includes():
    recap = TaskResults(RECORDS).recap()
    assert recap["node-a"] == {"ok": 1, "changed": 1, "unreachable": 0, "failed": 0, "skipped": 0, "ignored": 0}
    assert recap["node-b"] == {"ok": 1, "changed": 1, "unreachable": 0, "failed": 1, "skipped": 0, "ignored": 0}


def test_the_loader_takes_the_log_or_the_jsonl_and_fails_when_the_step_did_not_run(tmp_path):
    (tmp_path / "rebuild-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert len(results(tmp_path / "rebuild-1.log").records) == len(RECORDS)
    assert results(tmp_path / "rebuild-1.jsonl").where(action="gpustack_route")
    with pytest.raises(pytest.fail.Exception, match="step did not run"):
        results(tmp_path / "rebuild-2.log")
    (tmp_path / "bench.log").write_text("PLAY RECAP\n")
    with pytest.raises(pytest.fail.Exception, match=str(Path(tmp_path / "bench.log"))):
        results(tmp_path / "bench.log")

"""What an ansible-playbook run did: the PLAY RECAP of its log, parsed, and the structured task results the
pairserve_results callback writes (TaskResults). Shared by the integration tests (test_day2) and the lab's suites
(lab/scenarios/*/tests through support.lab_suite). No testinfra or pytest here: integration tests import it too."""

from __future__ import annotations

import json
import re

_HOST_LINE = re.compile(r"^(\S+)\s+:\s+(ok=.*)$", re.M)
_COUNTER = re.compile(r"(\w+)=(\d+)")


def parse_recap(text: str) -> dict | None:
    """{host: {ok, changed, unreachable, failed, skipped, rescued, ignored}} from the last PLAY RECAP in `text`;
    None when there is none (the play did not finish). A host absent from the dict never ran a task."""
    if "PLAY RECAP" not in text:
        return None
    tail = text.rsplit("PLAY RECAP", 1)[1]
    return {host: {k: int(v) for k, v in _COUNTER.findall(fields)} for host, fields in _HOST_LINE.findall(tail)}


# -- the structured results: the pairserve_results callback's JSON lines (tests/support/callback_plugins) ----------------

_RECAP_KEYS = ("ok", "changed", "unreachable", "failed", "skipped", "ignored")
_INCLUDES = {"include_tasks", "include_role", "include"}


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _same_name(recorded: str | None, wanted: str) -> bool:
    """A module or role name as written (`systemd_service`, `checkpoint`) or fully qualified
    (`ansible.builtin.systemd_service`, `pairserve.llm.checkpoint`): the same when equal, or when one side is
    unqualified and the last parts are equal."""
    if not recorded:
        return False
    if recorded == wanted:
        return True
    return ("." not in recorded or "." not in wanted) and _last(recorded) == _last(wanted)


def items(record: dict) -> list[dict]:
    """The results of a task's loop items, or the task's own result as the one item."""
    loop = record.get("results")
    return [r for r in loop if isinstance(r, dict)] if isinstance(loop, list) else [record]


def module_args(result: dict) -> dict:
    """The module's arguments as the module reports them (`invocation.module_args`; no_log ones masked there)."""
    return (result.get("invocation") or {}).get("module_args") or {}


class TaskResults:
    """The task results of one run, one record per task and host (handlers included), in the order they came.

    Each record is the result Ansible hands its callbacks (censored where no_log applies) plus `_host`, `_task`,
    `_action` (the module as written in the task), `_status` (ok, failed, skipped, unreachable), `_ignored`,
    `_role` (FQCN, or None outside a role) and `_task_path` (`<file>:<line>` of the task)."""

    def __init__(self, records: list[dict], source: str = "results"):
        self.records = list(records)
        self.source = source

    @classmethod
    def from_lines(cls, text: str, source: str = "results") -> "TaskResults":
        return cls([json.loads(line) for line in text.splitlines() if line.strip()], source)

    def where(self, host: str | None = None, action: str | None = None, role: str | None = None,
              task_file: str | None = None, task: str | None = None, status: str | None = None,
              changed: bool | None = None) -> list[dict]:
        """The records that match every criterion given: `action` and `role` short or FQCN; `task_file` the end
        of the task's file path (`tasks/weights.yml`, `rebuild/handlers/main.yml`); `task` the task's name
        (prefer action and role: names are for people); `changed` the result's changed flag."""
        found = []
        for record in self.records:
            path = str(record.get("_task_path") or "").rsplit(":", 1)[0]
            if host is not None and record.get("_host") != host:
                continue
            if action is not None and not _same_name(record.get("_action"), action):
                continue
            if role is not None and not _same_name(record.get("_role"), role):
                continue
            if task_file is not None and not (path == task_file or path.endswith("/" + task_file.lstrip("/"))):
                continue
            if task is not None and record.get("_task") != task:
                continue
            if status is not None and record.get("_status") != status:
                continue
            if changed is not None and bool(record.get("changed")) != changed:
                continue
            found.append(record)
        return found

    def hosts(self) -> set[str]:
        return {r["_host"] for r in self.records if r.get("_host")}

    def facts(self, host: str, name: str) -> list:
        """Every value a task of `host` set for the fact `name` (set_fact or a module's ansible_facts), in order."""
        return [r["ansible_facts"][name] for r in self.records
                if r.get("_host") == host and name in (r.get("ansible_facts") or {})]

    def recap(self) -> dict:
        """{host: {ok, changed, unreachable, failed, skipped, ignored}} counted from the results as the PLAY
        RECAP counts them: ok includes changed, an include is not counted, a failure the task ignores counts as
        ok and ignored. Unlike the PLAY RECAP, a failure a block rescues counts as failed (the callback cannot
        tell), and a host with no result at all is absent."""
        counts: dict = {}
        for record in self.records:
            host, status = record.get("_host"), record.get("_status")
            if not host:
                continue
            row = counts.setdefault(host, dict.fromkeys(_RECAP_KEYS, 0))
            if _last(str(record.get("_action") or "")) in _INCLUDES and status == "ok":
                continue
            if status == "failed" and not record.get("_ignored"):
                row["failed"] += 1
            elif status in ("ok", "failed"):
                row["ok"] += 1
                row["ignored"] += status == "failed"
                row["changed"] += bool(record.get("changed"))
            elif status in ("skipped", "unreachable"):
                row[status] += 1
        return counts

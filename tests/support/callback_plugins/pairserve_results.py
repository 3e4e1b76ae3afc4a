# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback: writes every task result (diff included) as one JSON line to a file."""

from __future__ import annotations

DOCUMENTATION = r"""
name: pairserve_results
type: aggregate
short_description: Write raw task results as JSON lines (pairserve test suite only)
description:
  - Appends one JSON object per task result (handlers included) to the file named by E(PAIRSERVE_RESULTS_FILE), with
    the host (C(_host)), the task's name (C(_task)), its module as written in the task (C(_action)), the outcome
    (C(_status), one of ok, failed, skipped or unreachable; C(_ignored) true for a failure the task ignores), the role
    the task belongs to (C(_role), its FQCN where it has one; null outside a role) and the task's file and line
    (C(_task_path)).
  - The result is the copy Ansible hands every callback, so what no_log hides is censored here as on screen;
    C(invocation.module_args) is the module's own, with its no_log parameters masked by the module.
  - Unlike the builtin tree callback it keeps C(diff), which the module tests assert on.
  - Ad-hoc C(ansible) runs load it only with E(ANSIBLE_LOAD_CALLBACK_PLUGINS=1).
requirements:
  - E(PAIRSERVE_RESULTS_FILE) set
"""

import json
import os

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "pairserve_results"
    CALLBACK_NEEDS_ENABLED = True

    def _write(self, result, status, ignored=False):
        path = os.environ.get("PAIRSERVE_RESULTS_FILE")
        if not path:
            return
        task = result._task  # pylint: disable=protected-access
        # Ansible's callback copy of the result: already censored where no_log applies.
        record = dict(result._result)  # pylint: disable=protected-access
        record["_host"] = result._host.get_name()  # pylint: disable=protected-access
        record["_task"] = result.task_name
        record["_action"] = task.action  # the module, as written in the task
        record["_status"] = status
        record["_ignored"] = bool(ignored)
        role = getattr(task, "_role", None)
        record["_role"] = role.get_name() if role is not None else None
        record["_task_path"] = task.get_path() or None
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed", ignored=ignore_errors)

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._write(result, "unreachable")

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Test-only callback: writes every task result (diff included) as one JSON line to a file."""

from __future__ import annotations

DOCUMENTATION = r"""
name: pairserve_results
type: aggregate
short_description: Write raw task results as JSON lines (pairserve test suite only)
description:
  - Appends one JSON object per task result to the file named by E(PAIRSERVE_RESULTS_FILE), with the host
    (C(_host)), the task's name (C(_task)), its module as written in the task (C(_action)) and the outcome (C(_status)).
  - Unlike the builtin tree callback it keeps C(diff), which the module tests assert on.
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

    def _write(self, result, status):
        path = os.environ.get("PAIRSERVE_RESULTS_FILE")
        if not path:
            return
        record = dict(result._result)  # pylint: disable=protected-access
        record["_host"] = result._host.get_name()  # pylint: disable=protected-access
        record["_task"] = result.task_name
        record["_action"] = result._task.action  # pylint: disable=protected-access  # the module, as written in the task
        record["_status"] = status
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=str) + "\n")

    def v2_runner_on_ok(self, result):
        self._write(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._write(result, "skipped")

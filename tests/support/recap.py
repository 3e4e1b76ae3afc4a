"""The PLAY RECAP of an ansible-playbook run, parsed: shared by the integration tests (test_day2) and the lab's
suites (molecule/*/tests through support.lab_suite). No testinfra here: integration tests import it too."""

from __future__ import annotations

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

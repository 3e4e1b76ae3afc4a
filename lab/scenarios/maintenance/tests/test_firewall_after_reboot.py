"""Deny by default survives a reboot: node-b's firewall unit deletes its table when the node shuts down (the
maintenance's reboot, `python -m lab scenario maintenance`) and loads it again at boot. The outsider checks of
lab/scenarios/default/tests/test_firewall.py run again here, after the reboot, with the same outsider (a network
namespace of its own, tests/support/lab_outsider.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from lab.api import STATE
# The outsider fixture, and the firewall checks collected again here, after the reboot.
from support.lab_outsider import outsider  # noqa: F401  pylint: disable=unused-import
from support.scripts import load

_DEFAULT = load(Path(__file__).resolve().parents[2] / "default" / "tests" / "test_firewall.py", "default_test_firewall")
keys = _DEFAULT.keys  # the fixture those checks take
test_an_outsider_is_refused_at_the_replica_and_the_worker_ports = _DEFAULT.test_an_outsider_is_refused_at_the_replica_and_the_worker_ports
test_each_node_has_its_table_loaded_by_its_unit = _DEFAULT.test_each_node_has_its_table_loaded_by_its_unit
test_the_outsider_is_refused_at_the_plain_api_port = _DEFAULT.test_the_outsider_is_refused_at_the_plain_api_port
test_the_outsider_is_served_through_the_route_with_a_key = _DEFAULT.test_the_outsider_is_served_through_the_route_with_a_key

DIR = STATE / "maintenance"


def _unix(*cmd: str) -> int:
    out = subprocess.run(list(cmd), check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    return int(out.lstrip("@"))


def test_node_b_rebooted_and_its_table_was_loaded_at_its_boot():
    before = json.loads((DIR / "before.json").read_text(encoding="utf-8"))
    after = json.loads((DIR / "after.json").read_text(encoding="utf-8"))
    assert after["node_b_started"] != before["node_b_started"], "node-b was not restarted by the maintenance"
    started = _unix("podman", "inspect", "--format", "{{.State.StartedAt.Unix}}", "pairserve-lab-node-b")
    loaded = _unix("podman", "exec", "pairserve-lab-node-b", "systemctl", "show", "--timestamp=unix",
                   "--property=ActiveEnterTimestamp", "--value", "pairserve-firewall")
    assert loaded >= started, f"node-b's firewall unit became active at {loaded}, before the node's boot at {started}"

"""What the lab's test suites (molecule/*/tests) share: GPUStack's API on the lab, its keys, the route, and the
logs of the plays scripts/lab.sh ran.

The lab shares the host's network, so GPUStack on node-a answers on 127.0.0.1:30080; the keys are read from
node-a the way an operator would (root-only files), through testinfra's podman backend.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import testinfra

from support.recap import parse_recap

REPO = Path(__file__).resolve().parents[2]
API = os.environ.get("PAIRSERVE_LAB_API", "http://127.0.0.1:30080")
NODE_A = os.environ.get("PAIRSERVE_NODE_A", "pairserve-lab-node-a")
STATE = REPO / ".lab"
SERVING = (REPO / "inventory" / "lab" / "group_vars" / "all" / "serving.yml").read_text()
ROUTE = re.search(r"^pairserve_route_name: (\S+)", SERVING, re.M).group(1)
WEIGHTS = {host: int(w) for host, w in re.findall(r"^  (node-[ab]): (\d+)$", SERVING, re.M)}


def call(path: str, key: str, body=None, timeout: float = 60):
    """(status, parsed JSON or error text) of one request to the lab's GPUStack."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    req = urllib.request.Request(API + path, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def items(path: str, key: str) -> list:
    status, body = call(path + ("&" if "?" in path else "?") + "perPage=100", key)
    assert status == 200, body
    return body["items"]


def read_keys() -> dict:
    node = testinfra.get_host(f"podman://{NODE_A}")
    return {name: node.file(f"/etc/pairserve/secrets/{name}-api-key").content_string.strip()
            for name in ("management", "inference")}


def route_weights(key: str, route: str = ROUTE) -> dict:
    """{model name: weight} of the route's targets."""
    routes = [r for r in items("/v2/model-routes", key) if r["name"] == route]
    assert len(routes) == 1, routes
    names = {m["id"]: m["name"] for m in items("/v2/models", key)}
    return {names.get(t["model_id"], t["model_id"]): t["weight"]
            for t in items(f"/v2/model-route-targets?route_id={routes[0]['id']}", key)
            if t["route_id"] == routes[0]["id"]}


def recap(log: Path) -> dict:
    """{host: {ok, changed, failed, ...}} from a play log's PLAY RECAP (support.recap.parse_recap)."""
    parsed = parse_recap(log.read_text())
    assert parsed is not None, f"{log} has no PLAY RECAP: the play did not finish"
    return parsed


def rc(path: Path) -> int:
    return int(path.read_text().strip())


def load_summary(scenario_dir: Path) -> dict:
    return json.loads((scenario_dir / "load.json").read_text())


def skip_unless_all_steps(scenario_dir: Path, what: str) -> None:
    """Skip a check whose step `scripts/lab.sh test` leaves out (PAIRSERVE_LAB_DAY2_STEPS=core), saying so; the
    scenario writes which steps it ran to <dir>/steps. A missing file is a scenario that did not run: fail."""
    steps = (scenario_dir / "steps").read_text().strip()
    if steps != "all":
        pytest.skip(f"{what}: not run by this lab run (PAIRSERVE_LAB_DAY2_STEPS={steps}, the default of "
                    "`scripts/lab.sh test`; `scripts/lab.sh upgrade|swap` and `make molecule` run it)")

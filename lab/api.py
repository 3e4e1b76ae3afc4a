"""GPUStack's API on the running lab, its keys, the route and the replica containers: what the lab's scripts
(lab/sleep_wake.py, lab/queue_weights.py) and the lab's test suites (lab/scenarios/*/tests) share.

The lab shares the host's network, so GPUStack on node-a answers on 127.0.0.1:30080 (its plain port, which node-a's
table leaves to the node itself while the lab serves HTTPS on 30443 with its own CA, LAB_CA); the keys are read
from node-a the way an operator would (root-only files), with `podman exec`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
API = os.environ.get("PAIRSERVE_LAB_API", "http://127.0.0.1:30080")
NODE_A = os.environ.get("PAIRSERVE_NODE_A", "pairserve-lab-node-a")
STATE = REPO / ".lab"
# The CA lab/tls.py made for this lab (lab/inventory/group_vars/all/tls.yml), and the HTTPS front's URL.
LAB_CA = STATE / "tls" / "ca.crt"
HTTPS_API = os.environ.get("PAIRSERVE_LAB_HTTPS_API", "https://127.0.0.1:30443")
SERVING = (REPO / "lab" / "inventory" / "group_vars" / "all" / "serving.yml").read_text()
ROUTE = re.search(r"^pairserve_route_name: (\S+)", SERVING, re.M).group(1)
WEIGHTS = {host: int(w) for host, w in re.findall(r"^  (node-[ab]): (\d+)$", SERVING, re.M)}


def lab_pins() -> dict:
    """The lab's pins as the plays see them: pins.yml (read by lab/pins.py, their one reader), the runner image's
    Jinja reference to the vLLM pin rendered, and the digest the lab wrote after pushing the image to the lab
    registry (group_vars/all/runner_digest.yml, read fresh: it changes while a suite runs)."""
    # PyYAML: only the lab suites need it.
    from lab import pins as lab_pin_files  # pylint: disable=import-outside-toplevel

    pins = lab_pin_files.lab()
    digest_file = lab_pin_files.LAB_PINS.parent / "runner_digest.yml"
    if digest_file.exists():
        pins.update(lab_pin_files.read_fresh(digest_file))
    pins["pairserve_runner_image"] = lab_pin_files.resolved(pins, "pairserve_runner_image")
    digest = pins.get("pairserve_runner_image_digest")
    pins["runner_reference"] = "%s@%s" % (pins["pairserve_runner_image"], digest) if digest else \
        pins["pairserve_runner_image"]
    return pins


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
    def read(name):
        return subprocess.run(["podman", "exec", NODE_A, "cat", f"/etc/pairserve/secrets/{name}-api-key"],
                              check=True, capture_output=True, text=True).stdout.strip()
    return {name: read(name) for name in ("management", "inference")}


def route_weights(key: str, route: str = ROUTE) -> dict:
    """{model name: weight} of the route's targets."""
    routes = [r for r in items("/v2/model-routes", key) if r["name"] == route]
    assert len(routes) == 1, routes
    names = {m["id"]: m["name"] for m in items("/v2/models", key)}
    return {names.get(t["model_id"], t["model_id"]): t["weight"]
            for t in items(f"/v2/model-route-targets?route_id={routes[0]['id']}", key)
            if t["route_id"] == routes[0]["id"]}


# The engines the lab's workers start replicas through (lab/services.py): podman's service and a Docker engine on
# the host; each node's inventory says which one its worker deploys through (pairserve_runner_runtime).
ENGINES = {"podman": ["podman", "--url", "unix:///run/pairserve-lab/podman.sock"],
           "docker": ["docker", "-H", "unix:///run/pairserve-lab/docker.sock"]}
LAB_INVENTORY = REPO / "lab" / "inventory"


def runtime_of(host: str) -> str:
    """pairserve_runner_runtime of a lab node: its host_vars, else the lab's group_vars (serving.yml)."""
    import yaml  # pylint: disable=import-outside-toplevel  # PyYAML: only the lab suites need it
    for path in (LAB_INVENTORY / "host_vars" / f"{host}.yml", LAB_INVENTORY / "group_vars" / "all" / "serving.yml"):
        value = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("pairserve_runner_runtime")
        if value:
            return value
    return "docker"


def _names(listed: dict) -> list:
    names = listed.get("Names")
    return [names] if isinstance(names, str) else list(names or [])


def engine_containers(engine: str) -> list:
    """[(name, engine)] of every container of one of the lab's engines."""
    if engine == "podman":
        out = subprocess.run(ENGINES[engine] + ["ps", "-a", "--format", "json"], check=True, capture_output=True,
                             text=True).stdout
        listed = json.loads(out or "[]")
    else:
        out = subprocess.run(ENGINES[engine] + ["ps", "-a", "--format", "{{json .}}"], check=True,
                             capture_output=True, text=True).stdout
        listed = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [(name, engine) for c in listed for name in _names(c)]


def inspect(engine: str, name: str) -> dict:
    """`inspect` of a container of an engine, with the engine's name under "PairserveEngine"."""
    out = subprocess.run(ENGINES[engine] + ["inspect", name], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout)[0], PairserveEngine=engine)


def replica_container(instance_name: str, suffix: str = "-run") -> dict:
    """inspect of the container GPUStack's worker runs an instance's vLLM in ({instance}-run-0), in whichever of the
    lab's engines started it (its name under "PairserveEngine"); suffix="-pause" finds the workload's pause
    container."""
    found = [(n, e) for engine in ENGINES for n, e in engine_containers(engine)
             if n.startswith(instance_name) and suffix in n[len(instance_name):]]
    assert len(found) == 1, f"{suffix} container of {instance_name}: {found}"
    return inspect(found[0][1], found[0][0])

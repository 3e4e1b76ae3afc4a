"""What the day-2 scenarios record of the lab at a moment, for their suites: GPUStack's state by name (site) and when
each of their events happened (record_time, read_times).

    site(path)   what GPUStack holds by name (routes and their targets' weights, models, API keys, workers) and each
                 replica's instance (its id survives a restore when its worker does, and a refused drain when nothing
                 was done): what a restore must bring back and a fault must leave alone
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lab import host
from lab.api import items, read_keys


def site_shape(models: list, routes: list, targets: list, api_keys: list, workers: list, instances: list) -> dict:
    """The site snapshot from GPUStack's lists (/v2/models, /v2/model-routes, /v2/model-route-targets,
    /v2/api-keys, /v2/workers, /v2/model-instances): each route's targets by model name with their weights (a target
    of a model GPUStack no longer lists keeps its id as its name; targets of other routes, or of no model, are left
    out), the models' and keys' names sorted, the workers and instances by name."""
    names = {m["id"]: m["name"] for m in models}
    route_names = {r["id"]: r["name"] for r in routes}
    by_route: dict[str, dict] = {name: {} for name in route_names.values()}
    for target in targets:
        if target.get("route_id") in route_names and target.get("model_id") is not None:
            model = names.get(target["model_id"], str(target["model_id"]))
            by_route[route_names[target["route_id"]]][model] = target["weight"]
    return {"routes": by_route, "models": sorted(names.values()),
            "api_keys": sorted(k["name"] for k in api_keys),
            "workers": {w["name"]: {"id": w["id"], "state": w["state"]} for w in workers},
            "instances": {i["model_name"]: {"id": i["id"], "state": i["state"], "worker": i.get("worker_name")}
                          for i in instances}}


def gpustack(what: str, *paths: str) -> list[list]:
    """The items of each of GPUStack's list endpoints `paths`, read with the management key from node-a; LabError
    naming `what` when GPUStack or the key cannot be read."""
    try:
        key = read_keys()["management"]
        return [items(api_path, key) for api_path in paths]
    except (OSError, AssertionError, ValueError, KeyError, subprocess.CalledProcessError) as err:
        raise host.LabError("%s: GPUStack could not be read: %s" % (what, err)) from err


def site(path: Path) -> None:
    """The site snapshot into `path` (JSON); LabError when GPUStack or the key cannot be read."""
    listed = gpustack("site snapshot %s" % path, "/v2/models", "/v2/model-routes", "/v2/model-route-targets",
                      "/v2/api-keys", "/v2/workers", "/v2/model-instances")
    Path(path).write_text(json.dumps(site_shape(*listed), indent=1))


def site_or_say(path: Path) -> bool:
    """The site snapshot, where a missing one is left for the suite to find: a failure is said, not raised."""
    try:
        site(path)
    except host.LabError as err:
        print("lab: %s" % err, file=sys.stderr, flush=True)
        return False
    return True


def stamp(ns: int | None = None) -> str:
    """The time as `date +%s.%N` writes it: seconds since the epoch, nanoseconds after the point."""
    seconds, nanos = divmod(time.time_ns() if ns is None else ns, 1_000_000_000)
    return "%d.%09d" % (seconds, nanos)


def record_time(path: Path, name: str) -> None:
    """One event's time appended to a scenario's times file, as a `name=<seconds>` line."""
    with open(path, "a") as out:
        out.write("%s=%s\n" % (name, stamp()))


def read_times(path: Path) -> dict[str, float]:
    """{name: seconds since the epoch} of a times file (its lines without `=` skipped; a name recorded twice keeps
    its last time)."""
    found = {}
    for line in Path(path).read_text().splitlines():
        if "=" in line:
            name, value = line.strip().split("=", 1)
            found[name] = float(value)
    return found

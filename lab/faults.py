"""The faults scenario's waits on the lab's GPUStack (lab/scenarios/faults/steps.py; molecule/faults):

    python -m lab.faults wait-drained HOST [--timeout S]        until every route target of HOST's replicas in the
                                                                lab's route has weight 0 (a drain took effect)
    python -m lab.faults wait-worker NAME STATE [--timeout S]   until GPUStack lists worker NAME in STATE; for
                                                                ready, also until the worker itself answers where
                                                                the server reaches it (its /healthz): GPUStack lists
                                                                a stopped worker ready until its own check (every
                                                                15 s) finds it gone

Each polls twice a second, prints what it saw when it ends and exits 0 when the state came, 1 when the time ran out.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request

from lab.api import REPO, ROUTE, items, read_keys, route_weights

if str(REPO / ".cache" / "collections") not in sys.path:
    sys.path.insert(0, str(REPO / ".cache" / "collections"))

from ansible_collections.pairserve.llm.plugins.module_utils.reach import worker_health_url  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.pairserve.llm.plugins.module_utils.replica_names import owned_by  # noqa: E402  pylint: disable=wrong-import-position


def own(names: dict, host: str) -> dict:
    """The entries of ``names`` (keyed by replica name) that are HOST's replicas, by the collection's one rule
    (module_utils/replica_names.py; the lab's replicas carry the route's name, its pooled mode's default)."""
    return {name: value for name, value in names.items() if owned_by(name, ROUTE, host)}


def wait(what, probe, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        try:
            done, seen = probe()
        except (OSError, AssertionError, ValueError) as err:  # the server restarting, a page not there yet
            done, seen = False, f"error: {err}"
        if done:
            print(f"lab.faults: {what}: {seen}")
            return 0
        time.sleep(0.5)
    print(f"lab.faults: {what} did not come in {timeout:.0f} s; last seen: {seen}", file=sys.stderr)
    return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.faults")
    sub = parser.add_subparsers(dest="command", required=True)
    drained = sub.add_parser("wait-drained")
    drained.add_argument("host")
    drained.add_argument("--timeout", type=float, default=900)
    worker = sub.add_parser("wait-worker")
    worker.add_argument("name")
    worker.add_argument("state")
    worker.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    key = read_keys()["management"]
    if args.command == "wait-drained":
        def probe():
            mine = own(route_weights(key, ROUTE), args.host)
            return bool(mine) and not any(mine.values()), mine
        return wait(f"{args.host} drained in route {ROUTE}", probe, args.timeout)

    def probe_worker():
        workers = {w["name"]: w for w in items("/v2/workers", key)}
        seen = {name: w["state"] for name, w in workers.items()}
        if (workers.get(args.name) or {}).get("state") != args.state:
            return False, seen
        if args.state != "ready":
            return True, seen
        url = worker_health_url(workers[args.name])
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status == 200, dict(seen, healthz=f"{url}: {resp.status}")
        except (urllib.error.URLError, OSError) as err:
            return False, dict(seen, healthz=f"{url}: {err}")
    return wait(f"worker {args.name} {args.state}", probe_worker, args.timeout)


if __name__ == "__main__":
    sys.exit(main())

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster's status in one table, and what is down: the one owner of these rules (playbooks/status.yml).

Read from GPUStack's own records (pairserve.llm.gpustack_info): workers with their GPUs (``status.gpu_devices``),
models (the replicas) with their instances, routes with their targets, and the vLLM backend's versions (the image
a pinned version runs). Each GPU node adds the disk left under its checkpoint cache, the server the last verify
record (roles/verify). A replica's GPUs are its ``gpu_selector`` ids (``<worker>:<type>:<index>``) looked up by
index in that worker's record, so the table names cards by UUID, as gpu_pairs paired them.

Down, and so a problem: a worker that is not ``ready`` (or an inventory GPU node without a worker record), an
instance that is not ``running``, a replica with fewer instances than it asks for, a route target without a
running instance, and a GPU node the play did not reach. A replica put to sleep by the controller (``replicas: 0``,
target weight 0) is shown asleep and is not a problem, unless nothing of its route runs.
"""

from __future__ import annotations

import re

RUNNING = "running"
READY = "ready"
NOT_RECORDED = "not recorded"
# gpustack_backend_version's names: <upstream version>-<12 hex>-custom.
PINNED_VERSION = re.compile(r"^(?P<upstream>.+)-[0-9a-f]{12}-custom$")
GIB = 1 << 30


def _worker_devices(worker: dict, gpus: list) -> list:
    """The worker's GPUs, sorted by index: its own record, else the GPU device list of GPUStack."""
    devices = ((worker or {}).get("status") or {}).get("gpu_devices")
    if not devices:
        devices = [gpu for gpu in gpus or [] if gpu.get("worker_name") == (worker or {}).get("name")]
    devices = [dev for dev in devices if isinstance(dev, dict)]
    return sorted(devices, key=lambda dev: (dev.get("index") is None, dev.get("index")))


def _selector_ids(model: dict) -> list:
    return list(((model or {}).get("gpu_selector") or {}).get("gpu_ids") or [])


def _gpus_of(model: dict, instance: dict, devices_by_worker: dict) -> list:
    """[{id, worker, index, uuid}] the replica is pinned to (gpu_selector), else the instance holds (gpu_indexes)."""
    wanted = []
    for gpu_id in _selector_ids(model):
        parts = str(gpu_id).rsplit(":", 2)
        index = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else None
        wanted.append((gpu_id, parts[0] if len(parts) == 3 else None, index))
    if not wanted and instance:
        for index in instance.get("gpu_indexes") or []:
            wanted.append(("%s:%s" % (instance.get("worker_name"), index), instance.get("worker_name"), index))
    found = []
    for gpu_id, worker, index in wanted:
        dev = next((d for d in devices_by_worker.get(worker, []) if d.get("index") == index), None)
        found.append({"id": gpu_id, "worker": worker, "index": index, "uuid": (dev or {}).get("uuid") or None})
    return found


def _image(model: dict, backends: list) -> str:
    """The image an instance of ``model`` runs: a Custom model's own, else its backend version's image_name."""
    if model.get("image_name"):
        return model["image_name"]
    backend, version = model.get("backend"), model.get("backend_version")
    for row in backends or []:
        if row.get("backend_name") != backend:
            continue
        config = (row.get("version_configs") or {}).get(version) or {}
        if config.get("image_name"):
            return config["image_name"]
    if version and PINNED_VERSION.match(version):
        return "? (version %s is not registered in the %s backend)" % (version, backend)
    return "GPUStack's %s %s image" % (backend or "?", version or "default")


def _size(value) -> str:
    return "%.1f GiB" % (float(value) / GIB)


def parse_df(stdout: str) -> dict:
    """``df -B1 --output=size,avail,target <path>``: {size, avail, mount}; ValueError on another shape."""
    lines = [line for line in (stdout or "").splitlines() if line.strip()]
    if len(lines) < 2:
        raise ValueError("df printed no figures: %r" % (stdout,))
    fields = lines[-1].split(None, 2)
    if len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
        raise ValueError("df printed %r, not <size> <available> <mount>" % (lines[-1],))
    return {"size": int(fields[0]), "avail": int(fields[1]), "mount": fields[2]}


def _disk_rows(nodes: list, expected: list) -> list:
    rows = []
    seen = set()
    for node in nodes or []:
        host = node.get("host")
        seen.add(host)
        row = {"host": host, "path": node.get("path"), "size": None, "avail": None, "mount": None, "error": None}
        if node.get("rc") not in (0, None) or node.get("stdout") is None:
            row["error"] = "; ".join(line.strip() for line in (node.get("stderr") or "").splitlines()
                                     if line.strip()) or "df failed (rc %s)" % node.get("rc")
        else:
            try:
                row.update(parse_df(node["stdout"]))
            except ValueError as err:
                row["error"] = str(err)
        rows.append(row)
    for host in expected or []:
        if host not in seen:
            rows.append({"host": host, "path": None, "size": None, "avail": None, "mount": None,
                         "error": "not read (the host was not reached)"})
    return sorted(rows, key=lambda row: str(row["host"]))


def _topology_rows(nodes: list) -> list:
    """Each GPU node's pairs as gpu_pairs read them for this status (``gpu``: {pairs} or {error}): where the cards
    hang (NUMA nodes, whether the pair spans CPU sockets) and the warning gpu_pairs gives for such a pair. Nodes
    that carry no ``gpu`` report are left out (the table then has no topology section)."""
    rows = []
    for node in sorted(nodes or [], key=lambda n: str(n.get("host"))):
        report = node.get("gpu")
        if not isinstance(report, dict):
            continue
        if report.get("error"):
            rows.append({"host": node.get("host"), "pair": None, "numa_nodes": [], "spans_sockets": None,
                         "link": None, "warning": None, "error": report["error"]})
            continue
        for pair in report.get("pairs") or []:
            rows.append({"host": node.get("host"), "pair": pair.get("index"), "numa_nodes": pair.get("numa_nodes") or [],
                         "spans_sockets": pair.get("spans_sockets"), "link": pair.get("link"),
                         "warning": pair.get("topology_warning"), "error": None})
    return rows


def _verify_line(record) -> str:
    if not isinstance(record, dict) or not record.get("result"):
        return NOT_RECORDED
    routes = "; ".join("%s (%s)" % (route.get("name"), ", ".join(route.get("models") or []) or "no replica listed")
                       for route in record.get("routes") or []) or "no route"
    if record["result"] == "passed":
        return "passed at %s: %s" % (record.get("finished_at") or record.get("started_at") or "?", routes)
    return ("%s at %s and never passed (it failed or was stopped; that run's output says why): %s"
            % (record["result"], record.get("started_at") or "?", routes))


def _table(header: list, rows: list) -> list:
    """Left-aligned columns, two spaces apart, trailing spaces cut."""
    cells = [[str(c) if c is not None else "" for c in row] for row in [header] + rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]


def _unreachable(worker_name, reach: dict):
    """The probe of a worker that did not answer (reach: {worker name: {url, ok, error}}), else None."""
    got = (reach or {}).get(worker_name)
    return got if got and not got.get("ok") else None


def _workers(workers: list, devices_by_worker: dict, expected_nodes: dict, problems: list, reach=None) -> list:
    rows = []
    for worker in workers:
        devices = devices_by_worker[worker.get("name")]
        down = _unreachable(worker.get("name"), reach)
        rows.append({
            "name": worker.get("name"),
            "state": ("unreachable (GPUStack: %s)" % worker.get("state")) if down else worker.get("state"),
            "state_message": worker.get("state_message"),
            "gpu_count": len(devices),
            "gpus": [{"index": d.get("index"), "uuid": d.get("uuid"), "name": d.get("name")} for d in devices]})
        if down:
            # Node first: GPUStack reaches the node's replicas only through this worker, and calls it ready until
            # its own check of the workers (every 15 s in 2.2.3) or the heartbeat finds it gone.
            problems.append("[%s] the worker at %s does not answer (%s): GPUStack reaches its replicas only through "
                            "it%s" % (worker.get("name"), down["url"].rsplit("/", 1)[0], down.get("error") or "no answer",
                                      _gpustack_says(worker.get("state"))))
        elif worker.get("state") != READY:
            problems.append("worker %s is %s%s" % (worker.get("name"), worker.get("state") or "in no state",
                                                   _reason(worker)))
    for host, worker_name in sorted(expected_nodes.items()):
        worker_name = worker_name or host  # the worker role's default name
        if worker_name not in devices_by_worker:
            problems.append("worker %s (GPU node %s) is not registered in GPUStack" % (worker_name, host))
    return rows


def _gpustack_says(state) -> str:
    """What GPUStack's own record says beside a probe that found the worker silent: "still" while it calls it ready
    (until its syncer or the heartbeat catches up), plainly once it has marked it too."""
    if not state:
        return ""
    return "; GPUStack still says %s" % state if state == READY else "; GPUStack says %s too" % state


def _reason(record: dict) -> str:
    return ": %s" % record["state_message"] if record.get("state_message") else ""


def _instances_of(model: dict, instances: list) -> list:
    mine = [i for i in instances if i.get("model_id") == model.get("id")
            or (i.get("model_id") is None and i.get("model_name") == model.get("name"))]
    return sorted(mine, key=lambda i: str(i.get("name")))


def _replicas(models: list, instances: list, backends: list, devices_by_worker: dict, problems: list,
              reach=None) -> list:
    rows = []
    for model in models:
        name, wanted = model.get("name"), model.get("replicas")
        mine = _instances_of(model, instances)
        common = {"model": name, "image": _image(model, backends), "backend_version": model.get("backend_version")}
        for inst in mine:
            down = _unreachable(inst.get("worker_name"), reach)
            rows.append(dict(common, instance=inst.get("name"),
                             state=("unreachable (GPUStack: %s)" % inst.get("state")) if down else inst.get("state"),
                             state_message=inst.get("state_message"), node=inst.get("worker_name"),
                             gpus=_gpus_of(model, inst, devices_by_worker), restarts=inst.get("restart_count")))
            if down:
                problems.append("replica %s: instance %s cannot serve: the worker of %s does not answer" % (
                    name, inst.get("name"), inst.get("worker_name")))
            elif inst.get("state") != RUNNING:
                restarts = " after %s restart(s)" % inst["restart_count"] if inst.get("restart_count") else ""
                problems.append("replica %s: instance %s is %s on %s%s%s" % (
                    name, inst.get("name"), inst.get("state") or "in no state", inst.get("worker_name") or "no worker",
                    restarts, _reason(inst)))
        if not mine:
            asleep = wanted == 0
            rows.append(dict(common, instance=None, state="asleep (replicas 0)" if asleep else "no instance",
                             state_message=None, node=None, gpus=_gpus_of(model, None, devices_by_worker),
                             restarts=None))
            if not asleep:
                problems.append("replica %s has no instance (it asks for %s)" % (name, wanted))
        elif isinstance(wanted, int) and len(mine) < wanted:
            problems.append("replica %s has %d instance(s) of the %d it asks for" % (name, len(mine), wanted))
    return rows


def _routes(routes: list, models: list, instances: list, problems: list, reach=None) -> list:
    models_by_id = dict((m.get("id"), m) for m in models)
    rows = []
    for route in sorted(routes, key=lambda r: str(r.get("name"))):
        live = 0
        for target in sorted(route.get("route_targets") or [], key=lambda t: str(t.get("id"))):
            weight = target.get("weight") or 0
            row = {"route": route.get("name"), "target": None, "weight": weight, "running": None,
                   "fallback": target.get("fallback_status_codes") or None}
            rows.append(row)
            if target.get("model_id") is None:
                row["target"] = "provider %s" % target.get("provider_id")
                live += 1  # an external provider: nothing of this cluster to check
                continue
            model = models_by_id.get(target["model_id"])
            if model is None:
                row["target"] = "model id %s" % target["model_id"]
                problems.append("route %s: target %s names model id %s, which GPUStack does not have"
                                % (route.get("name"), target.get("id"), target["model_id"]))
                continue
            row["target"] = model.get("name")
            # An instance whose worker does not answer does not serve, whatever GPUStack's record says.
            row["running"] = sum(1 for i in _instances_of(model, instances)
                                 if i.get("state") == RUNNING and not _unreachable(i.get("worker_name"), reach))
            if row["running"]:
                live += 1
            elif not (weight == 0 and model.get("replicas") == 0):
                problems.append("route %s: target %s (weight %s) has no running instance"
                                % (route.get("name"), model.get("name"), weight))
        if not live:
            problems.append("route %s has no running target: every request to it fails" % route.get("name"))
    return rows


def _lines(result: dict) -> list:
    """The printed table: one titled section per part, continuation rows for a second GPU."""
    lines = ["Workers"]
    rows = []
    for worker in result["workers"]:
        gpu_cells = [[g["index"], g["uuid"] or "(no UUID)", g["name"]] for g in worker["gpus"]] or [["", "no GPU", ""]]
        rows.append([worker["name"], worker["state"], worker["gpu_count"]] + gpu_cells[0])
        rows.extend([["", "", ""] + cells for cells in gpu_cells[1:]])
    lines += _table(["worker", "state", "GPUs", "index", "UUID", "name"], rows) if rows else ["  none registered"]

    lines.append("Replicas")
    rows = []
    for rep in result["replicas"]:
        uuids = [g["uuid"] or "%s (not on the worker)" % g["id"] for g in rep["gpus"]] or ["no GPU pinned"]
        rows.append([rep["model"], rep["instance"] or "-", rep["state"], rep["node"] or "-", uuids[0],
                     "-" if rep["restarts"] is None else rep["restarts"], rep["backend_version"] or "-", rep["image"]])
        rows.extend([["", "", "", "", uuid, "", "", ""] for uuid in uuids[1:]])
    lines += (_table(["replica", "instance", "state", "node", "GPU (UUID)", "restarts", "vLLM backend version",
                      "image"], rows) if rows else ["  none registered"])

    lines.append("Routes")
    rows = [[r["route"], r["target"], r["weight"], "-" if r["running"] is None else r["running"],
             ",".join(r["fallback"]) if r["fallback"] else "-"] for r in result["routes"]]
    lines += _table(["route", "target", "weight", "running instances", "fallback on"], rows) if rows else ["  none"]

    lines += ["Last verify", "  " + result["verify"]["text"]]

    lines.append("Checkpoint cache disk")
    rows = [[d["host"], d["path"] or "-", d["error"] if d["error"] else _size(d["avail"]),
             "" if d["error"] else _size(d["size"]), "" if d["error"] else d["mount"]] for d in result["disks"]]
    lines += _table(["node", "cache", "free", "size", "mount"], rows) if rows else ["  no GPU node"]

    if result["topology"]:
        lines.append("GPU pair topology")
        spans = {True: "yes", False: "no"}
        rows = [[t["host"], "-" if t["pair"] is None else t["pair"],
                 ", ".join("unknown" if n is None else str(n) for n in t["numa_nodes"]) or "-",
                 spans.get(t["spans_sockets"], "unknown"), t["link"] or "-"] if not t["error"]
                else [t["host"], "-", "not read: %s" % t["error"], "", ""] for t in result["topology"]]
        lines += _table(["node", "pair", "NUMA nodes", "spans sockets", "link"], rows)
        lines += ["  warning: %s: %s" % (t["host"], t["warning"]) for t in result["topology"] if t["warning"]]

    lines.append("Problems")
    lines += ["  " + p for p in result["problems"]] or [
        "  none: every worker is ready, every instance runs, every route target has a running instance"]
    return lines


def cluster_status(info: dict, nodes=None, verify=None, expected_nodes=None, reach=None) -> dict:
    """The cluster's status from GPUStack's records (``info``: gpustack_info's result with workers, gpus, models,
    model_instances, routes and inference_backends), the GPU nodes' disk reports (``nodes``: [{host, path, rc,
    stdout, stderr}] of ``df -B1 --output=size,avail,target``) and the last verify record (``verify``, or None).
    ``expected_nodes``: {inventory host: worker name, empty for the host's name} of the GPU nodes, each of which
    must have a ready worker. ``reach``: {worker name: {url, ok, error}}, each worker's ``/healthz`` asked from the
    server (module_utils/reach.py): a worker that did not answer leads the problems, and its instances do not count as
    running, whatever GPUStack's records say (they call a dead worker ready until its server's check of the workers,
    every 15 s in 2.2.3, or the heartbeat finds it gone).

    A node's report may carry ``gpu`` (its pairs as gpu_pairs read them, or {error}): the table then shows each pair's
    NUMA nodes and whether it spans CPU sockets, with gpu_pairs' warning (a warning, never a problem).

    Returns {workers, replicas, routes, verify, disks, topology, problems, lines, text}: the rows of each table, the problems
    (one line each, naming what is down) and the printed table, as lines and as one text.
    """
    info = info or {}
    expected_nodes = expected_nodes or {}
    workers = sorted(info.get("workers") or [], key=lambda w: str(w.get("name")))
    models = sorted(info.get("models") or [], key=lambda m: str(m.get("name")))
    instances = info.get("model_instances") or []
    devices_by_worker = dict((w.get("name"), _worker_devices(w, info.get("gpus") or [])) for w in workers)
    problems = []
    result = {
        "workers": _workers(workers, devices_by_worker, expected_nodes, problems, reach),
        "replicas": _replicas(models, instances, info.get("inference_backends") or [], devices_by_worker, problems,
                              reach),
        "routes": _routes(info.get("routes") or [], models, instances, problems, reach),
        "verify": {"record": verify if isinstance(verify, dict) else None, "text": _verify_line(verify)},
        "disks": _disk_rows(nodes, sorted(expected_nodes)),
        # warnings, not problems: a pair across sockets serves, slower (gpu_pairs' topology warning)
        "topology": _topology_rows(nodes),
        "problems": problems,
    }
    # Ansible exits non-zero for an unreached host anyway: say which, where the rest is listed.
    problems.extend("GPU node %s was not reached, so its disk was not read" % d["host"]
                    for d in result["disks"] if d["path"] is None)
    result["lines"] = _lines(result)
    result["text"] = "\n".join(result["lines"])
    return result

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a node rebuild must do: the cards detected now against the record on the node, against GPUStack's view
of the worker, and the replicas' registration against what the new pairs render.

Used by the filter pairserve.llm.rebuild_compare (the maintenance role's rebuild entry point). Pure functions
over plain values, so the rules are unit-tested without GPUStack.
"""

from __future__ import annotations

GPU_KEYS = ("index", "uuid", "name", "memory_total_mib", "compute_capability")
PAIR_KEYS = ("index", "uuids", "name", "memory_total_mib", "compute_capability", "gpustack_gpu_indexes")
MIB = 1048576


def _subset(item, keys):
    return {key: item[key] for key in keys if key in item}


def detected(gpu_fact):
    """The part of the pairserve_gpu fact the node's record keeps (gpus and pairs, in gpu_pairs' order)."""
    return {"gpus": [_subset(g, GPU_KEYS) for g in gpu_fact.get("gpus") or []],
            "pairs": [_subset(p, PAIR_KEYS) for p in gpu_fact.get("pairs") or []]}


def detected_rows(gpu_fact):
    """[index, name, MiB] per detected GPU by index: what both gpu_pairs and GPUStack know of a card."""
    return [[g["index"], g["name"], int(g["memory_total_mib"])]
            for g in sorted(gpu_fact.get("gpus") or [], key=lambda g: g["index"])]


def gpustack_rows(gpus):
    """[index, name, MiB] per GPU device GPUStack shows for a worker (memory.total in bytes), by index."""
    rows = []
    for gpu in sorted(gpus or [], key=lambda g: g["index"]):
        total = (gpu.get("memory") or {}).get("total") or 0
        rows.append([gpu["index"], gpu["name"], int(int(total) // MIB)])
    return rows


def _registered(models):
    return {m["name"]: [(m.get("gpu_selector") or {}).get("gpu_ids") or [], m.get("backend_parameters"),
                        m.get("local_path")] for m in models}


def _wanted(specs, model_path):
    return {s["name"]: [s["gpu_ids"], s["argv"], model_path] for s in specs}


def compare(recorded, gpu_fact, view, owned_worker_ids, specs, model_path):
    """The rebuild's decision.

    recorded: the node's pairs record (None when it has none); gpu_fact: pairserve_gpu; view: the maintenance
    role's view of this node (workers, gpus, models); owned_worker_ids: ids of the worker records this install
    owns (GPUStack's list filtered by the node's worker_uuid); specs: the replica role's pairserve_replica_specs;
    model_path: the checkpoint path the replicas load.
    """
    now = detected(gpu_fact)
    cards_changed = recorded is not None and (
        (recorded.get("gpus") or []) != now["gpus"] or (recorded.get("pairs") or []) != now["pairs"])
    gpustack = gpustack_rows(view.get("gpus"))
    rows = detected_rows(gpu_fact)
    owned = set(owned_worker_ids or [])
    stale_workers = [w for w in view.get("workers") or [] if w.get("id") not in owned]
    models = view.get("models") or []
    replicas_differ = (sorted(s["name"] for s in specs) != sorted(m["name"] for m in models)
                       or _registered(models) != _wanted(specs, model_path))
    gpustack_stale = gpustack != rows
    return {
        "recorded": recorded,
        "cards_changed": cards_changed,
        "gpustack_stale": gpustack_stale,
        "gpustack_gpus": gpustack,
        "detected_gpus": rows,
        "stale_workers": stale_workers,
        "replicas_differ": replicas_differ,
        "pairs": now["pairs"],
        "work": bool(cards_changed or gpustack_stale or stale_workers or replicas_differ),
    }

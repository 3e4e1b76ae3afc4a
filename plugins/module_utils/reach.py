# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a replica is reached, by GPUStack 2.2.3's own rule: the one owner of these addresses in the collection.

GPUStack's server sends every request of a route through the worker of the replica's node (worker-proxy mode), and
checks that worker with ``GET /healthz`` at ``<advertise_address or ip>:<port>`` (``gpustack/server/
worker_request.py``); the worker reaches the replica at ``<worker_ip>:<instance port>``, whose vLLM answers
``GET /health``. Verify (before its requests, and in its diagnosis), the drain's check of the other targets and the
status play ask these URLs; ``answers`` reads what came back.
"""

from __future__ import annotations


def worker_health_url(worker):
    """The worker's ``/healthz`` URL from its GPUStack record (id, ip, advertise_address, port); None when the record
    does not tell it."""
    worker = worker or {}
    host = worker.get("advertise_address") or worker.get("ip")
    return "http://%s:%s/healthz" % (host, worker["port"]) if host and worker.get("port") else None


def replica_health_url(instance):
    """The replica's ``/health`` URL from its instance record (worker_ip, port); None when the record does not tell
    it."""
    instance = instance or {}
    if instance.get("worker_ip") and instance.get("port"):
        return "http://%s:%s/health" % (instance["worker_ip"], instance["port"])
    return None


def worker_of(instance, workers):
    """The worker record an instance runs on (by worker_id), or {}."""
    return next((w for w in workers or [] if w.get("id") == (instance or {}).get("worker_id")), None) or {}


def answers(probes):
    """{url: (HTTP status or None, error text or None)} from the results of ``ansible.builtin.uri`` over such URLs
    (each with ``item``, the URL or a dict with ``url``, else ``url``; ``status``, -1 when nothing answered; ``msg``);
    a skipped or non-dict result is left out. The error text is uri's message for any answer but 200."""
    out = {}
    for probe in probes or []:
        if not isinstance(probe, dict) or probe.get("skipped"):
            continue
        status, item = probe.get("status"), probe.get("item")
        asked = item.get("url") if isinstance(item, dict) else item
        out[asked or probe.get("url")] = (status if status not in (-1, None) else None,
                                          probe.get("msg") if status != 200 else None)
    return out

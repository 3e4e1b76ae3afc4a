# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a replica is reached, by GPUStack 2.2.3's own rule: the one owner of these addresses in the collection.

GPUStack's server sends every request of a route through the worker of the replica's node (worker-proxy mode), and
checks that worker with ``GET /healthz`` at ``<advertise_address or ip>:<port>`` (``gpustack/server/
worker_request.py``); the worker reaches the replica at ``<worker_ip>:<instance port>``, whose vLLM answers
``GET /health``. Verify's diagnosis, the drain's check of the other targets and the status play ask these URLs.
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

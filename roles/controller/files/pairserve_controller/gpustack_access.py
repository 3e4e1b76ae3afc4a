# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The few GPUStack calls the controller makes, through the collection's own client.

``GpuStackClient`` (``module_utils/gpustack.py``) is the one the modules use: the same authentication, pagination,
error messages, and retries with backoff on connection errors and 5xx answers for GET and PUT. Route weights go
through ``reweighed_route_targets`` (``routes.reweigh``), as ``gpustack_route``'s drain and restore do: a replica
set to 0 in a route without a fallback of its own is parked as the route's weight-0 fallback (GPUStack 2.3.0
refuses a route mixing positive and 0 weights; 2.2.3 and 2.3.0 both accept that form), and leaves it when its
weight comes back.
"""

from __future__ import annotations

import time

from ansible_collections.pairserve.llm.plugins.module_utils.gpustack import (
    GpuStackClient,
    GpuStackError,
    path_id,
    reweighed_route_targets,
)

# Read-only fields of a model, left out of the body that PUTs it back.
_MODEL_READ_ONLY = ("id", "created_at", "updated_at", "deleted_at", "has_stale_lora_instances")

__all__ = ["GpuStack", "GpuStackError", "running_instance", "metrics_url_of"]


class GpuStack:
    """GPUStack as the controller sees it: models, one route, its targets, a model's replica count."""

    def __init__(self, url, api_key=None, timeout=10.0, retries=3, backoff=1.0, sleep=time.sleep, ca_path=None):
        self.client = GpuStackClient(url, api_key=api_key, timeout=timeout, retries=retries, backoff=backoff,
                                     sleep=sleep, ca_path=ca_path)

    def models_by_name(self):
        return dict((m["name"], m) for m in self.client.list("/v2/models") if not m.get("deleted_at"))

    def route(self, name):
        route = self.client.find("/v2/model-routes", name)
        if route is None:
            raise GpuStackError("route %r does not exist in GPUStack: create it (pairserve.llm.gpustack_route) first"
                                % name)
        return route

    def route_targets(self, route_id):
        return [t for t in self.client.list("/v2/model-route-targets", {"route_id": route_id})
                if t.get("route_id") == route_id and not t.get("deleted_at")]

    def set_route_weights(self, route, targets, weights, names_by_id):
        """PUT the route with ``weights`` ({model name: int}) on its current ``targets``: the collection's
        ``reweighed_route_targets``, which keeps every target id and applies the drain rule."""
        body = reweighed_route_targets(targets, names_by_id, weights)
        return self.client.put(path_id("/v2/model-routes", route["id"]), {"name": route["name"], "targets": body})

    def set_replicas(self, model_id, replicas):
        """Read the model and PUT it back with another replica count.

        A GPUStack model PUT validates the whole spec and resets omitted fields to their defaults
        (``distributed_inference_across_workers`` becomes true), so the body is the model as it is. It also
        sets a vLLM-backend model's ``image_name`` to null: the replicas' runner image therefore lives in their
        backend version (pairserve.llm.gpustack_backend_version), which this PUT leaves alone.
        """
        model = self.client.get(path_id("/v2/models", model_id))
        body = dict((k, v) for k, v in model.items() if k not in _MODEL_READ_ONLY)
        body["replicas"] = int(replicas)
        return self.client.put(path_id("/v2/models", model_id), body)

    def instances(self, model_id):
        return [i for i in self.client.list("/v2/model-instances", {"model_id": model_id})
                if i.get("model_id") == model_id]


def running_instance(instances):
    for inst in instances:
        if inst.get("state") == "running":
            return inst
    return None


def metrics_url_of(instance):
    """http://<worker_ip>:<port>/metrics of a running instance (the vLLM server GPUStack started)."""
    port = instance.get("port") or (instance.get("ports") or [None])[0]
    if not instance.get("worker_ip") or not port:
        return None
    return "http://%s:%s/metrics" % (instance["worker_ip"], port)

# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's own ``/metrics``: its decisions, as prometheus_client metrics in a registry of its own.

docs/controller.md lists every series with what it means. ``_created`` series are off: a scrape shows what the
controller decided, not when each series was first touched.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

try:  # prometheus_client 0.18 and later
    from prometheus_client import disable_created_metrics
except ImportError:  # pragma: no cover - older releases have no _created switch
    disable_created_metrics = None

if disable_created_metrics is not None:
    disable_created_metrics()

# name (without a counter's _total): (kind, help, label names)
SERIES = {
    "pairserve_controller_info": (Gauge, "The controller's route and mode (always 1).",
                                  ("route", "mode", "sleep", "dry_run")),
    "pairserve_controller_ticks": (Counter, "Observations that completed (metrics read, decision made).", ()),
    "pairserve_controller_tick_errors": (Counter, "Observations that failed (GPUStack or a replica unreachable).", ()),
    "pairserve_controller_last_tick_timestamp_seconds": (Gauge, "Unix time of the last completed observation.", ()),
    "pairserve_controller_route_weight": (Gauge, "The weight the controller last set or found on each route target.",
                                          ("route", "model")),
    "pairserve_controller_weight_updates": (Counter, "Route weight changes the controller made.", ("route",)),
    "pairserve_controller_replica_ready": (Gauge, "1 when the replica runs and its metrics answered.", ("model",)),
    "pairserve_controller_replica_requests_waiting": (Gauge, "Requests waiting on the replica (vLLM).", ("model",)),
    "pairserve_controller_replica_requests_running": (Gauge, "Requests running on the replica (vLLM).", ("model",)),
    "pairserve_controller_replica_asleep": (Gauge, "1 while the sleep replica is scaled to zero.", ("model",)),
    "pairserve_controller_replica_scalings": (Counter, "Replica count changes (to=0 sleep, to=1 wake).",
                                              ("model", "to")),
    "pairserve_controller_wakes": (Counter, "Cold starts of the sleep replica that completed.", ("model",)),
    "pairserve_controller_last_wake_seconds": (Gauge, "Seconds the last cold start took, wake to running.",
                                               ("model",)),
}


class Exposition:
    """The controller's series in a registry of its own (one per controller, so tests can run several)."""

    def __init__(self):
        self.registry = CollectorRegistry(auto_describe=True)
        self._metrics = dict((name, kind(name, text, labels, registry=self.registry))
                             for name, (kind, text, labels) in SERIES.items())

    def _series(self, name, labels):
        metric = self._metrics[name[:-len("_total")] if name.endswith("_total") else name]
        return metric.labels(**labels) if labels else metric

    def set(self, name, value, **labels):
        self._series(name, labels).set(float(value))

    def inc(self, name, by=1, **labels):
        self._series(name, labels).inc(by)

    def value(self, name, **labels):
        """The value of one sample, by its exposed name (a counter's with ``_total``); None when not exposed."""
        return self.registry.get_sample_value(name, labels)


def serve_metrics(exposition, address, port):
    """Serve ``exposition`` on http://address:port/metrics from a daemon thread; returns the server (shutdown())."""
    server, _thread = start_http_server(int(port), addr=address, registry=exposition.registry)
    return server

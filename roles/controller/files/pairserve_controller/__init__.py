# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pairserve controller: route weights from queued work, and sleep/wake of one replica.

Runs on the GPUStack server node as a systemd service, from a venv of its own that the controller role builds
(prometheus_client, and ansible-core for the collection's GPUStack client), beside a copy of the collection's
``module_utils`` it uses. Two jobs:

1. Queue-aware weights: every ``interval`` seconds it reads each replica's vLLM ``/metrics``, estimates the
   work queued on it in seconds (queued prompt tokens / prefill tok/s + outstanding output tokens / decode
   tok/s) and sets the GPUStack route weights so that new requests go where they finish first.
2. Sleep/wake: it scales one chosen replica to zero after ``idle_minutes`` without work and scales it back
   when another replica's queue passes a threshold; while that replica is cold its route weight is 0.

Modules: ``policy`` (the decisions, pure functions), ``vllm_metrics`` (a replica's /metrics), ``gpustack_access``
(GPUStack through the collection's client), ``config`` (the configuration file), ``exposition`` (its own
/metrics), ``service`` (the tick that ties them), ``cli`` (the command line).
"""

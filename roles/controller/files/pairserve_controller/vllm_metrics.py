# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A replica's vLLM ``/metrics``: read over HTTP (with retries) and parsed by prometheus_client's own parser.

vLLM 0.25.1 and 0.27.1 (``vllm/v1/metrics/loggers.py``) expose the gauges ``vllm:num_requests_waiting`` and
``vllm:num_requests_running``, the counters ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``
(tokens processed) and the histograms ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens`` (per
finished request). No metric counts the prompt tokens of *waiting* requests, so the controller estimates them as
``waiting x mean prompt tokens`` of recently finished requests (``policy.load_from_snapshot``).
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from pairserve_controller.policy import MetricsSnapshot


class MetricsError(Exception):
    """A replica's /metrics could not be read or is not vLLM's."""


def parse_prometheus(text):
    """Samples of a Prometheus text exposition: ``{sample name: [(labels dict, float value), ...]}``.

    The parsing is prometheus_client's. A malformed exposition raises ValueError naming what was wrong (a truncated
    or non-Prometheus answer must not read as an empty queue)."""
    samples = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except (ValueError, IndexError, TypeError) as err:
        raise ValueError("not a Prometheus text exposition: %s" % (err or type(err).__name__)) from None
    return samples


def _total(samples, name, model_name):
    values = [v for labels, v in samples.get(name, ())
              if (model_name is None or labels.get("model_name") in (None, model_name)) and not math.isnan(v)]
    return sum(values), bool(values)


def metrics_snapshot(samples, model_name=None):
    """A MetricsSnapshot from parse_prometheus() output.

    ``model_name`` keeps only samples whose ``model_name`` label matches (vLLM labels every sample with its
    served model name). ValueError when neither queue gauge is present: the URL is not a vLLM server.
    """
    waiting, has_waiting = _total(samples, "vllm:num_requests_waiting", model_name)
    running, has_running = _total(samples, "vllm:num_requests_running", model_name)
    if not (has_waiting or has_running):
        raise ValueError("no vllm:num_requests_waiting / vllm:num_requests_running in the metrics%s: is this "
                         "a vLLM /metrics endpoint?" % (" for model %r" % model_name if model_name else ""))
    kv_values = [v for labels, v in samples.get("vllm:kv_cache_usage_perc", ())
                 if model_name is None or labels.get("model_name") in (None, model_name)]
    # vllm:engine_sleep_state{sleep_state="awake"} is 0 while vLLM sleep mode holds the engine.
    awake = [v for labels, v in samples.get("vllm:engine_sleep_state", ()) if labels.get("sleep_state") == "awake"]
    return MetricsSnapshot(
        waiting=waiting,
        running=running,
        prompt_tokens_total=_total(samples, "vllm:prompt_tokens_total", model_name)[0],
        generation_tokens_total=_total(samples, "vllm:generation_tokens_total", model_name)[0],
        prompt_hist_sum=_total(samples, "vllm:request_prompt_tokens_sum", model_name)[0],
        prompt_hist_count=_total(samples, "vllm:request_prompt_tokens_count", model_name)[0],
        generation_hist_sum=_total(samples, "vllm:request_generation_tokens_sum", model_name)[0],
        generation_hist_count=_total(samples, "vllm:request_generation_tokens_count", model_name)[0],
        kv_cache_usage=max(kv_values) if kv_values else None,
        asleep=bool(awake) and max(awake) == 0,
    )


def fetch_text(url, timeout=10.0, retries=2, backoff=0.5, sleep=time.sleep):
    """The body of GET ``url``; retried (``backoff * 2**attempt`` s) on a connection failure or a 5xx, since a
    replica busy with a burst can miss one scrape. MetricsError naming the URL when every attempt failed."""
    attempt = 0
    while True:
        try:
            request = urllib.request.Request(url, headers={"Accept": "text/plain"})
            with urllib.request.urlopen(request, timeout=timeout) as resp:  # nosec: URLs come from GPUStack/config
                return resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            if err.code < 500 or attempt >= retries:
                raise MetricsError("GET %s: HTTP %s" % (url, err.code)) from None
        except (urllib.error.URLError, OSError) as err:
            if attempt >= retries:
                raise MetricsError("GET %s failed after %d attempt(s): %s"
                                   % (url, attempt + 1, getattr(err, "reason", err))) from None
        sleep(backoff * (2 ** attempt))
        attempt += 1


def read_snapshot(url, model_name=None, timeout=10.0, retries=2, sleep=time.sleep):
    """The MetricsSnapshot of the vLLM server at ``url``; MetricsError when it cannot be read or is not vLLM's."""
    text = fetch_text(url, timeout=timeout, retries=retries, sleep=sleep)
    try:
        return metrics_snapshot(parse_prometheus(text), model_name)
    except ValueError as err:
        raise MetricsError("%s: %s" % (url, err)) from None

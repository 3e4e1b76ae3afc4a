# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: what a failed request to an OpenAI-compatible endpoint means, and whether waiting helps.

The seed lost time because a permanent HTTP 400 (the tokenizer's ``truncation.max_length: 2048``
clipping image requests) came back through GPUStack as a 503 and looked like load. So every failure
here is classified from the status *and* the body: a vLLM 400 message inside a 503 is still a 400.
A response is anything with ``status``, ``error``, ``url``, ``text`` and ``error_message()``
(``_openai_client.Response``).
"""

from __future__ import annotations

import re


# Failure classes. PERMANENT ones will not go away by waiting: a person has to change something.
PERMANENT = ("context_limit", "tokenizer_truncation", "tools_disabled", "bad_request", "auth",
             "server_error", "wrong_answer", "config", "tls")
TRANSIENT = ("not_ready", "unavailable", "unreachable", "timeout")

TOKENIZER_FIX = ("tokenizer.json truncation max_length 2048, run tokenizer_patch: the checkpoint's tokenizer.json "
                 "(and tokenizer_config.json) keep truncation max_length 2048 from the 4-bit calibration; the "
                 "multimodal processor honours it once image placeholders expand. Run pairserve.llm.tokenizer_patch "
                 "on the checkpoint (the checkpoint role does) and restart the replica so the processor is rebuilt")


def backend_status(resp):
    """The replica's own HTTP status. GPUStack 2.2.3's server answers a worker's 4xx through a route as a
    503 whose message reads 'Worker request failed: 1 POST <url> status=400, error=...'; this returns the
    400 in that case, the response's status otherwise."""
    if resp.status in (502, 503):
        match = re.search(r"worker request failed:.*?status=(\d{3})", resp.error_message(), re.I | re.S)
        if match:
            return int(match.group(1))
    return resp.status


def classify(resp, check=None):
    """(class, explanation) for a failed response. The body decides before the status does."""
    message = resp.error_message()
    low = message.lower()
    if resp.status is None:
        if (resp.error or "").startswith("tls:"):
            return "tls", "%s. Permanent: waiting will not help." % resp.error[len("tls:"):].strip()
        if (resp.error or "").startswith("timeout"):
            return "timeout", ("no answer within the request timeout (%s). A cold replica or a very long prompt can "
                               "take minutes; if it persists the backend is hung: read the instance log." % resp.error)
        return "unreachable", ("nothing answered at %s (%s): the GPUStack server or the replica is down or the address "
                               "is wrong. Check that the service is running and the URL/port." % (resp.url, resp.error))
    # A vLLM 400 can come back wrapped in a 503 by the proxy in front of it: read the message first.
    if "maximum context length" in low or "maximum model length" in low or "max_model_len" in low:
        return "context_limit", ("permanent 400, context limit: %s. Not load: shorten the request or raise the "
                                 "profile's max_model_len (if the KV cache allows it)." % message[:400])
    if "max_length" in low or "truncat" in low:
        return "tokenizer_truncation", "permanent 400: %s. %s." % (message[:400], TOKENIZER_FIX)
    if "tool choice requires" in low or "enable-auto-tool-choice" in low:
        return "tools_disabled", ("permanent 400, tool calls rejected: %s. The replica runs without "
                                  "--enable-auto-tool-choice/--tool-call-parser: render the profile's arguments "
                                  "(tool_call_parser qwen3_coder) and roll the replica." % message[:400])
    if resp.status in (401, 403):
        return "auth", ("HTTP %d, the API key was refused (%s): give an inference API key of this GPUStack "
                        "(Authorization: Bearer ...)." % (resp.status, message[:200]))
    if resp.status == 400 or '"code": 400' in resp.text or "badrequesterror" in low:
        return "bad_request", ("permanent 400, bad arguments: %s. Waiting will not help; fix the request or the "
                               "replica's arguments." % message[:400])
    if resp.status == 404:
        return "not_ready", ("404: nothing serves model %r here: no instance behind the route is ready, or the route "
                             "name is wrong (%s). Transient during a cold start (8-12 min on the seed's cards); "
                             "otherwise check the route and instance states." % (check or "?", message[:200]))
    if resp.status in (502, 503, 504):
        return "unavailable", ("HTTP %d: a target has no running instance or its backend is unreachable (%s). "
                               "Transient while a replica starts or restarts; if it lasts, read the instance "
                               "log below." % (resp.status, message[:200]))
    if resp.status >= 500:
        return "server_error", ("HTTP %d from the backend: %s. The replica failed while answering (e.g. "
                                "--mamba-cache-mode align on a model without mamba layers): read the instance "
                                "log below." % (resp.status, message[:400]))
    return "bad_request", "HTTP %s: %s" % (resp.status, message[:400])


def is_permanent(failure_class):
    return failure_class in PERMANENT


def classify_image_failure(resp, text_ok):
    """Class and message of a failed image request. A permanent 400 on images while text works is the
    tokenizer's 2048 truncation (the seed's symptom) unless vLLM says the model takes no images at all."""
    cls, why = classify(resp)
    message = resp.error_message()
    low = message.lower()
    if any(k in low for k in ("not a multimodal model", "does not support multimodal", "image input is not",
                              "at most 0 image", "limit_mm_per_prompt")):
        return {"class": "config", "permanent": True,
                "message": "the replica accepts no images (text profile, --language-model-only or "
                           "limit-mm-per-prompt image 0): route image traffic to the multimodal profile, or mark "
                           "this route multimodal: false. (vLLM said: %s)" % message[:300]}
    if text_ok and (resp.status == 400 or cls in ("context_limit", "bad_request")) and cls != "tokenizer_truncation":
        return {"class": "tokenizer_truncation", "permanent": True,
                "message": "an image request failed with a permanent 400 while text requests work: %s. "
                           "(vLLM said: %s)" % (TOKENIZER_FIX, message[:300])}
    return {"class": cls, "permanent": is_permanent(cls), "message": why}

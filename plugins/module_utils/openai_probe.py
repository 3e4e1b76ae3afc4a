# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Real requests against an OpenAI-compatible endpoint (a GPUStack route or one vLLM replica), the
verification checks built on them, and the classification of what went wrong.

The seed lost time because a permanent HTTP 400 (the tokenizer's ``truncation.max_length: 2048``
clipping image requests) came back through GPUStack as a 503 and looked like load. So every failure
here is classified from the status *and* the body: a vLLM 400 message inside a 503 is still a 400.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
import time
import zlib
from http.cookiejar import CookieJar
from urllib.error import HTTPError, URLError

from ansible_collections.pairserve.llm.plugins.module_utils import reach, vl_tokens
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import (
    cert_verify_error,
    cert_verify_message,
    reusable_request,
)

# Failure classes. PERMANENT ones will not go away by waiting: a person has to change something.
PERMANENT = ("context_limit", "tokenizer_truncation", "tools_disabled", "bad_request", "auth",
             "server_error", "wrong_answer", "config", "tls")
TRANSIENT = ("not_ready", "unavailable", "unreachable", "timeout")

TOKENIZER_FIX = ("tokenizer.json truncation max_length 2048, run tokenizer_patch: the checkpoint's tokenizer.json "
                 "(and tokenizer_config.json) keep truncation max_length 2048 from the 4-bit calibration; the "
                 "multimodal processor honours it once image placeholders expand. Run pairserve.llm.tokenizer_patch "
                 "on the checkpoint (the checkpoint role does) and restart the replica so the processor is rebuilt")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        # vLLM renders tools with model_dump(): keep the key order name, description, parameters.
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}


class Response:
    """One HTTP exchange: status (None when nothing answered), parsed JSON body, raw text, timing."""

    def __init__(self, url, status=None, body=None, text="", elapsed=0.0, error=None):
        self.url = url
        self.status = status
        self.body = body
        self.text = text
        self.elapsed = elapsed
        self.error = error

    @property
    def ok(self):
        return self.status == 200

    def error_message(self):
        """vLLM's and GPUStack's error text: {"error": {"message": ...}}, {"message": ...} or {"detail": ...}."""
        body = self.body
        if isinstance(body, dict):
            err = body.get("error")
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
            for key in ("message", "detail"):
                if body.get(key):
                    return body[key] if isinstance(body[key], str) else json.dumps(body[key])
        return (self.text or self.error or "").strip()[:2000]

    def summary(self):
        return {"url": self.url, "status": self.status, "elapsed_s": round(self.elapsed, 3),
                "error": self.error, "message": None if self.ok else self.error_message()}


class Client:
    """Minimal OpenAI-compatible client on ansible's urls.Request (proxies, TLS options, no extra deps).

    ``ca_path``: the PEM file of the CA that signed the server's certificate (the system trust store when None). It
    is read here, so a path that is not one raises urls_session.CaPathError (a ValueError naming it) before any
    request. A certificate that cannot be verified is a Response whose error starts with ``tls:`` (class ``tls``).
    """

    def __init__(self, base_url, api_key=None, timeout=300.0, validate_certs=True, tokenize_url=None, ca_path=None):
        self.base_url = normalize_base_url(base_url)
        self.api_key = api_key
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.ca_path = ca_path
        # vLLM answers /tokenize at its root; a GPUStack route does not proxy it, so the caller may give
        # a replica's own address. Without one, token counts come from usage.prompt_tokens.
        self.tokenize_url = tokenize_url if tokenize_url is not None else self.base_url + "/tokenize"
        self._session = None
        if ca_path:
            self._request()

    def _request(self):
        """One TLS context for the client's life (urls_session says why: the instrument benchmark measured TTFT
        62 ms against vLLM's own 22 ms on the same requests while every request built its own)."""
        if self._session is None:
            self._session = reusable_request(self.validate_certs, self.ca_path)
        return self._session

    def _headers(self):
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers

    def open(self, url, payload=None, method=None, timeout=None):
        """Open a request; returns (response object or None, Response for errors)."""
        data = json.dumps(payload).encode("utf-8") if payload is not None else None
        start = time.monotonic()
        try:
            fh = self._request().open(method or ("POST" if data else "GET"), url, data=data, headers=self._headers(),
                                      timeout=timeout or self.timeout, cookies=CookieJar())
            return fh, None
        except HTTPError as exc:
            raw = exc.read().decode("utf-8", "replace") if exc.fp else ""
            return None, Response(url, exc.code, _json_or_none(raw), raw, time.monotonic() - start)
        except (URLError, OSError) as exc:
            unverified = cert_verify_error(exc)
            if unverified is not None:
                return None, Response(url, None, None, "", time.monotonic() - start,
                                      "tls: " + cert_verify_message(unverified, self.ca_path, url))
            reason = getattr(exc, "reason", exc)
            status_error = "timeout" if "timed out" in str(reason) else "unreachable"
            return None, Response(url, None, None, "", time.monotonic() - start, "%s: %s" % (status_error, reason))

    def request(self, url, payload=None, method=None, timeout=None):
        start = time.monotonic()
        fh, failure = self.open(url, payload, method, timeout)
        if failure is not None:
            return failure
        try:
            raw = fh.read().decode("utf-8", "replace")
            status = fh.status if hasattr(fh, "status") else fh.getcode()
        except OSError as exc:
            return Response(url, None, None, "", time.monotonic() - start, "unreachable: %s" % exc)
        finally:
            fh.close()
        return Response(url, status, _json_or_none(raw), raw, time.monotonic() - start)

    def chat(self, payload, timeout=None):
        return self.request(self.base_url + "/v1/chat/completions", payload, timeout=timeout)

    def tokenize_count(self, model, messages):
        """Prompt tokens of a chat (template applied) from vLLM's /tokenize; None when it is not served."""
        if not self.tokenize_url:
            return None, None
        resp = self.request(self.tokenize_url, {"model": model, "messages": messages,
                                                "add_generation_prompt": True})
        if resp.ok and isinstance(resp.body, dict) and "count" in resp.body:
            return int(resp.body["count"]), resp.body.get("max_model_len")
        return None, None

    def count_tokens(self, model, messages):
        """Token count of a chat prompt: /tokenize when reachable, else one max_tokens=1 request."""
        count = self.tokenize_count(model, messages)[0]
        if count is not None:
            return count
        resp = self.chat({"model": model, "messages": messages, "max_tokens": 1, "temperature": 0})
        if resp.ok:
            return int(resp.body["usage"]["prompt_tokens"])
        raise ProbeError(resp, "counting prompt tokens")


class ProbeError(Exception):
    """A request needed to prepare a check failed; carries the response for classification."""

    def __init__(self, response, doing):
        super().__init__("%s failed: HTTP %s %s" % (doing, response.status, response.error_message()[:300]))
        self.response = response
        self.doing = doing


def normalize_base_url(url):
    url = url.rstrip("/")
    for suffix in ("/v1/chat/completions", "/v1"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url


def _json_or_none(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return None


# --- classification -------------------------------------------------------------------------------

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


# --- fresh images -----------------------------------------------------------------------------------

def random_png(width=64, height=64):
    """A PNG of random RGB pixels, built with zlib and struct. Fresh every call: the seed's fixtures lied
    because cached images bypassed enough processor work to stay below the 2048 boundary."""
    raw = bytearray()
    row = width * 3
    noise = os.urandom(row * height)
    for y in range(height):
        raw.append(0)  # filter type 0 (None) before each scanline
        raw.extend(noise[y * row:(y + 1) * row])

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 6)) + \
        chunk(b"IEND", b"")


def image_message(count, size, text="Describe what these camera frames show, in one sentence."):
    """A user message with ``count`` fresh PNGs as data URLs, like the ten-frame camera request."""
    parts = [{"type": "text", "text": text}]
    digests = []
    for dummy in range(count):
        png = random_png(size, size)
        digests.append(hashlib.sha256(png).hexdigest())
        parts.append({"type": "image_url",
                      "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode("ascii")}})
    return {"role": "user", "content": parts}, digests


# --- long prompts to a token target ---------------------------------------------------------------

FILLER = "The camera on the north side saw a grey cat cross the yard at dusk. "


def build_prompt(client, model, target, prefix="Reply with OK. ", unit=FILLER):
    """Messages whose chat prompt is at most ``target`` tokens and as close to it as the filler allows.

    Counts with the server's own tokenizer (/tokenize, or usage.prompt_tokens) instead of guessing
    characters per token; a handful of counting calls whatever the target. Returns (messages, count,
    tokens per filler unit).
    """
    def msgs(reps, extra=""):
        return [{"role": "user", "content": prefix + unit * reps + extra}]

    def count(messages):
        """Token count, or None when the server refuses the prompt as longer than its context (counting
        through usage.prompt_tokens sends the prompt itself)."""
        try:
            return client.count_tokens(model, messages)
        except ProbeError as exc:
            if classify(exc.response)[0] == "context_limit":
                return None
            raise

    base = count(msgs(0))
    if base is None:
        raise ProbeError(Response(client.base_url, 400, None, "even the shortest prompt is too long"), "counting")
    per = max(1, (count(msgs(8)) or base + 8) - base) / 8.0
    reps = max(0, int((target - base) / per))
    current = count(msgs(reps))
    for dummy in range(8):  # BPE merges at boundaries make the per-unit cost a little uneven: correct
        if current is None:  # over the server's context: step back 10 %
            reps = int(reps * 0.9)
        elif current > target:
            reps = max(0, reps - int((current - target) / per) - 1)
        elif target - current > per:
            reps += int((target - current) / per)
        else:
            break
        current = count(msgs(reps))
    if current is None:
        raise ProbeError(Response(client.base_url, 400, None, "could not build a prompt under the context"),
                         "building a %d-token prompt" % target)
    if current >= target:
        return msgs(reps), current, per
    # top up with short words to land within a few tokens of the target
    words = "ok " * int(per + 2)
    lo, hi = 0, len(words)
    best = ("", current)
    while lo <= hi:
        mid = (lo + hi) // 2
        trial = count(msgs(reps, " " + words[:mid]))
        if trial is not None and trial <= target:
            best = (" " + words[:mid], trial)
            lo = mid + 1
        else:
            hi = mid - 1
        if best[1] == target:
            break
    return msgs(reps, best[0]), best[1], per


# --- checks -----------------------------------------------------------------------------------------

def _result(check, ok, resp=None, message="", failure_class=None, **detail):
    out = {"check": check, "ok": ok, "message": message, "class": failure_class,
           "permanent": is_permanent(failure_class) if failure_class else None}
    if resp is not None:
        out["status"] = resp.status
        out["elapsed_s"] = round(resp.elapsed, 3)
    out.update(detail)
    return out


def _failed_response(check, resp, model):
    cls, why = classify(resp, model)
    return _result(check, False, resp, why, cls, response_message=resp.error_message()[:1000])


def _message(resp):
    try:
        return resp.body["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None


def reasoning_of(message):
    # vLLM >= 0.10 puts it in "reasoning"; older ones and some proxies use "reasoning_content".
    return message.get("reasoning") or message.get("reasoning_content") or ""


def check_text(client, model, spec):
    """Text with reasoning: non-empty content and reasoning, or exactly the expected ones when given."""
    payload = {"model": model, "messages": spec["messages"], "max_tokens": spec["max_tokens"],
               "temperature": spec.get("temperature", 0)}
    if spec.get("reasoning_effort"):
        payload["reasoning_effort"] = spec["reasoning_effort"]
    resp = client.chat(payload)
    if not resp.ok:
        return _failed_response("text", resp, model)
    message = _message(resp) or {}
    content = (message.get("content") or "").strip()
    reasoning = reasoning_of(message).strip()
    finish = resp.body["choices"][0].get("finish_reason")
    detail = {"content": content[:500], "reasoning": reasoning[:500], "finish_reason": finish,
              "usage": resp.body.get("usage")}
    problems = []
    if not content:
        problems.append("the answer is empty%s" % (
            " (finish_reason 'length': max_tokens %d ran out inside the reasoning; give the reasoning budget "
            "more completion tokens)" % spec["max_tokens"] if finish == "length" else ""))
    if not reasoning:
        problems.append("no reasoning came back (is --reasoning-parser qwen3 set on the replica?)")
    if spec.get("expect_content") is not None and content != spec["expect_content"].strip():
        problems.append("content %r is not the expected %r" % (content[:200], spec["expect_content"].strip()))
    if spec.get("expect_reasoning") is not None and reasoning != spec["expect_reasoning"].strip():
        problems.append("reasoning %r is not the expected %r" % (reasoning[:200], spec["expect_reasoning"].strip()))
    if problems:
        return _result("text", False, resp, "; ".join(problems), "wrong_answer", **detail)
    return _result("text", True, resp, "answer and reasoning present", **detail)


def check_tool_call(client, model, spec):
    """A tool schema and tool_choice auto (what agents send) must give a parsed tool_calls entry."""
    payload = {"model": model, "messages": spec["messages"], "tools": spec["tools"], "tool_choice": "auto",
               "max_tokens": spec["max_tokens"], "temperature": spec.get("temperature", 0)}
    resp = client.chat(payload)
    if not resp.ok:
        return _failed_response("tool_call", resp, model)
    message = _message(resp) or {}
    calls = message.get("tool_calls") or []
    detail = {"tool_calls": calls[:4], "content": (message.get("content") or "")[:300]}
    if not calls:
        return _result("tool_call", False, resp,
                       "no parsed tool_calls in the answer (content %r): the tool-call parser did not recognise "
                       "the model's output; check --tool-call-parser (qwen3_coder for Qwen3 checkpoints)"
                       % (message.get("content") or "")[:200], "wrong_answer", **detail)
    function = calls[0].get("function") or {}
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "")
    except ValueError:
        arguments = None
    known = [t["function"]["name"] for t in spec["tools"]]
    problems = []
    if name not in known:
        problems.append("tool name %r is not one of %s" % (name, known))
    if not isinstance(arguments, dict):
        problems.append("arguments %r are not a JSON object" % function.get("arguments"))
    else:
        schema = next((t["function"].get("parameters") or {} for t in spec["tools"]
                       if t["function"]["name"] == name), {})
        missing = [k for k in schema.get("required", []) if k not in arguments]
        if missing:
            problems.append("required arguments %s are missing" % missing)
    if spec.get("expect_name") is not None and name != spec["expect_name"]:
        problems.append("tool %r is not the expected %r" % (name, spec["expect_name"]))
    if spec.get("expect_arguments") is not None and arguments != spec["expect_arguments"]:
        problems.append("arguments %s are not the expected %s" % (json.dumps(arguments),
                                                                  json.dumps(spec["expect_arguments"])))
    if problems:
        return _result("tool_call", False, resp, "; ".join(problems), "wrong_answer", **detail)
    return _result("tool_call", True, resp, "tool call %s(%s)" % (name, json.dumps(arguments)), **detail)


def _prompt_tokens(resp):
    try:
        return int(resp.body["usage"]["prompt_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def _control_request(client, model, size, geo, limit):
    """As many fresh frames as stay at or below ``limit`` image tokens, in one request: its outcome tells a failure
    that starts past the boundary (the truncation) from an image path that fails whatever the size."""
    control = vl_tokens.frames_below(limit, size, geo)
    if control < 1:
        return None
    small, _digests = image_message(control, size)
    answer = client.chat({"model": model, "messages": [small], "max_tokens": 16, "temperature": 0})
    return {"images": control, "image_tokens_expected": control * vl_tokens.frame_tokens(size, geo),
            "status": answer.status, "ok": answer.ok}


def check_images(client, model, count, size, text_ok=None, geometry=None, limit=vl_tokens.SEED_TRUNCATION):
    """``count`` fresh random PNGs in one request, sized so that their image tokens are past ``limit`` (the
    seed's 2,048 truncation) -> 200, and the server counts exactly the image tokens the processor geometry gives,
    each frame's pad tokens and its two wrapper tokens (``usage.prompt_tokens`` of the request minus that of the
    same text without images).

    A control request with as many fresh frames as stay below ``limit`` follows, pass or fail (its result is
    ``control``): when the large request failed and the control answered, the failure begins past the boundary,
    which is the tokenizer's truncation (the seed's symptom, whatever vLLM's message says)."""
    geo = vl_tokens.geometry(geometry)
    per_frame = vl_tokens.image_tokens(size, size, geo)
    expected = count * vl_tokens.frame_tokens(size, geo)
    message, digests = image_message(count, size)
    resp = client.chat({"model": model, "messages": [message], "max_tokens": 16, "temperature": 0})
    detail = {"images": count, "image_size": size, "image_sha256": digests,
              "unique_images": len(set(digests)) == len(digests), "image_tokens_per_frame": per_frame,
              "image_tokens_expected": expected, "limit": limit}
    if resp.ok:
        result = _counted_images(client, model, message, resp, detail, geo)
    else:
        result = _failed_response("images", resp, model)
        result.update(detail)
        result.update(classify_image_failure(resp, text_ok))
    control = _control_request(client, model, size, geo, limit)
    if control is None:
        return result
    result["control"] = control
    said = "a control request with %d fresh frames (%d image tokens, not past %d)" % (
        control["images"], control["image_tokens_expected"], limit)
    said_first = said[0].upper() + said[1:]
    if control["ok"] and result["ok"]:
        result["message"] += "; %s answered too." % said
    elif control["ok"]:
        if backend_status(resp) == 400 and result.get("class") not in ("config", "tokenizer_truncation"):
            # Past the boundary only, whatever vLLM's words: the seed's truncation (text_ok was not known).
            result.update({"class": "tokenizer_truncation", "permanent": True,
                           "message": "%d fresh frames (%d image tokens) failed with a permanent 400: %s. (vLLM said: %s)"
                                      % (count, expected, TOKENIZER_FIX, resp.error_message()[:300])})
        result["message"] += " %s answered: the failure starts past the boundary." % said_first
    elif result["ok"]:
        result.update(ok=False, **{"class": "server_error", "permanent": True})
        result["message"] += ("; but %s failed (HTTP %s): the image path is not reliable." % (said, control["status"]))
    else:
        result["message"] += (" %s failed too (HTTP %s): the image path fails whatever the size, not only past the "
                              "truncation." % (said_first, control["status"]))
    return result


def _counted_images(client, model, message, resp, detail, geo):
    """The image request answered: the server's image-token count (the request's prompt tokens minus its text-only
    twin's) must be exactly what the geometry gives."""
    count, size, expected, limit = detail["images"], detail["image_size"], detail["image_tokens_expected"], detail["limit"]
    text_only = {"role": "user", "content": [message["content"][0]]}
    twin = client.chat({"model": model, "messages": [text_only], "max_tokens": 1, "temperature": 0})
    with_images, without = _prompt_tokens(resp), _prompt_tokens(twin)
    if with_images is None or without is None:
        return _result("images", False, resp, "%d fresh images answered, but the server reported no "
                       "usage.prompt_tokens for the request or its text-only twin (HTTP %s): the image tokens it "
                       "counted cannot be checked" % (count, twin.status), "wrong_answer", **detail)
    counted = with_images - without
    detail = dict(detail, image_tokens_server=counted, prompt_tokens=with_images)
    if counted != expected:
        return _result("images", False, resp,
                       "the server counted %d image tokens for %d frames of %dx%d, the processor geometry %s gives %d "
                       "(%d per frame and %d wrapper tokens): the replica's processor is not the one this check sized "
                       "its request with, so it cannot tell whether the request crossed the %d-token boundary. Give "
                       "the checkpoint's preprocessor_config.json as image_processor"
                       % (counted, count, size, size, geo, expected, detail["image_tokens_per_frame"],
                          vl_tokens.WRAPPER_TOKENS, limit), "config", **detail)
    return _result("images", True, resp, "%d fresh %dx%d images answered; the server counted %d image tokens, as the "
                   "processor geometry gives, past the %d-token truncation the seed hit (prompt %d tokens)"
                   % (count, size, size, counted, limit, with_images), **detail)


def check_images_refused(client, model, size=64):
    """The text profile's side of the image check: a replica started without its vision tower
    (``--language-model-only``) or from a text-only checkpoint must refuse one fresh image with vLLM's own 400.
    An answer means the tower is loaded where the profile dropped it (its memory is gone from the KV cache) or the
    route is not the one it is labelled."""
    message, digests = image_message(1, size)
    resp = client.chat({"model": model, "messages": [message], "max_tokens": 1, "temperature": 0})
    detail = {"images": 1, "image_size": size, "image_sha256": digests}
    if resp.ok:
        return _result("images_refused", False, resp,
                       "a fresh image was answered by a route whose profile serves text only: the replica loaded its "
                       "vision tower (--language-model-only did not reach it) or the route is multimodal; re-render "
                       "and roll the replica, or mark the route multimodal: true", "config", **detail)
    refused = classify_image_failure(resp, text_ok=None)
    if refused["class"] == "config":
        return _result("images_refused", True, resp, "a fresh image was refused, as the text profile must: %s"
                       % resp.error_message()[:300], response_message=resp.error_message()[:1000], **detail)
    result = _failed_response("images_refused", resp, model)
    result.update(detail)
    result["message"] = ("a fresh image got no answer, but not vLLM's refusal of images either: %s" % result["message"])
    return result


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


def check_context(client, model, max_model_len, max_tokens=8):
    """A prompt near the context limit → 200; one past it → vLLM's 400 about the maximum context length."""
    results = []
    served = client.tokenize_count(model, [{"role": "user", "content": "x"}])[1]
    near_target = max_model_len - max_tokens - 1
    detail = {"max_model_len": max_model_len, "server_max_model_len": served}

    def too_short(resp, count):
        return ("a %s-token prompt, inside the profile's max_model_len %d, was refused: the replica serves a shorter "
                "context%s. Its --max-model-len is not the profile's: re-render and roll the replica, or lower the "
                "profile's max_model_len to what the KV cache holds. (vLLM said: %s)" % (
                    count if count is not None else "~%d" % near_target, max_model_len,
                    " (%s tokens)" % served if served else "", resp.error_message()[:300]))

    try:
        near_msgs, near_count, per = build_prompt(client, model, near_target)
    except ProbeError as exc:
        failed = _failed_response("context_near_limit", exc.response, model)
        failed.update(detail)
        if failed["class"] == "context_limit":  # even counting the prompt was refused as too long
            failed["message"] = too_short(exc.response, None)
        return [failed]
    resp = client.chat({"model": model, "messages": near_msgs, "max_tokens": max_tokens, "temperature": 0})
    if resp.ok:
        results.append(_result("context_near_limit", True, resp,
                               "%d-token prompt + %d completion tokens within %d answered"
                               % (near_count, max_tokens, max_model_len), prompt_tokens=near_count, **detail))
    else:
        failed = _failed_response("context_near_limit", resp, model)
        failed.update(detail, prompt_tokens=near_count)
        if failed["class"] == "context_limit":
            failed["message"] = too_short(resp, near_count)
        results.append(failed)
    # Past the limit: the near prompt plus filler worth ~128 tokens. Counting it may itself be refused by a
    # server that validates /tokenize against max_model_len, so vLLM's 400 is the judge here.
    extra = int(128 / per) + 1
    past_msgs = [{"role": "user", "content": near_msgs[0]["content"] + FILLER * extra}]
    resp = client.chat({"model": model, "messages": past_msgs, "max_tokens": max_tokens, "temperature": 0})
    detail = {"prompt_tokens_at_least": near_count + int(extra * per) - 1, "max_model_len": max_model_len}
    if backend_status(resp) == 400 and classify(resp)[0] == "context_limit":
        results.append(_result("context_past_limit", True, resp, "vLLM refused the over-long prompt with its 400"
                               + ("" if resp.status == 400 else " (passed on by GPUStack as HTTP %d)" % resp.status),
                               response_message=resp.error_message()[:300], **detail))
    elif resp.ok:
        results.append(_result("context_past_limit", False, resp,
                               "a prompt past max_model_len %d (%s tokens) was answered: the replica serves a longer "
                               "context than the profile says (check --max-model-len)"
                               % (max_model_len, resp.body.get("usage", {}).get("prompt_tokens")), "config", **detail))
    else:
        failed = _failed_response("context_past_limit", resp, model)
        failed.update(detail)
        results.append(failed)
    return results


def check_token_count(client, model, messages, reference):
    """usage.prompt_tokens of a fixed text prompt equals the recorded reference (the tokenizer patch
    must not change text token counts)."""
    resp = client.chat({"model": model, "messages": messages, "max_tokens": 1, "temperature": 0})
    if not resp.ok:
        return _failed_response("token_count", resp, model)
    count = int(resp.body["usage"]["prompt_tokens"])
    if reference is None:
        return _result("token_count", True, resp, "recorded %d prompt tokens (no reference given)" % count,
                       prompt_tokens=count, reference=None)
    if count != reference:
        return _result("token_count", False, resp,
                       "the fixed prompt now counts %d tokens, the reference is %d: the tokenizer changed (a patch "
                       "that touched more than truncation, or a different checkpoint revision)" % (count, reference),
                       "wrong_answer", prompt_tokens=count, reference=reference)
    return _result("token_count", True, resp, "%d prompt tokens, as recorded" % count,
                   prompt_tokens=count, reference=reference)


def run_checks(client, model, checks, spec):
    """Run the requested checks in a fixed order; text first, so the image check knows whether text works."""
    results = []
    text_ok = None
    if "text" in checks:
        text = dict(spec["text"])
        served = client.tokenize_count(model, [{"role": "user", "content": "x"}])[1]
        if served and text["max_tokens"] > served - 256:
            # The text check is about reasoning and answer, not the context: keep its budget inside what the
            # replica serves (vLLM before 0.32 rejects prompt + max_tokens > max_model_len with a 400).
            text["max_tokens"] = max(16, served - 256)
        results.append(check_text(client, model, text))
        text_ok = results[-1]["ok"]
    if "tool_call" in checks:
        results.append(check_tool_call(client, model, spec["tool_call"]))
    if "images" in checks:
        results.append(check_images(client, model, spec["image_count"], spec["image_size"], text_ok,
                                    spec.get("image_processor")))
    if "images_refused" in checks:
        results.append(check_images_refused(client, model))
    if "context" in checks:
        results.extend(check_context(client, model, spec["max_model_len"]))
    if "token_count" in checks:
        results.append(check_token_count(client, model, spec["token_count"]["messages"],
                                         spec["token_count"].get("reference")))
    return results


def reach_urls(instance, workers):
    """Where GPUStack reaches an instance (module_utils/reach.py): its worker's ``/healthz`` and the replica's own
    ``/health``. ``workers``: GPUStack's worker records. Either URL is None when the records do not tell it."""
    worker = reach.worker_of(instance, workers)
    if not worker.get("ip") and not worker.get("advertise_address") and instance.get("worker_ip"):
        worker = dict(worker, ip=instance["worker_ip"])
    return {"worker": reach.worker_health_url(worker), "replica": reach.replica_health_url(instance)}


def node_lines(instances):
    """One line per instance whose node cannot serve it, node first: its worker unreachable (GPUStack reaches the
    replica only through it) or the replica itself not answering, with the address tried. ``instances`` carry
    ``reach`` ({worker, replica}: None when not probed, else {url, ok, error})."""
    lines = []
    for inst in instances or []:
        reach = inst.get("reach") or {}
        node = inst.get("worker_name") or inst.get("worker_ip") or "?"
        worker, replica = reach.get("worker"), reach.get("replica")
        if worker and not worker["ok"]:
            lines.append("[%s] the worker at %s does not answer (%s): GPUStack reaches instance %s only through it, "
                         "so that replica cannot serve%s. Check `systemctl status gpustack-worker` and the network "
                         "between the server and %s." % (node, worker["url"].rsplit("/", 1)[0], worker["error"],
                                                         inst.get("name"), _listed(inst), node))
        elif replica and not replica["ok"]:
            lines.append("[%s] instance %s does not answer at %s (%s)%s." % (
                node, inst.get("name"), replica["url"], replica["error"], _listed(inst)))
    return lines


def _listed(inst):
    return "; GPUStack still lists it as %s" % inst["state"] if inst.get("state") == "running" else ""


def diagnosis(target, results, instances=None, boot_problems=None):
    """The message a person reads when verify fails: first the nodes that cannot serve (node_lines), then what
    failed, which class, what to do, and the replica's state and log tail."""
    lines = node_lines(instances)
    failed = [r for r in results if not r["ok"]]
    for result in failed:
        kind = "permanent" if result.get("permanent") else "transient"
        lines.append("[%s] check %s failed (HTTP %s, %s: %s): %s" % (
            target, result["check"], result.get("status"), kind, result.get("class"), result["message"]))
    for problem in boot_problems or []:
        lines.append("[%s] boot log: %s" % (target, problem))
    for inst in instances or []:
        worker = (inst.get("reach") or {}).get("worker")
        state = inst.get("state")
        if worker and not worker["ok"] and state == "running":
            state = "unreachable (GPUStack lists it as running; its worker does not answer)"
        lines.append("instance %s on %s: state %s%s" % (
            inst.get("name"), inst.get("worker_name") or inst.get("worker_ip") or "?", state,
            " (%s)" % inst["state_message"] if inst.get("state_message") else ""))
        if inst.get("log_tail"):
            lines.append("  last log lines of %s:" % inst.get("name"))
            lines.extend("    " + line for line in inst["log_tail"].splitlines()[-40:])
    return "\n".join(lines)

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the collection's one client of an OpenAI-compatible endpoint (a GPUStack route or one vLLM replica).

Each exchange is a ``Response`` (status, parsed body, text, timing, or the error when nothing answered); what a
failed one means is ``_openai_failures``'s business, what is sent ``_openai_prompts``'s.
"""

from __future__ import annotations

import json
import time
from http.cookiejar import CookieJar
from urllib.error import HTTPError, URLError

from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import (
    cert_verify_error,
    cert_verify_message,
    reusable_request,
)


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

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: one streamed (SSE) chat completion, timed on the client the way `vllm bench serve` times it.
"""

from __future__ import annotations

import json
import time

from ansible_collections.pairserve.llm.plugins.module_utils._openai_failures import classify


def stream_chat(client, payload, timeout=None):
    """One streamed chat completion with client-side timing.

    Returns dict: ok, status, ttft_s (first streamed chunk, sent after prefill), total_s, completion_tokens,
    prompt_tokens, decode_tok_s ((tokens - 1) / (last - first token), as vLLM's TPOT counts it), error.
    """
    payload = dict(payload, stream=True, stream_options={"include_usage": True})
    start = time.monotonic()
    handle, failure = client.open(client.base_url + "/v1/chat/completions", payload, timeout=timeout)
    if failure is not None:
        cls, why = classify(failure)
        return {"ok": False, "status": failure.status, "error": why, "class": cls}
    first = last = None
    usage = None
    chunks = 0
    try:
        for raw in _sse_lines(handle):  # SSE: "data: {json}\n\n", ending with "data: [DONE]"
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                usage = event["usage"]
            if event.get("choices"):
                # Time every chunk that carries a choice, visible text or not: vLLM sends one per engine step,
                # while its reasoning and tool parsers may hold text back and release it in a burst (timing only
                # visible text measured 119x vLLM's own decode rate). The first one leaves after prefill; this is
                # how `vllm bench serve` takes TTFT and TPOT, so the two instruments agree.
                now = time.monotonic()
                if first is None:
                    first = now
                last = now
                chunks += 1
    except (OSError, ValueError) as exc:
        return {"ok": False, "status": 200, "error": "stream broke: %s" % exc, "class": "unavailable"}
    finally:
        handle.close()
    end = time.monotonic()
    if first is None:
        return {"ok": False, "status": 200, "error": "the stream carried no token", "class": "wrong_answer"}
    completion = int((usage or {}).get("completion_tokens") or chunks)
    decode = (completion - 1) / (last - first) if completion > 1 and last > first else None
    return {"ok": True, "status": 200, "ttft_s": first - start, "total_s": end - start,
            "completion_tokens": completion, "prompt_tokens": int((usage or {}).get("prompt_tokens") or 0),
            "decode_tok_s": decode}


def _sse_lines(handle):
    """Lines as soon as they arrive. read1() returns what the socket has (one HTTP chunk); iterating the
    response instead buffered the whole stream here and timed 64 tokens as one burst."""
    reader = getattr(handle, "read1", None) or handle.read
    pending = b""
    while True:
        data = reader(65536)
        if not data:
            break
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line
    if pending:
        yield pending

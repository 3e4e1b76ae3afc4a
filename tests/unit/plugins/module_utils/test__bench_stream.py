"""One streamed chat completion timed on the client, against a local SSE endpoint: TTFT is the first chunk that
carries a choice (text or not), the decode rate counts (tokens - 1) over first to last chunk, and a failure says
its class instead of raising.

The timing test runs the server and the client in lock step on a clock of its own: the server moves the clock, sends
a chunk and waits until the client has read the clock for it. Wall-clock bounds failed on a loaded CI machine (the
client read the first chunk late, so first-to-last was shorter than the server's steps); the lock step gives exact
figures and still fails a client that buffers the stream (every chunk would then read the last time)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from support.local_http import LocalServer, QuietHandler, send_json

from ansible_collections.pairserve.llm.plugins.module_utils import _bench_stream
from ansible_collections.pairserve.llm.plugins.module_utils._bench_stream import stream_chat
from ansible_collections.pairserve.llm.plugins.module_utils._openai_client import Client

PREFILL_S = 0.2
STEP_S = 0.05


class LockStepClock:
    """``time`` for the module under test: ``monotonic()`` answers the server's time and tells the server it was read."""

    def __init__(self):
        self.now = 0.0
        self.read = threading.Event()

    def monotonic(self):
        self.read.set()
        return self.now


def sse_server(events, delay_first=0.0, step=0.0, clock=None):
    """A chat endpoint that answers every POST with ``events`` as SSE lines, ``delay_first`` before the first and
    ``step`` between the others, then ``data: [DONE]``. With ``clock``, the delays move that clock instead of
    sleeping, and each chunk that carries a choice waits until the client has read the clock."""

    class Handler(QuietHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if clock is not None:
                clock.read.clear()  # the client's read before it sent the request
            for pos, event in enumerate(events):
                delay = delay_first if pos == 0 else step
                if clock is None:
                    time.sleep(delay)
                else:
                    clock.now += delay
                self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.flush()
                if clock is not None and event.get("choices"):
                    # A client that buffers never reads the clock here: go on after a while, so the test fails on
                    # its figures instead of hanging.
                    clock.read.wait(5)
                    clock.read.clear()
            self.wfile.write(b"data: [DONE]\n\n")

    return LocalServer(Handler)


def chunk(text):
    return {"choices": [{"delta": {"content": text} if text else {}}]}


def test_first_chunk_after_prefill_is_the_ttft_and_every_choice_chunk_is_timed(monkeypatch):
    # The second chunk carries no visible text (a reasoning parser holding it back): it is an engine step all the same.
    events = [chunk("a"), chunk(""), chunk("c"), chunk("d"), chunk("e"),
              {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}}]
    clock = LockStepClock()
    monkeypatch.setattr(_bench_stream, "time", clock)
    with sse_server(events, PREFILL_S, STEP_S, clock=clock) as server:
        res = stream_chat(Client(server.url, None, 10), {"model": "m", "messages": []})
    assert res["ok"] and res["status"] == 200, res
    assert res["completion_tokens"] == 5 and res["prompt_tokens"] == 9
    assert res["ttft_s"] == pytest.approx(PREFILL_S), res
    assert res["total_s"] == pytest.approx(PREFILL_S + 5 * STEP_S), res  # the usage chunk comes a step later
    # 4 tokens after the first over the 4 steps between first and last chunk.
    assert res["decode_tok_s"] == pytest.approx(4 / (4 * STEP_S)), res


def test_without_usage_the_chunks_are_the_tokens():
    with sse_server([chunk("a"), chunk("b"), chunk("c")]) as server:
        res = stream_chat(Client(server.url, None, 10), {"model": "m", "messages": []})
    assert res["ok"] and res["completion_tokens"] == 3 and res["prompt_tokens"] == 0, res


def test_a_stream_without_a_token_is_a_wrong_answer():
    with sse_server([{"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 0}}]) as server:
        res = stream_chat(Client(server.url, None, 10), {"model": "m", "messages": []})
    assert res == {"ok": False, "status": 200, "error": "the stream carried no token", "class": "wrong_answer"}


def test_a_refused_request_carries_its_class():
    class Refuse(QuietHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers["Content-Length"]))
            send_json(self, 400, {"error": {"message": "This model's maximum context length is 4096 tokens.",
                                            "code": 400}})

    with LocalServer(Refuse) as server:
        res = stream_chat(Client(server.url, None, 10), {"model": "m", "messages": []})
    assert not res["ok"] and res["status"] == 400 and res["class"] == "context_limit", res
    down = stream_chat(Client("http://127.0.0.1:9", None, 5), {"model": "m", "messages": []})
    assert not down["ok"] and down["status"] is None and down["class"] == "unreachable", down

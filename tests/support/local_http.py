"""Local HTTP servers of the tests on 127.0.0.1: the thread that serves one, a JSON stub that answers from a
function, and GPUStack's paginated list body."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class LocalServer:
    """`handler` (a BaseHTTPRequestHandler class) served on a free port of 127.0.0.1 by a daemon thread."""

    def __init__(self, handler):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def send_json(handler: BaseHTTPRequestHandler, status: int, payload) -> None:
    """Answer the request `handler` holds: `payload` as it is when bytes, else as JSON."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class QuietHandler(BaseHTTPRequestHandler):
    """A handler that logs nothing (pytest's output stays clean)."""

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@dataclass
class StubRequest:
    """One request a JsonStub got: `target` as sent (query included), `path` and `query` parsed from it, `headers`
    as http.server read them (looked up by any case)."""

    method: str
    target: str
    headers: Message
    body: bytes
    path: str = field(init=False)
    query: dict = field(init=False)

    def __post_init__(self):
        url = urlparse(self.target)
        self.path, self.query = url.path, parse_qs(url.query)

    def json(self):
        return json.loads(self.body) if self.body else None


class JsonStub(LocalServer):
    """A server whose every answer is `answer(request)` -> (status, payload): bytes as they are, anything else as
    JSON. Every StubRequest is kept in `seen`."""

    def __init__(self, answer):
        self.seen: list[StubRequest] = []
        outer = self

        class Handler(QuietHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                request = StubRequest(self.command, self.path, self.headers,
                                      self.rfile.read(length) if length else b"")
                outer.seen.append(request)
                send_json(self, *answer(request))

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        super().__init__(Handler)


def gpustack_page(items: list) -> dict:
    """GPUStack's answer to a list request, all of it on one page."""
    return {"items": items, "pagination": {"page": 1, "perPage": 100, "total": len(items), "totalPage": 1}}

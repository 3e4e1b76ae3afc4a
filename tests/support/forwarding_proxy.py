"""A pass-through HTTP proxy on 127.0.0.1 that records what it forwards: the GPUStack module tests count what a
module really sent (GPUStack 2.2.3 writes no access log), the fault suite subclasses it to break GPUStack
mid-request (tests/integration/faults/faults_helpers.py, FaultProxy)."""

from __future__ import annotations

import http.client
from dataclasses import dataclass
from urllib.parse import urlparse

from support.local_http import LocalServer, QuietHandler

HOP_BY_HOP = ("transfer-encoding", "connection", "content-length")


@dataclass
class Forwarded:
    """One request on its way: `target` as sent (query included), `path` without the query, `index` its place
    among all the requests the proxy got."""

    method: str
    target: str
    path: str
    index: int
    headers: dict
    body: bytes | None


class ForwardingProxy(LocalServer):
    """Forwards every request to `upstream` and answers with what came back; `seen` holds (method, path) of each.

    `exchange` is the hook: it sends the request upstream and returns (status, headers, body), or None to close
    the client's connection without an answer. When upstream cannot be reached the client's connection is closed
    without an answer, as a dead server's would be.
    """

    def __init__(self, upstream: str):
        target = urlparse(upstream)
        self.seen: list[tuple[str, str]] = []
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                path = self.path.split("?")[0]
                request = Forwarded(self.command, self.path, path, len(outer.seen),
                                    {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")},
                                    self.rfile.read(length) if length else None)
                outer.seen.append((self.command, path))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                try:
                    answer = outer.exchange(conn, request)
                except (OSError, http.client.HTTPException):
                    answer = None  # upstream is gone: so is the answer
                finally:
                    conn.close()
                if answer is None:
                    self.close_connection = True
                    return
                status, headers, data = answer
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _forward

        super().__init__(Handler)

    def exchange(self, conn: http.client.HTTPConnection, request: Forwarded):
        """Send `request` on `conn` and return (status, headers, body) of the answer."""
        conn.request(request.method, request.target, body=request.body, headers=request.headers)
        resp = conn.getresponse()
        return resp.status, resp.getheaders(), resp.read()

    def writes(self) -> list[tuple[str, str]]:
        """The requests that may change something: all but GETs."""
        return [(m, p) for m, p in self.seen if m != "GET"]

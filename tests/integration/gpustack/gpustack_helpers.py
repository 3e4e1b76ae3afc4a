"""Helpers for the GPUStack module tests: a request-counting proxy and the four-step idempotence check."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from lab.ansible_runner import run_module


class CountingProxy:
    """A pass-through HTTP proxy on 127.0.0.1 that records (method, path) of every request it forwards.

    Lets a test count what a module really sent to GPUStack (GPUStack 2.2.3 writes no access log).
    """

    def __init__(self, upstream: str):
        target = urlparse(upstream)
        self.seen = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                outer.seen.append((self.command, self.path.split("?")[0]))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = _forward

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def writes(self):
        return [(m, p) for m, p in self.seen if m != "GET"]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def four_steps(module: str, args: dict, *, expect_change: bool = True):
    """check -> apply -> idempotent check -> idempotent apply, asserting changed each time; returns the 4 results."""
    results = []
    for check, want in ((True, expect_change), (False, expect_change), (True, False), (False, False)):
        res = run_module(module, args, check=check, diff=True)
        assert not res.failed, f"{module} check={check} failed: {res.result.get('msg')}\n{res.stderr}"
        assert res.changed is want, f"{module} check={check}: changed={res.changed}, expected {want}: {res.result}"
        results.append(res)
    return results

#!/usr/bin/env python
"""A bounded request loop against an OpenAI-compatible route, counting what failed.

    python -m lab.route_load --url http://127.0.0.1:30080 --model qwen --key-file KEYFILE \\
        --summary .lab/upgrade/load.json [--concurrency 2] [--max-seconds 1800] [--max-requests N]
        [--follow-key-file] [--ca-file CA] [--after-server-version V --server-restart FILE]

Sends small chat completions (a short prompt, a few output tokens) back to back from --concurrency threads
until SIGTERM/SIGINT, --max-seconds or --max-requests, like an application that keeps using the service while
a day-2 play runs. Each answer counts as ok (HTTP 200 with a non-empty choice) or failed (any other status, a
connection error, a timeout or a 200 without content), with the first failures kept verbatim. The summary
(JSON, written atomically when the loop ends and every --report-every seconds meanwhile) holds the counts, the
failures by class, the latency percentiles, and when the route answered nothing: the first and last failure's
time, and the longest gap between two answered requests that had failures in it (an outage: its start, the last
answer before it; its end, the first answer after it, null while it lasts; times in seconds since the epoch, as
`date +%s.%N` gives them, so a scenario can measure from its own events), with the requests answered and failed
from its end on; the last line on stdout says the same in words.
With --after-server-version the loop first waits until the URL's /version answers that version (a server upgrade
in progress: every request goes through GPUStack's server, so its restart is the route's one unavoidable gap) and
writes to --server-restart how long the server answered nothing; the loop counts from the server's first answer on.
The key is read from a file and never printed. Only the given URL is contacted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

PROMPTS = (
    "Name one prime number.",
    "Say hello in French.",
    "What colour is the sky on a clear day?",
    "Count from one to three.",
)


class Tally:
    """Counts, latencies and outages shared by the worker threads. An outage is the time between two answered
    requests (or the loop's start and its first answer) in which requests failed: how long a client of the route
    got nothing. Times are the clock's when a request ended (`clock`: seconds since the epoch)."""

    def __init__(self, keep: int = 20, clock=time.time):
        self.lock = threading.Lock()
        self.clock = clock
        self.ok = 0
        self.failed = 0
        self.by_class: dict[str, int] = {}
        self.first_failures: list[dict] = []
        self.latencies: list[float] = []
        self.keep = keep
        self.started = clock()
        self.first_failure_at: float | None = None
        self.last_failure_at: float | None = None
        self.last_ok_at: float | None = None
        # Failures since the last answer, and the longest outage that ended with an answer.
        self.open_failed = 0
        self.longest: dict | None = None
        self.ok_before_longest_end = 0
        # (time, class) of every failure: what failed after the longest outage is counted from them.
        self.failure_times: list[tuple[float, str]] = []

    def record(self, latency: float, failure: str | None = None, detail: str = "") -> None:
        with self.lock:
            now = self.clock()
            if failure is None:
                self.ok += 1
                self.latencies.append(latency)
                if self.open_failed:
                    gap = self._outage(now)
                    if self.longest is None or gap["seconds"] > self.longest["seconds"]:
                        self.longest = gap
                        self.ok_before_longest_end = self.ok - 1
                    self.open_failed = 0
                self.last_ok_at = now
                return
            self.failed += 1
            self.open_failed += 1
            if self.first_failure_at is None:
                self.first_failure_at = now
            self.last_failure_at = now
            self.failure_times.append((now, failure))
            self.by_class[failure] = self.by_class.get(failure, 0) + 1
            if len(self.first_failures) < self.keep:
                self.first_failures.append({"at": round(now - self.started, 1), "class": failure,
                                            "detail": detail[:300]})

    def _outage(self, end: float | None) -> dict:
        """The outage since the last answer: ended by an answer at `end`, or still going on (end None)."""
        since = self.last_ok_at if self.last_ok_at is not None else self.started
        return {"from": round(since, 3), "to": round(end, 3) if end is not None else None,
                "seconds": round((end if end is not None else self.clock()) - since, 3), "failed": self.open_failed}

    def summary(self) -> dict:
        with self.lock:
            lat = sorted(self.latencies)

            def pct(q: float) -> float | None:
                return round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None

            longest = self.longest
            if self.open_failed:
                still = self._outage(None)
                if longest is None or still["seconds"] > longest["seconds"]:
                    longest = still
            after: dict[str, int] = {}
            if longest is not None and longest["to"] is not None:
                for at, failure in self.failure_times:
                    if at > longest["to"]:
                        after[failure] = after.get(failure, 0) + 1
            return {"requests": self.ok + self.failed, "ok": self.ok, "failed": self.failed,
                    "failures_by_class": dict(self.by_class), "first_failures": list(self.first_failures),
                    "seconds": round(self.clock() - self.started, 1),
                    "started": round(self.started, 3),
                    "first_failure_at": round(self.first_failure_at, 3) if self.first_failure_at is not None else None,
                    "last_failure_at": round(self.last_failure_at, 3) if self.last_failure_at is not None else None,
                    "last_ok_at": round(self.last_ok_at, 3) if self.last_ok_at is not None else None,
                    "longest_outage": longest,
                    "failures_after_longest_outage": after if longest is not None and longest["to"] is not None else None,
                    "ok_after_longest_outage": self.ok - self.ok_before_longest_end
                    if longest is not None and longest["to"] is not None else None,
                    "latency_s": {"p50": pct(0.5), "p95": pct(0.95), "max": lat[-1] if lat else None}}


def one_request(url: str, model: str, key: str, prompt: str, max_tokens: int, timeout: float,
                ca_file: Path | None = None) -> tuple[str | None, str]:
    """(failure class or None, detail) of one chat completion; an https URL is verified against ca_file (read for
    this request, so a CA file replaced meanwhile counts from the next request) or the system's trust store."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            answer = json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return "http_%d" % err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as err:  # refused, reset, timeout, a certificate refused
        return "connection", str(getattr(err, "reason", err))
    except ValueError as err:
        return "bad_json", str(err)
    choices = (answer or {}).get("choices") or []
    if not choices or choices[0].get("message") is None:
        return "empty_answer", json.dumps(answer)[:300]
    return None, ""


def write_summary(path: Path, summary: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)


def wait_for_server_version(url: str, want: str, out: Path, timeout: float, stop: threading.Event) -> bool:
    """Poll <url>/version until it answers `want` (a leading "v" ignored); write the restart's figures to `out`:
    how long the server answered nothing, when the old version was last and the new one first seen (seconds from
    the start). False, with the error in `out`, when it did not within `timeout` or the loop was stopped."""
    start, last_old, down, seen = time.time(), None, None, None
    while time.time() - start < timeout and not stop.is_set():
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/version", timeout=2) as resp:
                seen = json.load(resp)["version"].lstrip("v")
            if seen == want:
                back = time.time()
                write_summary(out, {"version": want, "server_unanswered_s": round(back - (down or back), 1),
                                    "old_version_last_seen_s": round(last_old - start, 1) if last_old else None,
                                    "new_version_first_seen_s": round(back - start, 1)})
                return True
            last_old = time.time()
        except (OSError, ValueError, KeyError):
            down = down or time.time()
        stop.wait(0.5)
    write_summary(out, {"error": "the server did not answer %s within %.0f s (last: %s)" % (want, timeout, seen)})
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", required=True, help="base URL of the OpenAI-compatible API (127.0.0.1 in the lab)")
    parser.add_argument("--model", required=True, help="the route (model) name")
    parser.add_argument("--key-file", required=True, type=Path, help="file holding the inference API key")
    parser.add_argument("--follow-key-file", action="store_true",
                        help="read the key file again before each request (a client moved to a rotated key)")
    parser.add_argument("--ca-file", type=Path, help="CA file an https URL is verified against, read for each request")
    parser.add_argument("--summary", required=True, type=Path, help="JSON summary written here")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=1800.0, help="stop after this long in any case")
    parser.add_argument("--max-requests", type=int, default=0, help="stop after this many requests (0: no limit)")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--prompt-words", type=int, default=0,
                        help="pad each prompt with this many words of context (long prompts queue up in vLLM)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between two requests of one thread")
    parser.add_argument("--report-every", type=float, default=30.0)
    parser.add_argument("--after-server-version", metavar="VERSION",
                        help="first wait until <url>/version answers VERSION (a server restart), then count")
    parser.add_argument("--server-restart", type=Path, help="with --after-server-version: the restart's figures")
    args = parser.parse_args(argv)
    if args.after_server_version and not args.server_restart:
        parser.error("--after-server-version needs --server-restart FILE")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    try:
        key = args.key_file.read_text().strip()
    except OSError as err:
        parser.error("cannot read the key file %s: %s" % (args.key_file, err))
    if not key:
        parser.error("the key file %s is empty" % args.key_file)

    def current_key() -> str:
        # The file is replaced atomically by whoever moves the client; an unreadable moment keeps the last key.
        try:
            return args.key_file.read_text().strip() or key
        except OSError:
            return key

    tally = Tally()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.after_server_version:
        if not wait_for_server_version(args.url, args.after_server_version, args.server_restart,
                                       args.max_seconds, stop):
            print("route load: the server did not answer %s; see %s"
                  % (args.after_server_version, args.server_restart), flush=True)
            return 1
        print("route load: %s answers %s; counting from here" % (args.url, args.after_server_version), flush=True)
    sent = [0]
    sent_lock = threading.Lock()

    def worker(n: int) -> None:
        i = n
        while not stop.is_set():
            with sent_lock:
                if args.max_requests and sent[0] >= args.max_requests:
                    return
                sent[0] += 1
            start = time.monotonic()
            prompt = PROMPTS[i % len(PROMPTS)]
            if args.prompt_words:
                # Different context per request, so prefix caching cannot make the long prompts cheap.
                prompt = " ".join("w%d.%d" % (i, k) for k in range(args.prompt_words)) + "\n\n" + prompt
            failure, detail = one_request(args.url, args.model, current_key() if args.follow_key_file else key, prompt,
                                          args.max_tokens, args.timeout, args.ca_file)
            tally.record(time.monotonic() - start, failure, detail)
            i += args.concurrency
            stop.wait(args.pause)

    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(args.concurrency)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + args.max_seconds
    while any(t.is_alive() for t in threads) and not stop.is_set() and time.monotonic() < deadline:
        stop.wait(min(args.report_every, max(0.1, deadline - time.monotonic())))
        write_summary(args.summary, tally.summary())
    stop.set()
    for thread in threads:
        thread.join(args.timeout + 5)
    summary = tally.summary()
    write_summary(args.summary, summary)
    outage = summary["longest_outage"]
    print("route load: %d requests to %s in %.0f s, %d ok, %d failed%s%s" % (
        summary["requests"], args.model, summary["seconds"], summary["ok"], summary["failed"],
        (" " + json.dumps(summary["failures_by_class"])) if summary["failed"] else "",
        ("; longest outage %.1f s (%d failed)%s" % (outage["seconds"], outage["failed"],
                                                    "" if outage["to"] is not None else ", not over at the end")
         if outage else "")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A local Hugging Face Hub on 127.0.0.1 for tests: the real huggingface_hub client talks to it.

It serves what huggingface_hub 2.x needs for `snapshot_download` / `hf_hub_download` / `HfApi`:

  GET  /api/models/{repo}/revision/{rev}        model info: id, sha, siblings
  GET  /api/models/{repo}/tree/{rev}[/{dir}]    recursive listing: type, path, oid, size[, lfs]
  HEAD /{repo}/resolve/{rev}/{path}             X-Repo-Commit, quoted ETag, Content-Length
  GET  /{repo}/resolve/{rev}/{path}             body (Range supported)
  GET  /cdn/{sha256}                            LFS body on a second port (a different origin, as on the Hub)
  GET  /api/agent-harnesses                     empty registry (huggingface_hub builds its User-Agent from it)

Errors look like the Hub's: 404 with `X-Error-Code: RepoNotFound | RevisionNotFound | EntryNotFound`,
401 `RepoNotFound` for a private repo without its token. Every request is recorded (`hub.requests`) with the
bytes of body actually sent, so tests can count requests and re-sent bytes. `hub.cut_after(sha256, n)` makes
the next LFS GET of that blob close the connection after n body bytes (a network drop mid-file);
`hub.stall(sha256)` holds that blob's body until `hub.release()`, so a test can kill a client mid-download;
`hub.throttle(bytes_per_s)` paces every LFS body (16 KiB at a time), so a kill at a random moment lands mid-file;
`hub.pause_bodies()` holds every paced body until `hub.continue_bodies()` (a test lets the client read what the
kernel still buffers for it before it kills the client, so what the kill cost is what the client itself held).

File content is bytes or a `pathlib.Path` (big benchmark files are streamed from disk, never held in memory).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

CHUNK = 1 << 20
PACE_PIECE = 16 * 1024  # small: what sits in socket buffers when a client is killed stays small


@dataclass
class HubFile:
    """One file of a commit. `data` is bytes or a Path; the digests are computed once, streaming."""

    path: str
    data: bytes | Path
    lfs: bool = False
    size: int = 0
    git_oid: str = ""
    sha256: str = ""

    def __post_init__(self) -> None:
        sha1 = hashlib.sha1()
        sha256 = hashlib.sha256()
        self.size = len(self.data) if isinstance(self.data, bytes) else self.data.stat().st_size
        sha1.update(b"blob %d\0" % self.size)
        for chunk in self.chunks(0):
            sha1.update(chunk)
            sha256.update(chunk)
        self.git_oid, self.sha256 = sha1.hexdigest(), sha256.hexdigest()

    def chunks(self, start: int):
        """The body from `start`, in chunks of at most 1 MiB."""
        if isinstance(self.data, bytes):
            for pos in range(start, self.size, CHUNK):
                yield self.data[pos:pos + CHUNK]
            return
        with self.data.open("rb") as handle:
            handle.seek(start)
            while chunk := handle.read(CHUNK):
                yield chunk

    @property
    def etag(self) -> str:
        """The name huggingface_hub gives the blob: sha256 for LFS files, the git blob id otherwise."""
        return self.sha256 if self.lfs else self.git_oid


@dataclass
class Commit:
    sha: str
    files: dict[str, HubFile]


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, Commit]
    refs: dict[str, str] = field(default_factory=dict)
    token: str | None = None  # a private repo: requests need `Authorization: Bearer <token>`

    def resolve(self, rev: str) -> Commit | None:
        return self.commits.get(self.refs.get(rev, rev))


class _State:
    """What both listeners share."""

    def __init__(self, repos: list[Repo]):
        self.repos = {repo.repo_id: repo for repo in repos}
        self.blobs: dict[str, HubFile] = {}
        for repo in repos:
            for commit in repo.commits.values():
                for hub_file in commit.files.values():
                    if hub_file.lfs:
                        self.blobs[hub_file.sha256] = hub_file
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.cuts: dict[str, int] = {}
        self.stalled: set[str] = set()
        self.stall_started = threading.Event()
        self.release_event = threading.Event()
        self.cdn_base = ""
        self.rate: float | None = None  # bytes per second of an LFS body; None: as fast as the socket takes it
        self.flowing = threading.Event()  # cleared: paced bodies wait before their next piece
        self.flowing.set()


class _Handler(BaseHTTPRequestHandler):
    server_version = "fakehub/1"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """Quiet: the request log is `hub.requests`."""

    @property
    def state(self) -> _State:
        return self.server.state  # type: ignore[attr-defined]

    def do_HEAD(self):  # noqa: N802 (http.server naming)
        self._dispatch(head=True)

    def do_GET(self):  # noqa: N802
        self._dispatch(head=False)

    # -- plumbing ----------------------------------------------------------------------------------------
    def _record(self) -> dict:
        url = urlsplit(self.path)
        entry = {
            "method": self.command,
            "path": unquote(url.path),
            "query": parse_qs(url.query),
            "auth": self.headers.get("Authorization"),
            "range": self.headers.get("Range"),
            "port": self.server.server_address[1],
            "sent": 0,
        }
        with self.state.lock:
            self.state.requests.append(entry)
        return entry

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(status)
        merged = {"Content-Length": str(len(body))}
        merged.update(headers or {})
        for key, value in merged.items():
            self.send_header(key, value)
        self.end_headers()
        if body and not head:
            self.wfile.write(body)
            self._entry["sent"] += len(body)

    def _error(self, status: int, code: str, message: str, head: bool = False, extra: dict | None = None) -> None:
        headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
        headers.update(extra or {})
        self._send(status, json.dumps({"error": message}).encode(), headers, head)

    def _json(self, obj) -> None:
        self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _repo(self, parts: list[str]) -> tuple[Repo | None, list[str]]:
        if len(parts) >= 2 and f"{parts[0]}/{parts[1]}" in self.state.repos:
            return self.state.repos[f"{parts[0]}/{parts[1]}"], parts[2:]
        return None, parts

    def _authorized(self, repo: Repo) -> bool:
        return repo.token is None or self.headers.get("Authorization") == f"Bearer {repo.token}"

    # -- routes --------------------------------------------------------------------------------------------
    def _dispatch(self, head: bool) -> None:
        self._entry = self._record()  # pylint: disable=attribute-defined-outside-init
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        if parts[:2] == ["api", "agent-harnesses"]:
            return self._json({"standardEnvVars": [], "harnesses": {}})
        if parts[:2] == ["api", "models"]:
            return self._api(parts[2:])
        if parts[0] == "cdn" and len(parts) == 2:
            return self._cdn(parts[1], head)
        repo, rest = self._repo(parts)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found", head)
        if not self._authorized(repo):
            return self._error(401, "RepoNotFound", "Invalid credentials in Authorization header", head)
        if len(rest) >= 3 and rest[0] == "resolve":
            return self._resolve(repo, rest[1], "/".join(rest[2:]), head)
        return self._error(404, "EntryNotFound", "unsupported path", head)

    def _api(self, parts: list[str]) -> None:
        repo, rest = self._repo(parts)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        if not self._authorized(repo):
            return self._error(401, "RepoNotFound", "Invalid credentials in Authorization header")
        if len(rest) < 2 or rest[0] not in ("revision", "tree"):
            return self._error(404, "EntryNotFound", "unsupported api path")
        commit = repo.resolve(rest[1])
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rest[1]}")
        if rest[0] == "revision":
            return self._json({"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit.sha,
                               "private": repo.token is not None,
                               "siblings": [{"rfilename": p} for p in sorted(commit.files)]})
        prefix = "/".join(rest[2:])
        listing = []
        for path in sorted(commit.files):
            if prefix and not path.startswith(prefix + "/"):
                continue
            hub_file = commit.files[path]
            entry = {"type": "file", "path": path, "oid": hub_file.git_oid, "size": hub_file.size}
            if hub_file.lfs:
                entry["lfs"] = {"oid": hub_file.sha256, "size": hub_file.size, "pointerSize": 134}
            listing.append(entry)
        return self._json(listing)

    def _resolve(self, repo: Repo, rev: str, path: str, head: bool) -> None:
        commit = repo.resolve(rev)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
        hub_file = commit.files.get(path)
        if hub_file is None:
            return self._error(404, "EntryNotFound", f"{path} does not exist", head, {"X-Repo-Commit": commit.sha})
        common = {"X-Repo-Commit": commit.sha, "Accept-Ranges": "bytes", "ETag": f'"{hub_file.git_oid}"'}
        if hub_file.lfs:
            # The LFS body lives on another origin: huggingface_hub must not follow the redirect during its
            # HEAD call, or it misses X-Repo-Commit on the final response.
            common.update({"Location": f"{self.state.cdn_base}/cdn/{hub_file.sha256}",
                           "X-Linked-Etag": f'"{hub_file.sha256}"', "X-Linked-Size": str(hub_file.size)})
            return self._send(302, b"", common, head)
        return self._body(hub_file, common, head)

    def _cdn(self, sha256: str, head: bool) -> None:
        hub_file = self.state.blobs.get(sha256)
        if hub_file is None:
            return self._error(404, "EntryNotFound", "no such blob", head)
        return self._body(hub_file, {"ETag": f'"{sha256}"', "Accept-Ranges": "bytes"}, head)

    def _body(self, hub_file: HubFile, headers: dict, head: bool) -> None:
        start = 0
        status = 200
        requested = self.headers.get("Range")
        if requested and requested.startswith("bytes=") and not head:
            start = int(requested[6:].split("-")[0] or 0)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{hub_file.size - 1}/{hub_file.size}"
        self.send_response(status)
        headers.update({"Content-Length": str(hub_file.size - start), "Content-Type": "application/octet-stream"})
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if head:
            return None
        with self.state.lock:
            cut = self.state.cuts.pop(hub_file.sha256, None) if hub_file.lfs else None
        stalled = hub_file.lfs and hub_file.sha256 in self.state.stalled
        rate = self.state.rate if hub_file.lfs else None
        paced = time.monotonic()
        for chunk in self._paced(hub_file.chunks(start), rate):
            if cut is not None and self._entry["sent"] + len(chunk) >= cut:
                self.wfile.write(chunk[:max(cut - self._entry["sent"], 0)])
                self._entry["sent"] = cut
                self.wfile.flush()
                self.close_connection = True  # pylint: disable=attribute-defined-outside-init
                self.connection.shutdown(2)  # the drop: the client sees a short body
                return None
            if stalled and self._entry["sent"] > 0:
                self.state.stall_started.set()
                self.state.release_event.wait(60)
                stalled = False
            if rate and not self.state.flowing.is_set():
                self.state.flowing.wait(60)
                paced = time.monotonic()
            self.wfile.write(chunk)
            self._entry["sent"] += len(chunk)
            if rate:
                paced += len(chunk) / rate
                time.sleep(max(paced - time.monotonic(), 0))
        return None

    @staticmethod
    def _paced(chunks, rate):
        """The body in PACE_PIECE pieces when throttled (the pause comes after each piece), else as it is."""
        for chunk in chunks:
            if not rate:
                yield chunk
                continue
            for pos in range(0, len(chunk), PACE_PIECE):
                yield chunk[pos:pos + PACE_PIECE]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, state: _State):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state

    def handle_error(self, request, client_address):
        """A client that went away mid-body (killed on purpose by a test) is not a server error."""
        import sys  # pylint: disable=import-outside-toplevel
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHub:
    """Both listeners on ephemeral ports of 127.0.0.1; use as a context manager or start()/stop()."""

    def __init__(self, repos: list[Repo]):
        self.state = _State(repos)
        self._api = _Server(self.state)
        self._cdn = _Server(self.state)
        self.state.cdn_base = "http://127.0.0.1:%d" % self._cdn.server_address[1]
        self._threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self._api, self._cdn)]

    @property
    def endpoint(self) -> str:
        return "http://127.0.0.1:%d" % self._api.server_address[1]

    @property
    def requests(self) -> list[dict]:
        with self.state.lock:
            return list(self.state.requests)

    def reset_log(self) -> None:
        with self.state.lock:
            self.state.requests.clear()

    def bytes_sent(self, sha256: str | None = None) -> int:
        """Body bytes sent for one LFS blob (or for everything)."""
        return sum(r["sent"] for r in self.requests if sha256 is None or r["path"] == f"/cdn/{sha256}")

    def cut_after(self, sha256: str, nbytes: int) -> None:
        with self.state.lock:
            self.state.cuts[sha256] = nbytes

    def stall(self, sha256: str) -> None:
        self.state.stalled.add(sha256)
        self.state.stall_started.clear()
        self.state.release_event.clear()

    def throttle(self, bytes_per_s: float | None) -> None:
        """Pace LFS bodies at `bytes_per_s` (None: no limit)."""
        self.state.rate = bytes_per_s

    def pause_bodies(self) -> None:
        """Paced (throttled) bodies send nothing more until continue_bodies()."""
        self.state.flowing.clear()

    def continue_bodies(self) -> None:
        self.state.flowing.set()

    @property
    def cdn_port(self) -> int:
        return self._cdn.server_address[1]

    def release(self) -> None:
        self.state.stalled.clear()
        self.state.release_event.set()

    def start(self) -> "FakeHub":
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self.continue_bodies()
        for server, thread in zip((self._api, self._cdn), self._threads):
            server.shutdown()
            server.server_close()
            thread.join(10)

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

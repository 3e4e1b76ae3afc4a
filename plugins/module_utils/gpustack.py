# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one GPUStack REST client of pairserve.llm, shared by every module that talks to GPUStack.

Plain urllib through ansible.module_utils.urls, so the modules need no extra Python package on the
host that runs them. Facts about GPUStack 2.2.3 that this file encodes (checked against its source):
- errors come back as ``{"code", "reason", "message"}`` (422 validation errors use the same shape);
- list endpoints are paginated: ``?page=N&perPage=M`` -> ``{"items": [...], "pagination": {"totalPage"}}``;
- auth is ``Authorization: Bearer <api key>`` or HTTP Basic ``admin:<password>``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import socket
import time
from http.cookiejar import CookieJar
from pathlib import PurePosixPath

from ansible.module_utils.basic import env_fallback
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.six.moves.urllib.parse import urlencode, quote
from ansible_collections.pairserve.llm.plugins.module_utils.routes import reweigh, target_model
from ansible_collections.pairserve.llm.plugins.module_utils.urls_session import (
    CaPathError,
    cert_verify_error,
    cert_verify_message,
    reusable_request,
)

# The environment every replica gets from the seed. gpustack_model sends it merged with the user's env, which may
# add variables but not change these (gpustack_model refuses, and so does the validation play), for the reason
# SEED_ENV_WHY gives for each. replica_env (below) adds VLLM_CACHE_ROOT, which the user's env may set.
SEED_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
SEED_ENV_WHY = {
    "CUDA_DEVICE_ORDER": "it keeps the replica on the cards it is pinned to (NVML and the pinning count GPUs in PCI bus "
                         "order; CUDA by default counts fastest first, which puts a replica on the wrong cards of a "
                         "mixed host)",
    "PYTORCH_ALLOC_CONF": "it keeps the replica's memory from fragmenting (fragmentation cost the seed deployment its "
                          "last MiB of headroom)",
}


def seed_env_conflicts(env):
    """One sentence per seed variable that ``env`` sets to another value (none when it repeats the seed's)."""
    out = []
    for key, value in sorted(SEED_ENV.items()):
        if key in (env or {}) and str(env[key]) != value:
            out.append("%s=%s would replace the seed's %s=%s: %s; remove %s from it"
                       % (key, env[key], key, value, SEED_ENV_WHY[key], key))
    return out


# vLLM keeps its compile cache (torch.compile artefacts, what CUDA graph capture needs) under VLLM_CACHE_ROOT. GPUStack
# 2.2.3 points that at <worker data dir>/cache/vllm unless the model's env names it (_set_cache_env in
# worker/backends/vllm.py), a directory its replica container does not see when the worker runs on the host, as this
# collection runs it: the one directory GPUStack mounts is the checkpoint's parent, at the same path inside and out
# (_get_configured_mounts in worker/backends/base.py). The cache then lands in the container's writable layer, goes
# with the container at every restart, rollout and wake, and every start compiles again - on real cards inside the
# rollout and verify timeouts. So every model gets VLLM_CACHE_ROOT=<the checkpoint's parent>/.vllm-cache: mounted,
# it survives. Beside the checkpoint, not in it: the export of the checkpoint is kept identical to the snapshot.
# A user's env that names VLLM_CACHE_ROOT wins, as it does over GPUStack's own default (a location, unlike the seed
# variables, that changes no result); gpustack_model warns when it lies outside the mounted directory.
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
VLLM_CACHE_DIR = ".vllm-cache"


def replica_mount_dir(local_path):
    """The directory GPUStack 2.2.3 bind-mounts into the container of a replica of checkpoint ``local_path``, at the
    same path: the parent of the path as its worker resolves it (``str(Path(path).absolute())``, so a trailing slash
    or a ``.`` segment does not count). None for a path that is not absolute (the worker resolves it against its own
    working directory, which nothing here knows)."""
    if not isinstance(local_path, str) or not local_path.startswith("/"):
        return None
    return posixpath.dirname(str(PurePosixPath(local_path)))


def vllm_cache_root(local_path):
    """The VLLM_CACHE_ROOT every replica of checkpoint ``local_path`` gets: ``<replica_mount_dir>/.vllm-cache``
    (None when the mounted directory is not known)."""
    mount = replica_mount_dir(local_path)
    return posixpath.join(mount, VLLM_CACHE_DIR) if mount else None


def _inside(path, directory):
    path = posixpath.normpath(path)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def vllm_cache_root_outside_mount(local_path, env):
    """A sentence when ``env`` names a VLLM_CACHE_ROOT that the replica's container keeps in its own writable layer
    (outside the one directory GPUStack mounts for ``local_path``); None otherwise."""
    value = (env or {}).get(VLLM_CACHE_ROOT)
    mount = replica_mount_dir(local_path)
    if value is None or mount is None or (str(value).startswith("/") and _inside(str(value), mount)):
        return None
    return ("env sets VLLM_CACHE_ROOT=%s, outside %s, the one directory GPUStack mounts into the replica's container: "
            "vLLM's compile cache there is lost at every restart, rollout and wake, and each start compiles again. "
            "Remove VLLM_CACHE_ROOT from env for the default, %s" % (value, mount, vllm_cache_root(local_path)))


def replica_cache_dir(local_path, env=None):
    """The directory on the node behind the replica's VLLM_CACHE_ROOT, the same path in its container: ``env``'s
    VLLM_CACHE_ROOT when it names one inside the mounted directory, else vllm_cache_root(local_path). None when
    nothing on the node backs it (the env names one outside the mounted directory, or the mount is not known)."""
    if VLLM_CACHE_ROOT in (env or {}):
        if vllm_cache_root_outside_mount(local_path, env) or replica_mount_dir(local_path) is None:
            return None
        return posixpath.normpath(str(env[VLLM_CACHE_ROOT]))
    return vllm_cache_root(local_path)


def replica_env(local_path, env):
    """The env gpustack_model sends for a replica of checkpoint ``local_path``: SEED_ENV, VLLM_CACHE_ROOT
    (vllm_cache_root) unless ``env`` names it, then ``env`` (check seed_env_conflicts first: its values win here)."""
    out = dict(SEED_ENV)
    root = vllm_cache_root(local_path)
    if root:
        out[VLLM_CACHE_ROOT] = root
    out.update(env or {})
    return out


# Methods GPUStack handles idempotently: safe to repeat after a 5xx or a dropped connection.
IDEMPOTENT_METHODS = frozenset(("GET", "PUT", "DELETE", "HEAD"))
PER_PAGE = 100


class GpuStackError(Exception):
    """A failed GPUStack call: what was asked, the HTTP status and the server's own message."""

    def __init__(self, message, status=None, server_message=None, method=None, url=None, reason=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.server_message = server_message
        self.reason = reason
        self.method = method
        self.url = url

    def __str__(self):
        return self.message

    def to_result(self):
        """Keys a module adds to fail_json so playbooks can branch on the status."""
        return {"status": self.status, "server_message": self.server_message}


def gpustack_argument_spec():
    """Connection options shared by every GPUStack module (documented by doc fragment pairserve.llm.gpustack)."""
    return {
        "api_url": {"type": "str", "required": True, "fallback": (env_fallback, ["GPUSTACK_API_URL"])},
        "api_key": {"type": "str", "no_log": True, "fallback": (env_fallback, ["GPUSTACK_API_KEY"])},
        "username": {"type": "str", "default": "admin"},
        "password": {"type": "str", "no_log": True, "fallback": (env_fallback, ["GPUSTACK_PASSWORD"])},
        "timeout": {"type": "int", "default": 30},
        "retries": {"type": "int", "default": 3},
        "validate_certs": {"type": "bool", "default": True},
        "ca_path": {"type": "path"},
    }


GPUSTACK_REQUIRED_ONE_OF = [("api_key", "password")]


def _server_message(body):
    """The human part of a GPUStack error body, whatever its shape; raw text otherwise."""
    if not body:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        text = body.strip()
        return text[:500] if text else None
    if isinstance(data, dict):
        if isinstance(data.get("message"), str):
            return data["message"]
        detail = data.get("detail")
        if isinstance(detail, str):
            return detail
        if isinstance(detail, list):  # FastAPI's own 422 body
            return "; ".join(
                "%s: %s" % (".".join(str(p) for p in item.get("loc", [])), item.get("msg"))
                for item in detail if isinstance(item, dict))
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return error["message"]
    return json.dumps(data)[:500]


class GpuStackClient:
    """Talks to one GPUStack server.

    Retries with exponential backoff (``backoff * 2**attempt`` seconds) on connection errors and on
    HTTP 5xx for idempotent methods. A POST is retried only when the connection was refused (the
    request never reached the server), so a create is never sent twice. A TLS certificate that cannot be
    verified is not retried: waiting does not change it. ``ca_path``: the PEM file of the CA that signed the
    server's certificate (the system trust store when None); a path that is not one fails here, not at a call.
    """

    def __init__(self, api_url, api_key=None, username="admin", password=None, timeout=30,
                 validate_certs=True, retries=3, backoff=1.0, sleep=time.sleep, ca_path=None):
        if not api_url:
            raise GpuStackError("api_url is empty: set it to the GPUStack server, e.g. http://gpustack:30080")
        base = api_url.rstrip("/")
        if base.endswith("/v2"):
            base = base[:-3]
        if not base.startswith(("http://", "https://")):
            raise GpuStackError("api_url %r is not an http(s) URL: use e.g. http://gpustack:30080" % api_url)
        self.base_url = base
        self.api_key = api_key
        self.username = username
        self.password = password
        self.timeout = timeout
        self.validate_certs = validate_certs
        self.ca_path = ca_path
        self.retries = max(0, int(retries))
        self._session = None  # an ansible Request with one TLS context, made at the first call (here with ca_path)
        if ca_path:
            self._http()  # reads ca_path now: a wrong one fails before anything is sent
        self.backoff = backoff
        self._sleep = sleep
        # (method, path) of every request that reached the server; tests count PUTs with it.
        self.calls = []

    @classmethod
    def from_module(cls, module):
        params = module.params
        return cls(params["api_url"], api_key=params.get("api_key"), username=params.get("username") or "admin",
                   password=params.get("password"), timeout=params.get("timeout", 30),
                   validate_certs=params.get("validate_certs", True), retries=params.get("retries", 3),
                   ca_path=params.get("ca_path"))

    # -- transport -------------------------------------------------------------------------------

    def _auth(self):
        if self.api_key:
            return {"headers": {"Authorization": "Bearer %s" % self.api_key}}
        if self.password is not None:
            return {"url_username": self.username, "url_password": self.password, "force_basic_auth": True}
        return {}

    def _http(self):
        """One TLS context for every call of this client (urls_session says why)."""
        if self._session is None:
            try:
                self._session = reusable_request(self.validate_certs, self.ca_path)
            except CaPathError as err:
                raise GpuStackError(str(err), url=self.base_url) from err
        return self._session

    def url(self, path, params=None):
        url = self.base_url + path
        if params:
            url += "?" + urlencode([(k, v) for k, v in params.items() if v is not None])
        return url

    def request(self, method, path, body=None, params=None):
        """One call; returns the decoded JSON body (None when empty). Raises GpuStackError."""
        method = method.upper()
        url = self.url(path, params)
        auth = self._auth()
        headers = {"Accept": "application/json"}
        headers.update(auth.pop("headers", {}))
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        attempt = 0
        while True:
            try:
                resp = self._http().open(method, url, data=data, headers=headers, timeout=self.timeout,
                                         follow_redirects="none", cookies=CookieJar(), **auth)
                raw = resp.read()
                self.calls.append((method, path))
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError:
                    raise GpuStackError("GPUStack answered %s %s with a body that is not JSON: %r"
                                        % (method, url, raw[:200]), status=resp.getcode(), method=method, url=url)
            except HTTPError as err:
                self.calls.append((method, path))
                try:
                    text = err.read().decode("utf-8", "replace")
                except Exception:  # pylint: disable=broad-except
                    text = ""
                status = err.code
                if status >= 500 and method in IDEMPOTENT_METHODS and attempt < self.retries:
                    self._sleep(self.backoff * (2 ** attempt))
                    attempt += 1
                    continue
                raise self._http_error(method, url, status, text)
            except (URLError, socket.timeout, ConnectionError, OSError) as err:
                unverified = cert_verify_error(err)
                if unverified is not None:
                    raise GpuStackError("GPUStack %s %s failed: %s" % (method, url, cert_verify_message(
                        unverified, self.ca_path)), method=method, url=url, reason=unverified)
                reason = getattr(err, "reason", err)
                refused = isinstance(reason, ConnectionRefusedError)
                if attempt < self.retries and (method in IDEMPOTENT_METHODS or refused):
                    self._sleep(self.backoff * (2 ** attempt))
                    attempt += 1
                    continue
                raise GpuStackError(
                    "cannot reach GPUStack at %s (%s %s failed after %d attempt(s): %s); check api_url "
                    "and that the GPUStack server is running and listening there"
                    % (self.base_url, method, path, attempt + 1, reason), method=method, url=url)

    def _http_error(self, method, url, status, text):
        server_message = _server_message(text)
        quoted = server_message or "(empty body)"
        if status == 401:
            how = "the API key (api_key)" if self.api_key else "username %r / password" % self.username
            hint = "GPUStack rejected %s: check the credentials" % how
        elif status == 403:
            hint = "the credentials are valid but not allowed to do this (an inference-only API key?)"
        elif status == 404:
            hint = "not found"
        elif status >= 500:
            # e.g. PostgreSQL down: GPUStack 2.2.3 answers 500 "Connect call failed ('127.0.0.1', <db port>)"
            hint = ("the GPUStack server at %s failed to handle it: check that server's log and that its database "
                    "(PostgreSQL) is up, then rerun" % self.base_url)
        else:
            hint = None
        msg = "GPUStack %s %s failed: HTTP %s: %s" % (method, url, status, quoted)
        if hint:
            msg += " (%s)" % hint
        return GpuStackError(msg, status=status, server_message=server_message, method=method, url=url)

    def get(self, path, params=None):
        return self.request("GET", path, params=params)

    def post(self, path, body=None):
        return self.request("POST", path, body=body if body is not None else {})

    def put(self, path, body):
        return self.request("PUT", path, body=body)

    def delete(self, path):
        return self.request("DELETE", path)

    # -- helpers over the REST shape ---------------------------------------------------------------

    def list(self, path, params=None):
        """Every item of a paginated list endpoint (follows ``pagination.totalPage``)."""
        items = []
        page = 1
        while True:
            query = dict(params or {})
            query.update(page=page, perPage=PER_PAGE)
            data = self.get(path, query)
            if isinstance(data, list):  # a few endpoints answer a bare list
                return data
            chunk = (data or {}).get("items") or []
            items.extend(chunk)
            total_pages = ((data or {}).get("pagination") or {}).get("totalPage") or 1
            if page >= total_pages or not chunk:
                return items
            page += 1

    def find(self, path, name, params=None):
        """The one live item whose ``name`` is exactly ``name``, or None."""
        for item in self.list(path, params):
            if item.get("name") == name and not item.get("deleted_at"):
                return item
        return None

    def check_auth(self):
        """Fail early, with the cause, on a wrong URL or wrong credentials."""
        return self.get("/v2/users/me")

    # -- resources used by several modules -------------------------------------------------------

    def cluster_by_name(self, name):
        return self.find("/v2/clusters", name)

    def resolve_cluster_id(self, cluster):
        """Cluster id from an id or a name; GpuStackError naming the cluster when it does not exist."""
        if cluster is None:
            return None
        if isinstance(cluster, int) or (isinstance(cluster, str) and cluster.isdigit()):
            return int(cluster)
        found = self.cluster_by_name(cluster)
        if not found:
            names = sorted(c.get("name") for c in self.list("/v2/clusters"))
            raise GpuStackError("cluster %r does not exist in GPUStack (existing: %s); create it with "
                                "pairserve.llm.gpustack_cluster first" % (cluster, ", ".join(names) or "none"))
        return found["id"]


# -- backend versions that carry an image ------------------------------------------------------
#
# GPUStack 2.2.3's model update (PUT /v2/models/{id}, routes/models.py) sets ``image_name`` and ``run_command``
# to None whenever the backend is not Custom and the stored model has either. A vLLM-backend model that names
# its runner image itself therefore loses the image on its first update (a new argument, a replica count from
# the controller), and its next instance runs GPUStack's catalogue image. GPUStack's own way to run a chosen
# image with a built-in backend is a user-defined version of that backend (PUT /v2/inference-backends/{id},
# ``version_configs``): the worker resolves the model's ``backend_version`` there first
# (worker/backends/base.py, ``_resolve_image``), and the model carries no image to lose. Version names of
# built-in backends must end in ``-custom``; ``custom_framework`` must name the workers' GPU type or the
# scheduler's backend-framework filter drops every worker.

BACKEND_VERSION_SUFFIX = "-custom"
# The fields of an inference backend that a PUT replaces (routes/inference_backend.py, update handler):
# every one is sent back as read, so that only version_configs changes.
BACKEND_PUT_FIELDS = ("backend_name", "default_version", "default_backend_param", "default_run_command",
                      "default_entrypoint", "health_check_path", "description", "default_env",
                      "backend_source", "parameter_format", "common_parameters", "enabled")
IMAGE_DIGEST_RE = re.compile(r"@sha256:([0-9a-f]{64})$")


def pinned_backend_version(version, image):
    """The backend version name that carries ``image``: ``<version>-<12 hex>-custom``.

    The 12 hex are the start of the image's sha256 digest when the reference pins one, else of the sha256 of
    the reference itself. A new image therefore is a new version name, so a model moved to it differs from
    the server and is rolled out, and the version still named by a rolled-back model keeps its own image.
    The name starts with the upstream version: GPUStack's version-gated arguments compare that part.
    """
    if not version or not re.match(r"^[0-9]+(\.[0-9]+)+([.+_-]?[0-9A-Za-z]+)*\Z", version):
        raise GpuStackError("backend version %r is not a version such as 0.25.1" % (version,))
    if version.endswith(BACKEND_VERSION_SUFFIX):
        raise GpuStackError("backend version %r already ends in %r: give the upstream version (e.g. 0.25.1)"
                            % (version, BACKEND_VERSION_SUFFIX))
    if not image or any(c.isspace() for c in image):
        raise GpuStackError("image %r is not an image reference" % (image,))
    found = IMAGE_DIGEST_RE.search(image)
    ident = found.group(1)[:12] if found else hashlib.sha256(image.encode("utf-8")).hexdigest()[:12]
    return "%s-%s%s" % (version, ident, BACKEND_VERSION_SUFFIX)


def is_pinned_backend_version(name):
    """True for a version name made by pinned_backend_version."""
    return bool(re.match(r"^.+-[0-9a-f]{12}" + re.escape(BACKEND_VERSION_SUFFIX) + "$", name or ""))


def backend_row(client, backend):
    """The platform row of an inference backend (``GET /v2/inference-backends/backend_name/<name>``)."""
    return client.get("/v2/inference-backends/backend_name/%s" % quote(backend, safe=""))


def backend_versions(row):
    """The user-defined versions of a backend row (built-in versions carry built_in_frameworks)."""
    configs = (row or {}).get("version_configs") or {}
    return dict((name, conf) for name, conf in configs.items() if not (conf or {}).get("built_in_frameworks"))


def put_backend_versions(client, row, versions):
    """Replace the user-defined versions of ``row`` with ``versions``, every other field sent back as read."""
    body = dict((key, row.get(key)) for key in BACKEND_PUT_FIELDS if key in row)
    body["version_configs"] = versions
    return client.put(path_id("/v2/inference-backends", row["id"]), body)


def path_id(prefix, item_id):
    return "%s/%s" % (prefix, quote(str(item_id)))


# -- route targets -----------------------------------------------------------------------------------------

# Fields of a route target sent back as read, so that a PUT changes only weights and fallback codes.
ROUTE_TARGET_KEPT = ("provider_id", "provider_model_name", "overridden_model_name")


def reweighed_route_targets(current, names_by_id, changes):
    """The targets of a route PUT that gives ``changes`` ({model name: weight}) to some of ``current`` (the route's
    targets as the server has them), the others kept, every target id kept (GPUStack recreates a target sent
    without one), the drain rule applied by ``routes.reweigh``. ValueError for a model the route does not hold."""
    now = [{"model": target_model(t, names_by_id),
            "weight": t.get("weight", 0), "fallback_status_codes": t.get("fallback_status_codes")} for t in current]
    body = []
    for target, new in zip(current, reweigh(now, changes)):
        item = {"id": target["id"], "model_id": target.get("model_id"), "weight": new["weight"],
                "fallback_status_codes": new["fallback_status_codes"]}
        for key in ROUTE_TARGET_KEPT:
            if target.get(key) is not None:
                item[key] = target[key]
        body.append(item)
    return body


# -- diffs -----------------------------------------------------------------------------------------

def _normalize(value):
    """JSON round trip so tuples/lists and int/str keys compare the way the server stores them."""
    return json.loads(json.dumps(value, sort_keys=True))


def field_diff(desired, existing, subset_keys=()):
    """Per-field comparison of the keys the user manages.

    desired: the managed fields (None values are not managed and skipped).
    existing: the server's object, or None when it does not exist.
    subset_keys: dict-valued fields where only the desired sub-keys are compared (the server adds
    its own keys, e.g. ``gpu_selector.gpus_per_replica: null``).
    Returns (changed_keys, before, after): before/after hold only the changed managed keys, which is
    what Ansible's diff callback shows.
    """
    existing = existing or {}
    changed = []
    before = {}
    after = {}
    for key in sorted(desired):
        want = desired[key]
        if want is None:
            continue
        want_n = _normalize(want)
        have = existing.get(key)
        have_n = _normalize(have) if have is not None else None
        if key in subset_keys and isinstance(want_n, dict) and isinstance(have_n, dict):
            have_cmp = {k: have_n.get(k) for k in want_n}
        else:
            have_cmp = have_n
        if have_cmp != want_n:
            changed.append(key)
            before[key] = have_n
            after[key] = want_n
    return changed, before, after


def present_diff(name, changed, before, after, exists):
    """The ``diff`` dict modules return: per-field before/after, with headers naming the object."""
    return {
        "before": before if exists else {},
        "after": after,
        "before_header": "%s (%s)" % (name, "existing" if exists else "absent"),
        "after_header": "%s (desired)" % name,
    }


def absent_diff(name, existing):
    return {"before": existing or {}, "after": {}, "before_header": name, "after_header": "%s (absent)" % name}


def ensure_absent(module, client, result, kind, path, name, existing, shown=None):
    """state=absent of a module: delete ``existing`` (check mode: only say so) with a diff showing ``shown``
    (default: the object itself), then exit. Nothing to delete is changed=false."""
    if existing:
        result.update(changed=True, diff=absent_diff("%s %s" % (kind, name), existing if shown is None else shown))
        if not module.check_mode:
            try:
                client.delete(path_id(path, existing["id"]))
            except GpuStackError as err:
                fail(module, err, "cannot delete GPUStack %s %r" % (kind, name))
    module.exit_json(**result)


def value_authenticates(client, value):
    """True when API key ``value`` is live on ``client``'s server: GPUStack answers 200, or 403 for a key whose scope
    excludes /v2 (an inference key). GPUStack 2.2.3 checks a bearer key against its database on every request
    (api/auth.py get_user_from_api_token; the lookup cache is dropped when the key is deleted), so a deleted key is
    refused at once."""
    probe = GpuStackClient(client.base_url, api_key=value, timeout=client.timeout,
                           validate_certs=client.validate_certs, retries=client.retries, ca_path=client.ca_path)
    try:
        probe.get("/v2/users/me")
    except GpuStackError as err:
        if err.status == 403:
            return True
        if err.status == 401:
            return False
        raise
    return True


def fail(module, err, action):
    """fail_json quoting the server's own message and keeping the HTTP status for playbooks."""
    module.fail_json(msg="%s: %s" % (action, err), **err.to_result())

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller's wheel: the package ``pairserve_controller`` (roles/controller/files/) and the collection's
module_utils it imports, at their import path, as one installable wheel (PEP 427) built on the Ansible controller.

The node installs it into the controller's venv with pip, so nothing is copied file by file and nothing on the node
edits ``sys.path``. Which module_utils go in is read from the package's imports (and theirs, transitively): there is
no list to keep in step. The wheel is reproducible: the same sources give the same bytes (entries sorted, fixed
times and modes), so copying it to a node is idempotent; its version is the collection's with the sources' digest as
a local label (``0.1.0+g<12 hex>``), so a change of any source is a new version pip installs and an unchanged one is
not installed again.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import json
import os
import re
import zipfile
from pathlib import Path

from ansible_collections.pairserve.llm.plugins.module_utils._files import atomic_write
from ansible_collections.pairserve.llm.plugins.plugin_utils.role_defaults import ROLES

COLLECTION = ROLES.parent
PACKAGE = COLLECTION / "roles" / "controller" / "files" / "pairserve_controller"
NAME = "pairserve-controller"
MODULE_UTILS = "ansible_collections.pairserve.llm.plugins.module_utils"
# A zip entry's time is the DOS epoch: the wheel's bytes depend on its sources only.
EPOCH = (1980, 1, 1, 0, 0, 0)
ENTRY_POINT = "pairserve-controller = pairserve_controller.cli:main"
REQUIRES_PYTHON = ">=3.10"


class WheelError(ValueError):
    """A package that cannot be built: a module_utils import that names no file, a source that does not parse."""


def collection_version(root: Path = COLLECTION) -> str:
    """The collection's version: MANIFEST.json of an installed collection, else galaxy.yml of a checkout."""
    manifest = root / "MANIFEST.json"
    if manifest.is_file():
        return json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"]
    galaxy = root / "galaxy.yml"
    if galaxy.is_file():
        found = re.search(r"(?m)^version:\s*['\"]?([0-9][^'\"\s]*)", galaxy.read_text(encoding="utf-8"))
        if found:
            return found.group(1)
    raise WheelError("no version in %s or %s" % (manifest, galaxy))


def _module_utils_imports(source: str, path: Path) -> set:
    """Names of the collection's module_utils that ``source`` imports (``from <MODULE_UTILS> import x``,
    ``from <MODULE_UTILS>.x import y``, ``import <MODULE_UTILS>.x``)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise WheelError("%s does not parse: %s" % (path, exc)) from exc
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == MODULE_UTILS:
                names.update(alias.name for alias in node.names)
            elif node.module.startswith(MODULE_UTILS + "."):
                names.add(node.module[len(MODULE_UTILS) + 1:].split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(MODULE_UTILS + "."):
                    names.add(alias.name[len(MODULE_UTILS) + 1:].split(".")[0])
    return names


def sources(package: Path = PACKAGE, module_utils: Path = COLLECTION / "plugins" / "module_utils") -> dict:
    """{path in the wheel: bytes}: the package's modules and every module_utils file they reach."""
    files = {}
    wanted = set()
    for path in sorted(package.glob("*.py")):
        data = path.read_bytes()
        files["pairserve_controller/" + path.name] = data
        wanted |= _module_utils_imports(data.decode("utf-8"), path)
    if not files:
        raise WheelError("no Python files in %s" % package)
    done = set()
    while wanted - done:
        name = sorted(wanted - done)[0]
        done.add(name)
        path = module_utils / (name + ".py")
        if not path.is_file():
            raise WheelError("the controller imports %s.%s, which is not a file of the collection (%s)"
                             % (MODULE_UTILS, name, path))
        data = path.read_bytes()
        files[MODULE_UTILS.replace(".", "/") + "/" + path.name] = data
        wanted |= _module_utils_imports(data.decode("utf-8"), path)
    return files


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _entry(name: str, data: bytes, archive: zipfile.ZipFile) -> None:
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    info.create_system = 3  # Unix, whatever the controller runs on
    archive.writestr(info, data, compresslevel=9)


def build(package: Path = PACKAGE, module_utils: Path = COLLECTION / "plugins" / "module_utils",
          version: str | None = None) -> tuple:
    """(file name, version, wheel bytes) of the controller's wheel."""
    files = sources(package, module_utils)
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    version = "%s+g%s" % (version or collection_version(), digest.hexdigest()[:12])
    dist_info = "pairserve_controller-%s.dist-info" % version
    files[dist_info + "/METADATA"] = (
        "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: pairserve controller: route weights from queued "
        "work, and sleep/wake of one replica (pairserve.llm)\nLicense: GPL-3.0-or-later\nRequires-Python: %s\n"
        % (NAME, version, REQUIRES_PYTHON)).encode()
    files[dist_info + "/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: pairserve.llm\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[dist_info + "/entry_points.txt"] = ("[console_scripts]\n%s\n" % ENTRY_POINT).encode()
    record = "".join("%s,%s,%d\n" % (name, _record_hash(data), len(data)) for name, data in sorted(files.items()))
    files[dist_info + "/RECORD"] = (record + dist_info + "/RECORD,,\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        # dist-info last, RECORD at the very end, as wheel builders write them
        for name in sorted(files, key=lambda n: (n.startswith(dist_info), n.endswith("/RECORD"), n)):
            _entry(name, files[name], archive)
    return "pairserve_controller-%s-py3-none-any.whl" % version, version, out.getvalue()


def default_cache_dir() -> Path:
    """Where the wheels are kept on the Ansible controller: $XDG_CACHE_HOME/pairserve.llm/wheels (~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pairserve.llm" / "wheels"


def write(cache_dir: Path | None = None, **kwargs) -> dict:
    """The wheel built and kept in ``cache_dir`` (written once: its name changes with its content); what a task
    needs to copy and install it."""
    name, version, data = build(**kwargs)
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / name
    sha256 = hashlib.sha256(data).hexdigest()
    if not (path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256):
        atomic_write(str(path), data, mode=0o644)
    return {"path": str(path), "file": name, "name": NAME, "version": version, "sha256": sha256}

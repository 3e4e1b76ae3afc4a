"""The controller's wheel (plugins/plugin_utils/controller_wheel.py, lookup controller_wheel): what it holds, that
it is reproducible, that pip installs it and that the installed copy runs on its own; the lookup through Ansible."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.pairserve.llm.plugins.plugin_utils import controller_wheel as cw
from support.ansible_runner import run_local_play

MODULE_UTILS = "ansible_collections/pairserve/llm/plugins/module_utils/"


def _names(data: bytes) -> list:
    return zipfile.ZipFile(io.BytesIO(data)).namelist()


def test_the_wheel_holds_the_package_and_exactly_the_module_utils_it_imports():
    name, version, data = cw.build()
    assert name == "pairserve_controller-%s-py3-none-any.whl" % version
    assert version.startswith(cw.collection_version() + "+g") and len(version.split("+g")[1]) == 12
    names = _names(data)
    package = sorted(p.name for p in cw.PACKAGE.glob("*.py"))
    assert sorted(n.split("/")[1] for n in names if n.startswith("pairserve_controller/")) == package
    # the package imports gpustack, routes, reach (service, policy, gpustack_access); gpustack imports
    # urls_session and replica_names: the closure, nothing else (no bench, no hub)
    assert sorted(n[len(MODULE_UTILS):] for n in names if n.startswith(MODULE_UTILS)) == [
        "gpustack.py", "reach.py", "replica_names.py", "routes.py", "urls_session.py"]
    assert names[-1] == "pairserve_controller-%s.dist-info/RECORD" % version


def test_the_wheel_is_reproducible_and_its_version_follows_its_sources(tmp_path):
    first, again = cw.build(), cw.build()
    assert first == again
    package = tmp_path / "pairserve_controller"
    package.mkdir()
    for path in cw.PACKAGE.glob("*.py"):
        (package / path.name).write_bytes(path.read_bytes())
    copy = cw.build(package=package)
    assert copy == first  # the same sources from elsewhere: the same bytes
    (package / "policy.py").write_bytes((package / "policy.py").read_bytes() + b"\n# changed\n")
    changed = cw.build(package=package)
    assert changed[1] != first[1] and changed[1].split("+")[0] == first[1].split("+")[0]


def test_record_lists_every_file_with_its_hash_and_size():
    _name, version, data = cw.build()
    archive = zipfile.ZipFile(io.BytesIO(data))
    record = archive.read("pairserve_controller-%s.dist-info/RECORD" % version).decode().splitlines()
    listed = {}
    for line in record:
        path, digest, size = line.rsplit(",", 2)
        listed[path] = (digest, size)
    assert sorted(listed) == sorted(archive.namelist())
    for path, (digest, size) in listed.items():
        if path.endswith("/RECORD"):
            assert (digest, size) == ("", "")
            continue
        content = archive.read(path)
        assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        assert int(size) == len(content)
    entry_points = archive.read("pairserve_controller-%s.dist-info/entry_points.txt" % version).decode()
    assert entry_points == "[console_scripts]\npairserve-controller = pairserve_controller.cli:main\n"


def test_an_import_of_a_module_utils_file_that_does_not_exist_is_named(tmp_path):
    package = tmp_path / "pairserve_controller"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from ansible_collections.pairserve.llm.plugins.module_utils.no_such_file import thing\n")
    with pytest.raises(cw.WheelError, match="imports ansible_collections.pairserve.llm.plugins.module_utils.no_such_file"):
        cw.build(package=package)


def test_pip_installs_it_and_the_installed_command_runs_without_this_checkout(tmp_path):
    wheel = cw.write(tmp_path / "wheels")
    assert wheel["name"] == "pairserve-controller" and os.path.basename(wheel["path"]) == wheel["file"]
    assert hashlib.sha256(open(wheel["path"], "rb").read()).hexdigest() == wheel["sha256"]
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                    wheel["path"]], check=True, timeout=120)
    assert (site / "bin" / "pairserve-controller").is_file()
    env = dict((k, v) for k, v in os.environ.items() if k != "PYTHONPATH")
    env["PYTHONPATH"] = str(site)
    code = ("import importlib.metadata as m, pairserve_controller, ansible_collections.pairserve.llm.plugins."
            "module_utils.gpustack as g; print(m.version('pairserve-controller')); print(pairserve_controller.__file__);"
            " print(g.__file__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                          cwd=str(tmp_path), env=env)
    version, package, client = proc.stdout.split()
    assert version == wheel["version"]
    assert package.startswith(str(site)) and client.startswith(str(site)), proc.stdout
    help_text = subprocess.run([str(site / "bin" / "pairserve-controller"), "--help"], capture_output=True, text=True,
                               check=True, timeout=60, cwd=str(tmp_path), env=env).stdout
    assert "--check-config" in help_text


def test_write_keeps_one_file_per_version_and_leaves_it_alone_when_unchanged(tmp_path):
    first = cw.write(tmp_path)
    stamp = os.stat(first["path"]).st_mtime_ns
    second = cw.write(tmp_path)
    assert second == first and os.stat(first["path"]).st_mtime_ns == stamp
    assert sorted(os.listdir(tmp_path)) == [first["file"]]  # no temporary file left


def test_the_lookup_builds_it_in_the_directory_asked_for(tmp_path):
    res = run_local_play(tmp_path, "controller wheel", [
        {"name": "Build", "ansible.builtin.debug": {"msg": "{{ lookup('pairserve.llm.controller_wheel', dir=wheels) }}"}},
    ], {"wheels": str(tmp_path / "wheels")})
    assert res.rc == 0, res.stdout[-3000:]
    wheel = res.by_task["Build"]["msg"]
    assert wheel["path"] == str(tmp_path / "wheels" / wheel["file"]) and os.path.isfile(wheel["path"])
    assert wheel["version"] == cw.build()[1]

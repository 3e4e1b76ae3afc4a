#!/usr/bin/env python
"""Resolve the GPUStack constraints files, one per GPUStack release and node Python, with pip's own resolver.

    tools/resolve_constraints.py 2.2.3 2.3.0          # (re)write files/py3.X/gpustack-<release>.constraints.txt
    tools/resolve_constraints.py --python 3.12 2.2.3  # one Python only
    tools/resolve_constraints.py --check              # resolve every file again; fail unless each resolves to itself
    tools/resolve_constraints.py --pip-options 3.12   # the target options, one per line (build_wheelhouse.sh)

Inputs, in roles/gpustack_install/files/:
  gpustack-<release>.constraints.txt          the release's holds: what the release needs beyond what gpustack
                                              itself declares (SQLAlchemy < 2.1 for 2.2.3), written by hand
  py3.X/gpustack-<release>.constraints.txt    the output: every package `pip install gpustack==<release>`
                                              installs on that Python, pinned; what the gpustack_install role uses

Each node Python is resolved for the system that ships it (TARGETS): its CPython version, its glibc (the
manylinux tags its pip accepts), linux x86_64, wheels only (a node has no compiler). pip evaluates environment
markers (`exceptiongroup; python_version < "3.11"`) with the interpreter it runs on even under --python-version;
the resolver here runs pip with the target's marker values, so a 3.10 file is what pip on a 3.10 node installs.

Regenerating keeps every pin of the existing file (else of the reference Python's) that still resolves and lets pip
choose only for the rest: a pin that has no wheel for the target, or that the resolver reports in a conflict, is
dropped and resolved again. --fresh drops them all (newest of everything; for a new GPUStack release).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILES = REPO / "roles" / "gpustack_install" / "files"
INDEX_URL = "https://pypi.org/simple"
CACHE_DIR = REPO / ".cache" / "pip-resolve"


@dataclass(frozen=True)
class Target:
    """A node Python: the supported system that ships it, its CPython version and glibc."""

    system: str
    python: str      # full version of the system's python3 (markers, Requires-Python)
    glibc_minor: int  # glibc 2.<minor>: the newest manylinux_2_<minor> tag its pip accepts

    @property
    def minor(self) -> str:
        return ".".join(self.python.split(".")[:2])


# The supported systems (roles/preflight refuses every other one) and the python3 each ships.
TARGETS = {t.minor: t for t in (Target("Ubuntu 22.04", "3.10.12", 35),
                                Target("Debian 12", "3.11.2", 36),
                                Target("Ubuntu 24.04", "3.12.3", 39))}
# The Python the lab, the test server and CI run: the other files start from its pins.
REFERENCE = "3.11"


def canonical(name: str) -> str:
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_path(release: str, minor: str) -> Path:
    return FILES / f"py{minor}" / f"gpustack-{release}.constraints.txt"


def holds_path(release: str) -> Path:
    return FILES / f"gpustack-{release}.constraints.txt"


def releases() -> list[str]:
    """Every release with a holds file."""
    found = (re.fullmatch(r"gpustack-(\d+\.\d+\.\d+)\.constraints\.txt", p.name) for p in FILES.glob("gpustack-*"))
    return sorted((m.group(1) for m in found if m), key=lambda v: tuple(map(int, v.split("."))))


def read_pins(path: Path) -> dict[str, str]:
    """{canonical name: version} of the `name==version` lines of a constraints file (comments skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.strip()
    return pins


def pip_options(minor: str) -> list[str]:
    """pip's options for the target: wheels only, its interpreter, ABI and every manylinux tag its glibc accepts."""
    target = TARGETS[minor]
    nodot = minor.replace(".", "")
    platforms = [f"manylinux_2_{m}_x86_64" for m in range(target.glibc_minor, 16, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    return (["--only-binary=:all:", "--python-version", target.python, "--implementation", "cp",
             "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none"]
            + [arg for platform in platforms for arg in ("--platform", platform)])


class ResolutionError(RuntimeError):
    """pip could not resolve; the message ends with pip's own explanation."""


def run_pip_resolver(minor: str, args: list[str], *, index_url: str = INDEX_URL, cache_dir: Path = CACHE_DIR) -> dict:
    """`pip install --dry-run --report <args>` for the target: pip's installation report, or ResolutionError."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        # --isolated: no pip.conf, no PIP_* variables; the result depends on the index and the target only.
        pip = ["--isolated", "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check",
               "--no-input", "--progress-bar", "off", "--report", str(report), "--index-url", index_url,
               "--cache-dir", str(cache_dir)] + pip_options(minor) + [str(arg) for arg in args]
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "_pip", TARGETS[minor].python, *pip],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not report.exists():
            raise ResolutionError(f"pip could not resolve {' '.join(map(str, args))} for Python {minor} "
                                  f"({TARGETS[minor].system}):\n{_errors(proc.stdout + proc.stderr)}")
        result = json.loads(report.read_text())
    seen = result["environment"]["python_full_version"]
    if seen != TARGETS[minor].python:
        raise ResolutionError(f"pip evaluated markers for Python {seen}, not {TARGETS[minor].python}")
    return result


def _errors(output: str) -> str:
    """pip's explanation without its download progress."""
    keep = [line for line in output.splitlines()
            if line.strip() and not re.match(r"\s*(Collecting|Downloading|Using cached|Obtaining|━)", line)]
    return "\n".join(keep[-40:])


def resolved(report: dict) -> dict[str, str]:
    """{canonical name: version} of what the report installs."""
    return {canonical(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


def _culprits(message: str, candidates: set[str]) -> set[str]:
    """The preferred pins pip names in its failure: those without a distribution first, else those in the conflict."""
    unavailable = set()
    block = re.search(r"no matching distributions available for your environment:\n((?:\s+\S+\n?)+)", message)
    if block:
        unavailable |= {canonical(n) for n in block.group(1).split()}
    unavailable |= {canonical(n) for n in re.findall(r"No matching distribution found for ([A-Za-z0-9._-]+)", message)}
    if unavailable & candidates:
        return unavailable & candidates
    requested = re.findall(r"The user requested \(constraint\) ([A-Za-z0-9._-]+)", message)
    return {canonical(n) for n in requested} & candidates


def resolve(release: str, minor: str, preferred: dict[str, str], **pip) -> tuple[dict[str, str], list[str]]:
    """The release's full pin set for the target, keeping the preferred pins that resolve; and the dropped ones."""
    holds = holds_path(release)
    keep = {name: version for name, version in preferred.items() if name not in read_pins(holds)}
    dropped = []

    def drop(err: ResolutionError) -> None:
        culprits = _culprits(str(err), set(keep))
        if not culprits:
            raise err
        dropped.extend(f"{name}=={keep.pop(name)}" for name in sorted(culprits))

    with tempfile.TemporaryDirectory() as tmp:
        prefs = Path(tmp) / "preferred.txt"
        # First the pins with no distribution for this target at all (Requires-Python, no wheel for its tags), one
        # pip call each without dependencies: pip's conflict report after backtracking often names another package.
        while True:
            prefs.write_text("".join(f"{name}=={version}\n" for name, version in sorted(keep.items())))
            try:
                run_pip_resolver(minor, ["--no-deps", "-r", prefs], **pip)
                break
            except ResolutionError as err:
                drop(err)
        # Then the whole release; a preferred pin in a conflict is resolved again.
        while True:
            prefs.write_text("".join(f"{name}=={version}\n" for name, version in sorted(keep.items())))
            try:
                report = run_pip_resolver(minor, ["-c", holds, "-c", prefs, f"gpustack=={release}"], **pip)
                break
            except ResolutionError as err:
                drop(err)
    pins = resolved(report)
    pins.pop("gpustack")
    return pins, dropped


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, width=114, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def header(release: str, minor: str, pins: dict[str, str], dropped: list[str], reference: dict[str, str] | None,
           index_url: str) -> str:
    target, nodot = TARGETS[minor], minor.replace(".", "")
    lines = [
        f"GPUStack {release}, CPython {minor} ({target.system}: python3 {target.python}, glibc 2.{target.glibc_minor}),"
        f" linux x86_64: the {len(pins)}",
        f"packages `pip install gpustack=={release}` installs there, pinned. The gpustack_install role installs with"
        " the file",
        f"of the node's Python; `tools/build_wheelhouse.sh --python {minor} {release}` builds its offline wheelhouse"
        " from it.",
        f"GENERATED (do not edit) on {datetime.date.today().isoformat()} by"
        f" `tools/resolve_constraints.py --python {minor} {release}` with {_pip_version()}'s",
        f"resolver against {index_url}: `pip install --dry-run --ignore-installed --report -",
        f"-c ../gpustack-{release}.constraints.txt gpustack=={release}` for that target (wheels only, cp{nodot}/abi3/none,",
        f"manylinux_2_{target.glibc_minor} down to manylinux1, environment markers of Python {target.python}), honouring"
        " the release's holds",
        f"(../gpustack-{release}.constraints.txt) and keeping each earlier pin that still resolves.",
    ]
    if dropped:
        lines += _wrap("Resolved again for this Python (no wheel for it, or in a conflict): " + ", ".join(dropped) + ".")
    if reference is not None:
        moved = [f"{n} {reference[n]} -> {v}" for n, v in sorted(pins.items()) if n in reference and reference[n] != v]
        only_here = [f"{n}=={v}" for n, v in sorted(pins.items()) if n not in reference]
        not_here = [n for n in sorted(reference) if n not in pins]
        parts = ([f"moved {', '.join(moved)}"] if moved else []) \
            + ([f"only here {', '.join(only_here)}"] if only_here else []) \
            + ([f"not needed here {', '.join(not_here)}"] if not_here else [])
        lines += _wrap(f"Against the py{REFERENCE} file: " + ("; ".join(parts) if parts else "the same pins") + ".")
    lines.append("`tools/resolve_constraints.py --check` (tests/integration/test_constraints_resolve.py) resolves it"
                 " again.")
    return "".join(f"# {line}\n" for line in lines)


def _pip_version() -> str:
    proc = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=True)
    return "pip " + proc.stdout.split()[1]


def generate(release: str, minors: list[str], fresh: bool, **pip) -> None:
    if not holds_path(release).exists():
        sys.exit(f"resolve_constraints: no {holds_path(release).relative_to(REPO)}: write the release's holds first "
                 "(see the 2.2.3 one: SQLAlchemy must stay below 2.1)")
    # The reference Python first: the others start from its pins.
    for minor in sorted(minors, key=lambda m: m != REFERENCE):
        own, ref = lock_path(release, minor), lock_path(release, REFERENCE)
        preferred = {} if fresh else read_pins(own) if own.exists() else read_pins(ref) if ref.exists() else {}
        pins, dropped = resolve(release, minor, preferred, **pip)
        reference = read_pins(ref) if minor != REFERENCE and ref.exists() else None
        own.parent.mkdir(exist_ok=True)
        own.write_text(header(release, minor, pins, dropped, reference, pip.get("index_url", INDEX_URL))
                       + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
        print(f"{own.relative_to(REPO)}: {len(pins)} pins" + (f"; resolved again: {', '.join(dropped)}" if dropped else ""))


def check(release: str, minor: str, lock: Path | None = None, **pip) -> list[str]:
    """Resolve the file as the role installs with it (alone); the problems, empty when it resolves to itself.

    Raises ResolutionError when pip cannot resolve it at all. `lock` checks another file for that target.
    """
    lock = lock or lock_path(release, minor)
    if not lock.exists():
        return [f"{lock.relative_to(REPO)} is missing: run tools/resolve_constraints.py --python {minor} {release}"]
    pins = read_pins(lock)
    got = resolved(run_pip_resolver(minor, ["-c", lock, f"gpustack=={release}"], **pip))
    if got.pop("gpustack", None) != release:
        return [f"{lock.name}: pip did not resolve gpustack=={release}"]
    problems = [f"{name} is installed ({version}) but not pinned" for name, version in sorted(got.items())
                if name not in pins]
    problems += [f"{name}=={version} is pinned but not installed" for name, version in sorted(pins.items())
                 if name not in got]
    problems += [f"{name}=={version}, the release's hold, is not the pin ({pins.get(name)})"
                 for name, version in sorted(read_pins(holds_path(release)).items()) if pins.get(name) != version]
    return [f"py{minor}/{lock.name}: {p}" for p in problems]


def _pip_main(python: str, args: list[str]) -> int:
    """pip with the marker environment of CPython `python` (pip uses its own interpreter's under --python-version)."""
    from pip._vendor.packaging import markers
    from pip._internal.models import installation_report
    running = markers.default_environment

    def target_environment():
        env = running()
        env.update(python_version=".".join(python.split(".")[:2]), python_full_version=python,
                   implementation_name="cpython", implementation_version=python,
                   platform_python_implementation="CPython", platform_machine="x86_64",
                   platform_system="Linux", sys_platform="linux", os_name="posix")
        return env

    markers.default_environment = target_environment
    installation_report.default_environment = target_environment
    from pip._internal.cli.main import main
    return main(args)


def main(argv: list[str]) -> int:
    if argv[:1] == ["_pip"]:
        return _pip_main(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="*", help="GPUStack releases (default with --check: every one with holds)")
    parser.add_argument("--python", action="append", choices=sorted(TARGETS),
                        help="node Python (repeatable; default: every supported one)")
    parser.add_argument("--check", action="store_true", help="resolve the existing files again instead of writing")
    parser.add_argument("--fresh", action="store_true", help="ignore the earlier pins (all but the holds)")
    parser.add_argument("--pip-options", metavar="MINOR", choices=sorted(TARGETS),
                        help="print pip's target options for that Python, one per line, and exit")
    parser.add_argument("--index-url", default=INDEX_URL)
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    opts = parser.parse_args(argv)
    if opts.pip_options:
        print("\n".join(pip_options(opts.pip_options)))
        return 0
    minors = opts.python or sorted(TARGETS)
    pip = {"index_url": opts.index_url, "cache_dir": opts.cache_dir}
    if opts.check:
        problems = []
        for release in opts.releases or releases():
            for minor in minors:
                try:
                    problems += check(release, minor, **pip)
                except ResolutionError as err:
                    problems.append(str(err))
        print("\n".join(problems) or "every constraints file resolves to itself")
        return 1 if problems else 0
    if not opts.releases:
        parser.error("name the GPUStack release(s) to resolve, e.g. 2.2.3")
    for release in opts.releases:
        generate(release, minors, opts.fresh, **pip)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

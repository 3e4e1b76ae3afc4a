"""Run pairserve.llm modules and playbooks through real Ansible, for the tests and the benchmarks.

Every module run goes through `ansible localhost -m pairserve.llm.<module>` (AnsiballZ packing,
argument_spec validation, check mode and diff handling all run for real); the raw result, diff
included, comes back through the recording callback in tests/support/callback_plugins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"


@dataclass
class Result:
    """One module result plus the process output, for assertions and failure messages."""

    rc: int
    result: dict
    stdout: str
    stderr: str
    results: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.result.get("changed"))

    @property
    def failed(self) -> bool:
        return bool(self.result.get("failed")) or self.rc != 0

    def __getitem__(self, key):
        return self.result[key]

    def get(self, key, default=None):
        return self.result.get(key, default)

    @property
    def by_task(self) -> dict:
        """{task name: its last result}: what a test of a short play reads."""
        return {r["_task"]: r for r in self.results}


def _env(extra: dict | None) -> dict:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".cache" / "collections"),
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
        ANSIBLE_CALLBACKS_ENABLED="pairserve_results",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.update(extra or {})
    return env


def run_module(module: str, args: dict | None = None, *, check: bool = False, diff: bool = False,
               env: dict | None = None, verbosity: int = 0, timeout: float = 600) -> Result:
    """`ansible localhost -m pairserve.llm.<module> -a '<json>'` and its one result."""
    fqcn = module if "." in module else f"pairserve.llm.{module}"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        # An empty -a '{}' is refused as "raw params" by Ansible: leave -a out when there are no arguments.
        cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", fqcn] + (["-a", json.dumps(args)] if args else [])
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        if verbosity:
            cmd.append("-" + "v" * verbosity)
        proc = subprocess.run(cmd, cwd=REPO, env=_env({**(env or {}), "PAIRSERVE_RESULTS_FILE": str(out)}),
                              capture_output=True, text=True, timeout=timeout, check=False)
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    result = records[-1] if records else {}
    return Result(proc.returncode, result, proc.stdout, proc.stderr, records)


def run_playbook(playbook: str | Path, *, inventory: str | Path | None = None, extra_vars: dict | None = None,
                 check: bool = False, diff: bool = False, limit: str | None = None, env: dict | None = None,
                 timeout: float = 1800) -> Result:
    """`ansible-playbook` with every task result recorded; `.result` is the last one."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        cmd = [str(BIN / "ansible-playbook"), str(playbook)]
        if inventory:
            cmd += ["-i", str(inventory)]
        if extra_vars:
            cmd += ["-e", json.dumps(extra_vars)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        if limit:
            cmd += ["--limit", limit]
        proc = subprocess.run(cmd, cwd=REPO, env=_env({**(env or {}), "PAIRSERVE_RESULTS_FILE": str(out)}),
                              capture_output=True, text=True, timeout=timeout, check=False)
        records = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return Result(proc.returncode, records[-1] if records else {}, proc.stdout, proc.stderr, records)


def run_local_play(directory: str | Path, name: str, tasks: list, play_vars: dict | None = None,
                   timeout: float = 300, env: dict | None = None, server: bool = False) -> Result:
    """One play on localhost (local connection, no facts) written to DIRECTORY/play.yml and run: the way the tests
    run a filter or a role's task file through real Ansible. `.by_task` maps each task's name to its result.

    With `server`, localhost is the inventory's GPUStack server (group gpustack_server) and `play_vars` are its host
    variables, where the roles read the server's settings from (filter pairserve.llm.gpustack_server reads hostvars;
    a play's vars are not in them)."""
    play = {"name": name, "hosts": "localhost", "gather_facts": False, "connection": "local", "tasks": tasks}
    inventory = None
    if server:
        inventory = Path(directory) / "inventory.yml"
        host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **(play_vars or {})}
        inventory.write_text(yaml.safe_dump({"all": {"children": {"gpustack_server": {"hosts": {"localhost": host}}}}}),
                             encoding="utf-8")
    elif play_vars:
        play["vars"] = play_vars
    playbook = Path(directory) / "play.yml"
    playbook.write_text(yaml.safe_dump([play]), encoding="utf-8")
    return run_playbook(playbook, inventory=inventory, timeout=timeout, env=env)

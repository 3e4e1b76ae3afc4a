"""How the lab runs the collection's plays (as a user does: ansible-playbook on the lab inventory), keeps what they
did, times its phases and counts requests on the route meanwhile.

Each play run leaves three files in its directory: <name>.log (for people), <name>.jsonl (every task result as one
JSON line, from the pairserve_results callback in tests/support/callback_plugins: what the suites assert on) and
<name>.rc (its exit status). A play that fails does not stop the lab: the suites judge its results.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from lab import host

CALLBACKS = host.REPO / "tests" / "support" / "callback_plugins"
INVENTORY = str(host.INVENTORY / "hosts.yml")
_RECAP_CHANGED = re.compile(r"changed=(\d+)")


def recap_changed(log: Path) -> int:
    """The sum of `changed=` over the hosts of a log's PLAY RECAP (0 when the log has none)."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return 0
    at = text.rfind("PLAY RECAP")
    if at < 0:
        return 0
    return sum(int(n) for n in _RECAP_CHANGED.findall(text[at:]))


def results_env(log: Path, **extra) -> dict:
    """The environment of a run whose task results go to <log's name>.jsonl (started empty)."""
    jsonl = Path(log).with_suffix(".jsonl")
    jsonl.unlink(missing_ok=True)
    return host.environ(PAIRSERVE_RESULTS_FILE=jsonl, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS,
                        ANSIBLE_CALLBACKS_ENABLED="pairserve_results", ANSIBLE_LOAD_CALLBACK_PLUGINS=1, **extra)


def _record(log: Path, argv: list, tee: bool = False) -> int:
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = results_env(log)
    with open(log, "w") as out:
        if tee:
            proc = subprocess.Popen([str(a) for a in argv], cwd=host.REPO, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            for line in proc.stdout:
                out.write(line)
                print(line, end="", flush=True)
            rc = proc.wait()
        else:
            rc = subprocess.run([str(a) for a in argv], cwd=host.REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT, check=False).returncode
    log.with_suffix(".rc").write_text("%d\n" % rc)
    return rc


def play(log: Path, book: str, *args, tee: bool = False) -> int:
    """ansible-playbook <book> on the lab inventory: its log, task results and exit status kept beside each other,
    one summary line printed. Returns the exit status; never raises for a failed play."""
    rc = _record(log, ["ansible-playbook", "-i", INVENTORY, book, *args], tee=tee)
    jsonl = Path(log).with_suffix(".jsonl")
    host.say("  %s: rc=%d, changed=%d (%s, %s)" % (Path(log).stem, rc, recap_changed(log), log, jsonl))
    return rc


def adhoc(log: Path, pattern: str, module: str, module_args: str) -> int:
    """One module on a group of the lab inventory (`ansible <pattern> -m <module> -a <args>`), recorded as play()."""
    return _record(log, ["ansible", "-i", INVENTORY, pattern, "-m", module, "-a", module_args])


def converge(log: Path, *args) -> int:
    """site.yml on the lab, its output on screen as well as in the log (the main job's own output)."""
    return play(log, "site.yml", *args, tee=True)


def recap_lines(log: Path) -> str:
    text = Path(log).read_text(errors="replace")
    at = text.rfind("PLAY RECAP")
    return text[at:] if at >= 0 else ""


class Phases:
    """The lab's phases, each timed and announced; the figures print their times."""

    def __init__(self):
        self.took: dict[str, int] = {}

    def run(self, name: str, func, *args, **kwargs):
        """Run one phase; a LabError (or an exit status other than 0 where the phase returns one) fails it."""
        host.say("=== lab: %s" % name)
        start = time.monotonic()
        failed = None
        try:
            result = func(*args, **kwargs)
        except host.LabError as err:
            failed, result = err, None
        except (OSError, subprocess.SubprocessError) as err:  # a command or file the phase needed
            failed, result = host.LabError("%s: %s" % (name, err)), None
        self.took[name] = int(round(time.monotonic() - start))
        if failed is None and isinstance(result, int) and not isinstance(result, bool) and result != 0:
            failed = host.LabError("%s: exit %d" % (name, result))
        host.say("=== lab: %s took %d s%s" % (name, self.took[name], ", FAILED" if failed else ""))
        if failed is not None:
            raise failed
        return result


def verdict(met: bool) -> str:
    """A figure is a benchmark, not a timed test: printed with its target and whether it was met."""
    return "target met" if met else "target MISSED"


class Load:
    """The request loop (lab/route_load.py) on the route, in the background, counting every request until stopped:
    its key copied root-only from node-a into <dir>/key, its summary in <dir>/load.json."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.pidfile = self.dir / "load.pid"
        self.log = self.dir / "load.log"

    def _key(self) -> None:
        host.write_secret(self.dir / "key", host.secret("node-a", "inference-api-key") + "\n")

    def start(self, url: str = host.SERVER_URL, *args) -> "Load":
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key()
        host.spawn([host.PYTHON, "-m", "lab.route_load", "--url", url, "--model", "qwen",
                    "--key-file", self.dir / "key", "--summary", self.dir / "load.json", "--concurrency", "2",
                    "--max-seconds", "2400", *args], self.log, self.pidfile)
        return self

    def start_after_server_restart(self, version: str) -> "Load":
        """Wait in the background until the server answers `version`, record how long it did not answer (its
        restart: every request goes through GPUStack's server), then become the loop (same PID)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._key()
        host.spawn([host.PYTHON, "-m", "lab.route_load", "--url", host.SERVER_URL, "--model", "qwen",
                    "--key-file", self.dir / "key", "--summary", self.dir / "load.json", "--concurrency", "2",
                    "--max-seconds", "2400", "--after-server-version", version,
                    "--server-restart", self.dir / "server-restart.json"], self.log, self.pidfile)
        return self

    def stop(self) -> dict | None:
        """SIGTERM the loop (it writes its summary), print its last line; the summary, if it wrote one."""
        host.stop_pid(self.pidfile)
        (self.dir / "key").unlink(missing_ok=True)
        try:
            last = self.log.read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            last = []
        if last:
            host.say(last[0])
        try:
            return json.loads((self.dir / "load.json").read_text())
        except (OSError, ValueError):
            return None

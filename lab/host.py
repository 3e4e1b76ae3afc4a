"""The lab's host: where it keeps its state, and the few primitives every part of it uses (run a command, start and
stop a background process by its PID, talk to the node containers and the lab's two container engines).

Everything the lab creates lives in one of these places, and `python -m lab down` removes all of them:

    .lab/                           state: logs, PIDs, keys, the CA, the scenarios' results (STATE)
    /run/pairserve-lab/             sockets the nodes share with the host: podman, Docker, reboot requests (RUN_DIR)
    /var/lib/pairserve-lab/<node>/  each node's data directory (its checkpoint cache) (DATA_DIR)
    /var/run/cdi/pairserve-lab-*    each node's CDI spec (CDI_DIR)
    inventory/lab/group_vars/all/{lab_hub,runner_digest,upgrade_pins}.yml   generated inventory (git-ignored)
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = REPO / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").exists() else sys.executable
STATE = REPO / ".lab"
RUN_DIR = Path("/run/pairserve-lab")
DATA_DIR = Path("/var/lib/pairserve-lab")
CDI_DIR = Path("/var/run/cdi")
CACHE = REPO / ".cache"
INVENTORY = REPO / "lab" / "inventory"
GROUP_VARS = INVENTORY / "group_vars" / "all"
# The lab hub's endpoint and commit, for every run against inventory/lab.
HUB_VARS = GROUP_VARS / "lab_hub.yml"
# The digests the lab registry gave the pinned images; loads after pins.yml, whose image names it completes.
DIGEST_VARS = GROUP_VARS / "runner_digest.yml"
# The upgrade scenario's pins, copied in as a user edits pins.yml; loads after pins.yml (lexical order).
UPGRADE_PINS = GROUP_VARS / "upgrade_pins.yml"
LAB_PINS = GROUP_VARS / "pins.yml"
NODES = ("node-a", "node-b")
SSH_PORTS = {"node-a": 2222, "node-b": 2223}
SERVER_URL = "http://127.0.0.1:30080"
REGISTRY = "127.0.0.1:5000"
REGISTRY_DIR = CACHE / "lab-registry"
NODE_IMAGE = os.environ.get("PAIRSERVE_NODE_IMAGE", "localhost/pairserve-node:bookworm")
# podman's settings for this kind of host (podman_conf() writes them): the host's own podman (node containers,
# images) and the lab's podman service (the replicas), which adds the runc wrapper.
PODMAN_CONF = CACHE / "podman" / "containers.conf"
LAB_PODMAN_CONF = STATE / "containers.conf"
DOCKER_SOCK = RUN_DIR / "docker.sock"


class LabError(Exception):
    """A lab step that failed; the message says what and where to look. `python -m lab` prints it and exits 1."""


def container(node: str) -> str:
    return "pairserve-lab-%s" % node


def podman_conf() -> Path:
    """The host podman's settings for this kind of host, written once per process (CONTAINERS_CONF):
    - runc, not crun: crun 1.8 refuses cgroup v1 hybrid hosts ("cgroups in hybrid mode not supported");
    - cgroupfs: there is no systemd on the host to be the cgroup manager;
    - explicit ulimits: podman's root defaults need CAP_SYS_RESOURCE, which this sandbox's root lacks."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    if nproc == resource.RLIM_INFINITY or nproc > 32768:
        nproc = 32768
    text = ('[containers]\ndefault_ulimits = ["nofile=%d:%d", "nproc=%d:%d"]\n'
            '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n' % (nofile, nofile, nproc, nproc))
    if not PODMAN_CONF.exists() or PODMAN_CONF.read_text() != text:
        atomic_write(PODMAN_CONF, text)
    return PODMAN_CONF


def environ(**extra) -> dict:
    """The environment of every command the lab runs: the repository's venv first, its ansible.cfg, podman's
    settings, no colour in logs."""
    env = dict(os.environ)
    env["PATH"] = "%s:%s" % (VENV_BIN, env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["CONTAINERS_CONF"] = str(podman_conf())
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run(argv, *, check: bool = True, capture: bool = False, input=None, env=None, stdout=None,
        stderr=None, cwd=None, timeout=None) -> subprocess.CompletedProcess:
    """One command, in the repository, with the lab's environment. `check` raises LabError naming the command and
    its last output lines; `capture` returns its output as text."""
    argv = [str(a) for a in argv]
    if capture:
        stdout = subprocess.PIPE if stdout is None else stdout
        stderr = subprocess.PIPE if stderr is None else stderr
    proc = subprocess.run(argv, cwd=cwd or REPO, env=env or environ(), input=input, text=True, stdout=stdout,
                          stderr=stderr, check=False, timeout=timeout)
    if check and proc.returncode != 0:
        tail = "\n".join(((proc.stderr or "") + (proc.stdout or "")).strip().splitlines()[-15:])
        raise LabError("%s: exit %d%s" % (" ".join(argv[:6]), proc.returncode, ("\n" + tail) if tail else ""))
    return proc


def output(argv, **kwargs) -> str:
    """A command's standard output, stripped (LabError when it fails)."""
    return run(argv, capture=True, **kwargs).stdout.strip()


def podman(*args, **kwargs) -> subprocess.CompletedProcess:
    """The host's podman: the node containers and the images the lab builds."""
    return run(["podman", *args], **kwargs)


def lab_podman(*args, **kwargs) -> subprocess.CompletedProcess:
    """The podman service the podman nodes deploy replicas through (its own settings: the runc wrapper)."""
    return run(["podman", *args], env=environ(CONTAINERS_CONF=LAB_PODMAN_CONF), **kwargs)


def lab_docker(*args, **kwargs) -> subprocess.CompletedProcess:
    """The Docker engine the Docker nodes deploy replicas through."""
    return run(["docker", "-H", "unix://%s" % DOCKER_SOCK, *args], **kwargs)


def node_exec(node: str, *argv, input=None, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    """A command inside a node's container (`podman exec`, with stdin when `input` is given)."""
    flags = ["-i"] if input is not None else []
    return podman("exec", *flags, container(node), *argv, input=input, check=check, capture=capture)


def node_read(node: str, path: str) -> str:
    """A (root-only) file on a node, read the way an operator does."""
    return node_exec(node, "cat", path).stdout


def node_write(node: str, path: str, text: str) -> None:
    """A file on a node, replaced atomically (written beside, then renamed)."""
    node_exec(node, "sh", "-c", 'cat >"$1.tmp" && mv "$1.tmp" "$1"', "write", path, input=text)


def secret(node: str, name: str) -> str:
    """One of the collection's secrets on a node (/etc/pairserve/secrets/<name>), stripped."""
    return node_read(node, "/etc/pairserve/secrets/%s" % name).strip()


def write_secret(path: Path, text: str) -> None:
    """A key the lab keeps for a client: root-only from its first byte."""
    atomic_write(path, text, mode=0o600)


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write beside, then rename: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    # A temporary file a crash left keeps its mode: it goes first, and the new one gets its mode before any byte.
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode if mode is not None else 0o644)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def nft_delete(table: str) -> None:
    """One of the lab's tables in the host's ruleset (the nodes share its network), if it is there."""
    run(["nft", "delete", "table", "inet", table], check=False, capture=True)


def spawn(argv, log: Path, pidfile: Path, env=None) -> int:
    """A background process in a session of its own (so that stopping it stops what it started), its output in `log`
    and its PID in `pidfile`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen([str(a) for a in argv], cwd=REPO, env=env or environ(), stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    atomic_write(pidfile, "%d\n" % proc.pid)
    return proc.pid


def pid_of(pidfile: Path) -> int | None:
    try:
        return int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pidfile: Path) -> bool:
    """Whether the process a PID file names still runs (and is not a zombie of ours)."""
    pid = pid_of(pidfile)
    if pid is None:
        return False
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: it exists
        return True
    return True


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pid(pidfile: Path, group: bool = False, grace: float = 10.0) -> None:
    """Stop the process a PID file names, only that one (or its whole session with `group`): SIGTERM, wait, SIGKILL;
    then remove the file."""
    pidfile = Path(pidfile)
    pid = pid_of(pidfile)
    if pid is not None:
        # A session whose leader ended may still hold processes: with `group`, the session is what must end.
        running = (lambda: alive(pidfile) or _group_alive(pid)) if group else (lambda: alive(pidfile))
        send = (lambda sig: os.killpg(pid, sig)) if group else (lambda sig: os.kill(pid, sig))
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not running():
                break
            try:
                send(sig)
            except (ProcessLookupError, PermissionError):
                pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and running():
                time.sleep(0.1)
    pidfile.unlink(missing_ok=True)


def wait_for(probe, timeout: float, interval: float, what: str):
    """Call `probe` until it returns something true; LabError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise LabError("%s: not within %.0f s" % (what, timeout))
        time.sleep(interval)


def say(message: str) -> None:
    print(message, flush=True)

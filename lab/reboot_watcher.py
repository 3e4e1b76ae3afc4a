"""The lab's reboot: pairserve-lab-<node> restarted for each file <directory>/<node>, which the lab inventory's
pairserve_maintenance_reboot_command writes on the node (the directory is /run/pairserve-lab/reboot, shared with the
nodes). `podman restart` stops the container as a shutdown does (systemd gets its stop signal and stops its units),
then starts it again; the node's disk stays.

    python -m lab.reboot_watcher DIRECTORY

Runs until SIGTERM (the maintenance scenario starts it in the background and stops it by its PID); a restart under
way when the signal comes is finished first. Each reboot is logged with its UTC time.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from lab import host


def now() -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime())


def requests(directory: Path) -> list[Path]:
    """The reboot requests waiting in `directory` (none while it is not there)."""
    try:
        return sorted(p for p in directory.iterdir() if not p.name.startswith("."))
    except FileNotFoundError:
        return []


def reboot(node: str) -> None:
    print("%s reboot of %s: podman restart %s" % (now(), node, host.container(node)), flush=True)
    proc = host.podman("restart", "--time", "30", host.container(node), check=False, capture=True)
    if proc.returncode == 0:
        print("%s %s started again" % (now(), node), flush=True)
    else:
        print((proc.stderr or proc.stdout or "podman restart: exit %d" % proc.returncode).strip(), flush=True)


class Watcher:
    def __init__(self, directory: Path):
        self.directory = directory
        self.stopping = False

    def stop(self, *_) -> None:
        self.stopping = True

    def run(self) -> None:
        while not self.stopping:
            for request in requests(self.directory):
                if self.stopping:
                    break
                try:
                    request.unlink()
                except FileNotFoundError:
                    continue
                reboot(request.name)
            # SIGTERM's handler only sets the flag, so that a restart under way is not cut short: the loop ends
            # within a second of it.
            time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m lab.reboot_watcher DIRECTORY", file=sys.stderr)
        return 2
    watcher = Watcher(Path(args[0]))
    signal.signal(signal.SIGTERM, watcher.stop)
    watcher.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The faults scenario's dead worker: once node-a is drained (maintenance.yml's drain took effect), node-b's GPUStack
worker dies (SIGKILL) and stays down (its unit stopped, so that systemd does not start it again).

    python -m lab.scenarios.faults.killer TIMES_FILE

The kill's time goes to TIMES_FILE as `killed=<seconds>`. The scenario runs this in a session of its own and stops
the whole session when the play ends, so that a wait still running (the drain refused) ends with it. Exits 1 when
node-a was not drained within 900 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab import faults, host, snapshots


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m lab.scenarios.faults.killer TIMES_FILE", file=sys.stderr)
        return 2
    if faults.main(["wait-drained", "node-a", "--timeout", "900"]) != 0:
        return 1
    sys.stdout.flush()
    snapshots.record_time(Path(args[0]), "killed")
    return host.node_exec("node-b", "sh", "-c", "systemctl kill --signal=SIGKILL gpustack-worker; "
                          "systemctl stop gpustack-worker", check=False, capture=False).returncode


if __name__ == "__main__":
    sys.exit(main())

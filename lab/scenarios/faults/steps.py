"""Partial failures on the converged lab (docs/lab.md, "The faults scenario"): what a failed node, a dead worker and a
drain that would leave nothing do to the route. Four faults, each followed by the fix-up a user runs, then site.yml
(changed=0):

1. site.yml, and node-b's SSH port refusing connections from the checkpoint play on (a table of the lab's own in the
   host's ruleset): node-b is unreachable half-way, node-a's run goes on, and the route keeps node-b's target at its
   weight.
2. maintenance.yml --limit node-a while node-b's worker is stopped: refused before anything changes, since draining
   node-a would leave the route nothing.
3. maintenance.yml --limit node-a (action none) and node-b's worker killed as soon as node-a is drained, under the
   request loop: the maintenance stops before node-a's replicas go down and node-a's weights come back; after
   node-b's worker is started again, maintenance.yml finishes.
4. node-b's worker stopped across verify.yml and status.yml, as while the node restarts: both fail naming node-b's
   worker first; with the worker up again verify.yml passes.

Leaves in .lab/faults/: each play's .log/.jsonl/.rc (cut, cut-fixup, cut-rerun, refused, lost, finish, rerun,
verify-down, status-down, verify-back), times (cut, killed, lost_done), GPUStack by name between the steps
(lab/snapshots.py: before, after-cut, before-refused, after-refused, after-lost, after .json), node-a's maintenance
record around the refused run (refused-record-before, refused-record-after), load.json (the request loop's summary
in fault 3), cutter.log and killer.log.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from lab import host, nodes, snapshots
from lab.scenarios import Scenario

FAULT_TABLE = "pairserve_lab_fault"
CHECKPOINT_PLAY = re.compile(r"^PLAY \[Pinned checkpoint", re.M)
MAINTENANCE = ("playbooks/maintenance.yml", "--limit", "node-a", "-e", "pairserve_maintenance_action=none")


def cut_rules(port: int) -> str:
    """The lab's table refusing connections to `port` on the host (the nodes share its network)."""
    return ("table inet %s {\n"
            "  chain input {\n"
            "    type filter hook input priority -10; policy accept;\n"
            "    tcp dport %d reject with tcp reset\n"
            "  }\n"
            "}\n" % (FAULT_TABLE, port))


def say(number: int, message: str) -> None:
    host.say("=== lab faults %d: %s" % (number, message))


def maintenance_record(node: str) -> str:
    """maintenance.yml's record on the node, or "absent"."""
    proc = host.node_exec(node, "cat", "/var/lib/pairserve/maintenance.json", check=False)
    return proc.stdout if proc.returncode == 0 else "absent\n"


def wait_worker_ready() -> None:
    host.run([host.PYTHON, "-m", "lab.faults", "wait-worker", "node-b", "ready", "--timeout", "300"])


class Cutter:
    """Node-b's SSH port cut once the play's log shows the checkpoint play beginning: the table loaded, Ansible's
    persistent connections closed (so that the next task connects again, and is refused), the time recorded. What it
    did, or why not, goes to <dir>/cutter.log. stop() ends it whether the cut came or not."""

    def __init__(self, directory: Path):
        self.log = directory / "cut.log"
        self.times = directory / "times"
        self.report = directory / "cutter.log"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="faults-cutter", daemon=True)

    def start(self) -> "Cutter":
        self.log.write_text("")  # the play's log, before the play writes it: read from the start
        self.report.write_text("")
        self.thread.start()
        return self

    def _seen(self) -> bool:
        try:
            return bool(CHECKPOINT_PLAY.search(self.log.read_text(errors="replace")))
        except OSError:
            return False

    def _note(self, text: str) -> None:
        with open(self.report, "a") as out:
            out.write(text.rstrip("\n") + "\n")

    def _run(self) -> None:
        while not self._seen():
            if self.stopping.wait(0.2):
                self._note("the checkpoint play did not begin: no cut")
                return
        port = host.SSH_PORTS["node-b"]
        try:
            proc = host.run(["nft", "-f", "-"], input=cut_rules(port), check=False, capture=True)
        except OSError as err:
            self._note("nft -f -: %s" % err)
            return
        if proc.returncode != 0:
            self._note("nft -f -: exit %d\n%s%s" % (proc.returncode, proc.stdout, proc.stderr))
            return
        try:
            nodes.stop_ssh_masters()
        except host.LabError as err:
            self._note("closing Ansible's SSH connections: %s" % err)
        snapshots.record_time(self.times, "cut")
        self._note("%s: node-b's SSH port %d refuses connections" % (snapshots.stamp(), port))

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=60)


def run(scenario: Scenario) -> None:
    out = scenario.dir
    scenario.prepare("*.rc", "*.jsonl", "*.json", "*.log", "times", "refused-record-*")
    snapshots.site(out / "before.json")

    say(1, "site.yml; node-b's SSH port refuses connections from its checkpoint play on")
    # After the plays that only check (a failure there stops every host, by design): node-b has its worker and its
    # replica, and fails in the middle of the run, when the checkpoint play begins.
    cutter = Cutter(out).start()
    try:
        scenario.play("cut", "site.yml")
    finally:
        cutter.stop()
        host.nft_delete(FAULT_TABLE)
    snapshots.site_or_say(out / "after-cut.json")
    say(1, "site.yml with node-b reachable again, then again (changed=0)")
    scenario.play("cut-fixup", "site.yml")
    scenario.play("cut-rerun", "site.yml")

    say(2, "maintenance.yml --limit node-a while node-b's worker is stopped (refused)")
    # No wait for GPUStack to notice (its check of the workers runs every 15 s): the drain's check asks the worker.
    nodes.worker_unit("node-b", "stop")
    snapshots.site_or_say(out / "before-refused.json")
    (out / "refused-record-before").write_text(maintenance_record("node-a"))
    scenario.play("refused", *MAINTENANCE)
    snapshots.site_or_say(out / "after-refused.json")
    (out / "refused-record-after").write_text(maintenance_record("node-a"))
    nodes.worker_unit("node-b", "start")
    wait_worker_ready()

    say(3, "maintenance.yml --limit node-a; node-b's worker killed once node-a is drained")
    load = scenario.load().start()
    try:
        killer = out / "killer.pid"
        host.spawn([host.PYTHON, "-m", "lab.scenarios.faults.killer", out / "times"], out / "killer.log", killer)
        try:
            scenario.play("lost", *MAINTENANCE)
            snapshots.record_time(out / "times", "lost_done")
        finally:
            # Its whole session, so that a wait still running (the drain refused) ends with it.
            host.stop_pid(killer, group=True)
        snapshots.site_or_say(out / "after-lost.json")
    finally:
        load.stop()
    say(3, "node-b's worker started again; maintenance.yml --limit node-a finishes; site.yml (changed=0)")
    nodes.worker_unit("node-b", "start")
    wait_worker_ready()
    scenario.play("finish", *MAINTENANCE)
    scenario.play("rerun", "site.yml")
    snapshots.site_or_say(out / "after.json")

    say(4, "node-b restarting (its worker stopped) across verify.yml and status.yml")
    # No wait for GPUStack to notice: it lists node-b's worker ready and its instance running until its own check of
    # the workers (every 15 s) finds the worker gone; the faults suite takes either state.
    nodes.worker_unit("node-b", "stop")
    # Its wait for the replicas gets 30 s: GPUStack marks them unreachable once its syncer finds the worker gone.
    scenario.play("verify-down", "playbooks/verify.yml", "-e", "pairserve_verify_wait_timeout=30")
    scenario.play("status-down", "playbooks/status.yml")
    say(4, "node-b's worker up again; verify.yml passes (changed=0)")
    nodes.worker_unit("node-b", "start")
    wait_worker_ready()
    scenario.play("verify-back", "playbooks/verify.yml")

"""Node-a (the server, and a GPU node) lost with its disk and restored from a backup, under the request loop, as
docs/how-to/backup-restore.md's "Runbook: node A is lost" goes: backup.yml with the archive fetched to the
controller; node-a destroyed and recreated bare at its address; restore.yml (its last play fails for node-a alone:
its worker is not there yet); rebuild_node.yml --limit node-a; verify.yml; site.yml; then site.yml and restore.yml
again (changed=0). The loop keeps the inference key it started with: the old key.

Leaves in .lab/restore/: backups/node-a/ (the fetched archive), each play's .log/.jsonl/.rc (backup, restore,
rebuild, verify, site, rerun-site, rerun-restore), old-inference-key (root-only), load.json (the request loop's
summary), times (the drill's events: destroyed, node_bare, restored, rebuilt, site_done), the figures from those and
the loop's summary (figures.json, figures.txt), and GPUStack by name (lab/snapshots.py: before.json,
after-restore.json, after.json).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from lab import host, nodes, snapshots
from lab.scenarios import Scenario


def figures_of(times: dict[str, float], load: dict) -> dict:
    """The drill's figures: the recovery time (from the destroy to the end of the loop's longest outage, when the
    route answered again; None if it never did, or did before the destroy), each step's end in seconds after the
    destroy (None for a step with no time), and the loop's counts."""
    gone = times["destroyed"]
    outage = load.get("longest_outage") or {}
    back = outage.get("to")

    def since(name):
        return round(times[name] - gone, 1) if name in times else None

    return {"times": times, "outage": outage,
            "recovery_s": round(back - gone, 1) if back is not None and back > gone else None,
            "node_bare_s": since("node_bare"), "restore_done_s": since("restored"),
            "node_a_replica_back_s": since("rebuilt"), "total_s": since("site_done"),
            "requests": load["requests"], "ok": load["ok"], "failed": load["failed"],
            "failures_by_class": load["failures_by_class"],
            "ok_after_recovery": load.get("ok_after_longest_outage"),
            "failed_after_recovery": load.get("failures_after_longest_outage")}


def figures_text(figures: dict) -> str:
    """The figures as the drill prints them (times in UTC)."""
    outage = figures["outage"]
    lines = [
        "=== lab figures: restore drill (node-a destroyed at %s UTC)"
        % time.strftime("%H:%M:%S", time.gmtime(figures["times"]["destroyed"])),
        "  recovery time (the route answered nothing): %s s, from the destroy to the first request answered again "
        "(%s requests failed in it)" % (figures["recovery_s"], outage.get("failed")),
        "  node-a bare again (container, SSH):          %s s" % figures["node_bare_s"],
        "  restore.yml done:                            %s s" % figures["restore_done_s"],
        "  node-a's replica back (rebuild_node.yml):    %s s" % figures["node_a_replica_back_s"],
        "  total (site.yml done):                       %s s" % figures["total_s"],
        "  requests through the route with the old key: %d, %d ok, %d failed %s; after the recovery %s ok, failed %s"
        % (figures["requests"], figures["ok"], figures["failed"], json.dumps(figures["failures_by_class"]),
           figures["ok_after_recovery"], json.dumps(figures["failed_after_recovery"])),
    ]
    return "\n".join(lines) + "\n"


def restore_figures(directory: Path) -> str:
    """The drill's figures from <directory>/times and the loop's load.json, written to figures.json; the text that
    says them."""
    directory = Path(directory)
    figures = figures_of(snapshots.read_times(directory / "times"),
                         json.loads((directory / "load.json").read_text()))
    (directory / "figures.json").write_text(json.dumps(figures, indent=1))
    return figures_text(figures)


def latest_archive(backups: Path) -> Path | None:
    """The last archive (by its path, which names its time) fetched under `backups`, or None."""
    found = sorted(Path(backups).rglob("*.tar.gz"), key=str)
    return found[-1] if found else None


def run(scenario: Scenario) -> None:
    out = scenario.dir
    scenario.prepare("backups", "*.rc", "*.jsonl", "*.json", "*.log", "times", "figures.txt", "old-inference-key")
    times = out / "times"
    scenario.say("playbooks/backup.yml, the archive fetched to %s" % (out / "backups"))
    rc = scenario.play("backup", "playbooks/backup.yml", "-e", "pairserve_backup_fetch_dir=%s" % (out / "backups"))
    archive = latest_archive(out / "backups" / "node-a")
    if rc != 0 or archive is None:
        raise host.LabError("restore: no archive fetched to %s; see %s"
                            % (out / "backups" / "node-a", out / "backup.log"))
    snapshots.site(out / "before.json")
    # The clients' key, kept root-only for the suite: the restored server must accept it.
    host.write_secret(out / "old-inference-key", host.node_read("node-a", "/etc/pairserve/secrets/inference-api-key"))
    # Bounded as the other loops, with room for the whole drill (its plays install node-a from nothing).
    load = scenario.load().start(host.SERVER_URL, "--timeout", "30", "--max-seconds", "3600")
    try:
        time.sleep(10)  # the loop's first answers, before the loss
        scenario.say("node-a destroyed (container, data directory, its replica containers and firewall tables)")
        snapshots.record_time(times, "destroyed")
        nodes.destroy_node("node-a")
        nodes.stop_ssh_masters()
        # Node-b's worker loses its server: its heartbeats and status reports fail (every 30 s) while node-a is
        # rebuilt.
        time.sleep(30)
        scenario.say("node-a recreated bare at its address (same hostname, SSH, GPUs' stand-ins)")
        nodes.create_node("node-a")
        nodes.wait_for_ssh()
        nodes.runtime_units("node-a")
        snapshots.record_time(times, "node_bare")

        scenario.say("playbooks/restore.yml (expected to fail for node-a alone: its worker is not there yet)")
        scenario.play("restore", "playbooks/restore.yml", "-e", "pairserve_backup_restore_file=%s" % archive)
        snapshots.record_time(times, "restored")
        snapshots.site_or_say(out / "after-restore.json")
        scenario.say("playbooks/rebuild_node.yml --limit node-a")
        scenario.play("rebuild", "playbooks/rebuild_node.yml", "--limit", "node-a")
        snapshots.record_time(times, "rebuilt")
        scenario.say("playbooks/verify.yml (through the route, with the inference key the restore put back)")
        scenario.play("verify", "playbooks/verify.yml")
        scenario.say("site.yml (node-a's firewall and what else neither play installs)")
        scenario.play("site", "site.yml")
        snapshots.record_time(times, "site_done")
        scenario.say("the route under load from before the loss to here")
    finally:
        # Also when node-a could not be made again: the loop's summary says what the route did until then.
        load.stop()

    snapshots.site_or_say(out / "after.json")
    try:
        text = restore_figures(out)
    except (OSError, ValueError, KeyError, TypeError) as err:
        print("lab restore: no figures: %s" % err, file=sys.stderr, flush=True)
    else:
        (out / "figures.txt").write_text(text)
        host.say(text.rstrip("\n"))

    scenario.say("site.yml again (changed=0)")
    scenario.play("rerun-site", "site.yml")
    scenario.say("restore.yml again with the same archive (changed=0: nothing to do)")
    scenario.play("rerun-restore", "playbooks/restore.yml", "-e", "pairserve_backup_restore_file=%s" % archive)

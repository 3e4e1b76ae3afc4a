# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the message a person reads when llm_verify fails: the nodes that cannot serve first (where GPUStack
reaches each instance, module_utils/reach.py), then each failed check with its class, then each instance's state
and log tail.
"""

from __future__ import annotations

from ansible_collections.pairserve.llm.plugins.module_utils import reach


def reach_urls(instance, workers):
    """Where GPUStack reaches an instance (module_utils/reach.py): its worker's ``/healthz`` and the replica's own
    ``/health``. ``workers``: GPUStack's worker records. Either URL is None when the records do not tell it."""
    worker = reach.worker_of(instance, workers)
    if not worker.get("ip") and not worker.get("advertise_address") and instance.get("worker_ip"):
        worker = dict(worker, ip=instance["worker_ip"])
    return {"worker": reach.worker_health_url(worker), "replica": reach.replica_health_url(instance)}


def probes(instances, workers):
    """What to ask, one entry per URL: {instance, node, kind (worker or replica), url} for each instance's worker
    ``/healthz`` and replica ``/health`` (reach_urls), in the instances' order; an URL the records do not tell is
    left out."""
    out = []
    for inst in instances or []:
        for kind, url in reach_urls(inst, workers).items():
            if url:
                out.append({"instance": inst.get("name"), "node": inst.get("worker_name") or inst.get("worker_ip"),
                            "kind": kind, "url": url})
    return out


def with_reach(instances, workers, answers):
    """The instances, each with ``reach`` (node_lines' input) from the answers to ``probes``: answers maps each URL
    asked to (HTTP status or None, error text); an URL not in answers counts as not asked (left out)."""
    out = []
    for inst in instances or []:
        reach = {}
        for kind, url in reach_urls(inst, workers).items():
            if url and url in (answers or {}):
                status, error = answers[url]
                reach[kind] = {"url": url, "ok": status == 200, "error": error or "HTTP %s" % status}
        out.append(dict(inst, reach=reach))
    return out


def node_lines(instances):
    """One line per instance whose node cannot serve it, node first: its worker unreachable (GPUStack reaches the
    replica only through it) or the replica itself not answering, with the address tried. ``instances`` carry
    ``reach`` ({worker, replica}: None when not probed, else {url, ok, error})."""
    lines = []
    for inst in instances or []:
        reach = inst.get("reach") or {}
        node = inst.get("worker_name") or inst.get("worker_ip") or "?"
        worker, replica = reach.get("worker"), reach.get("replica")
        if worker and not worker["ok"]:
            lines.append("[%s] the worker at %s does not answer (%s): GPUStack reaches instance %s only through it, "
                         "so that replica cannot serve%s. Check `systemctl status gpustack-worker` and the network "
                         "between the server and %s." % (node, worker["url"].rsplit("/", 1)[0], worker["error"],
                                                         inst.get("name"), _listed(inst), node))
        elif replica and not replica["ok"]:
            lines.append("[%s] instance %s does not answer at %s (%s)%s." % (
                node, inst.get("name"), replica["url"], replica["error"], _listed(inst)))
    return lines


def _listed(inst):
    return "; GPUStack still lists it as %s" % inst["state"] if inst.get("state") == "running" else ""


def diagnosis(target, results, instances=None, boot_problems=None):
    """The message a person reads when verify fails: first the nodes that cannot serve (node_lines), then what
    failed, which class, what to do, and the replica's state and log tail."""
    lines = node_lines(instances)
    failed = [r for r in results if not r["ok"]]
    for result in failed:
        kind = "permanent" if result.get("permanent") else "transient"
        lines.append("[%s] check %s failed (HTTP %s, %s: %s): %s" % (
            target, result["check"], result.get("status"), kind, result.get("class"), result["message"]))
    for problem in boot_problems or []:
        lines.append("[%s] boot log: %s" % (target, problem))
    for inst in instances or []:
        worker = (inst.get("reach") or {}).get("worker")
        state = inst.get("state")
        if worker and not worker["ok"] and state == "running":
            state = "unreachable (GPUStack lists it as running; its worker does not answer)"
        lines.append("instance %s on %s: state %s%s" % (
            inst.get("name"), inst.get("worker_name") or inst.get("worker_ip") or "?", state,
            " (%s)" % inst["state_message"] if inst.get("state_message") else ""))
        if inst.get("log_tail"):
            lines.append("  last log lines of %s:" % inst.get("name"))
            lines.extend("    " + line for line in inst["log_tail"].splitlines()[-40:])
    return "\n".join(lines)

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which process holds a TCP port on a node, read from /proc (no ss or lsof needed), and the rule the preflight role
applies before anything is installed: a port the collection will bind (GPUStack's API, the HTTPS front, the worker,
its metrics) held by another program would leave a half-configured server or a worker that never starts, so it is
refused naming the process. The collection's own programs holding their own ports (a re-run) are fine.
"""

from __future__ import annotations

import os
import re

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp
SOCKET_RE = re.compile(r"^socket:\[(\d+)\]$")


def parse_proc_net_tcp(text, family="ipv4"):
    """[{port, address, inode}] of the listening sockets in the text of /proc/net/tcp or /proc/net/tcp6."""
    out = []
    for line in (text or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, port = fields[1].rsplit(":", 1)
        out.append({"port": int(port, 16), "address": _address(address, family), "inode": int(fields[9])})
    return out


def _address(hexaddr, family):
    if family == "ipv4" and len(hexaddr) == 8:
        return ".".join(str(int(hexaddr[i:i + 2], 16)) for i in (6, 4, 2, 0))
    if len(hexaddr) == 32:
        if hexaddr == "0" * 32:
            return "::"
        if hexaddr == "0" * 24 + "01000000":
            return "::1"
        return "ipv6:" + hexaddr.lower()
    return hexaddr


def socket_owners(proc="/proc"):
    """{socket inode: [(pid, process name)]} of every process whose fds this user may read."""
    owners = {}
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        fd_dir = os.path.join(proc, pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        name = None
        for fd in fds:
            try:
                match = SOCKET_RE.match(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                continue
            if match:
                if name is None:
                    name = _process_name(proc, pid)
                owners.setdefault(int(match.group(1)), []).append((int(pid), name))
    return owners


def _process_name(proc, pid):
    try:
        with open(os.path.join(proc, pid, "comm"), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def listening(proc="/proc"):
    """[{port, address, pid, process}] of every listening TCP socket (pid/process None when no readable process holds
    it: another PID namespace, or no permission)."""
    sockets = []
    for name, family in (("tcp", "ipv4"), ("tcp6", "ipv6")):
        try:
            with open(os.path.join(proc, "net", name), encoding="ascii", errors="replace") as handle:
                sockets.extend(parse_proc_net_tcp(handle.read(), family))
        except OSError:
            continue
    owners = socket_owners(proc)
    out = []
    for sock in sockets:
        holders = owners.get(sock["inode"]) or [(None, None)]
        for pid, process in sorted(set(holders), key=lambda h: (h[0] is None, h[0] or 0)):
            out.append({"port": sock["port"], "address": sock["address"], "pid": pid, "process": process})
    return sorted(out, key=lambda s: (s["port"], s["address"], s["pid"] or 0))


def held_ports_problems(sockets, wanted, host):
    """Problems for the ports the collection will bind that another program holds.

    sockets: listening() of the node; wanted: [{port, variable, owners: [process names that are the collection's own
    holder of it]}]; host: the inventory name. One problem per port, naming the variable, the holders and what to do."""
    out = []
    for want in wanted:
        port = want.get("port")
        try:
            port = int(port)
        except (TypeError, ValueError):
            continue  # the validation play refuses a port that is not one
        holders = [s for s in sockets if s["port"] == port]
        strangers = [s for s in holders if s["process"] not in (want.get("owners") or [])]
        if not strangers:
            continue
        names = ", ".join(sorted(set(
            "%s (pid %s) on %s" % (s["process"], s["pid"], s["address"]) if s["pid"] is not None else
            "a process this node does not show (another PID namespace such as a container, or a run without root) on %s"
            % s["address"]
            for s in strangers)))
        out.append({"host": host, "variable": want.get("variable"),
                    "problem": "port %d is already held by %s: %s could not bind it. Stop that program or give %s "
                               "another port" % (port, names, want.get("what") or "the collection's service",
                                                 want.get("variable"))})
    for item in out:
        item["text"] = "%s: %s: %s" % (item["host"], item["variable"], item["problem"])
    return out

"""Tests of module_utils/node_ports.py: /proc/net/tcp{,6} lines and their addresses, the owners of socket inodes and the
listening sockets read from a /proc tree built in tmp_path, the real /proc naming this test's own listener on
127.0.0.1, and the held-ports rule's edges. The module listening_ports and the preflight task are tested in
tests/unit/roles/test_preflight_node_facts.py."""

from __future__ import annotations

import os
import socket

from ansible_collections.pairserve.llm.plugins.module_utils import node_ports

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def tcp_line(address, state="0A", inode=100):
    return "   0: %s 00000000:0000 %s 00000000:00000000 00:00000000 00000000     0        0 %d 1\n" % (address, state, inode)


def test_listening_lines_are_read_with_their_addresses_and_the_rest_skipped():
    text = (HEADER + tcp_line("00000000:7596", inode=1) + tcp_line("0100007F:1388", "01", 2)
            + tcp_line("0A00000A:0016", inode=3) + "   3: too short\n")
    assert node_ports.parse_proc_net_tcp(text) == [{"port": 30102, "address": "0.0.0.0", "inode": 1},
                                                   {"port": 22, "address": "10.0.0.10", "inode": 3}]
    assert node_ports.parse_proc_net_tcp("") == [] and node_ports.parse_proc_net_tcp(None) == []
    assert node_ports.parse_proc_net_tcp(tcp_line("0100007F:0050")) == []  # the first line is the header


def test_ipv6_addresses_name_any_and_loopback_and_keep_the_others_as_read():
    six = HEADER + "".join(tcp_line(a, inode=i) for i, a in enumerate([
        "0" * 32 + ":0050", "0" * 24 + "01000000:0050", "B80D0120000000000000000001000000:0050"]))
    assert [s["address"] for s in node_ports.parse_proc_net_tcp(six, "ipv6")] == [
        "::", "::1", "ipv6:b80d0120000000000000000001000000"]


def fake_proc(root, processes, tcp="", tcp6=None):
    """A /proc tree: processes {pid: (comm or None, [fd link targets])}, net/tcp and (when given) net/tcp6."""
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(HEADER + tcp, encoding="ascii")
    if tcp6 is not None:
        (root / "net" / "tcp6").write_text(HEADER + tcp6, encoding="ascii")
    (root / "self").mkdir()  # not a pid: skipped
    for pid, (comm, links) in processes.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        if comm is not None:
            (root / str(pid) / "comm").write_text(comm + "\n", encoding="utf-8")
        for fd, target in enumerate(links):
            os.symlink(target, root / str(pid) / "fd" / str(fd))
    return str(root)


def test_socket_owners_are_read_from_the_fd_links_of_every_process(tmp_path):
    proc = fake_proc(tmp_path, {
        700: ("gpustack", ["/dev/null", "socket:[4242]", "pipe:[9]", "socket:[4343]"]),
        701: (None, ["socket:[4242]"]),  # no comm: named "?"
    })
    (tmp_path / "702").mkdir()  # a process whose fd directory cannot be listed: left out
    assert node_ports.socket_owners(proc) == {4242: [(700, "gpustack"), (701, "?")], 4343: [(700, "gpustack")]}


def test_listening_sockets_are_one_row_per_holder_sorted_and_an_unowned_one_has_no_pid(tmp_path):
    proc = fake_proc(tmp_path, {
        900: ("nginx", ["socket:[11]"]), 800: ("nginx", ["socket:[11]"]), 801: ("sshd", ["socket:[12]"]),
    }, tcp=tcp_line("00000000:01BB", inode=11) + tcp_line("0100007F:0016", inode=12), tcp6=tcp_line("0" * 32 + ":7596", inode=13))
    assert node_ports.listening(proc) == [
        {"port": 22, "address": "127.0.0.1", "pid": 801, "process": "sshd"},
        {"port": 443, "address": "0.0.0.0", "pid": 800, "process": "nginx"},
        {"port": 443, "address": "0.0.0.0", "pid": 900, "process": "nginx"},
        {"port": 30102, "address": "::", "pid": None, "process": None}]


def test_a_proc_without_tcp6_is_read_without_it(tmp_path):
    proc = fake_proc(tmp_path, {5: ("x", ["socket:[1]"])}, tcp=tcp_line("0100007F:1F90", inode=1))
    assert node_ports.listening(proc) == [{"port": 8080, "address": "127.0.0.1", "pid": 5, "process": "x"}]


def test_the_real_proc_names_this_process_as_the_holder_of_its_listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        mine = [s for s in node_ports.listening() if s["port"] == port]
    with open("/proc/self/comm", encoding="utf-8") as handle:
        comm = handle.read().strip()
    assert mine == [{"port": port, "address": "127.0.0.1", "pid": os.getpid(), "process": comm}]


def test_the_rule_skips_ports_that_are_not_numbers_and_names_each_stranger_once():
    sockets = [{"port": 30080, "address": "0.0.0.0", "pid": 7, "process": "nginx"},
               {"port": 30080, "address": "::", "pid": 7, "process": "nginx"},
               {"port": 30080, "address": "0.0.0.0", "pid": 8, "process": "gpustack"},
               {"port": 30080, "address": "0.0.0.0", "pid": 5, "process": "caddy"}]
    wanted = [{"port": "api", "variable": "pairserve_gpustack_api_port"}, {"port": None, "variable": "x"},
              {"port": 30080, "variable": "pairserve_gpustack_api_port", "owners": ["gpustack"]},
              {"port": 10150, "variable": "pairserve_gpustack_worker_port"}]
    found = node_ports.held_ports_problems(sockets, wanted, "node-a")
    assert found == [{
        "host": "node-a", "variable": "pairserve_gpustack_api_port",
        "problem": "port 30080 is already held by caddy (pid 5) on 0.0.0.0, nginx (pid 7) on 0.0.0.0, nginx (pid 7) "
                   "on ::: the collection's service could not bind it. Stop that program or give "
                   "pairserve_gpustack_api_port another port",
        "text": "node-a: pairserve_gpustack_api_port: port 30080 is already held by caddy (pid 5) on 0.0.0.0, nginx "
                "(pid 7) on 0.0.0.0, nginx (pid 7) on ::: the collection's service could not bind it. Stop that "
                "program or give pairserve_gpustack_api_port another port"}]
    # without owners, even the collection's own program is a stranger
    own = node_ports.held_ports_problems(sockets[2:3], [{"port": "30080", "variable": "v", "what": "GPUStack"}], "h")
    assert len(own) == 1 and own[0]["problem"].startswith("port 30080 is already held by gpustack (pid 8) on 0.0.0.0: GPUStack could not")
    assert node_ports.held_ports_problems([], wanted, "node-a") == []

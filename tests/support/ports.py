"""Free TCP ports for the processes the lab and the test tiers start on this machine: one owner for the rule.

A port asked from the kernel with bind(port 0) comes from the ephemeral range (net.ipv4.ip_local_port_range), the
same range the kernel hands every outgoing connection. Between the moment a test learns the port and the moment
GPUStack binds it (seconds later: the server's websocket proxy binds last), an outgoing connection of another test
lane may take it, and the server exits with "address already in use" (seen in CI: the proxy port of the GPUStack
tier's server). So ports here are drawn at random from a band just below the ephemeral range, which the kernel
never gives to connections, and are checked free on every address (the servers bind 0.0.0.0) before they are
handed out. Two lanes drawing the same port in the same seconds stays possible (1 in 10,000 per pair of draws);
``address_in_use`` lets a starter retry with new ports.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

# The band's width; it ends where the ephemeral range starts (32768 by default: ports 22768-32767).
BAND = 10000
_RANDOM = random.SystemRandom()


def ephemeral_start(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> int:
    """The first port of the kernel's ephemeral range (32768 where the file cannot be read)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))  # bound, never listening: nothing answers on it
        except OSError:
            return False
    return True


def free_port(tries: int = 200) -> int:
    """A TCP port that nothing on this machine holds, below the ephemeral range."""
    high = ephemeral_start()
    low = max(1024, high - BAND)
    if high - low < 100:  # a host with an unusual ephemeral range: ask the kernel instead
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for _attempt in range(tries):
        port = _RANDOM.randrange(low, high)
        if _is_free(port):
            return port
    raise RuntimeError(f"no free TCP port in {low}-{high - 1} after {tries} tries")


def address_in_use(log_text: str) -> bool:
    """Whether a server's log says it could not bind a port (EADDRINUSE), the case a retry with new ports fixes."""
    return "address already in use" in log_text.lower() or "errno 98" in log_text.lower()

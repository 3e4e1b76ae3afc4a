"""tests/support/ports.py: free ports come from below the kernel's ephemeral range and are really free; a held port is never
handed out; a server log that says EADDRINUSE is recognised (the retry in tests/support/gpustack_server.py)."""
from __future__ import annotations

import socket

import pytest

from support import ports


def test_ports_come_from_the_band_below_the_ephemeral_range_and_can_be_bound():
    high = ports.ephemeral_start()
    for _draw in range(50):
        port = ports.free_port()
        assert max(1024, high - ports.BAND) <= port < high
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_held_port_is_never_handed_out(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:
        taken = held.getsockname()[1]
        # Make the draw hit the held port first, then another one: the held one must be skipped.
        draws = iter([taken, taken + 1 if taken + 1 != taken else taken - 1])
        monkeypatch.setattr(ports, "ephemeral_start", lambda: taken + 5000)
        monkeypatch.setattr(ports._RANDOM, "randrange", lambda low, high: next(draws))
        assert ports.free_port() != taken
    finally:
        held.close()


def test_no_free_port_is_an_error_naming_the_band(monkeypatch):
    monkeypatch.setattr(ports, "_is_free", lambda port: False)
    with pytest.raises(RuntimeError, match=r"no free TCP port in \d+-\d+ after 3 tries"):
        ports.free_port(tries=3)


def test_the_ephemeral_start_is_read_from_the_kernel_file(tmp_path):
    rng = tmp_path / "range"
    rng.write_text("40000\t60999\n")
    assert ports.ephemeral_start(rng) == 40000
    assert ports.ephemeral_start(tmp_path / "missing") == 32768


def test_an_address_in_use_log_is_recognised():
    assert ports.address_in_use("OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 52035): "
                                "address already in use")
    assert not ports.address_in_use("gpustack.cmd.start - ERROR - database is not reachable")

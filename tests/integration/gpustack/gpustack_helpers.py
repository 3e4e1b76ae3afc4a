"""Helpers for the GPUStack module tests: the four-step idempotence check and the wait for GPUStack's own work
(the request-counting proxy is support/forwarding_proxy.py)."""

from __future__ import annotations

import time

from support.ansible_runner import run_module


def wait_for(predicate, timeout: float = 60, what: str = "condition"):
    """Poll `predicate` each second until it returns something true, and return that; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def four_steps(module: str, args: dict, *, expect_change: bool = True):
    """check -> apply -> idempotent check -> idempotent apply, asserting changed each time; returns the 4 results."""
    results = []
    for check, want in ((True, expect_change), (False, expect_change), (True, False), (False, False)):
        res = run_module(module, args, check=check, diff=True)
        assert not res.failed, f"{module} check={check} failed: {res.result.get('msg')}\n{res.stderr}"
        assert res.changed is want, f"{module} check={check}: changed={res.changed}, expected {want}: {res.result}"
        results.append(res)
    return results

"""A stand-in for the `docker` CLI on PATH that records its arguments (runner_image tests in both tiers)."""

from __future__ import annotations

import stat
from pathlib import Path


def fake_runtime(tmp_path: Path, present: bool) -> Path:
    """A `docker` executable on PATH that records its arguments; the module drives it like the real CLI."""
    log = tmp_path / "calls.log"
    script = tmp_path / "bin" / "docker"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho \"$@\" >> %s\ncase \"$1 $2\" in\n  'image inspect') exit %d ;;\n"
                      "  'pull '*) exit 0 ;;\nesac\nexit 0\n" % (log, 0 if present else 1))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script.parent

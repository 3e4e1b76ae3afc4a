# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private: the collection's one way to replace a file's content (modules and module_utils only).

    from ansible_collections.pairserve.llm.plugins.module_utils._files import atomic_write
    atomic_write(path, b"...")                      # new file: 0644 less the umask
    atomic_write(path, "text", mode=0o600)          # str is written as UTF-8
    atomic_write(path, data, like=os.stat(path))    # keep the replaced file's mode and owner

The data goes to a temporary file beside the target (`.<name>.pairserve-XXXXXXXX.tmp`, the name the hub and
tokenizer sweeps look for), is flushed and fsynced, takes its mode (and owner), and is renamed over the target; the
directory is fsynced last, so after a crash the path holds the old content or the new, never a part. A failure
removes the temporary file and leaves the target untouched.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write", "fsync_dir", "temp_prefix"]


def temp_prefix(path: str) -> str:
    """The prefix of the temporary files atomic_write makes for ``path`` (what a debris sweep matches)."""
    return "." + os.path.basename(path) + ".pairserve-"


def fsync_dir(directory: str) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write(path: str, data, mode: int | None = None, like: os.stat_result | None = None) -> None:
    """Replace ``path``'s content by ``data`` (bytes, or str as UTF-8) atomically and durably.

    ``mode``: the new file's permission bits. ``like``: the stat of the file being replaced, whose mode and owner
    are kept (``mode`` wins over its mode when both are given). Neither: 0644 less the process umask."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    if mode is None and like is not None:
        mode = like.st_mode & 0o7777
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o644 & ~umask
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=temp_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if like is not None and (like.st_uid, like.st_gid) != (os.getuid(), os.getgid()):
            os.chown(tmp, like.st_uid, like.st_gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(directory)

# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An exclusive lock between module runs on one host, for read-modify-write calls to a server that has no
compare-and-set (GPUStack replaces a backend's version list with each PUT).

``flock`` on a file in ``/run/lock`` (a tmpfs, emptied at boot) or the temp directory: the kernel drops the
lock when the holder dies, so a crashed run leaves nothing that blocks the next one. The lock file itself is
empty and is reused by every later run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
import time

LOCK_DIRS = ("/run/lock", tempfile.gettempdir())


class HostLockTimeout(Exception):
    """Another run held the lock for longer than the caller waits."""


def lock_path(name, dirs=LOCK_DIRS):
    """The lock file for ``name`` (any string; hashed so URLs make safe file names)."""
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
    for directory in dirs:
        if os.path.isdir(directory) and os.access(directory, os.W_OK):
            return os.path.join(directory, "pairserve-%s.lock" % digest)
    raise HostLockTimeout("no writable lock directory among %s" % ", ".join(dirs))


@contextlib.contextmanager
def host_lock(name, timeout=120.0, poll=0.2, dirs=LOCK_DIRS):
    """Hold an exclusive lock named ``name`` on this host; raise HostLockTimeout after ``timeout`` seconds."""
    path = lock_path(name, dirs)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise HostLockTimeout("another run held %s for more than %.0f s" % (path, timeout))
                time.sleep(poll)
        yield path
    finally:
        os.close(fd)

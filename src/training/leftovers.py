"""Working directories that a killed process leaves behind, and their safe removal.

A directory made with :func:`make_owned_dir` holds a lock file (``.owner.lock``) on which its
creating process keeps an exclusive ``flock`` for as long as it runs. The kernel drops that
lock when the process dies, however it dies (``kill -9`` included), so a later run proves a
leftover stale by taking the lock itself: :func:`remove_stale_dirs` removes exactly the
directories whose lock it can take, and keeps those of live owners and any without a lock file
(not provably stale). ``flock`` works on local disks and, on Linux, on NFS (RWX volumes),
where it is mapped to NFS locks.

Used for the non-chief workers' ``workertemp_*`` scratch directories (:mod:`training.train`)
and the ``.staging-*`` copies that selection renames into a new model version
(:mod:`training.select`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_NAME = ".owner.lock"
_held: dict[Path, int] = {}  # directory -> open lock fd (kept until release_dir)


def make_owned_dir(parent: str | os.PathLike | None, prefix: str, private: bool = True) -> Path:
    """Create ``<parent>/<prefix><random>`` holding a lock this process keeps until
    :func:`release_dir` (or its death).

    Args:
        parent: where to create it (``None``: the system temp folder).
        prefix: name prefix, e.g. ``"workertemp_worker_1_"``.
        private: mode 0700 (``tempfile.mkdtemp``); ``False`` gives the mode ``mkdir`` would
            (0777 minus the umask), for directories published under another name.

    Returns:
        The new directory.
    """
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if not private:
        umask = os.umask(0)
        os.umask(umask)
        path.chmod(0o777 & ~umask)
    fd = os.open(path / LOCK_NAME, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _held[path] = fd
    return path


def release_dir(path: Path, remove_lock_file: bool = True) -> None:
    """Drop this process's lock on ``path`` (and delete its lock file, e.g. before publishing
    the directory under another name)."""
    fd = _held.pop(Path(path), None)
    if remove_lock_file:
        Path(path, LOCK_NAME).unlink(missing_ok=True)
    if fd is not None:
        os.close(fd)


def _owner_is_gone(path: Path) -> bool:
    try:
        fd = os.open(path / LOCK_NAME, os.O_RDWR)
    except OSError:
        return False  # no lock file: not provably stale
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # a live process holds it
    finally:
        os.close(fd)
    return True


def remove_stale_dirs(parent: str | os.PathLike | None, pattern: str) -> list[Path]:
    """Remove the directories matching ``pattern`` in ``parent`` whose owner has died.

    Args:
        parent: directory to scan (``None``: the system temp folder); missing is fine.
        pattern: glob, e.g. ``"workertemp_*"``.

    Returns:
        The directories removed.
    """
    root = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    if not root.is_dir():
        return []
    removed = []
    for path in sorted(root.glob(pattern)):
        if path.is_dir() and path not in _held and _owner_is_gone(path):
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
    if removed:
        log.info("removed %d stale leftover(s) of killed runs in %s", len(removed), root)
    return removed

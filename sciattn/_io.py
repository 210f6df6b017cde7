"""Atomic file writes: data is never left half-written.

:func:`atomic_path` yields a temporary path in the target's directory; when the block ends
without an exception the file is flushed to disk, given the permissions of a plain ``open()``
(``0o666 & ~umask``; ``mkstemp`` creates ``0o600``) and renamed over the target (``os.replace`` is
atomic on POSIX). On an exception the temporary file is removed and the previous target, if any,
is untouched; an ``OSError`` without a file name (e.g. ``ENOSPC`` from ``write``) is re-raised
naming the target.

Temporary files are named ``.<target name>.<writer PID>.<random>.tmp``. Only a killed writer
(SIGKILL, power loss) leaves one behind; :func:`remove_stale_temp_files` removes those of a folder
whose PID is no live process on this host (and the older PID-less ``.<name>.<random>.tmp`` ones).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "atomic_write_bytes", "file_mode", "remove_stale_temp_files"]

# mkstemp's random part: 8 characters of [a-z0-9_]
_TEMP_WITH_PID = re.compile(r"^\..+\.(?P<pid>\d+)\.[a-z0-9_]{8}\.tmp$")
_TEMP_WITHOUT_PID = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def file_mode() -> int:
    """``0o666 & ~umask``: the mode ``open(path, "w")`` would give a new file."""
    try:
        with open("/proc/self/status") as fh:  # Linux: read the umask without changing it
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, target)
    except BaseException as err:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.errno is not None and err.filename is None:
            raise OSError(err.errno, err.strerror, str(target)) from err
        raise


def atomic_write_bytes(data: bytes, path: str | os.PathLike) -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`atomic_path` in ``folder`` (not below it) that no live
    process owns: those whose writer PID is not running on this host, and PID-less ones of the older
    naming. Returns the removed paths. A PID reused by an unrelated live process keeps its file until
    a later call; writers on other hosts sharing ``folder`` are not seen (one folder, one writer)."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if not entry.name.endswith(".tmp") or not entry.is_file(follow_symlinks=False):
            continue
        m = _TEMP_WITH_PID.match(entry.name)
        if m is not None:
            if _alive(int(m["pid"])):
                continue
        elif _TEMP_WITHOUT_PID.match(entry.name) is None:
            continue
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            continue
        removed.append(Path(entry.path))
    return removed

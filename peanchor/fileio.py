"""Atomic file writes and the run-directory lock.

Every file peanchor writes goes through :func:`atomic_write`: the bytes land in a temporary file in
the same directory, are flushed and fsynced, and only then renamed over the target. A crash (or
``kill -9``) at any moment leaves either the old file or the new one, never a torn one. A full disk
or an unwritable directory raises :class:`~peanchor.errors.PeanchorError` and leaves the old file.

Imports: :mod:`peanchor.errors` only.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from peanchor.errors import PeanchorError, RunDirError


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; rename it over ``target`` on success.

    For writers that insist on a filename (matplotlib, safetensors). The temporary keeps the
    target's suffix so format detection by extension still works.
    """
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=f".tmp{target.suffix}")
        os.close(fd)
    except OSError as e:
        raise PeanchorError(f"cannot write {target}: {e.strerror or e}") from e
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the file normal permissions
        os.replace(tmp_path, target)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        reason = "disk full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
        raise PeanchorError(f"cannot write {target}: {reason}") from e
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise
    _fsync_dir(target.parent)


def atomic_write(target: str | os.PathLike[str], write: Callable[[IO[bytes]], Any]) -> None:
    """Call ``write(f)`` on a binary temporary file, then rename it over ``target``."""
    with atomic_path(target) as tmp, open(tmp, "wb") as f:
        write(f)


def write_bytes(target: str | os.PathLike[str], data: bytes) -> None:
    atomic_write(target, lambda f: f.write(data))


def write_text(target: str | os.PathLike[str], text: str) -> None:
    write_bytes(target, text.encode("utf-8"))


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    write_text(target, json.dumps(obj, indent=2, sort_keys=False, allow_nan=True) + "\n")


def _fsync_dir(directory: Path) -> None:
    # Make the rename itself durable; not every filesystem allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """An exclusive lock on a run directory, held through a ``.lock`` file with the owner's pid.

    A second process is refused with :class:`RunDirError`. A lock whose owner is dead (a crash,
    ``kill -9``) on the same host is stale and taken over, so a crash never blocks a directory.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / ".lock"
        self._held = False

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PeanchorError(f"cannot use {self.path.parent} as a run directory: {e.strerror or e}") from e
        me = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if self._stale():
                    with contextlib.suppress(FileNotFoundError):
                        self.path.unlink()
                    continue
                raise RunDirError(
                    f"{self.path.parent} is in use by another peanchor process ({self._owner()}); "
                    f"wait for it, or delete {self.path} if that process is gone"
                ) from None
            except OSError as e:
                raise PeanchorError(f"cannot lock {self.path.parent}: {e.strerror or e}") from e
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self._held = True
            return
        raise RunDirError(f"could not take the lock {self.path}")

    def _owner(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown owner"
        except OSError:
            return "unknown owner"

    def _stale(self) -> bool:
        parts = self._owner().split()
        if len(parts) != 2 or not parts[0].isdigit():
            return True  # torn or foreign lock file: its writer died mid-write
        pid, host = int(parts[0]), parts[1]
        return host == socket.gethostname() and not _pid_alive(pid)

    def release(self) -> None:
        if self._held:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            self._held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

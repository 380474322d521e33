"""Atomic file writes, log appends and the run-directory lock (a lease).

Every file peanchor writes goes through :func:`atomic_write`: the bytes land in a temporary file in
the same directory, are flushed and fsynced, and only then renamed over the target. A crash (or
``kill -9``) at any moment leaves either the old file or the new one, never a torn one. A full disk
or an unwritable directory raises :class:`~peanchor.core.errors.PeanchorError` and leaves the old file. JSON is
written strict (:func:`write_json`): an undefined number is ``null``.

Imports: :mod:`peanchor.core.errors` only (pydantic_core lazily, for :data:`Number`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any

from peanchor.core.errors import PeanchorError, RunDirError


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


def strict_json(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None: strict JSON has no number for them, so an
    undefined value (e.g. the fragility of a model at 0 clean accuracy) is written as ``null``.

    >>> strict_json({"fs": [float("nan"), 0.5], "x": float("inf")})
    {'fs': [None, 0.5], 'x': None}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    return obj


class _NullIsNaN:
    """Pydantic metadata of :data:`Number`: ``null`` in a file reads as NaN."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema  # lazily: only readers of result files validate

        return core_schema.no_info_before_validator_function(lambda v: math.nan if v is None else v, handler(source))


# A measured float in a record that is read back from JSON (peanchor.results.records): written as null when undefined (NaN,
# ±inf), read back as NaN.
Number = Annotated[float, _NullIsNaN()]


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as strict JSON (undefined numbers as ``null``, see :func:`strict_json`), atomically."""
    write_text(target, json.dumps(strict_json(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def _fsync_dir(directory: Path) -> None:
    # Make the rename itself durable; not every filesystem allows opening a directory.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def append_text(target: str | os.PathLike[str], text: str) -> None:
    """Append ``text`` to a log file in one ``write`` (``O_APPEND``): lines of concurrent writers never interleave
    mid-line, and a kill leaves every earlier line whole. For logs only; everything else is written atomically."""
    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, text.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as e:
        raise PeanchorError(f"cannot write {target}: {e.strerror or e}") from e


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


LOCK_STALE_ENV = "PEANCHOR_LOCK_STALE_AFTER"
LOCK_STALE_AFTER_S = 600.0


def lock_stale_after() -> float:
    """Seconds without a refresh after which a lock is stale: ``$PEANCHOR_LOCK_STALE_AFTER`` or 600 (10 min)."""
    text = os.environ.get(LOCK_STALE_ENV)
    if not text:
        return LOCK_STALE_AFTER_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise PeanchorError(f"{LOCK_STALE_ENV}={text!r}: expected a positive number of seconds")
    return value


class RunLock:
    """An exclusive lease on a directory, held through a ``.lock`` file naming its owner (``pid host``).

    The holder refreshes the file's modification time every ``stale_after / 4`` seconds from a daemon
    thread. A lock is *stale*, and is taken over with a warning naming the old owner, when it was not
    refreshed for ``stale_after`` seconds (whichever host wrote it: a job killed on one node and requeued
    on another), or at once when its owner is a dead process on this host, or when the file is not a lock
    peanchor wrote. A fresh lock is refused with :class:`RunDirError`, from any host.

    ``stale_after`` defaults to :func:`lock_stale_after`. Hosts should agree on the time to within a small
    part of it (the file's time is set by the file system, and compared with this host's clock).
    """

    def __init__(self, directory: str | os.PathLike[str], *, stale_after: float | None = None) -> None:
        self.path = Path(directory) / ".lock"
        self.stale_after = lock_stale_after() if stale_after is None else float(stale_after)
        self._held = False
        self._me = ""
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise PeanchorError(f"cannot use {self.path.parent} as a run directory: {e.strerror or e}") from e
        self._me = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):
            try:
                self._create()
            except FileExistsError:
                verdict = self._stale_reason()
                if verdict is None:
                    raise RunDirError(self._refusal()) from None
                seen, reason = verdict
                with contextlib.suppress(FileNotFoundError):
                    if _identity(self.path) == seen:  # not replaced by a new owner meanwhile
                        self.path.unlink()
                        warnings.warn(f"taking over the lock {self.path}: {reason}", stacklevel=2)
                continue
            except OSError as e:
                raise PeanchorError(f"cannot lock {self.path.parent}: {e.strerror or e}") from e
            self._held = True
            self._start_refresher()
            return
        raise RunDirError(f"could not take the lock {self.path}")

    def _create(self) -> None:
        """Create the lock with its owner line in one step (a hard link of a written file), so nobody ever
        sees it empty; where the file system has no hard links, create it exclusively, then write."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".lock.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self._me)
            try:
                os.link(tmp, self.path)
                return
            except FileExistsError:
                raise
            except OSError:
                pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(self._me)

    def _owner(self) -> str:
        try:
            return self.path.read_text().strip() or "unknown owner"
        except OSError:
            return "unknown owner"

    def _age(self) -> float | None:
        try:
            return max(0.0, time.time() - self.path.stat().st_mtime)
        except OSError:
            return None

    def _stale_reason(self) -> tuple[tuple[int, int], str] | None:
        """``(the file's identity, why it is stale)``, or None for a live lock."""
        seen = _identity(self.path)
        if seen is None:
            return (0, 0), "it is gone"
        owner, age = self._owner(), self._age() or 0.0
        parts = owner.split()
        if len(parts) != 2 or not parts[0].isdigit():
            return seen, f"it is not a peanchor lock ({owner!r})"
        pid, host = int(parts[0]), parts[1]
        if host == socket.gethostname() and not _pid_alive(pid):
            return seen, f"its owner, process {pid} on {host}, is no longer running"
        if age > self.stale_after:
            return seen, (
                f"its owner, process {pid} on {host}, last refreshed it {age:.0f} s ago "
                f"(stale after {self.stale_after:.0f} s)"
            )
        return None

    def _refusal(self) -> str:
        age = self._age()
        fresh = "" if age is None else (
            f"; refreshed {age:.0f} s ago, stale if not refreshed for {self.stale_after:.0f} s "
            f"(${LOCK_STALE_ENV})"
        )
        return (
            f"{self.path.parent} is in use by another peanchor process ({self._owner()}{fresh}); "
            f"wait for it, or delete {self.path} if that process is gone"
        )

    def _start_refresher(self) -> None:
        self._stop.clear()
        interval = max(0.05, self.stale_after / 4)

        def refresh() -> None:
            while not self._stop.wait(interval):
                try:
                    if self.path.read_text() != self._me:
                        warnings.warn(f"lost the lock {self.path} to {self._owner()}", stacklevel=1)
                        return
                    os.utime(self.path)
                except OSError:
                    continue  # a file system hiccup: try again at the next interval

        self._refresher = threading.Thread(target=refresh, name=f"peanchor-lock:{self.path}", daemon=True)
        self._refresher.start()

    def release(self) -> None:
        if self._held:
            self._stop.set()
            if self._refresher is not None and self._refresher is not threading.current_thread():
                self._refresher.join(timeout=5)
            self._refresher = None
            try:
                if self.path.read_text() == self._me:  # never delete a lock another process took over
                    self.path.unlink()
            except OSError:
                pass
            self._held = False

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _identity(path: Path) -> tuple[int, int] | None:
    """``(inode, mtime_ns)`` of ``path``: changes when the file is replaced or refreshed."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns

"""SIGTERM and SIGINT as a clean, resumable stop.

A Slurm time limit or preemption, ``scancel``, torchrun's teardown and Ctrl-C all end a run with one of
these signals. :func:`handling` installs handlers for both (main thread only; re-entrant; the previous
handlers come back on exit). What a signal then does depends on where the process is:

* inside :func:`deferred` (the training loop's steps, validation and checkpoint writes) it is only
  recorded: the loop finishes its step, writes a resumable checkpoint and raises :class:`Interrupted`;
* anywhere else (building datasets, analysing a model) it raises :class:`Interrupted` at once, as
  Ctrl-C raises ``KeyboardInterrupt``, so ``finally`` blocks run and run-directory locks are released.

A second SIGINT inside a deferred section raises at once (an impatient Ctrl-C); repeated SIGTERMs (Slurm
signals every process of a step, and ``reproduce`` forwards the signal to its workers) are only recorded.

The exit code of a stopped command is ``128 + signal number`` (143 for SIGTERM, 130 for SIGINT), what a
shell reports for a process the signal killed, so batch scripts can tell "stopped, resumable" from
"failed" and requeue.

Imports: nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "Interrupted", "deferred", "handling", "install", "requested", "reset"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The process was asked to stop (SIGTERM/SIGINT); what it did so far is saved and resumable.

    A :class:`BaseException`, as :class:`KeyboardInterrupt` is: code that records a failure and goes on (a lens
    that fails in one pass, an audit check that raises) catches ``Exception`` and must not swallow a stop, or the
    process would run on after the signal was spent.
    """

    def __init__(self, signum: int, detail: str = "") -> None:
        self.signum = int(signum)
        name = signal.Signals(self.signum).name
        super().__init__(f"stopped by {name}" + (f": {detail}" if detail else ""))

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (reproduce's worker pool)
        text = str(self.args[0]) if self.args else ""
        detail = text.split(": ", 1)[1] if ": " in text else ""
        return (Interrupted, (self.signum, detail))


class _State:
    received: int | None = None  # the first stop signal since the last reset
    installed: int = 0  # nesting depth of handling()
    deferring: int = 0  # nesting depth of deferred()
    previous: dict[int, Any] = {}


_state = _State()


def _handler(signum: int, frame: FrameType | None) -> None:
    first = _state.received is None
    if first:
        _state.received = signum
    if _state.deferring == 0 or (signum == signal.SIGINT and not first):
        raise Interrupted(signum)


def install() -> bool:
    """Handle SIGTERM/SIGINT as described above from now on (main thread only); True if it did.

    For worker processes that live as long as the handling should; elsewhere use :func:`handling`.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    if _state.installed == 0:
        _state.previous = {s: signal.signal(s, _handler) for s in STOP_SIGNALS}
        _state.received = None
    _state.installed += 1
    return True


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Handle SIGTERM/SIGINT as described above while the block runs (a no-op outside the main thread)."""
    if not install():
        yield
        return
    try:
        yield
    finally:
        _state.installed -= 1
        if _state.installed == 0:
            for s, previous in _state.previous.items():
                signal.signal(s, previous)
            _state.previous = {}


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Record a stop signal instead of raising it: the code inside checks :func:`requested` at safe points."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1


def requested() -> int | None:
    """The stop signal received (a signal number), or None."""
    return _state.received


def reset() -> None:
    """Forget a received signal (a test, or an interactive session that carries on)."""
    _state.received = None

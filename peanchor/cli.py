"""The ``peanchor`` command line.

Each sub-command lives in :mod:`peanchor.commands` as a module with ``add_parser(subparsers)``; the
parser it adds sets ``func`` to a callable taking the parsed arguments and returning an exit code.
User errors (:class:`~peanchor.core.errors.PeanchorError`) become one line on stderr and a non-zero
exit; ``--debug`` shows their traceback too. A run stopped by SIGTERM/SIGINT after saving its state
(:class:`~peanchor.core.interrupts.Interrupted`) exits with 128 + the signal number: 143 or 130.

Plug-ins: every command takes ``--plugin MODULE`` (repeatable), and ``PEANCHOR_PLUGINS`` names more
(comma-separated); they are imported before the parser is built, so that their PEs, shift kinds, lenses and presets
are in the help, the choices and the errors as the built-ins are (:mod:`peanchor.core.registry`; installed plug-ins come
through entry points by themselves).

Imports: :mod:`peanchor.core.errors`, :mod:`peanchor.core.interrupts`, :mod:`peanchor.core.registry` and the
:mod:`peanchor.commands` modules (which import the rest lazily).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import re
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from peanchor.core.version import __version__
from peanchor.core.errors import PeanchorError
from peanchor.core.interrupts import Interrupted
from peanchor.core.registry import PLUGINS_ENV, load_plugins, plugins_from_env

COMMANDS = ("train", "analyze", "reproduce", "report", "data", "import_", "audit")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, like every other peanchor error, with the closest command or flag (sub-parsers
    inherit this class). No prefix abbreviations: ``--rpi-draw`` is not silently ``--rpi-draws``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            options = re.findall(r"'([^']*)'", choice.group(3)) or [c.strip() for c in choice.group(3).split(",")]
            message += did_you_mean(choice.group(2), options)
        self.exit(2, f"peanchor: error: {message} (see '{self.prog} --help')\n")

    def flags(self) -> list[str]:
        """Every option string this parser takes."""
        return [s for action in self._actions for s in action.option_strings]


def did_you_mean(word: str, options: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the closest of ``options``, or ``""``.

    >>> did_you_mean("reprodce", ["train", "reproduce", "report"])
    '; did you mean reproduce?'
    """
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _one_line_warning(message: Warning | str, category: type[Warning], *args: object, **kwargs: object) -> str:
    return f"peanchor: warning: {message}\n"


PLUGIN_HELP = (f"import MODULE first, a plug-in that registers PEs, shift kinds, lenses or presets (repeatable; "
               f"{PLUGINS_ENV}=MOD1,MOD2 does the same; installed plug-ins load by themselves)")


def plugin_modules(argv: Sequence[str]) -> list[str]:
    """The ``--plugin MODULE`` / ``--plugin=MODULE`` values of ``argv`` (before a ``--``), in order.

    >>> plugin_modules(["analyze", "RUN", "--plugin", "my_lab.shifts", "--plugin=my_lab.lenses"])
    ['my_lab.shifts', 'my_lab.lenses']
    """
    modules = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--plugin" and i + 1 < len(argv):
            modules.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            modules.append(arg.partition("=")[2])
    return modules


def _add_plugin_flag(parser: argparse.ArgumentParser, top: bool) -> None:
    """``--plugin`` on ``parser`` and on every sub-command below it (read by :func:`plugin_modules`)."""
    parser.add_argument("--plugin", action="append", metavar="MODULE", help=PLUGIN_HELP,
                        **({"default": []} if top else {"default": argparse.SUPPRESS}))  # fmt: skip
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _add_plugin_flag(sub, top=False)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="peanchor",
        description="Train ViTs with different positional encodings, intervene on them, and measure spatial "
        "structure (SSDC) and robustness (Fragility Score).",
    )
    parser.add_argument("--version", action="version", version=f"peanchor {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks for errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"peanchor.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"peanchor.commands.{name}":
                raise
            continue  # a command still being written; the others stay usable
        module.add_parser(sub)
    _add_plugin_flag(parser, top=True)
    return parser


def _unknown_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> NoReturn:
    """One line for arguments no parser took, with the closest flag of the command they were given to."""
    command = getattr(args, "command", None)
    target = parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            target = action.choices[command]
    flags = target.flags() if isinstance(target, _Parser) else []
    hint = next((did_you_mean(a.split("=", 1)[0], flags) for a in extra if a.startswith("-")), "")
    target.error(f"unrecognized arguments: {' '.join(extra)}{hint}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    previous_format = warnings.formatwarning
    if "--debug" not in argv:
        warnings.formatwarning = _one_line_warning  # e.g. a skipped unreadable image: one line naming it
    try:
        return _main(argv)
    finally:
        warnings.formatwarning = previous_format  # in-process callers (tests, notebooks) get theirs back


def _main(argv: list[str]) -> int:
    try:  # before the parser: the plug-ins' names are in its choices and help
        load_plugins(plugins_from_env(), origin=PLUGINS_ENV)
        load_plugins(plugin_modules(argv))
    except PeanchorError as e:
        if "--debug" in argv:
            raise
        print(f"peanchor: error: {e}", file=sys.stderr)
        return e.exit_code
    parser = build_parser()
    # argparse exits 2 with its own one-line message for bad flags; an unknown flag also gets the closest one.
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unknown_arguments(parser, args, extra)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0 if not argv or argv == ["--debug"] else 2
    try:
        return int(args.func(args) or 0)
    except Interrupted as e:  # SIGTERM/SIGINT: saved and resumable; 128 + the signal, as a shell reports it
        if args.debug:
            raise
        print(f"peanchor: {e}", file=sys.stderr)
        return e.exit_code
    except PeanchorError as e:
        if args.debug:
            raise
        print(f"peanchor: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("peanchor: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

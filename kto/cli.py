"""The ``kto`` command: one sub-command per module of ``kto.commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Modules import their heavy dependencies inside
``run`` so that ``kto --help`` and ``kto sim`` start fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

COMMANDS: dict[str, str] = {
    "plan": "kto.commands.plan",
    "sim": "kto.commands.sim",
    "control-plane": "kto.commands.control_plane",
    "broker": "kto.commands.broker",
    "watcher": "kto.commands.watcher",
    "reconciler": "kto.commands.reconciler",
    "status-service": "kto.commands.status_service",
    "webhook": "kto.commands.webhook",
    "up": "kto.commands.up",
    "demo": "kto.commands.demo",
    "bench": "kto.commands.bench",
    "chaos": "kto.commands.chaos",
    "history": "kto.commands.history",
    "export": "kto.commands.export",
    "replay": "kto.commands.replay",
    "keys": "kto.commands.keys",
    "console": "kto.commands.console",
    "sim-bench": "kto.commands.sim_bench",
}
"""Sub-command name → module implementing it."""


class CommandError(Exception):
    """A command that cannot go on: printed as one line, ``exit_code``, no traceback."""

    exit_code = 1


class UserError(CommandError):
    """An error caused by the user's input (a flag, a file, a setting): one line, exit code 2."""

    exit_code = 2


def default_of(settings: type[Any], name: str) -> Any:
    """The default of field ``name`` of the settings dataclass ``settings``: an option that fills a
    settings field takes its default from there, so the default is written once, beside the
    field's docstring. A field without a default, or no such field, is a TypeError."""
    for field in dataclasses.fields(settings):
        if field.name != name:
            continue
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:
            return field.default_factory()
        raise TypeError(f"{settings.__name__}.{name} has no default")
    raise TypeError(f"{settings.__name__} has no field {name!r}")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line naming it and where the flags are listed
    (argparse's own usage block runs to a dozen lines for a worker)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; only the chosen command's module is imported, so one broken
    command module cannot take the others down."""
    parser = _Parser(
        prog="kto", description="Kubeflow-compatible training-job operator on Kafka."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((arg for arg in argv if not arg.startswith("-")), None)
    for name, module_name in COMMANDS.items():
        if chosen in COMMANDS and name != chosen:
            sub.add_parser(name)
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            if name == chosen:
                raise
            sub.add_parser(name, help=f"(unavailable: {exc})")
            continue
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        code: int = args.run(args)
    except CommandError as exc:
        print(f"kto {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`kto history … | head`): stop quietly, as a shell tool does.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


if __name__ == "__main__":
    sys.exit(main())

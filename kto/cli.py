"""The ``kto`` command: one sub-command per module of ``kto.commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Modules import their heavy dependencies inside
``run`` so that ``kto --help`` and ``kto sim`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "plan": "kto.commands.plan",
    "broker": "kto.commands.broker",
    "watcher": "kto.commands.watcher",
    "reconciler": "kto.commands.reconciler",
    "status-service": "kto.commands.status_service",
    "up": "kto.commands.up",
    "demo": "kto.commands.demo",
    "bench": "kto.commands.bench",
}
"""Sub-command name → module implementing it."""


class UserError(Exception):
    """An error caused by the user's input: printed as one line, exit code 2, no traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kto", description="Kubeflow-compatible training-job operator on Kafka."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except UserError as exc:
        print(f"kto {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())

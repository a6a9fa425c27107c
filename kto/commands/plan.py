"""``kto plan``: the children kto would create for job YAMLs, without a cluster.

In: files (or stdin) holding job documents: the six kubeflow.org/v1 kinds,
MPIJob kubeflow.org/v2beta1 (mpi-operator), and et-operator's TrainingJob,
ScaleIn and ScaleOut (kai.alibabacloud.com/v1alpha1; a scaler is checked, it
has no children of its own), and Kubeflow Trainer v2's TrainJob, whose
TrainingRuntime or ClusterTrainingRuntime is looked up among all the documents
given (`kto plan torch_distributed.yaml my-trainjob.yaml`). Out: the child
manifests (pods, services, config maps, …) on stdout, as a YAML stream or a
JSON array. Every document goes through what the operator does: load,
validate (as the upstream webhook, on the un-defaulted job), default, plan.
Any problem is reported on stderr, one line per error, and nothing is
written to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Iterator
from typing import Any

import yaml

HELP = ("Print the child objects kto would create for job YAMLs (kubeflow.org v1 and v2beta1, et-operator, "
        "Kubeflow Trainer v2's TrainJob with its runtime among the files).")

_EPILOG = """\
Documents are numbered from 0 within each file, in file order (empty
documents are skipped but keep their number). Errors go to stderr as
`<file>: document <index>: <field path>: <message>`; on any error nothing is
printed on stdout and the exit status is 2. Warnings (`warning: ...`) do not
fail the command.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from kto.cli import default_of
    from shared.core.settings import OperatorSettings

    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="+", metavar="FILE", help="job YAML file(s); '-' reads stdin")
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml",
        help="yaml: a '---' separated stream (default); json: one JSON array",
    )
    parser.add_argument(
        "--gang-scheduler-name", default=default_of(OperatorSettings, "gang_scheduler_name"),
        help="as the operator flag: 'volcano' or a scheduler-plugins scheduler name; empty = off",
    )
    parser.add_argument(
        "--cluster-domain", default=default_of(OperatorSettings, "cluster_domain"),
        help="as CUSTOM_CLUSTER_DOMAIN: suffix appended to TF_CONFIG host names",
    )


class _Loader(yaml.SafeLoader):
    """YAML as Kubernetes reads it: timestamps stay strings (they become JSON strings there)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


@dataclasses.dataclass
class _Outcome:
    children: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def _read(name: str) -> str:
    if name == "-":
        return sys.stdin.read()
    with open(name, encoding="utf-8") as handle:
        return handle.read()


def _documents(text: str, label: str, outcome: _Outcome) -> Iterator[tuple[int, Any]]:
    """(index, document) for every non-empty document; a YAML error ends the file."""
    parsed = 0
    try:
        for document in yaml.load_all(text, Loader=_Loader):  # noqa: S506 - a SafeLoader
            if document is not None:
                yield parsed, document
            parsed += 1
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        detail = f"{context}: {problem}" if context else problem
        outcome.errors.append(f"{label}: document {parsed}: {where}: invalid YAML: {detail}")


Parsed = list[tuple[int, Any] | str]
"""A file's documents (index, document) and its errors (text), in the order they were met."""


def _parsed(text: str, label: str) -> Parsed:
    found = _Outcome()
    items: Parsed = list(_documents(text, label, found))
    return [*items, *found.errors]  # a YAML error ends the file: it comes after its documents


def _plan_files(files: list[tuple[str, Parsed]], args: argparse.Namespace, outcome: _Outcome) -> None:
    """Plan every document of every file, in order; each sees all the documents given (a TrainJob
    finds its runtime in another file)."""
    import datetime as dt

    from shared.core import families, settings

    operator_settings = settings.OperatorSettings(
        gang_scheduler_name=args.gang_scheduler_name, cluster_domain=args.cluster_domain
    )
    beside = [item[1] for _, parsed in files for item in parsed if isinstance(item, tuple)]
    for label, parsed in files:
        for item in parsed:
            if isinstance(item, str):
                outcome.errors.append(item)
                continue
            index, document = item
            prefix = f"{label}: document {index}"
            family = families.REGISTRY.for_document(document)
            planned = family.dry_run(document, operator_settings, _PLANNED_KEY, dt.datetime.now(dt.UTC), beside)
            outcome.warnings.extend(f"warning: {prefix}: {warning}" for warning in planned.warnings)
            outcome.errors.extend(f"{prefix}: {error}" for error in planned.errors)
            if not planned.errors:
                outcome.children.extend(planned.children)


_PLANNED_KEY = "<generated by the operator>"
"""What a dry run shows in place of an SSH key pair."""


def run(args: argparse.Namespace) -> int:
    outcome = _Outcome()
    files: list[tuple[str, Parsed]] = []
    for name in args.files:
        label = "<stdin>" if name == "-" else name
        try:
            text = _read(name)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            files.append((label, [f"{label}: cannot read: {reason}"]))
            continue
        files.append((label, _parsed(text, label)))
    _plan_files(files, args, outcome)
    for warning in outcome.warnings:
        print(warning, file=sys.stderr)
    if outcome.errors:
        for error in outcome.errors:
            print(error, file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(outcome.children, indent=2))
    elif outcome.children:
        sys.stdout.write(yaml.safe_dump_all(outcome.children, sort_keys=False, explicit_start=True))
    return 0

"""``kto plan``: the children kto would create for job YAMLs, without a cluster.

In: files (or stdin) holding job documents: the six kubeflow.org/v1 kinds,
MPIJob kubeflow.org/v2beta1 (mpi-operator), and et-operator's TrainingJob,
ScaleIn and ScaleOut (kai.alibabacloud.com/v1alpha1; a scaler is checked, it
has no children of its own). Out: the child
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

HELP = "Print the child objects kto would create for job YAMLs (kubeflow.org v1 and v2beta1, et-operator)."

_EPILOG = """\
Documents are numbered from 0 within each file, in file order (empty
documents are skipped but keep their number). Errors go to stderr as
`<file>: document <index>: <field path>: <message>`; on any error nothing is
printed on stdout and the exit status is 2. Warnings (`warning: ...`) do not
fail the command.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="+", metavar="FILE", help="job YAML file(s); '-' reads stdin")
    parser.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml",
        help="yaml: a '---' separated stream (default); json: one JSON array",
    )
    parser.add_argument(
        "--gang-scheduler-name", default="",
        help="as the operator flag: 'volcano' or a scheduler-plugins scheduler name; empty = off",
    )
    parser.add_argument(
        "--cluster-domain", default="",
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


def _plan_file(label: str, text: str, args: argparse.Namespace, outcome: _Outcome) -> None:
    from shared.api import jobs
    from shared.core import defaulting, settings, validating

    operator_settings = settings.OperatorSettings(
        gang_scheduler_name=args.gang_scheduler_name, cluster_domain=args.cluster_domain
    )
    for index, document in _documents(text, label, outcome):
        prefix = f"{label}: document {index}"
        api_version = document.get("apiVersion") if isinstance(document, dict) else None
        if api_version == "kubeflow.org/v2beta1":
            _plan_mpi_v2(prefix, document, operator_settings, outcome)
            continue
        if api_version == "kai.alibabacloud.com/v1alpha1":
            _plan_elastic(prefix, document, outcome)
            continue
        try:
            job = jobs.load(document)
        except jobs.LoadError as exc:
            outcome.errors.extend(f"{prefix}: {path or '<document>'}: {message}" for path, message in exc.errors)
            continue
        report = validating.validate(job)
        outcome.warnings.extend(f"warning: {prefix}: {warning}" for warning in report.warnings)
        if not report.ok:
            outcome.errors.extend(f"{prefix}: {error}" for error in report.errors)
            continue
        # Imported here, once a job is valid: planning is the heaviest module.
        from shared.core import planning

        try:
            outcome.children.extend(planning.plan(defaulting.set_defaults(job), operator_settings))
        except planning.PlanError as exc:
            outcome.errors.append(f"{prefix}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a planning bug must still not print a traceback
            outcome.errors.append(f"{prefix}: internal error while planning (a kto bug): {type(exc).__name__}: {exc}")


_PLANNED_KEY = "<generated by the operator>"
"""What a dry run shows in place of an SSH key pair."""


def _load_errors(prefix: str, exc: Any, outcome: _Outcome) -> None:
    outcome.errors.extend(f"{prefix}: {path or '<document>'}: {message}" for path, message in exc.errors)


def _plan_mpi_v2(prefix: str, document: Any, operator_settings: Any, outcome: _Outcome) -> None:
    """An MPIJob v2beta1: the children of its first sync (spec A.7), with a stand-in key."""
    import datetime as dt

    from shared.api import mpijobs
    from shared.core.mpi_v2 import defaulting, sshkeys, validating
    from shared.core.mpi_v2 import reconciling as mpi_v2

    try:
        job = mpijobs.load(document)
    except mpijobs.LoadError as exc:
        _load_errors(prefix, exc, outcome)
        return
    report = validating.validate(defaulting.set_defaults(job))
    if not report.ok:
        outcome.errors.extend(f"{prefix}: {error}" for error in report.errors)
        return
    keys = sshkeys.KeyPair(_PLANNED_KEY.encode(), _PLANNED_KEY.encode())
    decision = mpi_v2.decide(job, [], dt.datetime.now(dt.UTC), operator_settings, lambda: keys)
    outcome.children.extend(decision.creates)


def _plan_elastic(prefix: str, document: Any, outcome: _Outcome) -> None:
    """A TrainingJob: its children in upstream's creation order; a scaler: checked only."""
    from shared.api import elastic
    from shared.core.elastic import defaulting, planning, validating
    from shared.core.elastic.settings import ElasticSettings

    try:
        loaded = elastic.load(document)
    except elastic.LoadError as exc:
        _load_errors(prefix, exc, outcome)
        return
    if not isinstance(loaded, elastic.TrainingJob):
        report = validating.validate_scaler(loaded)
        if not report.ok:
            outcome.errors.extend(f"{prefix}: {error}" for error in report.errors)
        return
    job = defaulting.set_defaults(loaded)
    report = validating.validate(job)
    outcome.warnings.extend(f"warning: {prefix}: {warning}" for warning in report.warnings)
    if not report.ok:
        outcome.errors.extend(f"{prefix}: {error}" for error in report.errors)
        return
    keys = planning.KeyPair(_PLANNED_KEY, _PLANNED_KEY)
    outcome.children.extend(planning.plan(job, ElasticSettings(), keys))


def run(args: argparse.Namespace) -> int:
    outcome = _Outcome()
    for name in args.files:
        label = "<stdin>" if name == "-" else name
        try:
            text = _read(name)
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            outcome.errors.append(f"{label}: cannot read: {reason}")
            continue
        _plan_file(label, text, args, outcome)
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

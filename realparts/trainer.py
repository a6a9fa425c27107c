"""Kubeflow Trainer v2's own files, the yardstick of kto's ``trainer.kubeflow.org`` API.

In: nothing but the Go module proxy. Out: :func:`ensure_module`, the directory of the Go module
``github.com/kubeflow/trainer/v2`` at :data:`VERSION` (its zip holds ``manifests/`` and
``examples/``), downloaded once per machine into the per-machine cache (``~/.cache/kto``,
``realparts.caching``) with a module cache of its own there (``GOMODCACHE`` under the build
directory, ``GOFLAGS=-modcacherw`` so the cache can be replaced), and the files tests read from it:

* :func:`runtime_files`: upstream's built-in runtimes, ``manifests/base/runtimes``, as kustomize
  lists them (each ``kustomization.yaml``'s ``resources``, directories followed: torchtune's), and the
  data-cache one (``runtimes/data-cache``, installed by upstream's data-cache overlay);
* :func:`example_files`: ``examples/yaml/*.yaml``;
* :func:`crd_files`: upstream's three CRDs (for the schema comparison only).

Nothing fetched is committed; the tests fetch what is missing.
"""

from __future__ import annotations

import json
import os
import pathlib

import yaml

from realparts import caching

VERSION = "v2.3.0"
MODULE = "github.com/kubeflow/trainer/v2"
_MODULE_DIR = "module"
"""The name under the cache entry of the link to the module's unpacked tree."""


def _download(directory: pathlib.Path) -> None:
    go = caching.require_tool("go", "install Go 1.26 or newer (https://go.dev/dl or your distribution's golang package)")
    env = dict(os.environ, GOMODCACHE=str(directory / "gomodcache"), GOFLAGS="-modcacherw", GO111MODULE="on")
    log = directory / "download.log"
    caching.run_logged([go, "mod", "download", "-json", f"{MODULE}@{VERSION}"], cwd=directory, env=env,
                       log_path=log, what=f"go mod download of {MODULE}@{VERSION}")
    # The log holds go's JSON answer after anything it printed first; Dir is where the tree is.
    text = log.read_text()
    answer = json.loads(text[text.index("{"):])
    unpacked = pathlib.Path(answer["Dir"])
    (directory / _MODULE_DIR).symlink_to(unpacked.relative_to(directory))


def ensure_module(*, quiet: bool = False) -> pathlib.Path:
    """The unpacked module tree (``manifests/``, ``examples/``, ``pkg/`` …), downloaded once per machine."""
    return caching.cached(f"trainer-{VERSION}", _download, quiet=quiet) / _MODULE_DIR


def _kustomized(directory: pathlib.Path) -> list[pathlib.Path]:
    """The YAML files a kustomization lists, in its order, sub-kustomizations followed."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    found: list[pathlib.Path] = []
    for resource in kustomization.get("resources") or []:
        path = directory / resource
        found.extend(_kustomized(path) if path.is_dir() else [path])
    return found


RUNTIME_KUSTOMIZATIONS = ("manifests/base/runtimes", "manifests/base/runtimes/data-cache")
"""The kustomizations of the built-in runtimes: the default one (torchtune's included) and the data-cache
overlay's, which upstream installs apart."""


def runtime_files() -> list[pathlib.Path]:
    """Upstream's built-in (Cluster)TrainingRuntimes, ``manifests/base/runtimes/**/*.yaml``."""
    module = ensure_module()
    return [path for directory in RUNTIME_KUSTOMIZATIONS for path in _kustomized(module / directory)]


def example_files() -> list[pathlib.Path]:
    """Upstream's example TrainJobs, ``examples/yaml/*.yaml``."""
    return sorted((ensure_module() / "examples" / "yaml").glob("*.yaml"))


def crd_files() -> dict[str, pathlib.Path]:
    """Upstream's CRDs by plural (``trainjobs`` → ``trainer.kubeflow.org_trainjobs.yaml``)."""
    return {path.stem.split("_", 1)[1]: path
            for path in _kustomized(ensure_module() / "manifests" / "base" / "crds")}


def documents(path: pathlib.Path) -> list[dict[str, object]]:
    """The objects of one YAML file (empty documents left out)."""
    return [document for document in yaml.safe_load_all(path.read_text()) if document]

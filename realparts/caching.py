"""The per-machine cache of built real parts, keyed by version.

In: a part name and version (``kube-v1.37.2``, ``kafka-4.1.1``) and a
function that builds it into a fresh directory. Out: the directory of the
finished build, under ``$KTO_CACHE_DIR`` (default ``~/.cache/kto``).

A build runs at most once per machine: it is made in ``<name>.tmp-<pid>``,
marked complete with a ``.complete`` file and renamed into place, under a
lock file, so two ``make test`` runs at once build it once and an
interrupted build leaves nothing that looks finished.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable

COMPLETE = ".complete"


class PartError(Exception):
    """A real part cannot be built or started: one line naming what is missing and how to get it."""


def cache_root() -> pathlib.Path:
    """``$KTO_CACHE_DIR`` or ``~/.cache/kto``."""
    configured = os.environ.get("KTO_CACHE_DIR", "").strip()
    return pathlib.Path(configured).expanduser() if configured else pathlib.Path.home() / ".cache" / "kto"


def require_tool(name: str, how: str) -> str:
    """The path of executable ``name`` on PATH, or a PartError saying how to get it."""
    found = shutil.which(name)
    if found is None:
        raise PartError(f"{name} is not installed (needed to build the real parts): {how}")
    return found


def run_logged(command: list[str], *, cwd: pathlib.Path, env: dict[str, str], log_path: pathlib.Path,
               what: str) -> None:
    """Run one build step, its output appended to ``log_path``; a PartError naming ``what``, the exit
    code and the log (not its lines: a compiler's output is many lines) if it fails."""
    with log_path.open("ab") as output:
        result = subprocess.run(command, cwd=cwd, env=env, stdout=output, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        raise PartError(f"{what} failed (exit {result.returncode}); its output is in {log_path}")


GO_HOW = "install Go 1.26 or newer (https://go.dev/dl or your distribution's golang package)"


def go_build(directory: pathlib.Path, *, module: str, version: str, package: str, binary: str, what: str) -> None:
    """One ``go build`` of ``package`` of ``module`` at ``version`` from the Go module proxy: a build
    module required it is written in ``directory/src`` (nothing of it is committed anywhere), the
    static binary goes to ``directory/binary``, the output of both steps to ``directory/build.log``."""
    go = require_tool("go", GO_HOW)
    source = directory / "src"
    source.mkdir(parents=True)
    (source / "go.mod").write_text(f"module kto.local/{binary}build\n\ngo 1.26.0\n\nrequire {module} {version}\n")
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    for command in ([go, "get", f"{package}@{version}"],
                    [go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(directory / binary), package]):
        run_logged(command, cwd=source, env=env, log_path=directory / "build.log",
                   what=f"go {command[1]} of {what} {version}")


def module_dir(source: pathlib.Path, module: str, version: str) -> pathlib.Path:
    """Where the Go module cache holds ``module`` at ``version`` (downloaded by a build in ``source``)."""
    go = require_tool("go", GO_HOW)
    found = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=source,
                           capture_output=True, check=False)
    if found.returncode != 0:
        raise PartError(f"go mod download of {module}@{version} failed: "
                        f"{found.stderr.decode(errors='replace').strip()}")
    return pathlib.Path(json.loads(found.stdout)["Dir"])


def copy_tree(source: pathlib.Path, target: pathlib.Path) -> None:
    """Copy a directory of the module cache, made writable (the module cache's files are read-only,
    and a cached build must be removable)."""
    shutil.copytree(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


CRD_DIR = "crd"
"""Where a controller's build keeps its module's ``config/components/crd/bases``."""
WEBHOOK_DIR = "webhook"
"""Where a controller's build keeps its module's ``config/components/webhook``."""


def go_build_controller(directory: pathlib.Path, *, module: str, version: str, package: str, binary: str,
                        what: str) -> None:
    """:func:`go_build` of a kubebuilder project's manager, with the module's CRDs (:data:`CRD_DIR`)
    and webhook manifests (:data:`WEBHOOK_DIR`) beside the binary; the build module removed after."""
    go_build(directory, module=module, version=version, package=package, binary=binary, what=what)
    components = module_dir(directory / "src", module, version) / "config" / "components"
    copy_tree(components / "crd" / "bases", directory / CRD_DIR)
    copy_tree(components / "webhook", directory / WEBHOOK_DIR)
    shutil.rmtree(directory / "src")


def cached_controller(name: str, *, module: str, version: str, package: str, binary: str, what: str,
                      revision: int, quiet: bool = False) -> pathlib.Path:
    """The build of :func:`go_build_controller` in the cache as ``<name>-<version>-r<revision>``."""
    return cached(f"{name}-{version}-r{revision}", functools.partial(
        go_build_controller, module=module, version=version, package=package, binary=binary, what=what), quiet=quiet)


def cached(name: str, build: Callable[[pathlib.Path], None], *, quiet: bool = False) -> pathlib.Path:
    """The finished build ``name`` in the cache, running ``build(directory)`` once if it is missing.

    ``build`` fills the directory it is given and raises PartError on failure; the failed build's
    ``build.log`` is kept as ``<name>.failed.log`` beside it (the directory is removed), and the
    error names that. The first build prints its duration on stderr (it takes minutes).
    """
    root = cache_root()
    final = root / name
    if (final / COMPLETE).is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with (root / f"{name}.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / COMPLETE).is_file():  # built by someone else while we waited
            return final
        work = root / f"{name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if not quiet:
            print(f"kto: building {name} into {root} (once per machine) ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            build(work)
        except PartError as exc:
            log, kept = work / "build.log", root / f"{name}.failed.log"
            message = str(exc)
            if log.is_file():
                log.replace(kept)
                message = message.replace(str(log), str(kept))
            shutil.rmtree(work, ignore_errors=True)
            raise PartError(message) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        elapsed = time.monotonic() - started
        (work / COMPLETE).write_text(f"built in {elapsed:.0f}s\n")
        shutil.rmtree(final, ignore_errors=True)
        work.rename(final)
        if not quiet:
            print(f"kto: built {name} in {elapsed:.0f}s", file=sys.stderr, flush=True)
    return final

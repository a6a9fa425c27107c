"""The process runtime of the sim's nodes: a pod's containers run as real processes on this machine.

A node labelled ``sim.kto.dev/runtime: process`` (``kto up --runtime process``,
``kto sim --runtime process``, or ``kubectl label node``) runs each pod whose
containers all have a ``command`` as local processes; other pods, and every pod of a
``simulated`` node, are simulated as before (sim/node/kubelet.py). Images are not pulled or
looked at: the "image" is this machine — its PATH, with a per-pod Python layer over
kto's own Python environment first on it (see :class:`PodDir`).

In: the pod (its spec as stored), the node's and pod's addresses, ConfigMaps and
Secrets read through the kubelet's API server (sim/node/apis.py). Out: per container, a process started
through sim/node/launching.py with

* the environment a kubelet gives: ``PATH``, ``HOME`` (the pod's scratch directory)
  and ``HOSTNAME`` (the pod's hostname) in place of an image's, then ``envFrom`` and
  ``env`` in order — literal values, ``fieldRef`` (metadata.name, namespace, uid,
  labels['…'], annotations['…'], spec.nodeName, spec.serviceAccountName,
  status.hostIP(s), status.podIP(s)), ``resourceFieldRef`` (limits/requests of cpu,
  memory, ephemeral-storage with divisor; a missing limit is the node's allocatable),
  ``configMapKeyRef`` and ``secretKeyRef`` (``optional`` honoured), with ``$(VAR)``
  expanded as the kubelet does (``$$`` escapes, unknown names left as written); no
  service-link variables;
* ``command`` + ``args`` with ``$(VAR)`` expanded the same way;
* ``workingDir`` when given (it must exist: a runtime would create it inside the
  image, but here it would be a directory of this machine), else the pod's scratch
  directory ``<pods-dir>/<namespace>_<pod>_<uid>/work``;
* stdout and stderr appended to ``logs/<container>/<restart>.log`` beside it (what
  ``kubectl logs`` and ``--previous`` read);
* an ``/etc/hosts`` of its own (``hosts`` beside it, rewritten in place as services
  come and go): this machine's hosts file, then the pod's own hostname and every
  Service of the namespace (``svc``, ``svc.ns``, ``svc.ns.svc``,
  ``svc.ns.svc.cluster.local``) and every ``hostname.subdomain`` pod name on
  127.0.0.1, then the pod's ``hostAliases``. Every pod shares this machine's network,
  as ``hostNetwork`` pods share their node's: its podIP is 127.0.0.1, and two pods
  that listen on one port collide.

A command that cannot run here — an executable not on PATH, a path that does not
exist or is not executable, a missing ``workingDir`` — is a ``StartError`` (exit code
128, the message names what is missing), decided before anything starts; a missing
ConfigMap, Secret or key is ``CreateContainerConfigError`` (the container waits and is
tried again). Neither ever stops the kubelet.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import pathlib
import re
import shutil
import signal
import site
import sys
import sysconfig
import venv
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from sim import errors, objects, quantities
from sim.node import apis

log = logging.getLogger(__name__)

SIMULATED = "simulated"
PROCESS = "process"
RUNTIMES = (SIMULATED, PROCESS)

POD_IP = "127.0.0.1"
"""Every process pod's IP: the processes share this machine's loopback network."""

LAUNCHER = pathlib.Path(__file__).with_name("launching.py")
START_ERROR_CODE = 128
"""The exit code a runtime reports for a container that could not be started."""
MAX_BACKOFF = 300.0
"""CrashLoopBackOff's ceiling, in seconds (the kubelet's)."""
MAX_GRACE = 30.0
"""Seconds at most a deleted pod's processes get between SIGTERM and SIGKILL."""


class StartFailure(Exception):
    """A container that cannot be started: ``reason`` (StartError, CreateContainerConfigError) and message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


# --------------------------------------------------------------------------
# Pure decisions
# --------------------------------------------------------------------------


def unrunnable(pod: Mapping[str, Any]) -> str | None:
    """Why the pod cannot run as processes (a container without ``command``), or None when it can."""
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        return "it has no containers"
    for container in containers:
        if not container.get("command"):
            return (f"container {container.get('name', '')} has no command (the entrypoint of image "
                    f"{container.get('image', '')!r} is not known here)")
    return None


_REFERENCE = re.compile(r"\$\$|\$\(([^)]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion: a defined name is replaced, ``$$`` is ``$``, the rest stays."""

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        name = match[1]
        return env[name] if name in env else match[0]

    return _REFERENCE.sub(replace, text)


def hostname(pod: Mapping[str, Any]) -> str:
    """The pod's hostname: ``spec.hostname`` or its name (as the kubelet sets it)."""
    spec = pod.get("spec") or {}
    return str(spec.get("hostname") or objects.metadata(pod).get("name") or "")


def field_value(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    """A ``fieldRef`` as the kubelet resolves it; ``StartFailure`` for a path it does not support."""
    metadata = objects.metadata(pod)
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if match:
        return str((metadata.get(match[1]) or {}).get(match[2], ""))
    raise StartFailure("CreateContainerConfigError", f"unsupported fieldRef fieldPath {path!r}")


def resource_value(container: Mapping[str, Any], ref: Mapping[str, Any], allocatable: Mapping[str, Any]) -> str:
    """A ``resourceFieldRef``: the limit (or request) in units of ``divisor``, rounded up as the kubelet does."""
    resource = str(ref.get("resource") or "")
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not name:
        raise StartFailure("CreateContainerConfigError", f"unsupported resourceFieldRef resource {resource!r}")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = allocatable.get(name, "0")
    divisor = quantities.parse(ref.get("divisor") or "1")
    if divisor <= 0:
        raise StartFailure("CreateContainerConfigError", f"resourceFieldRef {resource}: divisor must be positive")
    return str(math.ceil(quantities.parse(value) / divisor))


Lookup = Callable[[str, str, str], Awaitable["dict[str, str] | None"]]
"""(``configmaps`` | ``secrets``, namespace, name) → its data as text, or None when it does not exist."""


async def container_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], base: Mapping[str, str], *,
    pod_ip: str, host_ip: str, allocatable: Mapping[str, Any], lookup: Lookup,
) -> dict[str, str]:
    """The environment of one container: ``base`` (the image's part), ``envFrom``, then ``env`` in order."""
    namespace = str(objects.metadata(pod).get("namespace") or "")
    env = dict(base)
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, field in (("configmaps", "configMapRef"), ("secrets", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            data = await lookup(kind, namespace, str(ref.get("name") or ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise StartFailure("CreateContainerConfigError", f'{kind[:-1]} "{ref.get("name")}" not found')
            for key, value in data.items():
                env[prefix + key] = value
    for var in container.get("env") or []:
        name = str(var.get("name") or "")
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value") or ""), env)
            continue
        if "fieldRef" in source:
            env[name] = field_value(pod, str((source["fieldRef"] or {}).get("fieldPath") or ""), pod_ip, host_ip)
        elif "resourceFieldRef" in source:
            env[name] = resource_value(container, source["resourceFieldRef"] or {}, allocatable)
        else:
            for kind, field, title in (("configmaps", "configMapKeyRef", "ConfigMap"),
                                       ("secrets", "secretKeyRef", "Secret")):
                ref = source.get(field)
                if ref is None:
                    continue
                data = await lookup(kind, namespace, str(ref.get("name") or ""))
                key = str(ref.get("key") or "")
                if data is not None and key in data:
                    env[name] = data[key]
                elif not ref.get("optional"):
                    if data is None:
                        raise StartFailure("CreateContainerConfigError", f'{kind[:-1]} "{ref.get("name")}" not found')
                    raise StartFailure("CreateContainerConfigError",
                                       f"couldn't find key {key} in {title} {namespace}/{ref.get('name')}")
                break
    return env


def argv_of(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(VAR)`` expanded."""
    return [expand(str(part), env) for part in [*(container.get("command") or []), *(container.get("args") or [])]]


def find_executable(command: str, path: str, cwd: pathlib.Path) -> str:
    """The file ``command`` runs, as runc looks it up; ``StartFailure`` naming it when there is none."""
    if "/" in command:
        candidate = (cwd / command) if not command.startswith("/") else pathlib.Path(command)
        if not candidate.exists():
            raise StartFailure("StartError", f'exec: "{command}": stat {candidate}: no such file or directory')
        if candidate.is_dir() or not os.access(candidate, os.X_OK):
            raise StartFailure("StartError", f'exec: "{command}": permission denied')
        return str(candidate)
    found = shutil.which(command, path=path)
    if found is None:
        raise StartFailure("StartError", f'exec: "{command}": executable file not found in $PATH')
    return found


def cluster_names(namespace: str, services: Iterable[str], subdomain_hosts: Iterable[tuple[str, str]]) -> list[str]:
    """The names cluster DNS would answer for a pod of ``namespace``: services and ``hostname.subdomain``."""
    names: list[str] = []
    for short in sorted({*services, *(f"{host}.{sub}" for host, sub in subdomain_hosts)}):
        names += [short, f"{short}.{namespace}", f"{short}.{namespace}.svc", f"{short}.{namespace}.svc.cluster.local"]
    return names


def hosts_text(machine_hosts: str, pod: Mapping[str, Any], names: Iterable[str]) -> str:
    """The pod's /etc/hosts: this machine's, then its own and the cluster's names on 127.0.0.1, then hostAliases."""
    lines = [machine_hosts.rstrip("\n"), "", "# kto process runtime: this pod and the cluster's names"]
    spec = pod.get("spec") or {}
    own = hostname(pod)
    namespace = str(objects.metadata(pod).get("namespace") or "")
    if spec.get("subdomain"):
        own = f"{own}.{spec['subdomain']}.{namespace}.svc.cluster.local\t{own}"
    lines.append(f"{POD_IP}\t{own}")
    lines += [f"{POD_IP}\t{name}" for name in names]
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines.append("# Entries added by HostAliases.")
        lines += [f"{a.get('ip', '')}\t{chr(9).join(a.get('hostnames') or [])}" for a in aliases]
    return "\n".join(lines) + "\n"


def backoff(restarts: int, base: float) -> float:
    """CrashLoopBackOff before restart number ``restarts`` + 1: ``base`` doubled per restart, at most 5 minutes."""
    return min(base * 2 ** max(0, restarts - 1), MAX_BACKOFF) if restarts else 0.0


def exit_code(returncode: int) -> int:
    """A process's exit status as a runtime reports it (a signal N is 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def container_id(uid: str, container: str, attempt: int) -> str:
    digest = hashlib.sha256(f"process/{uid}/{container}/{attempt}".encode()).hexdigest()
    return f"process://{digest}"


# --------------------------------------------------------------------------
# One container's state, rendered into the pod status
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Container:
    """What the kubelet knows of one container of a process pod."""

    name: str
    image: str
    state: str = "waiting"
    """waiting | running | terminated."""
    reason: str = "ContainerCreating"
    """Of a waiting or terminated state."""
    message: str | None = None
    restart_count: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    last_terminated: dict[str, Any] | None = None
    attempts: int = 0
    """Starts tried so far."""
    log_index: int = -1
    """The restart count when the latest start was tried: its log is ``<log_index>.log``."""
    done: bool = False
    """Terminated for good (no restart follows)."""
    process: asyncio.subprocess.Process | None = None

    def terminated(self) -> dict[str, Any]:
        state: dict[str, Any] = {"exitCode": self.exit_code if self.exit_code is not None else 0,
                                 "reason": self.reason, "finishedAt": self.finished_at}
        if self.message:
            state["message"] = self.message
        if self.started_at:
            state["startedAt"] = self.started_at
        return state

    def status(self, uid: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name, "image": self.image,
            "imageID": f"{self.image}@sha256:{hashlib.sha256(self.image.encode()).hexdigest()}",
            "ready": self.state == "running", "started": self.state == "running",
            "restartCount": self.restart_count, "lastState": {},
        }
        if self.attempts:
            entry["containerID"] = container_id(uid, self.name, self.attempts - 1)
        if self.state == "running":
            entry["state"] = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            entry["state"] = {"terminated": self.terminated()}
        else:
            waiting: dict[str, Any] = {"reason": self.reason}
            if self.message:
                waiting["message"] = self.message
            entry["state"] = {"waiting": waiting}
        if self.last_terminated is not None:
            entry["lastState"] = {"terminated": self.last_terminated}
        return entry


@dataclasses.dataclass
class Pod:
    """A pod the kubelet runs as processes: its directory, containers (in spec order) and tasks."""

    dir: PodDir
    containers: list[Container]
    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)

    def container(self, name: str | None) -> Container | None:
        """The named container (the first when None)."""
        if name is None:
            return self.containers[0] if self.containers else None
        return next((c for c in self.containers if c.name == name), None)

    @property
    def processes(self) -> list[asyncio.subprocess.Process]:
        return [c.process for c in self.containers if c.process is not None and c.process.returncode is None]

    def all_running(self) -> bool:
        return all(c.state == "running" for c in self.containers)

    def settled(self) -> bool:
        return all(c.done for c in self.containers)


# --------------------------------------------------------------------------
# Effects: the pod's directory, its Python layer, the processes
# --------------------------------------------------------------------------


def _python_layer(layer: pathlib.Path) -> None:
    """A virtual environment over kto's own Python: ``python``, ``pip`` and the console scripts of
    kto's environment (``torchrun`` …) run in it, see every package of kto's environment, and
    install into the layer (which goes with the pod) — like a container's writable layer over
    an image that holds kto's Python."""
    venv.EnvBuilder(symlinks=True, with_pip=False, clear=True).create(layer)
    purelib = sysconfig.get_path("purelib", vars={"base": str(layer), "platbase": str(layer)})
    bases = [p for p in site.getsitepackages() if os.path.isdir(p)]
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        bases.append(site.getusersitepackages())
    # An "import" line makes site process the .pth files of kto's environment too (editable installs).
    pathlib.Path(purelib, "_kto_base.pth").write_text(
        "".join(f"import site; site.addsitedir({base!r})\n" for base in bases))
    ours = layer / "bin" / "python"
    scripts = pathlib.Path(sysconfig.get_path("scripts"))
    interpreters = {sys.executable, os.path.realpath(sys.executable)}
    for script in scripts.iterdir() if scripts.is_dir() else ():
        target = layer / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            with script.open("rb") as handle:
                head = handle.readline(512)
                if not head.startswith(b"#!") or head[2:].strip().decode(errors="replace") not in interpreters:
                    continue
                body = handle.read()
        except OSError:
            continue
        target.write_bytes(b"#!" + str(ours).encode() + b"\n" + body)
        target.chmod(0o755)


class PodDir:
    """``<pods-dir>/<namespace>_<pod>_<uid>``: ``work/`` (working directory and HOME), ``python/`` (the
    Python layer, made on first use), ``hosts`` and ``logs/<container>/<n>.log``."""

    def __init__(self, root: pathlib.Path, namespace: str, name: str, uid: str) -> None:
        self.path = root / f"{namespace}_{name}_{uid}"
        self.work = self.path / "work"
        self.layer = self.path / "python"
        self.hosts = self.path / "hosts"

    def log(self, container: str, attempt: int) -> pathlib.Path:
        return self.path / "logs" / container / f"{attempt}.log"

    async def prepare(self) -> None:
        """Make the directories and the Python layer (once)."""
        if (self.layer / "pyvenv.cfg").exists():
            return
        self.work.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(_python_layer, self.layer)

    def base_env(self, pod: Mapping[str, Any]) -> dict[str, str]:
        """What an image would give: PATH (the pod's Python layer, kto's scripts, this machine's PATH),
        HOME, HOSTNAME."""
        scripts = sysconfig.get_path("scripts")
        path = os.pathsep.join([str(self.layer / "bin"), scripts, os.environ.get("PATH", os.defpath)])
        return {"PATH": path, "HOME": str(self.work), "HOSTNAME": hostname(pod)}

    def write_hosts(self, text: str) -> None:
        """Write in place (the bind mount holds the inode); unchanged text is not written."""
        with contextlib.suppress(FileNotFoundError):
            if self.hosts.read_text() == text:
                return
        self.path.mkdir(parents=True, exist_ok=True)
        with self.hosts.open("a+") as handle:
            handle.seek(0)
            handle.truncate()
            handle.write(text)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


async def launch(argv: list[str], executable: str, env: Mapping[str, str], cwd: pathlib.Path,
                 hosts: pathlib.Path, log_path: pathlib.Path) -> asyncio.subprocess.Process:
    """Start the container's process through sim/node/launching.py, in a session of its own (so its whole
    tree can be signalled), output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as output:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", str(LAUNCHER), str(os.getpid()), str(hosts), executable, *argv,
            stdin=asyncio.subprocess.DEVNULL, stdout=output, stderr=output, env=dict(env), cwd=str(cwd),
            start_new_session=True,
        )


def signal_tree(process: asyncio.subprocess.Process | None, signum: int) -> None:
    """Signal the process's session (its process group): torchrun's workers too."""
    if process is None or process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)


async def stop(processes: Iterable[asyncio.subprocess.Process | None], grace: float) -> None:
    """SIGTERM each, wait up to ``grace`` seconds, then SIGKILL what is left."""
    running = [p for p in processes if p is not None and p.returncode is None]
    for process in running:
        signal_tree(process, signal.SIGTERM)
    if not running:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), grace)
    for process in running:
        signal_tree(process, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in running)), 5.0)


def read_data(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    """A ConfigMap's ``data`` (and ``binaryData``) or a Secret's ``data`` (base64) as text."""
    if kind == "secrets":
        return {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    data = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("binaryData") or {}).items():
        data[key] = base64.b64decode(value).decode(errors="replace")
    return data


async def lookup_in(api: apis.NodeApi, kind: str, namespace: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's or Secret's data read through the kubelet's API server; None when it does not exist."""
    try:
        obj = await api.get(kind, namespace, name)
    except errors.ApiError as exc:
        if exc.code == 404:
            return None
        raise
    return read_data(kind, obj)


def machine_hosts() -> str:
    try:
        return pathlib.Path("/etc/hosts").read_text()
    except OSError:
        return "127.0.0.1\tlocalhost\n"

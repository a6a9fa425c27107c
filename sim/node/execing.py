"""The files of simulated pods, their init containers' commands, and exec into their containers.

In: a pod (as the kubelet runs it) and the API server to read its ConfigMap
and Secret volumes from (sim/node/apis.py: the local cluster's store, or the
node agent's client of any API server); an exec's container and argv. Out: per pod a set of
:class:`shelling.Filesystem`s — one root per container, one per volume,
emptyDirs shared by the containers that mount them — built only for pods that
are exec'd or whose init containers have commands (thousands of plain pods
stay free); init containers' results (:class:`InitOutcome`); exec results
(:class:`shelling.Result`); and the kubelet's refusal of an exec before it
starts (:class:`ExecRefused`). The exec entrance itself, with its streams, is
sim/node/kubeletserving.py's ``serve_exec``.

Launcher processes for ``ps``: a pod annotated ``sim.kto.dev/ssh-hosts-file:
<path>`` shows, besides PID 1, one ``ssh -o PasswordAuthentication=no -o
StrictHostKeyChecking=no <host>`` process per host listed in that file (read
at each ``ps``), or ``<attach> <host>`` with ``sim.kto.dev/attach-command:
<attach>``.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from sim import errors, objects
from sim.node import apis, shelling

log = logging.getLogger(__name__)

HOSTS_FILE_ANNOTATION = "sim.kto.dev/ssh-hosts-file"
ATTACH_ANNOTATION = "sim.kto.dev/attach-command"
DEFAULT_MODE = 0o644

Key = tuple[str, str]


@dataclasses.dataclass
class PodFiles:
    """One pod's filesystems: a root per container (init containers too) and its volumes."""

    uid: str
    roots: dict[str, shelling.Filesystem]
    volumes: dict[str, shelling.Filesystem]
    contexts: dict[str, shelling.Context]

    def shell(self, container: str) -> shelling.Shell:
        return shelling.Shell(self.roots[container], self.contexts[container])


@dataclasses.dataclass(frozen=True)
class InitOutcome:
    """What the init containers did: the log lines, and the first that failed (index, exit code) if any."""

    logs: list[str]
    failed: tuple[int, int] | None


class ExecRefused(Exception):
    """The kubelet refuses an exec before it starts: ``code`` and the plain-text body it answers."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def has_init_commands(pod: Mapping[str, Any]) -> bool:
    """True when an init container has a command or args the shell should run."""
    return any(c.get("command") or c.get("args") for c in (pod.get("spec") or {}).get("initContainers") or [])


class Filesystems:
    """The filesystems of the pods one kubelet runs, built on demand."""

    def __init__(self, api: apis.NodeApi) -> None:
        self._api = api
        self._pods: dict[Key, PodFiles] = {}
        self._judge = shelling.Shell(shelling.Filesystem())
        """A shell over nothing, to judge whether a command is one the shell simulates."""

    def __len__(self) -> int:
        return len(self._pods)

    def forget(self, key: Key) -> None:
        self._pods.pop(key, None)

    async def of(self, pod: Mapping[str, Any]) -> PodFiles:
        """The pod's files, built (volumes read from the API server) the first time they are needed."""
        metadata = objects.metadata(pod)
        key = (metadata.get("namespace") or "", metadata.get("name") or "")
        files = self._pods.get(key)
        if files is None or files.uid != metadata.get("uid", ""):
            files = await self._build(pod)
            self._pods[key] = files
        return files

    async def initialise(self, pod: Mapping[str, Any], start: int = 0) -> InitOutcome:
        """Run the commands of the init containers from number ``start`` on, in order; stop at the first failure.

        The pod's files are built only when one of those commands is one the shell simulates: a pod whose
        init containers only wait (a DNS loop) costs no filesystem while it lives."""
        containers = list(enumerate((pod.get("spec") or {}).get("initContainers") or []))[start:]
        commands = {index: [str(a) for a in (*(c.get("command") or []), *(c.get("args") or []))]
                    for index, c in containers}
        understood = {index for index, argv in commands.items() if argv and self._judge.understands(argv)}
        files = await self.of(pod) if understood else None
        logs: list[str] = []
        for index, container in containers:
            name = container.get("name", "")
            argv = commands[index]
            if not argv:
                logs.append(f"sim: init container {name} completed")
                continue
            if files is None or index not in understood:
                # A program the sim does not simulate (a DNS wait loop, a downloader …):
                # it is taken to have done its job, as every init container did before
                # the sim ran any.
                logs.append(f"sim: init container {name} runs what the sim does not simulate; taken as done")
                continue
            result = files.shell(name).run(argv)
            logs += [f"{name}: {line}" for line in (result.stdout + result.stderr).decode(errors="replace").splitlines()]
            if result.exit_code != 0:
                logs.append(f"sim: init container {name} exited with code {result.exit_code}")
                return InitOutcome(logs, (index, result.exit_code))
            logs.append(f"sim: init container {name} completed")
        return InitOutcome(logs, None)

    async def exec(self, pod: Mapping[str, Any], container: str, argv: Sequence[str],
                   stdin: bytes = b"") -> shelling.Result:
        files = await self.of(pod)
        return files.shell(container).run(list(argv), stdin)

    # -- building --

    async def _build(self, pod: Mapping[str, Any]) -> PodFiles:
        metadata = objects.metadata(pod)
        spec = pod.get("spec") or {}
        namespace = metadata.get("namespace") or ""
        annotations = metadata.get("annotations") or {}
        volumes: dict[str, shelling.Filesystem] = {}
        for volume in spec.get("volumes") or []:
            volumes[volume.get("name", "")] = await self._volume(namespace, volume)
        roots: dict[str, shelling.Filesystem] = {}
        contexts: dict[str, shelling.Context] = {}
        hostname = spec.get("hostname") or metadata.get("name") or "localhost"
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            name = container.get("name", "")
            root = shelling.Filesystem.root()
            root.write("/etc/hostname", f"{hostname}\n".encode())
            for mount in container.get("volumeMounts") or []:
                volume = volumes.get(mount.get("name", ""))
                if volume is not None and mount.get("mountPath"):
                    root.mount(mount["mountPath"], volume, mount.get("subPath") or "")
            roots[name] = root
            contexts[name] = shelling.Context(
                command_line=shelling.command_line(container),
                hostfile=annotations.get(HOSTS_FILE_ANNOTATION),
                attach=annotations.get(ATTACH_ANNOTATION) or shelling.SSH_ATTACH,
                hostname=hostname,
            )
        return PodFiles(metadata.get("uid", ""), roots, volumes, contexts)

    async def _volume(self, namespace: str, volume: Mapping[str, Any]) -> shelling.Filesystem:
        fs = shelling.Filesystem()
        if "configMap" in volume:
            await self._project(fs, namespace, "configmaps", volume["configMap"].get("name", ""), volume["configMap"],
                                volume["configMap"].get("defaultMode", DEFAULT_MODE))
        elif "secret" in volume:
            await self._project(fs, namespace, "secrets", volume["secret"].get("secretName", ""), volume["secret"],
                                volume["secret"].get("defaultMode", DEFAULT_MODE))
        elif "projected" in volume:
            mode = volume["projected"].get("defaultMode", DEFAULT_MODE)
            for source in volume["projected"].get("sources") or []:
                if "configMap" in source:
                    await self._project(fs, namespace, "configmaps", source["configMap"].get("name", ""),
                                        source["configMap"], mode)
                elif "secret" in source:
                    await self._project(fs, namespace, "secrets", source["secret"].get("name", ""),
                                        source["secret"], mode)
        # emptyDir, hostPath and the rest start empty.
        return fs

    async def _project(self, fs: shelling.Filesystem, namespace: str, resource: str, name: str,
                       source: Mapping[str, Any], mode: int) -> None:
        """The keys of a ConfigMap or Secret as files (``items`` picks keys, paths and modes)."""
        try:
            obj = await self._api.get(resource, namespace, name)
        except errors.ApiError as exc:
            if exc.code != 404:
                raise
            log.info("sim kubelet: %s %s/%s of a volume does not exist: the volume is empty", resource, namespace, name)
            return
        values: dict[str, bytes] = {}
        if resource == "secrets":
            for key, value in (obj.get("data") or {}).items():
                values[key] = base64.b64decode(value or "")
        else:
            for key, value in (obj.get("data") or {}).items():
                values[key] = str(value).encode()
            for key, value in (obj.get("binaryData") or {}).items():
                values[key] = base64.b64decode(value or "")
        items = source.get("items")
        if items is None:
            for key, data in values.items():
                fs.write("/" + key, data, int(mode))
            return
        for item in items:
            key = item.get("key", "")
            if key in values:
                fs.write(posixpath.join("/", item.get("path") or key), values[key], int(item.get("mode", mode)))


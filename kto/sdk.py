"""What upstream's ``kubeflow-training`` SDK lacks, for kto's jobs: their audit trail on the bus.

Use upstream's ``TrainingClient`` for create, get, list, wait, logs, update and delete — it
works against kto unchanged (tests/sdk/test_kubeflow_sdk.py). This module adds only what
upstream has no notion of, in an async client and a sync one of the same shape:

* ``history(job)`` — the job's records on ``kto.jobs`` in log order
  (:class:`shared.bus.reading.Entry`: offset, time, record, trace id), read from the one
  partition of its key, as ``kto history`` does;
* ``trace_id(job)`` — the W3C trace id its records carry (the first record that has one;
  None when none does, e.g. tracing is off), to look the job up in Jaeger or Tempo;
* ``replay(job)`` — every decision of its trail made again with the pure core and
  compared (:class:`shared.bus.replaying.JobReport`, as ``kto replay``).

In: a job as a name (with the client's namespace, kind and cluster), a job key
``cluster/namespace/kind/name``, a job object as a dict, or an upstream model
(``KubeflowOrgV1PyTorchJob`` …); the broker's settings (``KTO_KAFKA_*`` by default).
Out: the values above, or a typed error naming the job: :class:`JobNotFound` (the log
holds no record of it), :class:`Timeout` (no answer within ``timeout``),
:class:`BusUnavailable` (the broker cannot be reached), :class:`InvalidJob` (what was
passed names no job). All are :class:`SdkError`.

    from kto import sdk
    client = sdk.SyncClient(namespace="default", cluster="kto-1")
    client.history("mnist"); client.trace_id("mnist"); client.replay("mnist").ok
    entries = await sdk.Client(namespace="default").history("mnist")     # the async form
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from shared.api import objects
from shared.bus import reading, records, replaying
from shared.bus.errors import BusError
from shared.bus.settings import KafkaSettings, SettingsError

DEFAULT_TIMEOUT = 30.0


class SdkError(Exception):
    """An SDK call failed for ``job`` (its key, ``cluster/namespace/kind/name``)."""

    def __init__(self, job: str, message: str) -> None:
        super().__init__(message)
        self.job = job


class JobNotFound(SdkError):
    """The jobs topic holds no record of the job."""

    def __init__(self, job: str, topic: str) -> None:
        super().__init__(job, f"job {job}: no record of it in {topic}")


class Timeout(SdkError):
    """The broker did not answer within the timeout."""

    def __init__(self, job: str, seconds: float) -> None:
        super().__init__(job, f"job {job}: the broker did not answer within {seconds:g}s")
        self.seconds = seconds


class BusUnavailable(SdkError):
    """The broker cannot be reached, or its settings are unusable."""

    def __init__(self, job: str, reason: str) -> None:
        super().__init__(job, f"job {job}: {reason}")


class InvalidJob(SdkError):
    """What was passed as a job names none."""

    def __init__(self, job: str, reason: str) -> None:
        super().__init__(job, f"{reason}: {job!r}")


@dataclasses.dataclass(frozen=True)
class Defaults:
    """How a bare job name is completed into a job key."""

    cluster: str = "kto-1"
    """The cluster part of job keys: the watcher's ``--cluster`` (``kto up`` names them kto-1 …)."""
    namespace: str = "default"
    kind: str = "PyTorchJob"


def job_key(job: Any, defaults: Defaults = Defaults()) -> records.JobKey:
    """The job key of ``job``: a name, a key, a job object dict or an upstream model."""
    if isinstance(job, records.JobKey):
        return job
    if isinstance(job, str):
        if "/" in job:
            try:
                return records.JobKey.parse(job)
            except records.InvalidJobKey as exc:
                raise InvalidJob(job, str(exc)) from None
        name, namespace, kind = job, defaults.namespace, defaults.kind
    elif isinstance(job, Mapping):
        name = objects.name_of(job)
        namespace = objects.namespace_of(job) or defaults.namespace
        kind = str(job.get("kind") or defaults.kind)
    elif hasattr(job, "metadata"):  # an upstream model: KubeflowOrgV1PyTorchJob …
        metadata = job.metadata
        name = str(getattr(metadata, "name", "") or "")
        namespace = str(getattr(metadata, "namespace", "") or defaults.namespace)
        kind = str(getattr(job, "kind", "") or defaults.kind)
    else:
        raise InvalidJob(repr(job), "not a job name, key, object or model")
    try:
        return records.JobKey(cluster=defaults.cluster, namespace=namespace, kind=kind, name=name)
    except ValueError:
        raise InvalidJob(f"{defaults.cluster}/{namespace}/{kind}/{name}", "not a job") from None


class Client:
    """Async: ``await client.history(job)``, ``trace_id(job)``, ``replay(job)``."""

    def __init__(self, kafka: KafkaSettings | None = None, *, cluster: str = "kto-1", namespace: str = "default",
                 job_kind: str = "PyTorchJob", timeout: float = DEFAULT_TIMEOUT) -> None:
        self._kafka = kafka
        self.defaults = Defaults(cluster, namespace, job_kind)
        self.timeout = timeout

    def _settings(self, key: str) -> KafkaSettings:
        if self._kafka is not None:
            return self._kafka
        try:
            return KafkaSettings.from_env()
        except SettingsError as exc:
            raise BusUnavailable(key, str(exc)) from None

    async def history(self, job: Any) -> list[reading.Entry]:
        """The job's records in log order; :class:`JobNotFound` when there are none."""
        key = str(job_key(job, self.defaults))
        settings = self._settings(key)
        entries: list[reading.Entry] = []

        async def read() -> None:
            async for raw in reading.scan(settings, accept=lambda k: k == key, key=key):
                entries.append(raw.decoded())

        try:
            async with asyncio.timeout(self.timeout):
                await read()
        except TimeoutError:
            raise Timeout(key, self.timeout) from None
        except BusError as exc:
            raise BusUnavailable(key, str(exc)) from None
        if not entries:
            raise JobNotFound(key, settings.jobs_topic)
        return entries

    async def trace_id(self, job: Any) -> str | None:
        """The trace id of the job's first record that carries one; None when none does."""
        return next((entry.trace_id for entry in await self.history(job) if entry.trace_id), None)

    async def replay(self, job: Any) -> replaying.JobReport:
        """Every decision of the job's trail made again and compared (``report.ok``, ``report.divergence``)."""
        entries = await self.history(job)
        return replaying.replay_job(entries[0].key, entries)


class SyncClient:
    """The same calls, blocking (each runs its own event loop: not for use inside a running one)."""

    def __init__(self, kafka: KafkaSettings | None = None, *, cluster: str = "kto-1", namespace: str = "default",
                 job_kind: str = "PyTorchJob", timeout: float = DEFAULT_TIMEOUT) -> None:
        self.client = Client(kafka, cluster=cluster, namespace=namespace, job_kind=job_kind, timeout=timeout)

    def history(self, job: Any) -> list[reading.Entry]:
        return asyncio.run(self.client.history(job))

    def trace_id(self, job: Any) -> str | None:
        return asyncio.run(self.client.trace_id(job))

    def replay(self, job: Any) -> replaying.JobReport:
        return asyncio.run(self.client.replay(job))

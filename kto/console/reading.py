"""Reading the clusters and the audit log for the console.

In: a kubeconfig, every context of which is a cluster (named as in job keys),
and the Kafka settings. Out: each cluster's jobs of every kind kto serves, or
why the cluster did not answer (every call is bounded in time, so one cluster
that hangs never holds the others up); one job; the answers to reviews (who a
token is, what a user may list); one job's audit-log entries (with those of its MultiKueue
copies in the other clusters), read to the end or followed as they are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import pathlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

from kto.commands import history
from shared.bus import reading, records
from shared.bus.settings import KafkaSettings
from shared.kube import clients, resources

_RETRY = clients.RetrySettings(attempts=2, initial_wait=0.05, max_wait=0.5)
"""A console asks again soon anyway: one retry, no long back-off."""


class Unanswered(Exception):
    """A cluster that cannot answer now; the message says why, in one line."""


def _why(exc: BaseException, host: str = "") -> str:
    """One line on why a call failed: for a connection that failed, what the connection said."""
    if isinstance(exc, clients.ApiError) and exc.code == 0 and exc.__cause__ is not None:
        exc = exc.__cause__
        text = " ".join(str(exc).split()) or type(exc).__name__
        return f"cannot connect to {host}: {text}" if host and host not in text else text
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


class Clusters:
    """One API client per context, opened on first use; ``close()`` closes them all (safe twice)."""

    def __init__(self, kubeconfig: pathlib.Path, contexts: Sequence[str], timeout: float) -> None:
        self.kubeconfig = kubeconfig
        self.contexts = tuple(contexts)
        self.timeout = timeout
        self._clients: dict[str, clients.KubeClient] = {}
        self._lock = asyncio.Lock()

    async def _client(self, cluster: str) -> clients.KubeClient:
        async with self._lock:
            client = self._clients.get(cluster)
            if client is None:
                try:
                    client = await clients.KubeClient.connect(self.kubeconfig, cluster, retry=_RETRY)
                except Exception as exc:  # kubernetes-asyncio's ConfigException: a context it cannot use
                    raise Unanswered(f"context {cluster} of {self.kubeconfig}: {_why(exc)}") from None
                self._clients[cluster] = client
            return client

    async def jobs(self, cluster: str) -> list[dict[str, Any]]:
        """Every job of every kind in ``cluster`` (a kind the cluster does not serve has none)."""
        client = await self._client(cluster)

        async def of(rt: resources.ResourceType) -> list[dict[str, Any]]:
            try:
                items, _ = await client.list(rt)
            except clients.ApiError as exc:
                if exc.not_found:  # its CRD is not installed there (et-operator's, say)
                    return []
                raise
            return items

        try:
            async with asyncio.timeout(self.timeout):
                found = await asyncio.gather(*(of(rt) for rt in resources.JOB_TYPES.values()))
        except TimeoutError:
            raise Unanswered(f"no answer in {self.timeout:g}s") from None
        except clients.ApiError as exc:
            raise Unanswered(_why(exc, client.host)) from None
        return [job for items in found for job in items]

    async def job(self, key: records.JobKey) -> dict[str, Any] | None:
        """The job of ``key`` as its cluster has it; None when the cluster has no such job."""
        client = await self._client(key.cluster)
        try:
            async with asyncio.timeout(self.timeout):
                return await client.get(resources.JOB_TYPES[key.kind], key.namespace, key.name)
        except TimeoutError:
            raise Unanswered(f"no answer in {self.timeout:g}s") from None
        except clients.ApiError as exc:
            if exc.not_found:
                return None
            raise Unanswered(_why(exc, client.host)) from None

    async def create(self, cluster: str, rt: resources.ResourceType, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` created as a cluster-scoped ``rt`` in ``cluster`` — a review, answered and not
        stored — and the answer; Unanswered when the cluster cannot or will not answer."""
        client = await self._client(cluster)
        try:
            async with asyncio.timeout(self.timeout):
                return await client.create(rt, None, body)
        except TimeoutError:
            raise Unanswered(f"no answer in {self.timeout:g}s") from None
        except clients.ApiError as exc:
            raise Unanswered(_why(exc, client.host)) from None

    async def close(self) -> None:
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()


@dataclasses.dataclass
class _Answer:
    jobs: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: str = ""
    at: float = float("-inf")
    """Loop time of the answer."""
    asking: asyncio.Task[None] | None = None


class Listing:
    """The jobs of every cluster, asked again at most every ``fresh`` seconds whoever asks (the jobs
    page and ``/api/jobs`` share the answers). Each cluster is asked on its own. A cluster that
    answered last time is waited for (at most the clusters' timeout); one that did not is waited
    for at most ``patience`` seconds and keeps its error meanwhile, so it does not hold up the
    others' answers each time."""

    def __init__(self, clusters: Clusters, fresh: float, patience: float) -> None:
        self._clusters = clusters
        self._fresh = fresh
        self._patience = patience
        self._answers = {cluster: _Answer() for cluster in clusters.contexts}

    async def _ask(self, cluster: str, answer: _Answer) -> None:
        try:
            answer.jobs, answer.error = await self._clusters.jobs(cluster), ""
        except Unanswered as exc:
            answer.jobs, answer.error = [], str(exc)
        answer.at = asyncio.get_running_loop().time()

    async def snapshot(self) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
        """(jobs per cluster, why each cluster that did not answer did not)."""
        now = asyncio.get_running_loop().time()
        for cluster, answer in self._answers.items():
            if now - answer.at >= self._fresh and (answer.asking is None or answer.asking.done()):
                answer.asking = asyncio.create_task(self._ask(cluster, answer), name=f"console-list-{cluster}")
        asking = {a.asking: not a.error for a in self._answers.values()
                  if a.asking is not None and not a.asking.done()}
        if asking:
            await asyncio.wait(asking, timeout=self._patience)
        answering = {task for task, answered in asking.items() if answered and not task.done()}
        if answering:  # each ask ends within the clusters' timeout
            await asyncio.wait(answering)
        jobs = {cluster: a.jobs for cluster, a in self._answers.items()}
        errors = {cluster: a.error or f"no answer in {self._patience:g}s yet"
                  for cluster, a in self._answers.items() if a.error or a.at == float("-inf")}
        return jobs, errors

    async def close(self) -> None:
        for answer in self._answers.values():
            if answer.asking is not None:
                answer.asking.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await answer.asking


async def entries(settings: KafkaSettings, key: records.JobKey) -> list[reading.Entry]:
    """Every record of ``key`` on the jobs topic, in log order (only its partition is read)."""
    text = str(key)
    return [raw.decoded() async for raw in reading.scan(settings, accept=text.__eq__, key=text)]


async def joined_entries(settings: KafkaSettings, key: records.JobKey,
                         contexts: Sequence[str]) -> list[reading.Entry]:
    """:func:`entries` of ``key``; for a job under Kueue also those of its MultiKueue copies in the other
    clusters of ``contexts`` (:func:`kto.commands.history.joined`), in time order."""
    found = await entries(settings, key)
    if not any(isinstance(e.record, records.Observation) and e.record.object_kind == resources.WORKLOADS.kind
               for e in found):
        return found
    others = [records.JobKey(cluster=c, namespace=key.namespace, kind=key.kind, name=key.name)
              for c in contexts if c != key.cluster]
    for other in await asyncio.gather(*(entries(settings, o) for o in others)):
        found.extend(other)
    found = history.joined(found, str(key))
    found.sort(key=lambda e: (e.timestamp_ms, e.partition, e.offset))
    return found


async def follow(settings: KafkaSettings, key: records.JobKey, after: reading.Entry | None) -> AsyncIterator[reading.Entry]:
    """The records of ``key`` written after ``after`` (all of them when None), as they come, for ever.
    The partition is sought by time a little before ``after`` (brokers' and producers' clocks may
    differ by that much) and what is not past its offset is passed over."""
    text = str(key)
    since_ms = after.timestamp_ms - 5000 if after is not None else None
    async for raw in reading.scan(settings, accept=text.__eq__, key=text, since_ms=since_ms, follow=True):
        if after is None or raw.offset > after.offset:
            yield raw.decoded()

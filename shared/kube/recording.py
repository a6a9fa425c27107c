"""Kubernetes Events about a job, recorded best effort and aggregated as client-go's recorder does.

In: a job, :class:`~shared.core.events.Event` values (type, reason, message), the
instance that reports them and the time. Out: ``v1`` Events in the job's namespace
(``involvedObject`` the job, ``source.component`` its upstream controller name), or a
warning in the log when the API server refuses one: a lost Event never blocks a
reconcile or a status write.

Aggregated so a normal run stays within its write budget:

* events of one call with the same type and reason are one Event, their messages
  joined (``Created pod: a, b``): client-go's aggregator combines similar events too;
* an Event this process already recorded (same job uid, type, reason and message) is
  not created again: its ``count`` and ``lastTimestamp`` are patched, as client-go's
  correlator does for a repeated event (the Events API's series).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from shared.api import common, objects
from shared.core.events import Event
from shared.kube import clients, resources

log = logging.getLogger("kto.kube.events")

class Regarding(Protocol):
    """A job as its family's API type loads it (or a :class:`Subject`): what an Event names as its
    object and source."""

    @property
    def KIND(self) -> str: ...  # noqa: N802 (the API types' class constant)

    @property
    def CONTROLLER_NAME(self) -> str: ...  # noqa: N802

    @property
    def api_version(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def metadata(self) -> common.ObjectMeta: ...



@dataclasses.dataclass(frozen=True)
class Subject:
    """A job an Event names, as a reference to it gives it (a Kueue Workload's controller
    ownerReference): for Events about a job whose family's API type is not at hand."""

    KIND: str
    CONTROLLER_NAME: str
    """Its upstream controller (``families.Family.controllers``): the Event's source."""
    api_version: str
    metadata: common.ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or ""


MAX_MESSAGE = 1024
"""Longest Event message written (the API server's limit is larger; kubectl shows one line)."""
REMEMBERED = 4096
"""Events a recorder remembers for counting repeats (the oldest are forgotten first)."""


def event_body(job: Regarding, event: Event, instance: str, now: dt.datetime) -> dict[str, Any]:
    at = common.format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{job.name}.", "namespace": job.namespace},
        "involvedObject": {
            "apiVersion": job.api_version, "kind": job.KIND, "name": job.name,
            "namespace": job.namespace, "uid": job.metadata.uid or "",
            "resourceVersion": job.metadata.resource_version or "",
        },
        "reason": event.reason,
        "message": event.message,
        "type": event.type,
        "source": {"component": job.CONTROLLER_NAME},
        "reportingComponent": job.CONTROLLER_NAME,
        "reportingInstance": instance,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }


def combined(events: Sequence[Event]) -> list[Event]:
    """``events`` with those of the same type and reason made one, in first-seen order:
    ``Created pod: a`` and ``Created pod: b`` → ``Created pod: a, b`` (messages naming one
    object after a common prefix); other messages are joined with ``; ``; a repeated
    message is kept once."""
    groups: dict[tuple[str, str], list[str]] = {}
    for event in events:
        messages = groups.setdefault((event.type, event.reason), [])
        if event.message not in messages:
            messages.append(event.message)
    result = []
    for (type_, reason), messages in groups.items():
        prefixes = {m.partition(": ")[0] for m in messages}
        names = [m.partition(": ")[2] for m in messages]
        if len(messages) > 1 and len(prefixes) == 1 and all(": " in m and " " not in n for m, n in zip(messages, names)):
            prefix = next(iter(prefixes))
            message = f"{prefix}: " + ", ".join(names)
        else:
            message = "; ".join(messages)
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE - 1] + "…"
        result.append(Event(type_, reason, message))  # type: ignore[arg-type]
    return result


class Recorder:
    """One process's Events: combined per call, repeats counted (see the module)."""

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self._recorded: collections.OrderedDict[tuple[str, ...], tuple[str, int]] = collections.OrderedDict()
        """(namespace, job uid, type, reason, message) → (Event name, count)."""

    async def record(
        self, client: clients.KubeClient, job: Regarding, events: Sequence[Event], now: dt.datetime,
    ) -> None:
        for event in combined(events):
            await self._one(client, job, event, now)

    async def _one(self, client: clients.KubeClient, job: Regarding, event: Event, now: dt.datetime) -> None:
        key = (job.namespace, job.metadata.uid or job.name, event.type, event.reason, event.message)
        known = self._recorded.get(key)
        try:
            if known is not None:
                name, count = known
                try:
                    await client.patch(resources.EVENTS, job.namespace, name,
                                       {"count": count + 1, "lastTimestamp": common.format_time(now)})
                    self._remember(key, name, count + 1)
                    return
                except clients.ApiError as exc:
                    if not exc.not_found:
                        raise
                    # Expired (Events live an hour by default): a new one.
            created = await client.create(resources.EVENTS, job.namespace,
                                          event_body(job, event, self._instance, now))
            self._remember(key, objects.name_of(created), 1)
        except clients.ApiError as exc:
            log.warning("event %s for %s/%s not recorded: %s", event.reason, job.namespace, job.name, exc)

    def _remember(self, key: tuple[str, ...], name: str, count: int) -> None:
        self._recorded[key] = (name, count)
        self._recorded.move_to_end(key)
        while len(self._recorded) > REMEMBERED:
            self._recorded.popitem(last=False)

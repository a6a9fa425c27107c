"""Kubernetes Events about a job, recorded best effort as client-go's recorder does.

In: a job, an :class:`~shared.core.statuses.Event` (type, reason, message), the
instance that reports it and the time. Out: one ``v1`` Event created in the
job's namespace (``involvedObject`` the job, ``source.component`` its upstream
controller name), or a warning in the log when the API server refuses it:
a lost Event never blocks a reconcile or a status write.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from shared.api import common, elastic, jobs, mpijobs
from shared.core import statuses
from shared.kube import clients, resources

log = logging.getLogger("kto.kube.events")


def event_body(job: jobs.Job | mpijobs.MPIJob | elastic.TrainingJob, event: statuses.Event, instance: str, now: dt.datetime) -> dict[str, Any]:
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


async def record(
    client: clients.KubeClient, job: jobs.Job | mpijobs.MPIJob | elastic.TrainingJob, event: statuses.Event, instance: str,
    now: dt.datetime,
) -> None:
    try:
        await client.create(resources.EVENTS, job.namespace, event_body(job, event, instance, now))
    except clients.ApiError as exc:
        log.warning("event %s for %s/%s not recorded: %s", event.reason, job.namespace, job.name, exc)

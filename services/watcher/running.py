"""The watcher process: one cluster, one active watcher, everything published.

In: :class:`~services.watcher.settings.WatcherSettings` and
:class:`~shared.bus.settings.KafkaSettings`.
Out: observations on the jobs topic while this process leads the cluster's
Lease; nothing while it stands by. Runs until cancelled.

Wiring: serve the metrics and the probes (when a port is set; readiness: the
broker and the API server answer, the Lease has been read and, as leader, every
watched type listed), connect to the cluster (a bad kubeconfig raises
:class:`ClusterConfigError` at once), start the publisher (it waits for the
broker), then campaign for the Lease. Each term as leader runs the watches
(starting with a full list published as ADDED / MODIFIED / RESYNCED / DELETED
against what this process last published) and the periodic resync. When the
broker comes back after an outage, the term's tasks are restarted, which
relists and republishes everything, so nothing is dropped silently.
"""

from __future__ import annotations

import asyncio
import logging
import typing
from collections.abc import Callable

from services.watcher import resyncing, watching
from services.watcher.settings import WatcherSettings
from shared import health, metrics
from shared.bus import errors, producing, signing
from shared.bus.settings import KafkaSettings
from shared.kube import clients, leasing

log = logging.getLogger("kto.watcher")


_REFUSAL_BACKOFF = 0.5
"""Seconds before the first full relist after a refused record; doubles per refusal."""
_REFUSAL_MAX_BACKOFF = 30.0
_REFUSAL_RESET = 60.0
"""A term that ran this long before a refusal starts the backoff afresh."""


class ClusterConfigError(Exception):
    """The kubeconfig (path or context) cannot be used to reach the cluster. Not retriable."""


class _BrokerRecovered(Exception):
    """Raised inside a term to restart its tasks after a broker outage."""


async def connect(settings: WatcherSettings, on_request: clients.RequestHook | None = None) -> clients.KubeClient:
    """A client for the cluster; :class:`ClusterConfigError` for a bad kubeconfig or context."""
    try:
        return await clients.KubeClient.connect(settings.kubeconfig, settings.context, on_request=on_request)
    except (OSError, ValueError, LookupError, TypeError) as exc:
        raise ClusterConfigError(_config_problem(settings, exc)) from None
    except Exception as exc:  # kubernetes-asyncio's ConfigException is a bare Exception
        if type(exc).__name__ != "ConfigException":
            raise
        raise ClusterConfigError(_config_problem(settings, exc)) from None


def _config_problem(settings: WatcherSettings, exc: BaseException) -> str:
    where = settings.kubeconfig or "the default kubeconfig"
    context = f" (context {settings.context!r})" if settings.context else ""
    return f"cannot use kubeconfig {where}{context}: {exc}"


async def _answers(client: clients.KubeClient) -> str | None:
    """Readiness: the API server answers ``GET /version`` (allowed to every caller)."""
    await client.request("GET", "/version", route="version")
    return None


async def _not_connected() -> str | None:
    return "no client for the cluster yet"


async def _not_campaigning() -> str | None:
    return "not campaigning for the Lease yet (waiting for the broker)"


async def _campaigning(elector: leasing.LeaderElector, watcher: watching.Watcher) -> str | None:
    """Readiness: the Lease has been read or written (a standby that sees another holder is
    ready: it takes over when the Lease expires); as leader, every watched type is listed."""
    if elector.is_leader:
        if watcher.unlisted:
            return f"leading; not listed yet: {', '.join(sorted(watcher.unlisted))}"
        return None
    if elector.leader is None:
        return "the Lease has not been read yet"
    return None


async def _wait_for_recovery(outage: watching.BrokerOutage) -> None:
    await outage.recovered.wait()
    raise _BrokerRecovered()


async def lead(watcher: watching.Watcher, outage: watching.BrokerOutage) -> None:
    """One term as the active watcher: watch and resync until cancelled; start
    over (full relist) whenever the broker comes back after an outage."""
    settings = watcher.settings
    loop = asyncio.get_running_loop()
    refusals = 0
    while True:
        outage.recovered.clear()
        started = loop.time()
        refused: errors.PublishError | None = None
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(watcher.run(), name=f"watch cluster {settings.cluster}")
                group.create_task(
                    resyncing.resync_forever(watcher, settings.resync_interval),
                    name=f"resync cluster {settings.cluster}",
                )
                group.create_task(_wait_for_recovery(outage), name=f"broker outage of {settings.cluster}")
        except* _BrokerRecovered:
            log.info("cluster %s: broker is back; relisting and republishing everything", settings.cluster)
        except* errors.PublishError as group:
            refused = typing.cast(errors.PublishError, group.exceptions[0])
        if refused is None:
            refusals = 0
            continue
        # The broker refused a record for good (or answered an error no retry
        # fixes, as a restarting Tansu does before its topics exist). The record
        # is not in the inventory, so the next full list publishes it again;
        # back off so a record refused every time does not relist in a loop.
        refusals = 1 if loop.time() - started > _REFUSAL_RESET else refusals + 1
        delay = min(_REFUSAL_MAX_BACKOFF, _REFUSAL_BACKOFF * 2 ** (refusals - 1))
        log.error("cluster %s: the broker refused a record (%s); relisting everything in %.1fs",
                  settings.cluster, refused, delay)
        await asyncio.sleep(delay)


async def run(
    settings: WatcherSettings, kafka_settings: KafkaSettings, on_active: Callable[[], None] = lambda: None,
) -> None:
    """Watch ``settings.cluster`` while leading its Lease; runs until cancelled.
    ``on_active`` is called each time this process becomes the active watcher."""
    service_metrics = metrics.ServiceMetrics(kafka_settings.dlq_topic)
    checks = health.Health()
    outage = watching.BrokerOutage()
    keyring = signing.Keyring.from_env()
    publisher = producing.Publisher(
        kafka_settings, watching.SOURCE, settings.identity, on_event=[outage, service_metrics.on_bus_event],
        signer=None if keyring is None else keyring.signer(watching.SOURCE),
        digest_key=b"" if keyring is None else keyring.digest_key,
    )
    checks.add("broker", publisher.ping)
    checks.add("cluster", _not_connected)
    checks.add("lease", _not_campaigning)
    async with (
        metrics.serving(service_metrics, settings.metrics_port, checks, settings.health_port),
        await connect(settings, service_metrics.on_request) as client,
    ):
        checks.add("cluster", lambda: _answers(client))
        if keyring is None:
            log.warning("watcher: observations are not signed (%s is unset), so workers that verify refuse them; "
                        "see docs/security.md", signing.ENV)
        log.info("watcher %s starting for cluster %s (%s), namespace %s, lease %s/%s",
                 settings.identity, settings.cluster, client.host, settings.namespace or "(all)",
                 settings.lease_namespace, settings.lease)
        async with publisher:
            watcher = watching.Watcher(client, publisher, settings, service_metrics)
            elector = leasing.LeaderElector(
                client, settings.lease_namespace, settings.lease, settings.identity,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.lease_renew_deadline,
                retry_period=settings.lease_retry_period,
            )
            checks.add("lease", lambda: _campaigning(elector, watcher))

            async def while_leader() -> None:
                log.info("watcher %s is now the active watcher of cluster %s", settings.identity, settings.cluster)
                on_active()
                try:
                    await lead(watcher, outage)
                finally:
                    log.info("watcher %s stopped watching cluster %s", settings.identity, settings.cluster)

            await elector.run(while_leader)

"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

In: a :class:`~shared.kube.clients.KubeClient`, the Lease's namespace and name,
this process's identity, and the work to do while leading.
Out: :meth:`LeaderElector.run`, which waits in standby until it holds the
Lease, runs the work as a task, renews the Lease every ``retry_period``, and
cancels the work when it can no longer prove it is the leader (renewal failing
for ``renew_deadline``, or someone else holding the Lease), then goes back to
standby.

The Lease fields follow client-go: ``holderIdentity``, ``leaseDurationSeconds``,
``acquireTime``, ``renewTime`` (MicroTime, wall clock) and
``leaseTransitions``. Writes use the Lease's resourceVersion, so two
candidates racing for one Lease cannot both win (the loser gets 409).
Expiry is judged on this process's monotonic clock from the moment it last saw
the Lease change, never by comparing wall clocks of different machines
(client-go's ``observedTime``): a standby that sees a Lease stop changing
takes it over ``leaseDurationSeconds`` later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from shared.api import objects
from shared.kube import clients, resources

log = logging.getLogger("kto.kube.leasing")


def _micro_time(now: datetime.datetime) -> str:
    """RFC3339 with microseconds, as metav1.MicroTime is written."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wall_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass(frozen=True)
class _Observed:
    """The Lease as last read, and when (monotonic) its record last changed."""

    holder: str
    renew_time: str
    lease_duration: float
    resource_version: str
    changed_at: float


class LeaderElector:
    """Campaigns for one Lease and runs work while it holds it.

    ``lease_duration``: how long a standby waits after the Lease last changed
    before taking it over. ``renew_deadline``: how long the leader keeps trying
    to renew before it gives up leadership (must be below ``lease_duration``,
    so the old leader stops before a standby may start). ``retry_period``: the
    pause between two attempts to acquire or renew.
    ``release_on_cancel``: when ``run`` is cancelled while leading, clear the
    holder so a standby takes over at once instead of after ``lease_duration``.
    """

    def __init__(
        self,
        client: clients.KubeClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        *,
        release_on_cancel: bool = True,
    ) -> None:
        if not identity:
            raise ValueError("identity must not be empty")
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                f"need 0 < retry_period ({retry_period}) < renew_deadline ({renew_deadline})"
                f" < lease_duration ({lease_duration})"
            )
        self._client = client
        self._namespace = namespace
        self._name = name
        self._identity = identity
        self._lease_duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._release_on_cancel = release_on_cancel
        self._observed: _Observed | None = None
        self._leading = False
        self._last_leader: str | None = None

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def is_leader(self) -> bool:
        """True while this process holds the Lease (and its work is running)."""
        return self._leading

    @property
    def leader(self) -> str | None:
        """The holder of the Lease as last observed ("" or None when nobody holds it)."""
        return self._observed.holder if self._observed is not None else None

    async def run(self, while_leader: Callable[[], Awaitable[None]]) -> None:
        """Campaign forever: acquire, run ``while_leader`` as a task, step down when
        leadership is lost (the task is cancelled), and go back to standby.

        Returns when ``while_leader`` returns by itself; raises what it raises.
        Either way the Lease is released first. Cancel ``run`` to stop campaigning.
        """
        while True:
            await self._acquire()
            finished = await self._lead(while_leader)
            if finished:
                return

    async def _acquire(self) -> None:
        """Standby: try every ``retry_period`` until this process holds the Lease."""
        while True:
            if await self._try_acquire_or_renew():
                self._leading = True
                log.info("leader election: %s acquired lease %s/%s", self._identity, self._namespace, self._name)
                return
            await asyncio.sleep(self._retry_period)

    async def _lead(self, while_leader: Callable[[], Awaitable[None]]) -> bool:
        """Run the work and renew; True if the work ended by itself."""

        async def work() -> None:
            await while_leader()

        task = asyncio.create_task(work(), name=f"lead {self._namespace}/{self._name} as {self._identity}")
        last_renewal = time.monotonic()
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._retry_period)
                if done:
                    # The work ended by itself: give the Lease back and report it.
                    await asyncio.shield(self._release())
                    task.result()  # raises what the work raised
                    return True
                deadline = last_renewal + self._renew_deadline
                remaining = deadline - time.monotonic()
                renewed = False
                if remaining > 0:
                    try:
                        async with asyncio.timeout(remaining):
                            renewed = await self._try_acquire_or_renew()
                    except TimeoutError:
                        renewed = False
                if renewed:
                    last_renewal = time.monotonic()
                    continue
                if self._observed is not None and self._observed.holder not in ("", self._identity):
                    log.warning(
                        "leader election: %s lost lease %s/%s to %s",
                        self._identity, self._namespace, self._name, self._observed.holder,
                    )
                    break
                if time.monotonic() >= deadline:
                    log.warning(
                        "leader election: %s could not renew lease %s/%s for %.1fs; stepping down",
                        self._identity, self._namespace, self._name, self._renew_deadline,
                    )
                    break
        except asyncio.CancelledError:
            await asyncio.shield(self._stop_work(task))
            if self._release_on_cancel:
                await asyncio.shield(self._release())
            self._leading = False
            raise
        await self._stop_work(task)
        self._leading = False
        return False

    async def _stop_work(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        # asyncio.wait never raises the task's outcome, and lets our own
        # cancellation through, so neither is swallowed here.
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            log.error("leader election: work of %s failed while stopping: %r", self._identity, task.exception())
        self._leading = False

    async def _get(self) -> dict[str, Any] | None:
        try:
            return await self._client.get(resources.LEASES, self._namespace, self._name)
        except clients.ApiError as exc:
            if exc.not_found:
                return None
            raise

    def _observe(self, lease: dict[str, Any]) -> _Observed:
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        renew_time = str(spec.get("renewTime") or "")
        duration = spec.get("leaseDurationSeconds")
        lease_duration = float(duration) if isinstance(duration, (int, float)) and duration > 0 else self._lease_duration
        previous = self._observed
        now = time.monotonic()
        changed_at = now
        if previous is not None and (previous.holder, previous.renew_time) == (holder, renew_time):
            changed_at = previous.changed_at
        observed = _Observed(
            holder, renew_time, lease_duration, objects.resource_version_of(lease),
            changed_at,
        )
        self._observed = observed
        if holder != self._last_leader:
            self._last_leader = holder
            if holder and holder != self._identity:
                log.info("leader election: lease %s/%s is held by %s", self._namespace, self._name, holder)
        return observed

    def _spec(self, acquire_time: str, transitions: int) -> dict[str, Any]:
        now = _micro_time(_wall_now())
        return {
            "holderIdentity": self._identity,
            "leaseDurationSeconds": max(1, math.ceil(self._lease_duration)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's tryAcquireOrRenew); False on any failure."""
        try:
            lease = await self._get()
            if lease is None:
                body = {
                    "apiVersion": resources.LEASES.api_version,
                    "kind": resources.LEASES.kind,
                    "metadata": {"name": self._name, "namespace": self._namespace},
                    "spec": self._spec("", 0),
                }
                created = await self._client.create(resources.LEASES, self._namespace, body)
                self._observe(created)
                return True
            observed = self._observe(lease)
            spec = dict(lease.get("spec") or {})
            held_by_other = observed.holder not in ("", self._identity)
            if held_by_other and time.monotonic() < observed.changed_at + observed.lease_duration:
                return False
            transitions = int(spec.get("leaseTransitions") or 0)
            if observed.holder == self._identity:
                new_spec = self._spec(str(spec.get("acquireTime") or ""), transitions)
            else:
                new_spec = self._spec("", transitions + 1)
            body = dict(lease)
            body["metadata"] = dict(objects.meta(lease))
            body["spec"] = {**spec, **new_spec}
            updated = await self._client.replace(resources.LEASES, self._namespace, body)
            self._observe(updated)
            return True
        except clients.ApiError as exc:
            if exc.conflict or exc.already_exists:
                log.debug("leader election: %s lost a race for %s/%s: %s", self._identity, self._namespace,
                          self._name, exc)
            else:
                log.warning("leader election: %s cannot read or write lease %s/%s: %s", self._identity,
                            self._namespace, self._name, exc)
            return False

    async def _release(self) -> None:
        """Clear the holder (client-go's ReleaseOnCancel) if this process still holds the Lease."""
        try:
            async with asyncio.timeout(self._retry_period):
                lease = await self._get()
                if lease is None:
                    return
                spec = dict(lease.get("spec") or {})
                if spec.get("holderIdentity") != self._identity:
                    return
                spec.update(
                    holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(_wall_now()),
                )
                body = dict(lease)
                body["spec"] = spec
                self._observe(await self._client.replace(resources.LEASES, self._namespace, body))
                log.info("leader election: %s released lease %s/%s", self._identity, self._namespace, self._name)
        except (clients.ApiError, TimeoutError) as exc:
            log.warning("leader election: %s could not release lease %s/%s: %s", self._identity,
                        self._namespace, self._name, exc)

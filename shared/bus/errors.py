"""Errors of the bus, and the one rule that says whether an error is worth a retry.

In: any exception raised by aiokafka, the network, or a record handler.
Out: :func:`is_retriable`, used by the single retry policy in
:mod:`shared.bus.retrying` for both transport and handler retries.
"""

from __future__ import annotations

import asyncio

from aiokafka import errors as kafka_errors

from shared.bus.records import MalformedRecord
from shared.bus.settings import SettingsError

__all__ = [
    "BusError",
    "MalformedRecord",
    "PublishError",
    "Retriable",
    "SettingsError",
    "is_retriable",
]


class Retriable(Exception):
    """Raise this (or a subclass) from a handler for a failure that may pass on
    a later attempt: the record is retried with backoff, then dead-lettered."""


class BusError(Exception):
    """A failure of the bus itself. ``retriable`` tells whether trying again may help."""

    retriable: bool = False


class PublishError(BusError):
    """The broker refused a record for good (too large, not authorised, unknown topic…)."""


class BrokerError(BusError):
    """The embedded broker could not be started or did not become ready."""


# Errors aiokafka does not flag retriable but that mean "the broker is away or
# slow": a batch expired in the producer, a request timed out, a socket broke.
_TRANSIENT: tuple[type[BaseException], ...] = (
    kafka_errors.KafkaTimeoutError,
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.NoBrokersAvailable,
    # UNKNOWN_SERVER_ERROR: Tansu answers a produce with it while it comes back empty
    # and its topics are being created again (seen in chaos broker restarts). A record
    # carries a dedup id, so a bounded retry is safe on any broker.
    kafka_errors.UnknownError,
    TimeoutError,
    ConnectionError,
)


def is_retriable(exc: BaseException) -> bool:
    """True if trying again may succeed.

    Cancellation and interpreter exits are never retriable. :class:`Retriable`,
    transient network errors, and any exception whose ``retriable`` attribute is
    true (aiokafka's errors, :class:`BusError`) are.
    """
    if not isinstance(exc, Exception) or isinstance(exc, asyncio.CancelledError):
        return False
    if isinstance(exc, (Retriable, *_TRANSIENT)):
        return True
    return bool(getattr(exc, "retriable", False))

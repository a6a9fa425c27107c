"""The one retry policy of the bus, shared by the publisher and the consumer.

In: a :class:`RetryPolicy` and an optional callback told about each retry.
Out: tenacity ``AsyncRetrying`` objects:

* :func:`transport` — for talking to the broker (start a client, send a
  record, send to the dead-letter topic). Retries retriable errors with
  capped exponential backoff and jitter *forever*: the bus never drops a
  record because the broker is away; it waits, and says so through the hook.
* :func:`handling` — for a record handler. Retries retriable errors a bounded
  number of times; the caller then dead-letters the record.

Which errors are retriable is decided in one place: :func:`shared.bus.errors.is_retriable`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import tenacity

from shared.bus import errors

_T = TypeVar("_T")

RetryCallback = Callable[[int, BaseException, float], None]
"""Called before each wait with (attempt number, error, seconds to wait)."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Backoff shape and bounds."""

    initial_backoff: float = 0.1
    """Seconds before the first retry; doubles each time (with jitter)."""
    max_backoff: float = 5.0
    """Cap of the backoff for transport retries (seconds)."""
    handler_attempts: int = 4
    """Attempts of a record handler (the first included) before dead-lettering."""
    handler_max_backoff: float = 2.0
    """Cap of the backoff between handler attempts (seconds): a record blocks its
    job key while it is retried, so this stays short."""
    jitter: float = 0.1
    """Up to this many seconds added at random to each wait."""


def _before_sleep(callback: RetryCallback | None) -> Callable[[tenacity.RetryCallState], None]:
    def hook(state: tenacity.RetryCallState) -> None:
        if callback is None or state.outcome is None:
            return
        exc = state.outcome.exception()
        if exc is None:
            return
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        callback(state.attempt_number, exc, wait)

    return hook


def transport(
    policy: RetryPolicy, *, on_retry: RetryCallback | None = None,
    retriable: Callable[[BaseException], bool] = errors.is_retriable,
) -> tenacity.AsyncRetrying:
    """Retry retriable broker errors (``retriable`` says which) forever, with capped backoff."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(retriable),
        wait=tenacity.wait_exponential_jitter(
            multiplier=policy.initial_backoff, max=policy.max_backoff, jitter=policy.jitter
        ),
        stop=tenacity.stop_never,
        before_sleep=_before_sleep(on_retry),
        reraise=True,
    )


def _handler_error_retriable(
    exc: BaseException, retriable: Callable[[BaseException], bool] | None,
) -> bool:
    if errors.is_retriable(exc):
        return True
    if retriable is None or not isinstance(exc, Exception):
        return False
    return retriable(exc)


def handling(
    policy: RetryPolicy,
    *,
    retriable: Callable[[BaseException], bool] | None = None,
    on_retry: RetryCallback | None = None,
    attempts: int | None = None,
) -> tenacity.AsyncRetrying:
    """Retry a handler's retriable errors (``is_retriable`` or the extra
    ``retriable`` predicate) at most ``attempts`` (default
    ``policy.handler_attempts``) times in all."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(lambda exc: _handler_error_retriable(exc, retriable)),
        wait=tenacity.wait_exponential_jitter(
            multiplier=policy.initial_backoff, max=policy.handler_max_backoff, jitter=policy.jitter
        ),
        stop=tenacity.stop_after_attempt(attempts or policy.handler_attempts),
        before_sleep=_before_sleep(on_retry),
        reraise=True,
    )


async def handle(
    policy: RetryPolicy,
    call: Callable[[], Awaitable[_T]],
    *,
    retriable: Callable[[BaseException], bool] | None = None,
    on_retry: RetryCallback | None = None,
) -> _T:
    """``await call()`` with :func:`handling`'s retries. The first attempt runs
    without tenacity's per-call bookkeeping (a worker handles every record this
    way, and nearly every one succeeds at once); a retriable failure goes on to
    the remaining attempts under :func:`handling`."""
    try:
        return await call()
    except Exception as exc:
        if policy.handler_attempts <= 1 or not _handler_error_retriable(exc, retriable):
            raise
        failed = exc
    wait = policy.initial_backoff + random.uniform(0, policy.jitter)
    if on_retry is not None:
        on_retry(1, failed, wait)
    await asyncio.sleep(wait)

    def shifted(attempt: int, exc: BaseException, wait: float) -> None:
        if on_retry is not None:
            on_retry(attempt + 1, exc, wait)

    async for attempt in handling(
        policy, retriable=retriable, on_retry=shifted, attempts=policy.handler_attempts - 1
    ):
        with attempt:
            return await call()
    raise AssertionError("tenacity ends with a result or the last error")

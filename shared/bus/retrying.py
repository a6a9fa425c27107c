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

import dataclasses
from collections.abc import Callable

import tenacity

from shared.bus import errors

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
    policy: RetryPolicy, *, on_retry: RetryCallback | None = None
) -> tenacity.AsyncRetrying:
    """Retry retriable broker errors forever, with capped backoff."""
    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(errors.is_retriable),
        wait=tenacity.wait_exponential_jitter(
            multiplier=policy.initial_backoff, max=policy.max_backoff, jitter=policy.jitter
        ),
        stop=tenacity.stop_never,
        before_sleep=_before_sleep(on_retry),
        reraise=True,
    )


def handling(
    policy: RetryPolicy,
    *,
    retriable: Callable[[BaseException], bool] | None = None,
    on_retry: RetryCallback | None = None,
) -> tenacity.AsyncRetrying:
    """Retry a handler's retriable errors (``is_retriable`` or the extra
    ``retriable`` predicate) at most ``policy.handler_attempts`` times in all."""

    def should_retry(exc: BaseException) -> bool:
        if errors.is_retriable(exc):
            return True
        if retriable is None or not isinstance(exc, Exception):
            return False
        return retriable(exc)

    return tenacity.AsyncRetrying(
        retry=tenacity.retry_if_exception(should_retry),
        wait=tenacity.wait_exponential_jitter(
            multiplier=policy.initial_backoff, max=policy.handler_max_backoff, jitter=policy.jitter
        ),
        stop=tenacity.stop_after_attempt(policy.handler_attempts),
        before_sleep=_before_sleep(on_retry),
        reraise=True,
    )

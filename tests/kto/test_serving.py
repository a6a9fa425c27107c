"""A service command that stops on an error ends as one line (``kto.serving.serve``), never a traceback."""

from __future__ import annotations

import asyncio

import pytest

from kto import cli, serving
from shared.bus import errors


async def _failing_in_a_task_group() -> None:
    async def start() -> None:
        raise errors.PublishError("cannot start an idempotent producer on 127.0.0.1:1: set KTO_KAFKA_IDEMPOTENCE=false")

    async with asyncio.TaskGroup() as group:
        group.create_task(start())


async def _failing_unexpectedly() -> None:
    raise RuntimeError("a fault\nof kto")


def test_a_service_error_that_names_its_fix_is_a_user_error_even_from_a_task_group() -> None:
    with pytest.raises(cli.UserError) as raised:
        serving.serve(_failing_in_a_task_group)
    assert str(raised.value) == "cannot start an idempotent producer on 127.0.0.1:1: set KTO_KAFKA_IDEMPOTENCE=false"
    assert raised.value.exit_code == 2


def test_any_other_error_is_named_with_its_type_in_one_line_and_exit_code_1(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("DEBUG", logger="kto"), pytest.raises(cli.CommandError) as raised:
        serving.serve(_failing_unexpectedly)
    assert not isinstance(raised.value, cli.UserError) and raised.value.exit_code == 1
    assert str(raised.value) == "RuntimeError: a fault of kto (KTO_LOG_LEVEL=DEBUG logs where)"
    assert raised.value.__suppress_context__, "no 'during handling' chain to print"
    [logged] = [r for r in caplog.records if r.name == "kto"]
    assert logged.levelname == "DEBUG" and logged.exc_info is not None  # where, for whoever asks


def test_a_user_error_raised_by_the_service_goes_out_as_it_is() -> None:
    async def refusing() -> None:
        raise cli.UserError("--kubeconfig k: no such file")

    with pytest.raises(cli.UserError, match="^--kubeconfig k: no such file$"):
        serving.serve(refusing)

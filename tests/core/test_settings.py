"""The operator settings read from the environment: whether kto serves JobSets."""

from __future__ import annotations

import pytest

from shared.core import settings


@pytest.mark.parametrize(("value", "served"), [
    pytest.param(None, True, id="unset: kto serves JobSets"),
    pytest.param("", True, id="empty"),
    pytest.param("true", True, id="true"),
    pytest.param("FALSE", False, id="false in any case"),
    pytest.param("0", False, id="0"),
    pytest.param(" off ", False, id="off"),
])
def test_kto_serve_jobsets_says_whether_kto_serves_jobsets(value: str | None, served: bool) -> None:
    environ = {} if value is None else {settings.SERVE_JOBSETS_ENV: value}
    assert settings.serve_jobsets(environ) is served


def test_a_value_that_is_neither_true_nor_false_is_refused() -> None:
    with pytest.raises(ValueError, match="KTO_SERVE_JOBSETS"):
        settings.serve_jobsets({settings.SERVE_JOBSETS_ENV: "maybe"})

"""Fixtures of the et-operator core tests (the world itself is in ``world.py``)."""

from __future__ import annotations

import pytest

from tests.core.elastic.world import World, training_job


@pytest.fixture
def world() -> World:
    return World(training_job())

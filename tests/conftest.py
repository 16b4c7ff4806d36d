"""Shared fixtures: every test must leave configuration, default device and engine as found."""
import importlib

import pytest

from ember import config, device


def _engine_state():
    try:
        engine = importlib.import_module('ember.engine')
    except ImportError:
        return None
    return engine.state_token()


@pytest.fixture(autouse=True)
def no_leaked_state():
    before = (config.snapshot(), device.current_device(), _engine_state())
    yield
    after = (config.snapshot(), device.current_device(), _engine_state())
    assert after == before, f'test left global state changed: {before} -> {after}'

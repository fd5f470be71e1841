"""The audit commands sign with the test signing key unless a test says otherwise."""

from __future__ import annotations

import pytest

from tests.support.cli import Env
from tests.support.keys import SIGNING_KEY


@pytest.fixture
def env(env: Env) -> Env:
    return {**env, "AUTHLEDGER_SIGNING_KEY": SIGNING_KEY, "AUTHLEDGER_SIGNING_KEY_FILE": None}

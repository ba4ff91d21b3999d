"""What a test does when a tool, package or service it needs is missing: it skips, unless every
test is required (SWARMHUB_TEST_REQUIRE_ALL=1, as `make test` sets), and then it fails.

One mechanism for every such dependency, so that `make test` never passes with a part not run.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def require_all() -> bool:
    return os.environ.get("SWARMHUB_TEST_REQUIRE_ALL") == "1"


def unavailable(message: str) -> NoReturn:
    """Skip the test for want of `message`'s dependency, or fail it when all tests are required."""
    if require_all():
        pytest.fail(f"{message} (SWARMHUB_TEST_REQUIRE_ALL=1: a missing dependency is a failure)")
    pytest.skip(message)


def import_module(name: str, hint: str) -> ModuleType:
    """`name` imported, or `unavailable` with the import error and `hint` (how to install it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        unavailable(f"cannot import {name} ({exc}): {hint}")

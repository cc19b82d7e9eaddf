"""Waiting in tests: poll a condition until it holds or a deadline passes.

Every test that waits for another thread or process (a node to listen, a round to pass, a
message to arrive) uses these, so a timeout always reads the same way."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], object], timeout: float, interval: float = 0.2) -> bool:
    """True as soon as `condition()` is truthy; after `timeout` seconds, its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def wait_for(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.2,
) -> T:
    """The first truthy value of `predicate()`; AssertionError naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def node_info(run_dir: Path) -> dict | None:
    """What a running node wrote to its run folder's node.json (peer id, addresses), or None
    before it listens."""
    path = Path(run_dir) / "node.json"
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def wait_node_info(run_dir: Path, timeout: float = 120.0, what: str = "the node to listen") -> dict:
    """node.json of a node starting in `run_dir`, once it listens."""
    return wait_for(lambda: node_info(run_dir), timeout, what)

"""Parts of py-libp2p a node never uses stay unloaded (placeholders that refuse to be used)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.core.errors import TransportError
from swarm.core.libp2p_parts import UnusedPart

ROOT = Path(__file__).resolve().parents[3]


def test_a_placeholder_hands_out_classes_that_refuse_to_be_made():
    part = UnusedPart("libp2p.example")
    cls = part.SomeClient
    assert isinstance(cls, type)
    with pytest.raises(TransportError, match="libp2p.example.SomeClient is not loaded"):
        cls("anything")
    with pytest.raises(AttributeError):
        part.__wrapped__  # noqa: B018 - dunder lookups stay plain misses


def test_the_transport_loads_without_the_unused_parts():
    code = """
import json, sys
import swarm.p2p.libp2p
from swarm.core.libp2p_parts import skipped
print(json.dumps({"skipped": skipped(),
                  "loaded": [m for m in ("zeroconf", "httpx", "requests") if m in sys.modules]}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.splitlines()[-1])
    assert len(result["skipped"]) == 5 and result["loaded"] == []

"""Why the NAT test (tests/integration/test_nat.py) would be skipped: said in one line,
with what to do."""

from __future__ import annotations

import shutil

from tests.integration import netns


def test_without_root_the_reason_is_root(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.unavailable() == "network namespaces need root"


def test_without_the_tools_the_reason_names_them_and_the_setup(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    real = shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda t: None if t == "iptables" else real(t))
    reason = netns.unavailable()
    assert reason is not None and "iptables" in reason and "not installed" in reason
    assert netns.SYSTEM_SETUP in reason  # the set-up installs them only when asked

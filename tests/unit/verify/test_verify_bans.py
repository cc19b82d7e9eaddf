"""`swarm-node ban/unban`: bans are ledger rows, peer IDs are checked, mistakes are one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from swarm.core.errors import SwarmError
from swarm.core.identity import create_identity, peer_id_of
from swarm.ledger import Ledger, banned_peers
from swarm.verify.bans import ban, unban

PEER = peer_id_of(create_identity(b"\x05" * 32))


def test_ban_and_unban_write_the_ledger(tmp_path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger(url).close()
    assert ban(url, PEER, "spam", now=5.0) == f"banned {PEER}"
    assert ban(url, PEER, "again") == f"{PEER} was already banned"
    ledger = Ledger(url, create=False)
    with ledger.reader() as s:
        row = banned_peers(s)[PEER]
        assert (row.source, row.reason, row.banned_at) == ("user", "spam", 5.0)
    assert unban(url, PEER) == f"unbanned {PEER} (banned by the user: spam)"
    assert unban(url, PEER) == f"{PEER} was not banned"
    ban(url, PEER)  # no reason given
    assert unban(url, PEER) == f"unbanned {PEER} (banned by the user)"
    with ledger.reader() as s:
        assert banned_peers(s) == {}
    ledger.close()


@pytest.mark.parametrize(
    "peer", ["nobody", "12D3KooWxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", ""]
)
def test_a_bad_peer_id_is_a_clear_error(tmp_path, peer):
    with pytest.raises(SwarmError, match="is not a peer ID"):
        ban(f"sqlite:///{tmp_path / 'ledger.sqlite'}", peer)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_ban_unban_and_their_errors(tmp_path):
    Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}").close()
    done = _cli("ban", PEER, "--run-dir", str(tmp_path), "--reason", "flooding")
    assert done.returncode == 0 and done.stdout.strip() == f"banned {PEER}"
    done = _cli("unban", PEER, "--run-dir", str(tmp_path))
    assert done.returncode == 0 and "unbanned" in done.stdout
    bad = _cli("ban", "not-a-peer", "--run-dir", str(tmp_path))
    assert (
        bad.returncode == 2
        and bad.stderr.strip().startswith("error: ")
        and len(bad.stderr.strip().splitlines()) == 1
    )
    missing = _cli("ban", PEER, "--run-dir", str(tmp_path / "nowhere"))
    assert (
        missing.returncode == 2
        and "no ledger at" in missing.stderr
        and "Traceback" not in missing.stderr
    )

"""Per-peer budgets for GossipSub control messages, renewed every heartbeat. Pure.

GossipSub v1.1 bounds what one peer's gossip may cost (spec: "Spam Protection"): IHAVE is
looked at for at most MAX_IHAVE_MESSAGES messages and MAX_IHAVE_LENGTH message IDs per
peer and heartbeat; an IWANT for one message is answered at most GOSSIP_RETRANSMISSION
times per peer. py-libp2p 0.8.1 has neither: it rate-limits IHAVE and IWANT *entries* to
10 a second but answers every ID inside them, the same ID as often as asked, and asks for
every unknown ID it is offered. We add a byte budget for IWANT answers per peer and
heartbeat, and allow one PRUNE answer to a backoff-violating GRAFT per peer, topic and
heartbeat.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable

GOSSIP_RETRANSMISSION = 3  # answers per (peer, message ID)
MAX_IHAVE_MESSAGES = 10  # IHAVE entries looked at, per peer and heartbeat
MAX_IHAVE_LENGTH = 5000  # message IDs looked at (and so asked for), per peer and heartbeat
MAX_IWANT_ANSWERS = 5000  # messages sent in answer to IWANTs, per peer and heartbeat
IWANT_BYTES_PER_HEARTBEAT = 8 * 1024 * 1024  # bytes of those answers, per peer and heartbeat
# How long an answered message ID is remembered: the message cache's history is 5 heartbeats.
REMEMBER_HEARTBEATS = 6
# Control entries (IHAVE, IWANT, GRAFT, PRUNE, IDONTWANT) of any topic, known or not: in one
# RPC, and per peer and heartbeat. An honest peer sends one IHAVE per topic and heartbeat and
# a GRAFT or PRUNE per topic now and then; a 4 MiB RPC can carry tens of thousands.
MAX_CONTROL_PER_RPC = 128
MAX_CONTROL_PER_HEARTBEAT = 512
MAX_CONTROL_IDS_PER_RPC = MAX_IHAVE_LENGTH + MAX_IWANT_ANSWERS  # message IDs in IHAVE + IWANT


class ControlBudget:
    """What each peer may still cost us this heartbeat; `new_heartbeat` renews it."""

    def __init__(self) -> None:
        self._heartbeat = 0
        self._ihave_messages: collections.Counter = collections.Counter()
        self._ihave_ids: collections.Counter = collections.Counter()
        self._iwant_answers: collections.Counter = collections.Counter()
        self._iwant_bytes: collections.Counter = collections.Counter()
        self._prune_replies: set[tuple[Hashable, str]] = set()
        self._control: collections.Counter = collections.Counter()
        self._answered: dict[tuple[Hashable, bytes], int] = {}
        self._answered_at: collections.deque[tuple[int, tuple[Hashable, bytes]]] = (
            collections.deque()
        )

    def new_heartbeat(self) -> None:
        self._heartbeat += 1
        self._ihave_messages.clear()
        self._ihave_ids.clear()
        self._iwant_answers.clear()
        self._iwant_bytes.clear()
        self._prune_replies.clear()
        self._control.clear()
        horizon = self._heartbeat - REMEMBER_HEARTBEATS
        while self._answered_at and self._answered_at[0][0] <= horizon:
            _, key = self._answered_at.popleft()
            self._answered.pop(key, None)

    def admit_control(self, peer: Hashable, entries: int, ids: int) -> str | None:
        """None if an RPC's `entries` control entries carrying `ids` message IDs may be looked
        at; else why its whole control part is ignored (checked before any entry is)."""
        if entries > MAX_CONTROL_PER_RPC:
            return f"{entries} control entries in one RPC (at most {MAX_CONTROL_PER_RPC})"
        if ids > MAX_CONTROL_IDS_PER_RPC:
            return f"{ids} message IDs in one RPC (at most {MAX_CONTROL_IDS_PER_RPC})"
        if self._control[peer] + entries > MAX_CONTROL_PER_HEARTBEAT:
            return f"over {MAX_CONTROL_PER_HEARTBEAT} control entries this heartbeat"
        self._control[peer] += entries
        return None

    def admit_ihave(self, peer: Hashable, ids: int) -> int:
        """How many of an IHAVE's `ids` message IDs may be looked at (0: ignore it all)."""
        if self._ihave_messages[peer] >= MAX_IHAVE_MESSAGES:
            return 0
        self._ihave_messages[peer] += 1
        allowed = max(0, min(ids, MAX_IHAVE_LENGTH - self._ihave_ids[peer]))
        self._ihave_ids[peer] += allowed
        return allowed

    def admit_iwant(self, peer: Hashable, msg_id: bytes, size: int) -> bool:
        """Whether to answer `peer`'s IWANT for `msg_id` (a message of `size` bytes)."""
        key = (peer, msg_id)
        if self._answered.get(key, 0) >= GOSSIP_RETRANSMISSION:
            return False
        if self._iwant_answers[peer] >= MAX_IWANT_ANSWERS:
            return False
        if self._iwant_bytes[peer] + size > IWANT_BYTES_PER_HEARTBEAT and self._iwant_bytes[peer]:
            return False
        if key not in self._answered:
            self._answered_at.append((self._heartbeat, key))
        self._answered[key] = self._answered.get(key, 0) + 1
        self._iwant_answers[peer] += 1
        self._iwant_bytes[peer] += size
        return True

    def admit_prune_reply(self, peer: Hashable, topic: str) -> bool:
        """One PRUNE answer per peer, topic and heartbeat to GRAFTs we refuse."""
        key = (peer, topic)
        if key in self._prune_replies:
            return False
        self._prune_replies.add(key)
        return True

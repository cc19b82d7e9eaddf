"""Every transport refusal has the node's own reason of the same code (swarm.node.refusals)."""

from __future__ import annotations

from swarm.core.reasons import Reason
from swarm.node.refusals import TRANSPORT_REASONS, transport_reason
from swarm.p2p.transport import RefusalReason


def test_every_transport_reason_maps_to_the_reason_of_its_code():
    assert set(TRANSPORT_REASONS) == set(RefusalReason)
    for refusal in RefusalReason:
        reason = transport_reason(refusal)
        assert reason is not Reason.UNKNOWN and reason.value == refusal.value
        assert reason.unsigned  # blamed on the peer that sent it, whatever it claims

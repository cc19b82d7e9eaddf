"""The transport's own refusals as the node's rejection reasons.

The transport refuses some things before any validator runs (an oversize or unsigned
message, a gossip control flood, a blob fetcher past its limits ...) and reports each as a
`swarm.p2p.transport.Refusal` with a `RefusalReason`. The node counts these in its
ledger and against the peer's reputation like a rejected group, under the `Reason` of the
same code: the one list of reasons the ledger and reports know. The mapping is explicit
and complete (`TRANSPORT_REASONS` fails at import if a transport reason has no `Reason`).

Here, not in either enum's module, so that `swarm.verify` never imports the transport and
the transport never imports `swarm.verify`.
"""

from __future__ import annotations

from swarm.core.reasons import Reason
from swarm.p2p.transport import RefusalReason

TRANSPORT_REASONS: dict[RefusalReason, Reason] = {r: Reason(r.value) for r in RefusalReason}


def transport_reason(reason: RefusalReason) -> Reason:
    """The `Reason` the ledger records for a transport refusal."""
    return TRANSPORT_REASONS[reason]

"""The per-peer outbound RPC queues: `TunedQueues` deepens and counts them, `coalesce` batches
what waits in one.
"""

from __future__ import annotations

from collections.abc import Callable

from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

# Queued RPCs to one peer are sent as one RPC of up to this many bytes (see SwarmPubsub).
RPC_BATCH_BYTES = 512 * 1024


class TunedQueues(dict):
    """`Pubsub.peer_queues` replacement: deepens each per-peer RPC queue as pubsub registers it.

    Fixes: each peer's queue holds 32 RPCs and silently drops the rest; a burst of 100
    messages delivered 16. Pubsub builds every queue with the library defaults (32 RPCs,
    1 MiB) and hands the same object to that peer's sending task, so the queue must be
    tuned in place at the moment it is stored, which is this `__setitem__`. Drops and
    RPCs discarded with a dead peer's queue are counted through the callbacks.
    """

    def __init__(
        self,
        depth: int,
        max_rpc_size: int,
        on_drop: Callable[[], None],
        on_discard: Callable[[int], None],
    ) -> None:
        super().__init__()
        self._depth = depth
        self._max_rpc_size = max_rpc_size
        self._on_drop = on_drop
        self._on_discard = on_discard

    def __setitem__(self, peer_id: ID, queue: RpcQueue) -> None:
        # RpcQueue exposes no setter for its depth; `_queue.max_size` is its only knob.
        queue._queue.max_size = self._depth
        queue.max_message_size = self._max_rpc_size
        queue.push = self._counting_push(queue)  # type: ignore[method-assign]  # a patch
        queue.close = self._counting_close(queue)  # type: ignore[method-assign]  # a patch
        super().__setitem__(peer_id, queue)

    def _counting_close(self, queue: RpcQueue) -> Callable[[], None]:
        # Pubsub closes a peer's queue when its stream dies; whatever is still in it is lost.
        original_close = queue.close
        on_discard = self._on_discard

        def close() -> None:
            if not queue.closed and len(queue) > 0:
                on_discard(len(queue))
            original_close()

        return close

    def _counting_push(self, queue: RpcQueue) -> Callable[..., bool]:
        original_push = queue.push
        on_drop = self._on_drop

        def push(rpc: rpc_pb2.RPC, priority: bool = False) -> bool:
            accepted = original_push(rpc, priority)
            if not accepted and not queue.closed:  # a closed queue is a departed peer, not a drop
                on_drop()
            return accepted

        return push


def coalesce(
    first: rpc_pb2.RPC, queue: RpcQueue, limit: int
) -> tuple[rpc_pb2.RPC, rpc_pb2.RPC | None]:
    """Merge RPCs already waiting in `queue` into `first`, up to `limit` bytes.

    Returns the batch and the first RPC that did not fit (to send next), if any. Merging
    concatenates the publish, subscription and control lists, which is what a GossipSub
    RPC carrying several messages is; the sender's signed record is the same in all.
    """
    if len(queue) == 0:
        return first, None
    batch = rpc_pb2.RPC()
    batch.CopyFrom(first)
    size = batch.ByteSize()
    while len(queue) > 0:
        # RpcQueue has only an async pop; its PriorityQueue pops synchronously.
        following = queue._queue.pop()
        if following is None:
            break
        following_size = following.ByteSize()
        if size + following_size > limit:
            return batch, following
        batch.MergeFrom(following)
        size += following_size
    return batch, None

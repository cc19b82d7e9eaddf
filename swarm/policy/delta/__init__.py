"""Sparse, bit-exact weight deltas between bf16 policy versions, and full anchors.

Between two policy versions trained at RL learning rates most Adam steps fall below bf16
rounding, so only a small share of the bf16 weights change, and those that do mostly move by
one or two units in the last place. A trainer publishes the change as a *delta*; followers
holding the same model apply it and end up bit-identical to the trainer. A late joiner starts
from an *anchor* (a complete weight set in the same container) and applies the chain of
deltas after it.

What this module is: pure functions over CPU bf16 tensors and bytes. It does not touch the
network or the disk, sign anything, decide when to publish, or keep state between calls.
Everything is done on the uint16 bit patterns of the weights, never with float compares, so
NaN payloads, infinities and -0.0 survive unchanged.

Container (every integer little-endian)::

    "SWPD"  u16 format_version  u32 header_len
    header   zstd-compressed msgpack map, header_len bytes
    payload  every tensor's sections, concatenated in header order
    trailer  blake3 of all preceding bytes (32 bytes)

The header map holds ``kind`` ("delta" or "anchor"), ``hash`` (the weight-hash algorithm),
``from_version`` / ``to_version``, ``base_hash`` / ``result_hash`` (see `weights_hash`) and
``tensors``: one map per tensor name in sorted order with its shape, dtype, ``alias_of``
(tied weights), changed-element ``count``, the ``index`` coding ("none", "gaps", "bitmap",
"all") with the gap byte ``width``, the ``values`` coding ("zdiff", "xor", "raw"), 16-byte
``base_tag`` / ``result_tag`` (truncated per-tensor hashes, used to name what mismatched)
and ``sections``: a ``[stored_len, raw_len]`` pair per byte stream (zstd when the two
differ, stored verbatim when equal).

Each canonical tensor's sections are its index streams (one per gap byte plane, or the
bitmap) followed by its low and high value planes.

Per changed tensor the encoder picks the cheapest index coding (gaps between changed
positions split into byte planes, a bitmap, or "all") and the cheapest value coding: the
wrapped difference of new minus old bit patterns, zigzagged ("zdiff": a one-ulp nudge becomes
1 or 2), the XOR of the two bit patterns, or the raw new bits, each as a high and a low byte
plane. Planes put the near-constant high bytes together so zstd reduces them to almost
nothing. An unchanged tensor costs only its header entry.

Trust: the trailer and the hashes catch corruption and a wrong base, and prove the follower
ended where the trainer did. They do not say who made the delta: sign the bytes elsewhere.
Hashing uses blake3 (several GB/s per core; hashing is the largest single cost of both
encoding and applying). Work is spread over a thread pool, since numpy, zstd and blake3
release the GIL on large buffers.
"""

from swarm.policy.delta.apply import (
    Undo,
    apply_chain,
    apply_delta,
    apply_delta_undoable,
    decode_anchor,
)
from swarm.policy.delta.container import (
    FORMAT_VERSION,
    MAGIC,
    PREFIX,
    PROBE,
    SAMPLE,
    SCAN_CHUNK,
    TRAILER_LEN,
    DeltaError,
    DeltaInfo,
    LayoutMismatch,
    NonFiniteWeights,
    TensorInfo,
    build_container,
    check_layout,
    header_extent,
    parse_container,
    peek_header,
    read_header,
)
from swarm.policy.delta.encode import encode_anchor, encode_delta
from swarm.policy.delta.journal import put_values
from swarm.policy.delta.tensors import bf16_state_dict, weights_hash

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "PREFIX",
    "PROBE",
    "SAMPLE",
    "SCAN_CHUNK",
    "TRAILER_LEN",
    "DeltaError",
    "DeltaInfo",
    "LayoutMismatch",
    "NonFiniteWeights",
    "TensorInfo",
    "Undo",
    "apply_chain",
    "apply_delta",
    "apply_delta_undoable",
    "bf16_state_dict",
    "build_container",
    "check_layout",
    "decode_anchor",
    "encode_anchor",
    "encode_delta",
    "header_extent",
    "parse_container",
    "peek_header",
    "put_values",
    "read_header",
    "weights_hash",
]

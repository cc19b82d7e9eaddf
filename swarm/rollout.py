"""The rollout-group wire format: versioned msgpack, canonical bytes, Ed25519 signatures.

A *rollout group* is one question's G completions with their claimed rewards and everything
a receiver needs to check them: the task spec (so the question and ground truth can be
rebuilt), the model and policy version that produced them, the sampling parameters, the
round, a timestamp, a random nonce, and the format bonus the sender's verifier adds when a
completion ends with its tagged answer (`format_bonus`), so receivers can check every
claimed reward exactly.

On the wire::

    gossip message = msgpack {"v": 3, "kind": "rollouts", "groups": [[body, signature], ...]}
    body           = canonical msgpack map of one group (sorted keys, float64, no extensions)
    signature      = Ed25519 over SIGNING_DOMAIN + body, by the key of `body.sender`

The signature covers the exact body bytes, and the body must be canonical (re-encoding the
decoded group gives the same bytes), so there is one valid byte string per group: a
content hash of the body identifies a group for deduplication and for the ledger. The
sender's peer ID embeds its public key, so a valid signature binds the group to that peer.

Decoding is strict: anything unexpected raises `RejectedMessage` with a short, stable
reason code (stored in the ledger). Deliberately not here: checks that need state or
compute (duplicates, replays, rate limits, rebuilding tasks, re-scoring): see
`swarm.verify`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgpack

from swarm.errors import RejectedMessage, TaskError
from swarm.tasks import MAX_SPEC_INDEX, TaskSpec, canonical_config

# 2: groups declare their format bonus; 3: the bonus is earned only by a completion that ends
# with its tagged answer (`swarm.tasks.well_formatted`), so schema-2 claims no longer match.
SCHEMA_VERSION = 3
SIGNING_DOMAIN = b"swarm-node/rollout-group/v1\x00"
NONCE_BYTES = 16

# Every node uses the same limits (a receiver stricter than a sender would make the sender's
# messages vanish); the gossip message limit of the transport is 1 MiB.
MAX_MESSAGE_BYTES = 512 * 1024  # one gossip message (a batch of groups)
TARGET_MESSAGE_BYTES = 64 * 1024  # batches are cut near this size
MAX_GROUP_BYTES = 256 * 1024
MAX_GROUPS_PER_MESSAGE = 256
MAX_COMPLETIONS = 256
MAX_TEXT_CHARS = 32_768  # one completion or the question
MAX_NAME_CHARS = 256  # swarm id, sender, model, dataset, hash
MAX_CONFIG_CHARS = 4096
MAX_TOKENS_PER_COMPLETION = 16_384
REWARD_BOUND = 100.0  # claimed rewards must be finite and within +-this
MAX_FORMAT_BONUS = 1.0  # the same bound as the tasks.format_reward config key


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters a group was generated with (informational, and for checks)."""

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int


@dataclass(frozen=True)
class RolloutGroup:
    """One question's completions and claimed rewards, as shared with the swarm."""

    swarm_id: str
    sender: str  # peer ID (12D3KooW...) of the node that generated and signed the group
    task: TaskSpec
    question: str
    completions: tuple[str, ...]
    rewards: tuple[float, ...]  # as claimed by the sender; receivers recompute them
    finished: tuple[bool, ...]  # whether each completion ended with a stop token
    model: str
    base_hash: str
    policy_version: int
    sampling: Sampling
    round: int
    created_at: float
    nonce: bytes = field(default_factory=lambda: os.urandom(NONCE_BYTES))
    # The sender's own token ids: only meaningful to peers with the same tokenizer (spot checks).
    token_ids: tuple[tuple[int, ...], ...] = ()
    # The bonus the sender's verifier adds for a completion ending with <answer>...</answer> (its
    # tasks.format_reward): receivers recompute each claimed reward with it.
    format_bonus: float = 0.0


@dataclass(frozen=True)
class SignedBody:
    """Canonical body bytes and the signature over them (what travels for any signed message)."""

    body: bytes
    signature: bytes

    @property
    def content_hash(self) -> str:
        """Hex SHA-256 of the body: the message's identity for dedup and the ledger."""
        return hashlib.sha256(self.body).hexdigest()


@dataclass(frozen=True)
class SignedGroup(SignedBody):
    """A rollout group's canonical body bytes and the sender's signature over them."""


# ---------------------------------------------------------------------------------------------
# Encoding


def _group_map(group: RolloutGroup) -> dict:
    """The group as a plain map with keys in sorted order (canonical msgpack needs that)."""
    fields = {
        "completions": list(group.completions),
        "created_at": float(group.created_at),
        "finished": [bool(f) for f in group.finished],
        "format_bonus": float(group.format_bonus),
        "model": group.model,
        "base_hash": group.base_hash,
        "nonce": bytes(group.nonce),
        "policy_version": int(group.policy_version),
        "question": group.question,
        "rewards": [float(r) for r in group.rewards],
        "round": int(group.round),
        "sampling": {
            "max_new_tokens": int(group.sampling.max_new_tokens),
            "temperature": float(group.sampling.temperature),
            "top_k": int(group.sampling.top_k),
            "top_p": float(group.sampling.top_p),
        },
        "sender": group.sender,
        "swarm_id": group.swarm_id,
        "task": {
            "config": group.task.config_json,
            "dataset": group.task.dataset,
            "index": int(group.task.index),
            "seed": int(group.task.seed),
        },
        "token_ids": [list(ids) for ids in group.token_ids],
        "v": SCHEMA_VERSION,
    }
    return {key: fields[key] for key in sorted(fields)}


def encode_group(group: RolloutGroup) -> bytes:
    """Canonical body bytes of a group."""
    return msgpack.packb(_group_map(group), use_bin_type=True)


def sign_group(group: RolloutGroup, key_pair) -> SignedGroup:
    """Encode and sign `group` with the node's libp2p key pair (whose peer ID must be the sender)."""
    from swarm.p2p.identity import peer_id_of, sign

    if peer_id_of(key_pair) != group.sender:
        raise ValueError("a group must be signed by the key of its sender")
    body = encode_group(group)
    return SignedGroup(body=body, signature=sign(key_pair, SIGNING_DOMAIN + body))


def pack_messages(groups: Iterable[SignedGroup], target_bytes: int = TARGET_MESSAGE_BYTES) -> list[bytes]:
    """Batch signed groups into gossip messages of about `target_bytes` (never over the limit)."""
    messages, batch, size = [], [], 0
    for group in groups:
        item = len(group.body) + len(group.signature) + 16
        if batch and (size + item > target_bytes or len(batch) >= MAX_GROUPS_PER_MESSAGE):
            messages.append(_pack_batch(batch))
            batch, size = [], 0
        batch.append(group)
        size += item
    if batch:
        messages.append(_pack_batch(batch))
    return messages


def _pack_batch(batch: list[SignedGroup]) -> bytes:
    data = msgpack.packb(
        {"v": SCHEMA_VERSION, "kind": "rollouts", "groups": [[g.body, g.signature] for g in batch]},
        use_bin_type=True,
    )
    if len(data) > MAX_MESSAGE_BYTES:
        raise RejectedMessage("oversize", f"a single group of {len(data)} bytes exceeds the message limit")
    return data


# ---------------------------------------------------------------------------------------------
# Decoding (strict: every failure is a RejectedMessage with a reason code)


def unpack_message(data: bytes) -> list[SignedGroup]:
    """Split a gossip message into signed groups. Checks the envelope only."""
    pairs = _unpack_envelope(data, "rollouts", "groups", SCHEMA_VERSION, MAX_MESSAGE_BYTES, MAX_GROUPS_PER_MESSAGE, MAX_GROUP_BYTES)
    return [SignedGroup(body=body, signature=signature) for body, signature in pairs]


def _unpack_envelope(
    data: bytes, kind: str, items_key: str, schema: int, max_bytes: int, max_items: int, max_item_bytes: int
) -> list[tuple[bytes, bytes]]:
    """The (body, signature) pairs of a message {"v", "kind", <items_key>: [[body, signature], ...]}.

    Shared by rollout messages and delta-manifest messages: the envelope is the same shape,
    only its kind, schema and limits differ. Every failure is a RejectedMessage.
    """
    what = items_key[:-1]  # "groups" -> "group"
    if len(data) > max_bytes:
        raise RejectedMessage("oversize", f"{kind} message of {len(data)} bytes")
    envelope = _unpack(data, max_len=max_items + 8)
    if not isinstance(envelope, dict) or set(envelope) != {"v", "kind", items_key}:
        raise RejectedMessage("malformed", f"{kind} message envelope has the wrong fields")
    if envelope["v"] != schema:
        raise RejectedMessage("unknown_schema", f"{kind} message schema {envelope['v']!r}")
    if envelope["kind"] != kind:
        raise RejectedMessage("malformed", f"unknown message kind {envelope['kind']!r}")
    items = envelope[items_key]
    if not isinstance(items, list) or not 1 <= len(items) <= max_items:
        raise RejectedMessage("malformed", f"{items_key} must be a non-empty list within the limit")
    for item in items:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, bytes) for x in item)):
            raise RejectedMessage("malformed", f"each {what} must be [body, signature] bytes")
        if len(item[0]) > max_item_bytes:
            raise RejectedMessage("oversize", f"{what} body of {len(item[0])} bytes")
    return [(body, signature) for body, signature in items]


def decode_group(body: bytes) -> RolloutGroup:
    """Parse and validate a group body (schema, types, bounds, canonical form). No signature check."""
    if len(body) > MAX_GROUP_BYTES:
        raise RejectedMessage("oversize", f"group body of {len(body)} bytes")
    raw = _unpack(body, max_len=max(MAX_COMPLETIONS, MAX_TEXT_CHARS))
    if not isinstance(raw, dict):
        raise RejectedMessage("malformed", "group body is not a map")
    if raw.get("v") != SCHEMA_VERSION:
        raise RejectedMessage("unknown_schema", f"group schema {raw.get('v')!r}")
    group = _group_from_map(raw)
    if encode_group(group) != body:
        raise RejectedMessage("non_canonical", "group body is not in canonical form")
    return group


def stored_nonce(body: bytes) -> bytes:
    """The nonce of a group body this node already verified and stored, without rebuilding the group.

    Ten times cheaper than `decode_group`, for a node reading back its recent groups on start.
    """
    raw = _unpack(body, max_len=max(MAX_COMPLETIONS, MAX_TEXT_CHARS))
    nonce = raw.get("nonce") if isinstance(raw, dict) else None
    if not isinstance(nonce, bytes):
        raise RejectedMessage("malformed", "stored group body has no nonce")
    return nonce


def verify_signed(signed: SignedGroup) -> RolloutGroup:
    """Decode a signed group and check its signature against the sender's peer ID."""
    from swarm.p2p.identity import verify

    group = decode_group(signed.body)
    if not verify(group.sender, SIGNING_DOMAIN + signed.body, signed.signature):
        raise RejectedMessage("bad_signature", f"signature does not verify for sender {group.sender[:16]}...")
    return group


def _unpack(data: bytes, max_len: int):
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            max_str_len=MAX_TEXT_CHARS * 4,
            max_bin_len=MAX_GROUP_BYTES,
            max_array_len=max_len,
            max_map_len=64,
            max_ext_len=0,
        )
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, TypeError, UnicodeDecodeError) as e:
        raise RejectedMessage("undecodable", f"{e.__class__.__name__}: {e}"[:200]) from None


_GROUP_KEYS = frozenset(
    {"completions", "created_at", "finished", "format_bonus", "model", "base_hash", "nonce", "policy_version", "question",
     "rewards", "round", "sampling", "sender", "swarm_id", "task", "token_ids", "v"}
)


def _group_from_map(raw: dict) -> RolloutGroup:
    if set(raw) != _GROUP_KEYS:
        missing, extra = sorted(_GROUP_KEYS - set(raw)), sorted(set(raw) - _GROUP_KEYS)
        raise RejectedMessage("malformed", f"group fields: missing {missing}, unexpected {extra}")
    completions = _str_list(raw["completions"], "completions", MAX_TEXT_CHARS)
    n = len(completions)
    if not 1 <= n <= MAX_COMPLETIONS:
        raise RejectedMessage("malformed", f"{n} completions (1..{MAX_COMPLETIONS} allowed)")
    rewards = raw["rewards"]
    if not isinstance(rewards, list) or len(rewards) != n:
        raise RejectedMessage("malformed", "rewards must be a list with one reward per completion")
    for r in rewards:
        if isinstance(r, bool) or not isinstance(r, float | int) or not math.isfinite(r) or abs(r) > REWARD_BOUND:
            raise RejectedMessage("bad_reward", f"reward {r!r} is not a finite number within +-{REWARD_BOUND}")
    finished = raw["finished"]
    if not isinstance(finished, list) or len(finished) != n or not all(isinstance(f, bool) for f in finished):
        raise RejectedMessage("malformed", "finished must be one boolean per completion")
    token_ids = raw["token_ids"]
    if not isinstance(token_ids, list) or len(token_ids) not in (0, n):
        raise RejectedMessage("malformed", "token_ids must be empty or one list per completion")
    for ids in token_ids:
        if not isinstance(ids, list) or len(ids) > MAX_TOKENS_PER_COMPLETION or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in ids
        ):
            raise RejectedMessage("malformed", "token ids must be lists of non-negative ints")
    nonce = raw["nonce"]
    if not isinstance(nonce, bytes) or len(nonce) != NONCE_BYTES:
        raise RejectedMessage("malformed", f"nonce must be {NONCE_BYTES} bytes")
    return RolloutGroup(
        swarm_id=_str(raw["swarm_id"], "swarm_id", MAX_NAME_CHARS),
        sender=_str(raw["sender"], "sender", MAX_NAME_CHARS),
        task=_task(raw["task"]),
        question=_str(raw["question"], "question", MAX_TEXT_CHARS),
        completions=tuple(completions),
        rewards=tuple(float(r) for r in rewards),
        finished=tuple(finished),
        model=_str(raw["model"], "model", MAX_NAME_CHARS),
        base_hash=_str(raw["base_hash"], "base_hash", MAX_NAME_CHARS),
        policy_version=_int(raw["policy_version"], "policy_version", 0, 2**53),
        sampling=_sampling(raw["sampling"]),
        round=_int(raw["round"], "round", 0, 2**53),
        created_at=_float(raw["created_at"], "created_at", 0.0, 1e12),
        nonce=nonce,
        token_ids=tuple(tuple(ids) for ids in token_ids),
        format_bonus=_float(raw["format_bonus"], "format_bonus", 0.0, MAX_FORMAT_BONUS),
    )


def _task(raw) -> TaskSpec:
    if not isinstance(raw, dict) or set(raw) != {"config", "dataset", "index", "seed"}:
        raise RejectedMessage("malformed", "task must have config, dataset, index and seed")
    return TaskSpec(
        dataset=_str(raw["dataset"], "task.dataset", MAX_NAME_CHARS),
        config_json=_config_json(raw["config"]),
        seed=_int(raw["seed"], "task.seed", 0, 2**63 - 1),
        index=_int(raw["index"], "task.index", 0, MAX_SPEC_INDEX),
    )


def _config_json(value) -> str:
    """A task config: canonical JSON of an object, as `TaskSpec.make` writes it (else malformed)."""
    text = _str(value, "task.config", MAX_CONFIG_CHARS)
    try:
        parsed = json.loads(text)
        canonical = canonical_config(parsed) if isinstance(parsed, dict) else None
    except (ValueError, RecursionError, TaskError):  # bad JSON, nesting bombs, NaN
        canonical = None
    if canonical != text:
        raise RejectedMessage("malformed", "task.config must be canonical JSON of an object")
    return text


def _sampling(raw) -> Sampling:
    if not isinstance(raw, dict) or set(raw) != {"max_new_tokens", "temperature", "top_k", "top_p"}:
        raise RejectedMessage("malformed", "sampling must have max_new_tokens, temperature, top_k, top_p")
    return Sampling(
        temperature=_float(raw["temperature"], "sampling.temperature", 0.0, 100.0),
        top_p=_float(raw["top_p"], "sampling.top_p", 0.0, 1.0),
        top_k=_int(raw["top_k"], "sampling.top_k", 0, 2**31),
        max_new_tokens=_int(raw["max_new_tokens"], "sampling.max_new_tokens", 1, 2**31),
    )


def _str(value, name: str, max_chars: int) -> str:
    if not isinstance(value, str) or len(value) > max_chars:
        raise RejectedMessage("malformed", f"{name} must be a string of at most {max_chars} characters")
    return value


def _str_list(value, name: str, max_chars: int) -> list[str]:
    if not isinstance(value, list):
        raise RejectedMessage("malformed", f"{name} must be a list")
    return [_str(v, name, max_chars) for v in value]


def _int(value, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RejectedMessage("malformed", f"{name} must be an integer in [{low}, {high}]")
    return value


def _float(value, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value) or not low <= value <= high:
        raise RejectedMessage("malformed", f"{name} must be a finite float in [{low}, {high}]")
    return value


# ---------------------------------------------------------------------------------------------
# Delta manifests: a trainer's signed announcement of a weight delta or anchor.
#
# On the wire::
#
#     gossip message / index blob = msgpack {"v": 1, "kind": "delta_manifests", "manifests": [[body, signature], ...]}
#     body      = canonical msgpack map of one manifest (sorted keys, float64, no extensions)
#     signature = Ed25519 over MANIFEST_SIGNING_DOMAIN + body, by the key of `body.provider`
#
# The payload itself (the `swarm.policy.delta` container) never travels on gossip: the
# provider serves it under `key` over the blob stream protocol, and the signed `payload_hash`
# (blake3 of the payload bytes) and `size` bind the fetched bytes to the manifest. A manifest
# says nothing about whether to trust the provider: followers check `provider` themselves.

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_SIGNING_DOMAIN = b"swarm-node/delta-manifest/v1\x00"
MAX_MANIFEST_BYTES = 2048  # one manifest body (~500 bytes in practice)
MAX_MANIFESTS_PER_MESSAGE = 256  # a trainer's index of the deltas and anchors it serves
MAX_MANIFEST_MESSAGE_BYTES = MAX_MANIFESTS_PER_MESSAGE * (MAX_MANIFEST_BYTES + 96)
MAX_BLOB_KEY_CHARS = 512
MAX_PAYLOAD_BYTES = 1 << 40
MANIFEST_KINDS = ("delta", "anchor")
_HEX_HASH_CHARS = 64


@dataclass(frozen=True)
class DeltaManifest:
    """What a trainer announces about one delta (version a -> b) or anchor (full weights at b)."""

    swarm_id: str
    provider: str  # peer ID that serves the payload and signs this manifest
    model: str  # model name, as in the provider's policy.model
    base_hash: str  # hex identity of the base model's bf16 weights (the policy's base_hash)
    kind: str  # "delta" or "anchor"
    from_version: int  # the version a delta applies to; -1 for an anchor
    to_version: int  # the version the weights are at after applying
    size: int  # payload bytes
    payload_hash: str  # hex blake3 of the payload bytes
    result_hash: str  # hex `swarm.policy.delta.weights_hash` of the weights after applying
    key: str  # blob key the provider serves the payload under
    created_at: float


@dataclass(frozen=True)
class SignedManifest(SignedBody):
    """A manifest's canonical body bytes and the provider's signature over them."""


def _manifest_map(m: DeltaManifest) -> dict:
    fields = {
        "base_hash": m.base_hash,
        "created_at": float(m.created_at),
        "from_version": int(m.from_version),
        "key": m.key,
        "kind": m.kind,
        "model": m.model,
        "payload_hash": m.payload_hash,
        "provider": m.provider,
        "result_hash": m.result_hash,
        "size": int(m.size),
        "swarm_id": m.swarm_id,
        "to_version": int(m.to_version),
        "v": MANIFEST_SCHEMA_VERSION,
    }
    return {key: fields[key] for key in sorted(fields)}


def encode_manifest(manifest: DeltaManifest) -> bytes:
    """Canonical body bytes of a manifest."""
    return msgpack.packb(_manifest_map(manifest), use_bin_type=True)


def sign_manifest(manifest: DeltaManifest, key_pair) -> SignedManifest:
    """Encode and sign `manifest` with the provider's libp2p key pair."""
    from swarm.p2p.identity import peer_id_of, sign

    if peer_id_of(key_pair) != manifest.provider:
        raise ValueError("a manifest must be signed by the key of its provider")
    _manifest_from_map(_manifest_map(manifest))  # refuse to sign what receivers would reject
    body = encode_manifest(manifest)
    return SignedManifest(body=body, signature=sign(key_pair, MANIFEST_SIGNING_DOMAIN + body))


def pack_manifests(manifests: Iterable[SignedManifest]) -> bytes:
    """One gossip message (or index blob) carrying signed manifests."""
    items = [[m.body, m.signature] for m in manifests]
    if not 1 <= len(items) <= MAX_MANIFESTS_PER_MESSAGE:
        raise ValueError(f"a manifest message carries 1..{MAX_MANIFESTS_PER_MESSAGE} manifests")
    return msgpack.packb(
        {"v": MANIFEST_SCHEMA_VERSION, "kind": "delta_manifests", "manifests": items}, use_bin_type=True
    )


def unpack_manifests(data: bytes) -> list[SignedManifest]:
    """Split a manifest message into signed manifests. Checks the envelope only."""
    pairs = _unpack_envelope(
        data, "delta_manifests", "manifests", MANIFEST_SCHEMA_VERSION, MAX_MANIFEST_MESSAGE_BYTES,
        MAX_MANIFESTS_PER_MESSAGE, MAX_MANIFEST_BYTES,
    )
    return [SignedManifest(body=body, signature=signature) for body, signature in pairs]


def decode_manifest(body: bytes) -> DeltaManifest:
    """Parse and validate a manifest body (schema, types, bounds, canonical form). No signature check."""
    if len(body) > MAX_MANIFEST_BYTES:
        raise RejectedMessage("oversize", f"manifest body of {len(body)} bytes")
    raw = _unpack(body, max_len=64)
    if not isinstance(raw, dict):
        raise RejectedMessage("malformed", "manifest body is not a map")
    if raw.get("v") != MANIFEST_SCHEMA_VERSION:
        raise RejectedMessage("unknown_schema", f"manifest schema {raw.get('v')!r}")
    manifest = _manifest_from_map(raw)
    if encode_manifest(manifest) != body:
        raise RejectedMessage("non_canonical", "manifest body is not in canonical form")
    return manifest


def verify_manifest(signed: SignedManifest) -> DeltaManifest:
    """Decode a signed manifest and check its signature against the provider's peer ID."""
    from swarm.p2p.identity import verify

    manifest = decode_manifest(signed.body)
    if not verify(manifest.provider, MANIFEST_SIGNING_DOMAIN + signed.body, signed.signature):
        raise RejectedMessage("bad_signature", f"manifest signature does not verify for {manifest.provider[:16]}...")
    return manifest


_MANIFEST_KEYS = frozenset(
    {"base_hash", "created_at", "from_version", "key", "kind", "model", "payload_hash", "provider",
     "result_hash", "size", "swarm_id", "to_version", "v"}
)


def _manifest_from_map(raw: dict) -> DeltaManifest:
    if set(raw) != _MANIFEST_KEYS:
        missing, extra = sorted(_MANIFEST_KEYS - set(raw)), sorted(set(raw) - _MANIFEST_KEYS)
        raise RejectedMessage("malformed", f"manifest fields: missing {missing}, unexpected {extra}")
    kind = raw["kind"]
    if kind not in MANIFEST_KINDS:
        raise RejectedMessage("malformed", f"manifest kind {kind!r}")
    to_version = _int(raw["to_version"], "to_version", 0, 2**53)
    if kind == "anchor":
        from_version = _int(raw["from_version"], "from_version", -1, -1)
    else:
        from_version = _int(raw["from_version"], "from_version", 0, to_version - 1)
    return DeltaManifest(
        swarm_id=_str(raw["swarm_id"], "swarm_id", MAX_NAME_CHARS),
        provider=_str(raw["provider"], "provider", MAX_NAME_CHARS),
        model=_str(raw["model"], "model", MAX_NAME_CHARS),
        base_hash=_hex_hash(raw["base_hash"], "base_hash"),
        kind=kind,
        from_version=from_version,
        to_version=to_version,
        size=_int(raw["size"], "size", 1, MAX_PAYLOAD_BYTES),
        payload_hash=_hex_hash(raw["payload_hash"], "payload_hash"),
        result_hash=_hex_hash(raw["result_hash"], "result_hash"),
        key=_str(raw["key"], "key", MAX_BLOB_KEY_CHARS),
        created_at=_float(raw["created_at"], "created_at", 0.0, 1e12),
    )


def _hex_hash(value, name: str) -> str:
    if not (isinstance(value, str) and len(value) == _HEX_HASH_CHARS and all(c in "0123456789abcdef" for c in value)):
        raise RejectedMessage("malformed", f"{name} must be {_HEX_HASH_CHARS} lowercase hex characters")
    return value

"""Write the wire golden files: fixed messages of every kind, as this code encodes them.

Run from the repository root: `python tests/data/wire/generate.py [OUT_DIR]` (default: this
folder). Keys, nonces and timestamps are fixed and Ed25519 signatures are deterministic, so
the same code writes the same bytes. The files in the repository were written by the code
of the commit that added them; tests/unit/wire/test_wire_golden.py checks that today's code
decodes them to the recorded field values and re-encodes them to the same bytes.
Regenerate only on purpose (a new schema version), never to make that test pass.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import msgspec

from swarm.core.identity import create_identity, peer_id_of
from swarm.tasks import TaskSpec
from swarm.wire import DeltaManifest, RolloutGroup, Sampling, pack_manifests, pack_messages
from swarm.wire.signing import sign_group, sign_manifest
from swarm.wire.streams import (
    BlobStatus,
    PeerEntry,
    blob_request,
    blob_response_header,
    encode_peer_exchange,
)

KEY = create_identity(b"\x01" * 32)
TRAINER = create_identity(b"\x03" * 32)


def groups() -> dict[str, RolloutGroup]:
    small = RolloutGroup(
        swarm_id="swarm-golden",
        sender=peer_id_of(KEY),
        task=TaskSpec.make("chain_sum", {"min_terms": 2, "max_terms": 2}, seed=3, index=7),
        question="State the final answer to the following arithmetic problem: 4 + 5 =",
        completions=(
            "<answer>9</answer>",
            "<answer>10</answer>",
            "9",
            "<answer>ünïcode ✓</answer>",
        ),
        rewards=(1.1, 0.1, 1.0, 0.1),
        finished=(True, True, False, True),
        model="swarm-tiny",
        base_hash="ab" * 16,
        policy_version=12,
        sampling=Sampling(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=8),
        round=12,
        created_at=1_700_000_000.5,
        nonce=bytes(range(16)),
        token_ids=((4, 20, 5), (4, 18, 17, 5), (20,), (4, 3, 5)),
        format_bonus=0.1,
    )
    # Wider encodings: 20 completions (array16), a 300-character question (str16), integers
    # needing 16, 32 and 64 bits, no token ids, and a zero format bonus.
    wide = RolloutGroup(
        swarm_id="swarm-golden",
        sender=peer_id_of(KEY),
        task=TaskSpec.make(
            "basic_arithmetic",
            {"max_terms": 4, "min_terms": 2, "z": [1, 2.5]},
            seed=2**63 - 1,
            index=1_000_000,
        ),
        question="Q" * 300,
        completions=tuple(f"<answer>{i}</answer>" for i in range(20)),
        rewards=tuple(float(i % 3) - 1.0 for i in range(20)),
        finished=tuple(i % 2 == 0 for i in range(20)),
        model="Qwen/Qwen2.5-0.5B-Instruct",
        base_hash="cd" * 32,
        policy_version=2**40,
        sampling=Sampling(temperature=0.7, top_p=0.95, top_k=300, max_new_tokens=70_000),
        round=65_536,
        created_at=1_712_345_678.25,
        nonce=b"\xff" * 16,
        token_ids=(),
        format_bonus=0.0,
    )
    return {"group_small": small, "group_wide": wide}


def manifests() -> dict[str, DeltaManifest]:
    delta = DeltaManifest(
        swarm_id="swarm-golden",
        provider=peer_id_of(TRAINER),
        model="swarm-tiny",
        base_hash="ab" * 32,
        kind="delta",
        from_version=3,
        to_version=4,
        size=123_456,
        payload_hash="cd" * 32,
        result_hash="ef" * 32,
        key="sync/abababababababab/delta/3-4",
        created_at=1_700_000_100.125,
    )
    anchor = msgspec.structs.replace(
        delta,
        kind="anchor",
        from_version=-1,
        to_version=70_000,
        size=5 * 2**32,
        key="sync/abababababababab/anchor/70000",
    )
    return {"manifest_delta": delta, "manifest_anchor": anchor}


# A peer-exchange answer and blob-stream frames. (The first files were written with the
# expressions swarm/p2p/libp2p_transport.py used: json.dumps({"peers": entries}).encode(),
# struct ">I" key frames and ">BQ" response headers.)
PX_ENTRIES = [
    {"id": peer_id_of(KEY), "addrs": ["/ip4/127.0.0.1/tcp/4001", "/ip6/::1/tcp/4002"]},
    {"id": peer_id_of(TRAINER), "addrs": ["/ip4/10.0.0.7/tcp/31337"]},
]
BLOB_KEY = "sync/abababababababab/index"


def fields(obj) -> dict:
    """A struct's fields by attribute name as JSON-able values (bytes as hex, tuples as
    lists), without the schema version."""

    def plain(value):
        if isinstance(value, bytes):
            return {"hex": value.hex()}
        if isinstance(value, msgspec.Struct):
            return {
                f.name: plain(getattr(value, f.name))
                for f in msgspec.structs.fields(value)
                if f.name != "v"
            }
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        return value

    return plain(obj)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    expected: dict[str, dict] = {}
    signed_groups = []
    for name, group in groups().items():
        signed = sign_group(group, KEY)
        signed_groups.append(signed)
        (out / f"{name}.body").write_bytes(signed.body)
        (out / f"{name}.sig").write_bytes(signed.signature)
        expected[name] = fields(group)
    (out / "rollouts_message.bin").write_bytes(pack_messages(signed_groups)[0])
    signed_manifests = []
    for name, manifest in manifests().items():
        signed = sign_manifest(manifest, TRAINER)
        signed_manifests.append(signed)
        (out / f"{name}.body").write_bytes(signed.body)
        (out / f"{name}.sig").write_bytes(signed.signature)
        expected[name] = fields(manifest)
    (out / "manifests_message.bin").write_bytes(pack_manifests(signed_manifests))
    peers = [PeerEntry(e["id"], tuple(e["addrs"])) for e in PX_ENTRIES]
    (out / "peer_exchange.json.bin").write_bytes(encode_peer_exchange(peers))
    expected["peer_exchange"] = {"peers": PX_ENTRIES}
    (out / "blob_request.bin").write_bytes(blob_request(BLOB_KEY))
    (out / "blob_response_ok.bin").write_bytes(blob_response_header(BlobStatus.OK, 1234))
    (out / "blob_response_missing.bin").write_bytes(blob_response_header(BlobStatus.MISSING, 0))
    expected["blob"] = {"key": BLOB_KEY, "ok_size": 1234}
    text = json.dumps(expected, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    (out / "expected.json").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)

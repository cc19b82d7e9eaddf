"""Tests of swarm.policy.delta: bit-exact deltas and anchors, and refusal of bad input.

Weights are compared as int16 bit patterns throughout, never as floats, so NaN payloads,
infinities and -0.0 count as what they are.
"""

from __future__ import annotations

import blake3
import msgpack
import numpy as np
import pytest
import torch
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import swarm.policy.delta as delta
import swarm.policy.delta.codec as delta_codec
import swarm.policy.delta.journal as delta_journal
from swarm.core.errors import SwarmError
from swarm.policy.delta import (
    DeltaError,
    apply_chain,
    apply_delta,
    bf16_state_dict,
    decode_anchor,
    encode_anchor,
    encode_delta,
    read_header,
    weights_hash,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bit patterns floats compare badly on: NaNs (quiet, signalling, negative), +-inf, -0.0, +0.0,
# the smallest subnormal and the largest finite value.
SPECIAL = np.array(
    [0x7FC0, 0x7FC1, 0x7F81, 0xFFFF, 0x7F80, 0xFF80, 0x8000, 0x0000, 0x0001, 0x7F7F],
    dtype=np.uint16,
)
SHAPES = [(), (1,), (7,), (0,), (0, 3), (3, 5), (2, 3, 4), (17, 33), (64, 65)]


# --------------------------------------------------------------------------- helpers


def bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().view(torch.int16).numpy().reshape(-1).view(np.uint16)


def from_bits(values: np.ndarray, shape: tuple[int, ...]) -> torch.Tensor:
    arr = np.ascontiguousarray(values, dtype=np.uint16).view(np.int16).reshape(shape)
    return torch.from_numpy(arr.copy()).view(torch.bfloat16)


def random_bits(rng: np.random.Generator, n: int) -> np.ndarray:
    out = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    special = rng.random(n) < 0.1
    out[special] = rng.choice(SPECIAL, size=int(special.sum()))
    return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(bits(a[k]), bits(b[k])) for k in a)


def snapshot(weights: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: bits(v).copy() for k, v in weights.items()}


def unchanged(weights: dict[str, torch.Tensor], snap: dict[str, np.ndarray]) -> bool:
    return weights.keys() == snap.keys() and all(
        np.array_equal(bits(weights[k]), snap[k]) for k in weights
    )


def clone(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Deep copy keeping tied names tied."""
    out, seen = {}, {}
    for name, t in weights.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
        if key not in seen:
            seen[key] = t.clone()
        out[name] = seen[key]
    return out


def step(
    weights: dict[str, torch.Tensor], rng: np.random.Generator, density: float, nudge: bool
) -> dict[str, torch.Tensor]:
    """A copy of `weights` with a `density` share of elements changed.

    nudge: +-1/+-2 on the bit pattern (an Adam-sized step, wrapping allowed); otherwise
    arbitrary new bit patterns, specials included.
    """
    new = clone(weights)
    done = set()
    for t in new.values():
        if id(t) in done:
            continue
        done.add(id(t))
        flat = bits(t).copy()
        pick = np.flatnonzero(rng.random(flat.size) < density)
        if nudge:
            flat[pick] += rng.choice(np.array([1, 2, 65535, 65534], dtype=np.uint16), pick.size)
        else:
            flat[pick] = random_bits(rng, pick.size)
        t.copy_(from_bits(flat, tuple(t.shape)))
    return new


def model_weights(seed: int = 0, tied: bool = True) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    w = {
        "embed.weight": from_bits(random_bits(rng, 40 * 8), (40, 8)),
        "layer.weight": from_bits(random_bits(rng, 8 * 8), (8, 8)),
        "layer.bias": from_bits(random_bits(rng, 8), (8,)),
        "norm.scale": from_bits(random_bits(rng, 1), ()),
    }
    w["lm_head.weight"] = w["embed.weight"] if tied else w["embed.weight"].clone()
    return w


@st.composite
def weight_sets(draw):
    """(old, new): random shapes and strides, densities 0..100%, bit patterns, nudges."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    shapes = draw(st.lists(st.sampled_from(SHAPES), min_size=1, max_size=4))
    old = {f"t{i}": from_bits(random_bits(rng, int(np.prod(s))), s) for i, s in enumerate(shapes)}
    if draw(st.booleans()):  # non-contiguous views (clones keep their strides)
        old = {k: v.transpose(0, -1) if v.dim() > 1 else v for k, v in old.items()}
    if draw(st.booleans()):
        old["tied"] = old["t0"]
    density = draw(st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0))
    return old, step(old, rng, density, nudge=draw(st.booleans()))


def _rebuild(blob: bytes, edit=lambda h: None, payload=lambda p: p) -> bytes:
    """Re-pack a blob after editing its header and payload, with a valid checksum: a
    well-formed liar, which only the consistency checks can catch."""
    header, body = delta.parse_container(blob)
    edit(header)
    return delta.build_container(header, [payload(bytes(body))])


# --------------------------------------------------------------------------- round trips


@FAST
@given(weight_sets())
def test_delta_roundtrip_is_bit_exact(pair):
    old, new = pair
    blob = encode_delta(old, new, from_version=3, to_version=4)
    target = clone(old)
    info = apply_delta(target, blob, expect_from_version=3)
    assert same(target, new)
    assert info.result_hash == weights_hash(new) == weights_hash(target)
    assert info.base_hash == weights_hash(old)
    assert (info.kind, info.from_version, info.to_version) == ("delta", 3, 4)
    expected = sum(int((bits(old[k]) != bits(new[k])).sum()) for k in old if k != "tied")
    assert info.changed == expected


@FAST
@given(weight_sets())
def test_anchor_roundtrip_is_bit_exact(pair):
    _, new = pair
    weights, info = decode_anchor(encode_anchor(new, version=9))
    assert same(weights, new)
    assert info.kind == "anchor" and info.to_version == 9 and info.from_version is None
    if "tied" in new and new["t0"].numel():  # an empty tensor has no storage to share
        assert weights["tied"] is weights["t0"]


def test_unchanged_weights_cost_almost_nothing():
    old = {"big": from_bits(np.arange(1 << 16, dtype=np.uint16), (256, 256))}
    blob = encode_delta(old, clone(old), from_version=0, to_version=1)
    info = read_header(blob)
    assert info.changed == 0 and info.tensors[0].index_coding == "none"
    assert len(blob) < 300  # header + hashes only, against 128 KiB dense
    target = clone(old)
    apply_delta(target, blob)
    assert same(target, old)


def test_every_element_changed_uses_all_index():
    rng = np.random.default_rng(1)
    old = {"w": from_bits(random_bits(rng, 1000), (10, 100))}
    new = {"w": from_bits(bits(old["w"]) ^ np.uint16(0x0001), (10, 100))}
    blob = encode_delta(old, new, from_version=0, to_version=1)
    assert read_header(blob).tensors[0].index_coding == "all"
    target = clone(old)
    apply_delta(target, blob)
    assert same(target, new)


def test_codings_follow_the_data():
    rng = np.random.default_rng(2)
    old = {"w": from_bits(random_bits(rng, 1 << 14), (1 << 14,))}
    nudged = step(old, rng, 0.01, nudge=True)
    info = read_header(encode_delta(old, nudged, from_version=0, to_version=1))
    assert (info.tensors[0].index_coding, info.tensors[0].value_coding) == ("gaps", "zdiff")
    half = step(old, rng, 0.5, nudge=False)
    info = read_header(encode_delta(old, half, from_version=0, to_version=1))
    assert info.tensors[0].index_coding == "bitmap"
    assert info.tensors[0].value_coding in ("raw", "xor")


def test_sampled_choice_and_chunked_scan(monkeypatch):
    # Shrink the thresholds so the large-tensor code paths run on small data.
    monkeypatch.setattr(delta_codec, "SAMPLE", 64)
    monkeypatch.setattr(delta_codec, "SCAN_CHUNK", 1000)  # the change scan of encoding
    monkeypatch.setattr(delta_journal, "SCAN_CHUNK", 1000)  # and the chunked writes of applying
    rng = np.random.default_rng(3)
    old = {"w": from_bits(random_bits(rng, 50_000), (50, 1000))}
    for density, nudge in ((0.02, True), (0.3, False), (1.0, True)):
        new = step(old, rng, density, nudge)
        target = clone(old)
        apply_delta(target, encode_delta(old, new, from_version=0, to_version=1))
        assert same(target, new)


def test_delta_is_much_smaller_than_dense_for_rl_like_steps():
    rng = np.random.default_rng(4)
    w = (0.02 * torch.from_numpy(rng.standard_normal(1 << 20).astype(np.float32))).bfloat16()
    old = {"w": w}
    flat = bits(w).copy()
    pick = np.flatnonzero(rng.random(flat.size) < 0.01)
    flat[pick] += rng.choice(np.array([1, 65535], dtype=np.uint16), pick.size)  # +-1 ulp
    new = {"w": from_bits(flat, (1 << 20,))}
    blob = encode_delta(old, new, from_version=0, to_version=1)
    assert 2 * w.numel() / len(blob) > 100


def test_incompressible_streams_are_stored_verbatim():
    rng = np.random.default_rng(10)
    n = 16 * delta.PROBE
    w = {"w": from_bits(rng.integers(0, 1 << 16, n, dtype=np.uint16), (n,))}
    blob = encode_anchor(w, version=0)
    assert len(blob) > 2 * n  # both byte planes stored as they are
    weights, _ = decode_anchor(blob)
    assert same(weights, w)


def test_non_contiguous_target_is_written_in_place():
    rng = np.random.default_rng(5)
    backing = from_bits(random_bits(rng, 6 * 10), (6, 10))
    old = {"view": backing[:, ::2]}
    assert not old["view"].is_contiguous()
    new = step({"view": old["view"].contiguous()}, rng, 0.5, nudge=False)
    blob = encode_delta(old, new, from_version=0, to_version=1)
    apply_delta(old, blob)
    assert same(old, new)
    assert np.array_equal(bits(backing[:, ::2]), bits(new["view"]))


# --------------------------------------------------------------------------- tied weights


def test_tied_weights_encode_once_and_apply_to_tied_or_untied_targets():
    old = model_weights(tied=True)
    new = step(old, np.random.default_rng(6), 0.3, nudge=True)
    assert new["lm_head.weight"] is new["embed.weight"]
    blob = encode_delta(old, new, from_version=0, to_version=1)
    info = read_header(blob)
    head = next(t for t in info.tensors if t.name == "lm_head.weight")
    assert head.alias_of == "embed.weight" and head.payload_bytes == 0

    tied = clone(old)
    apply_delta(tied, blob)  # one write lands in both names; XOR/diff applied once
    assert same(tied, new) and tied["lm_head.weight"] is tied["embed.weight"]

    untied = {k: v.clone() for k, v in old.items()}
    apply_delta(untied, blob)  # the same change is written to each copy
    assert same(untied, new)


def test_tied_in_new_but_different_in_old_is_refused():
    old = model_weights(tied=False)
    old["lm_head.weight"] = step({"x": old["lm_head.weight"]}, np.random.default_rng(7), 0.5, True)[
        "x"
    ]
    new = model_weights(tied=True)
    with pytest.raises(DeltaError, match="tied"):
        encode_delta(old, new, from_version=0, to_version=1)


def test_target_tying_what_the_delta_keeps_apart_is_refused():
    old, new = model_weights(tied=False), model_weights(seed=1, tied=False)
    blob = encode_delta(old, new, from_version=0, to_version=1)
    target = model_weights(tied=True)
    snap = snapshot(target)
    with pytest.raises(DeltaError, match="ties"):
        apply_delta(target, blob)
    assert unchanged(target, snap)


def test_partly_overlapping_views_are_refused():
    base = from_bits(np.arange(20, dtype=np.uint16), (20,))
    with pytest.raises(DeltaError, match="overlap"):
        weights_hash({"a": base[:12], "b": base[8:]})
    weights_hash({"a": base[:10], "b": base[10:]})  # disjoint views of one storage are fine


# --------------------------------------------------------------------------- refusals


def _setup():
    old = model_weights()
    new = step(old, np.random.default_rng(8), 0.2, nudge=True)
    return old, new, encode_delta(old, new, from_version=5, to_version=6)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_flipped_byte_is_rejected_and_target_untouched(data):
    old, _, blob = _SETUP
    pos = data.draw(st.integers(0, len(blob) - 1))
    bad = bytearray(blob)
    bad[pos] ^= data.draw(st.integers(1, 255))
    target = clone(old)
    snap = snapshot(target)
    with pytest.raises(DeltaError):
        apply_delta(target, bytes(bad))
    assert unchanged(target, snap)


_SETUP = _setup()


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda w: w["layer.weight"].view(torch.int16).view(-1)[3].add_(1),
            "base hash mismatch.*layer.weight",
        ),
        (lambda w: w.pop("layer.bias"), "lacks tensors \\['layer.bias'\\]"),
        (
            lambda w: w.update(extra=torch.zeros(2, dtype=torch.bfloat16)),
            "unexpected \\['extra'\\]",
        ),
        (
            lambda w: w.update({"layer.bias": torch.zeros(9, dtype=torch.bfloat16)}),
            "shape mismatch.*layer.bias",
        ),
        (
            lambda w: w.update({"layer.bias": torch.zeros(8, dtype=torch.float16)}),
            "dtype mismatch.*layer.bias",
        ),
        (lambda w: w.update({"layer.bias": torch.zeros(8)}), "dtype mismatch.*layer.bias"),
    ],
    ids=["wrong-base", "missing", "extra", "shape", "dtype-f16", "dtype-f32"],
)
def test_wrong_target_is_rejected_and_untouched(mutate, match):
    old, _, blob = _SETUP
    target = clone(old)
    mutate(target)
    snap = snapshot(target)
    with pytest.raises(DeltaError, match=match):
        apply_delta(target, blob)
    assert unchanged(target, snap)


def test_wrong_version_is_rejected():
    old, _, blob = _SETUP
    target = clone(old)
    with pytest.raises(DeltaError, match="version mismatch.*5 -> 6.*version 4"):
        apply_delta(target, blob, expect_from_version=4)
    assert same(target, old)


def test_unknown_format_version_is_rejected():
    _, _, blob = _SETUP
    body = bytearray(blob[: -delta.TRAILER_LEN])
    body[4:6] = (delta.FORMAT_VERSION + 1).to_bytes(2, "little")
    resealed = bytes(body) + blake3.blake3(bytes(body)).digest()
    with pytest.raises(DeltaError, match="format version"):
        read_header(resealed)


@pytest.mark.parametrize("junk", [b"", b"SWPD", b"nope" * 20])
def test_not_a_delta(junk):
    with pytest.raises(DeltaError):
        read_header(junk)


def test_wrong_result_hash_rolls_back():
    old, _, blob = _SETUP
    liar = _rebuild(blob, lambda h: h.update(result_hash=bytes(32)))
    target = clone(old)
    snap = snapshot(target)
    with pytest.raises(DeltaError, match="result hash mismatch"):
        apply_delta(target, liar)
    assert unchanged(target, snap)


def test_failure_during_writes_rolls_back(monkeypatch):
    old, _, blob = _SETUP
    real_put, calls = delta.put_values, []

    def flaky_put(flat, idx, values):
        calls.append(1)
        if len(calls) == 2:
            real_put(flat, idx, values)  # fail after writing: the worst case
            raise MemoryError("simulated")
        real_put(flat, idx, values)

    monkeypatch.setattr(delta_journal, "put_values", flaky_put)
    target = clone(old)
    snap = snapshot(target)
    with pytest.raises(MemoryError):
        apply_delta(target, blob, threads=1)
    assert unchanged(target, snap)


def _first_changed(h: dict) -> dict:
    return next(r for r in h["tensors"] if r.get("count") and r["alias_of"] is None)


def _alias(h: dict) -> dict:
    return next(r for r in h["tensors"] if r["alias_of"] is not None)


def _flip_first_section(payload: bytes) -> bytes:
    return bytes([payload[0] ^ 0xFF]) + payload[1:]


def _break_first_zstd_frame(blob: bytes) -> bytes:
    """The blob with the magic of its first compressed section broken, resealed."""
    header, payload = delta.parse_container(blob)
    offset = 0
    for rec in header["tensors"]:
        for stored, raw in rec.get("sections", []):
            if stored != raw:
                data = bytearray(payload)
                data[offset] ^= 0xFF
                return delta.build_container(header, [bytes(data)])
            offset += stored
    raise AssertionError("no compressed section")


def _seal(head: bytes, payload: bytes = b"", head_len: int | None = None) -> bytes:
    """A container around arbitrary header bytes, with a valid checksum."""
    prefix = delta.PREFIX.pack(
        delta.MAGIC, delta.FORMAT_VERSION, len(head) if head_len is None else head_len
    )
    body = prefix + head + payload
    return body + blake3.blake3(body).digest()


def _zmsg(obj) -> bytes:
    return zstandard.ZstdCompressor().compress(msgpack.packb(obj))


@pytest.mark.parametrize(
    "container",
    [
        pytest.param(lambda: _seal(b"x" * 10, head_len=1000), id="header-past-end"),
        pytest.param(lambda: _seal(b"not zstd at all"), id="header-not-zstd"),
        pytest.param(lambda: _seal(_zmsg([1, 2])), id="header-not-map"),
        pytest.param(
            lambda: _seal(_zmsg({"kind": "delta", "hash": "blake3"})), id="header-no-fields"
        ),
        pytest.param(lambda: _break_first_zstd_frame(_SETUP[2]), id="section-not-zstd"),
    ],
)
def test_malformed_container_is_rejected(container):
    target = clone(_SETUP[0])
    with pytest.raises(DeltaError):
        apply_delta(target, container())
    assert same(target, _SETUP[0])


@pytest.mark.parametrize(
    "edit, payload",
    [
        (lambda h: _first_changed(h).update(count=_first_changed(h)["count"] + 1), None),
        (lambda h: h["tensors"].reverse(), None),
        (lambda h: h.update(kind="x"), None),
        (lambda h: h.update(hash="sha1"), None),
        (lambda h: h.update(from_version=None), None),
        (lambda h: h.update(tensors=[1, 2]), None),
        (lambda h: _first_changed(h).update(index="rle"), None),
        (lambda h: _first_changed(h).update(values="delta2"), None),
        (lambda h: _first_changed(h).update(shape=[-1]), None),
        (lambda h: _first_changed(h).update(sections=[[1, 2, 3]]), None),
        (lambda h: _alias(h).update(alias_of="nope"), None),
        (lambda h: _alias(h).update(alias_of="lm_head.weight"), None),
        (lambda h: _alias(h).update(shape=[1]), None),
        (lambda h: _alias(h).pop("alias_of"), None),
        (None, lambda p: p + b"extra"),
        (None, lambda p: p[:-1]),
        (None, _flip_first_section),
    ],
)
def test_inconsistent_container_is_rejected(edit, payload):
    old, _, blob = _SETUP
    liar = _rebuild(blob, edit or (lambda h: None), payload or (lambda p: p))
    target = clone(old)
    with pytest.raises(DeltaError):
        apply_delta(target, liar)
    assert same(target, old)


def test_anchor_claiming_diff_values_is_rejected():
    anchor = encode_anchor(model_weights(), version=0)
    liar = _rebuild(anchor, lambda h: _first_changed(h).update(values="zdiff"))
    with pytest.raises(DeltaError, match="need old weights"):
        decode_anchor(liar)


def test_encode_refuses_bad_input():
    old = model_weights()
    with pytest.raises(DeltaError, match="greater"):
        encode_delta(old, old, from_version=2, to_version=2)
    with pytest.raises(DeltaError, match="non-negative"):
        encode_delta(old, old, from_version=-1, to_version=2)
    with pytest.raises(DeltaError, match="lacks"):
        encode_delta(
            old, {k: v for k, v in old.items() if k != "layer.bias"}, from_version=0, to_version=1
        )
    reshaped = dict(old, **{"layer.weight": old["layer.weight"].reshape(4, 16)})
    with pytest.raises(DeltaError, match="shape mismatch"):
        encode_delta(old, reshaped, from_version=0, to_version=1)
    with pytest.raises(DeltaError, match="dtype"):
        encode_anchor({"x": torch.zeros(3)}, version=0)
    with pytest.raises(DeltaError, match="not a torch.Tensor"):
        encode_anchor({"x": np.zeros(3)}, version=0)
    with pytest.raises(DeltaError, match="names must be str"):
        encode_anchor({1: torch.zeros(3, dtype=torch.bfloat16)}, version=0)
    with pytest.raises(DeltaError, match="expanded"):
        weights_hash({"x": torch.zeros(1, dtype=torch.bfloat16).expand(4)})
    with pytest.raises(DeltaError, match="dense CPU"):
        encode_anchor({"x": torch.zeros(3, dtype=torch.bfloat16).to_sparse()}, version=0)
    with pytest.raises(DeltaError, match="not an anchor"):
        decode_anchor(_SETUP[2])
    assert issubclass(DeltaError, SwarmError)


# --------------------------------------------------------------------------- chains


def test_chain_from_anchor_equals_final_weights():
    rng = np.random.default_rng(9)
    versions = [model_weights()]
    for _ in range(4):
        versions.append(step(versions[-1], rng, 0.1, nudge=True))
    anchor = encode_anchor(versions[0], version=10)
    deltas = [
        encode_delta(a, b, from_version=10 + i, to_version=11 + i)
        for i, (a, b) in enumerate(zip(versions, versions[1:], strict=False))
    ]
    weights, info = apply_chain(anchor, deltas)
    assert same(weights, versions[-1]) and info.to_version == 14
    assert weights["lm_head.weight"] is weights["embed.weight"]
    with pytest.raises(DeltaError, match="version mismatch"):
        apply_chain(anchor, [deltas[0], deltas[2]])


def test_anchor_applied_in_place_overwrites_everything():
    old, new = model_weights(seed=1), model_weights(seed=2)
    target = clone(old)
    apply_delta(target, encode_anchor(new, version=3))
    assert same(target, new)


def test_failed_anchor_in_place_restores_untied_copies_that_differed():
    # An anchor checks no base, so an untied copy of a tied tensor may hold other bits
    # than its twin; a rollback must put each copy's own bits back.
    target = model_weights(seed=1, tied=False)
    target["lm_head.weight"] = model_weights(seed=3)["lm_head.weight"].clone()
    snap = snapshot(target)
    liar = _rebuild(
        encode_anchor(model_weights(seed=2), version=3), lambda h: h.update(result_hash=bytes(32))
    )
    with pytest.raises(DeltaError, match="result hash mismatch"):
        apply_delta(target, liar)
    assert unchanged(target, snap)


def test_header_describes_the_delta():
    old, new, blob = _SETUP
    info = read_header(blob)
    assert info.format_version == delta.FORMAT_VERSION and info.nbytes == len(blob)
    assert [t.name for t in info.tensors] == sorted(old)
    assert {t.name: t.shape for t in info.tensors} == {k: tuple(v.shape) for k, v in old.items()}
    assert {t.dtype for t in info.tensors} == {"bfloat16"}
    assert info.numel == sum(v.numel() for k, v in old.items() if k != "lm_head.weight")
    header, _ = delta.parse_container(blob)
    assert {"kind", "hash", "from_version", "to_version", "base_hash", "result_hash"} <= set(header)


# --------------------------------------------------------------------------- publishing


def test_bf16_state_dict_casts_copies_and_keeps_ties():
    model = torch.nn.Sequential(torch.nn.Embedding(11, 6), torch.nn.Linear(6, 11, bias=False))
    model[1].weight = model[0].weight
    snap = bf16_state_dict(model)
    assert set(snap) == {"0.weight", "1.weight"}
    assert snap["0.weight"] is snap["1.weight"]
    assert snap["0.weight"].dtype == torch.bfloat16 and snap["0.weight"].is_contiguous()
    expected = model[0].weight.detach().to(torch.bfloat16)
    assert np.array_equal(bits(snap["0.weight"]), bits(expected))
    with torch.no_grad():
        model[0].weight.add_(1.0)
    assert np.array_equal(bits(snap["0.weight"]), bits(expected))  # a copy, not a view
    blob = encode_anchor(snap, version=0)
    assert read_header(blob).tensors[1].alias_of == "0.weight"
    with pytest.raises(DeltaError, match="floating"):
        bf16_state_dict({"steps": torch.zeros(2, dtype=torch.int64)})


def test_weights_hash_sees_names_shapes_and_every_bit():
    w = {"a": from_bits(np.array([0x7FC0, 0x8000], dtype=np.uint16), (2,))}
    h = weights_hash(w)
    assert h == weights_hash(clone(w)) and len(h) == 32
    assert h != weights_hash({"b": w["a"]})
    assert h != weights_hash({"a": w["a"].reshape(1, 2)})
    assert h != weights_hash({"a": from_bits(np.array([0x7FC1, 0x8000], dtype=np.uint16), (2,))})
    assert h != weights_hash({"a": from_bits(np.array([0x7FC0, 0x0000], dtype=np.uint16), (2,))})


# --------------------------------------------------------------------------- apply without an up-front base hash
# `apply_delta` hashes the weights once (after writing); a wrong base must still never
# leave a mix behind: either the result hash matches (the weights are then exactly the new
# ones) or everything is rolled back and the error says which base tensors differ.


@FAST
@given(weight_sets(), st.data())
def test_any_wrong_base_gives_the_new_weights_or_is_rolled_back(pair, data):
    old, new = pair
    blob = encode_delta(old, new, from_version=0, to_version=1)
    target = clone(old)
    names = [k for k in target if target[k].numel()]
    if not names:
        return
    name = data.draw(st.sampled_from(names))
    flat = bits(target[name]).copy()
    pos = data.draw(st.integers(0, flat.size - 1))
    flat[pos] ^= np.uint16(data.draw(st.integers(1, 0xFFFF)))
    target[name].copy_(from_bits(flat, tuple(target[name].shape)))
    snap = snapshot(target)
    try:
        apply_delta(target, blob)
    except DeltaError as e:
        assert "base hash mismatch" in str(e) and repr(name) in str(e)
        assert unchanged(target, snap)
    else:  # every differing bit was overwritten by the change: the result is exact
        assert same(target, new)


def test_failure_midway_through_a_chunked_write_rolls_back(monkeypatch):
    monkeypatch.setattr(delta_journal, "SCAN_CHUNK", 100)
    rng = np.random.default_rng(11)
    old = {"w": from_bits(random_bits(rng, 5000), (5000,))}
    new = step(old, rng, 0.2, nudge=True)
    blob = encode_delta(old, new, from_version=0, to_version=1)
    real_put, calls = delta.put_values, []

    def flaky_put(flat, idx, values):
        calls.append(1)
        real_put(flat, idx, values)
        if len(calls) == 7:  # seventh slice of one tensor, after writing it
            raise MemoryError("simulated")

    monkeypatch.setattr(delta_journal, "put_values", flaky_put)
    target = clone(old)
    snap = snapshot(target)
    with pytest.raises(MemoryError):
        apply_delta(target, blob, threads=1)
    assert unchanged(target, snap)
    monkeypatch.setattr(delta_journal, "put_values", real_put)
    apply_delta(target, blob)
    assert same(target, new)


def test_delta_to_untied_copies_that_differ_is_rejected_and_each_copy_restored():
    old = model_weights(seed=1, tied=True)
    new = step(old, np.random.default_rng(12), 0.3, nudge=True)
    blob = encode_delta(old, new, from_version=0, to_version=1)
    target = {k: v.clone() for k, v in old.items()}  # untied copies...
    target["lm_head.weight"] = step(
        {"x": target["lm_head.weight"]}, np.random.default_rng(13), 0.5, False
    )["x"]
    snap = snapshot(target)  # ...of which one no longer matches the base
    with pytest.raises(DeltaError, match="base hash mismatch.*lm_head.weight"):
        apply_delta(target, blob)
    assert unchanged(target, snap)


def test_nan_inf_and_signed_zero_patterns_survive_a_delta_exactly():
    specials = np.resize(SPECIAL, 4096)
    old = {"w": from_bits(np.roll(specials, 3), (64, 64))}
    new = {"w": from_bits(specials, (64, 64))}  # every element moves between special patterns
    target = clone(old)
    apply_delta(target, encode_delta(old, new, from_version=0, to_version=1))
    assert np.array_equal(bits(target["w"]), specials)


# --------------------------------------------------------------------------- a follower's guards


def _finite_weights(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    emb = (0.02 * torch.randn(64, 16, generator=gen)).to(torch.bfloat16)
    return {
        "emb": emb,
        "head": emb,
        "w": (0.02 * torch.randn(300, 300, generator=gen)).to(torch.bfloat16),
    }


@pytest.mark.parametrize("pattern", [0x7FC0, 0x7F80, 0xFF80, 0xFFFF])
@pytest.mark.parametrize("kind", ["delta", "anchor"])
def test_finite_refuses_nan_and_inf_values_and_rolls_back(pattern, kind):
    old = _finite_weights(0)
    new = clone(old)
    # one element deep in a large tensor, and one of the tied pair
    new["w"].view(torch.int16).view(-1)[77_777] = np.int16(np.uint16(pattern).view(np.int16))
    new["emb"].view(torch.int16).view(-1)[5] = np.int16(np.uint16(pattern).view(np.int16))
    if kind == "delta":
        blob = encode_delta(old, new, from_version=0, to_version=1)
    else:
        blob = encode_anchor(new, version=1)
    target = clone(old)
    snap = snapshot(target)
    with pytest.raises(delta.NonFiniteWeights, match="NaN or infinite"):
        apply_delta(target, blob, finite=True)
    assert unchanged(target, snap)
    apply_delta(target, blob)  # without the guard every pattern is carried as is
    assert same(target, new)


def test_finite_accepts_every_finite_pattern():
    finite = SPECIAL[(SPECIAL & 0x7F80) != 0x7F80]  # -0.0, +0.0, subnormal, largest finite
    old = {"w": from_bits(np.resize(finite, 64), (8, 8))}
    new = {"w": from_bits(np.roll(np.resize(finite, 64), 1), (8, 8))}
    target = clone(old)
    apply_delta(target, encode_delta(old, new, from_version=0, to_version=1), finite=True)
    assert same(target, new)


def test_an_undo_puts_back_what_an_applied_delta_changed():
    old = _finite_weights(1)
    new = step(old, np.random.default_rng(2), 0.05, nudge=True)
    target = clone(old)
    snap = snapshot(target)
    info, undo = delta.apply_delta_undoable(
        target, encode_delta(old, new, from_version=3, to_version=4)
    )
    assert same(target, new) and info.to_version == 4
    undo()
    assert unchanged(target, snap)
    anchor_target = clone(old)
    _, undo = delta.apply_delta_undoable(anchor_target, encode_anchor(new, version=9))
    assert same(anchor_target, new)
    undo()
    assert unchanged(anchor_target, snap)


def test_the_header_is_read_from_the_first_bytes_before_the_payload():
    old = _finite_weights(3)
    blob = encode_anchor(old, version=5)
    end = delta.header_extent(blob[: delta.PREFIX.size])
    assert end < len(blob) // 4  # the header is a small part of an anchor
    info = delta.peek_header(blob[:end])
    assert (info.kind, info.to_version) == ("anchor", 5)
    assert [t.name for t in info.tensors] == sorted(old)
    delta.check_layout(info, {name: t.shape for name, t in old.items()})
    with pytest.raises(DeltaError, match="header ends at"):
        delta.peek_header(blob[: end - 1])
    with pytest.raises(DeltaError, match="oversized"):
        delta.peek_header(blob[:end], max_header=16)
    with pytest.raises(DeltaError, match="magic"):
        delta.header_extent(b"JUNK" + blob[4:10])


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda w: w.pop("w"), r"unknown \['w'\]"),
        (lambda w: w.update(extra=torch.zeros(3).bfloat16()), r"lacks tensors \['extra'\]"),
        (lambda w: w.update(w=torch.zeros(300, 299).bfloat16()), "shape mismatch for 'w'"),
    ],
)
def test_check_layout_names_what_differs_from_the_weights(change, match):
    weights = _finite_weights(4)
    info = delta.peek_header(encode_anchor(weights, version=1))
    other = dict(weights)
    change(other)
    with pytest.raises(delta.LayoutMismatch, match=match):
        delta.check_layout(info, {name: t.shape for name, t in other.items()})
    with pytest.raises(delta.LayoutMismatch):  # apply refuses the same, before writing
        apply_delta(clone(other), encode_anchor(weights, version=1))

"""Strict msgpack decoding into `msgspec.Struct`s, with a stable rejection reason for every failure.

`decode_strict` is the fast path: msgspec decodes and validates the bytes against the
struct's types and bounds in one pass. Only when that fails, or when the caller finds the
body not canonical, does `diagnose` look at the bytes again to name the reason the same way
for every node, in this order: `undecodable` (not msgpack, or beyond the decoder limits
below), `malformed` (not a map), then for a body `unknown_schema` (its "v") before
`malformed` (wrong fields), and for an envelope the fields before the schema, then a
caller's own ordered checks, then `malformed` for an integer where a float is declared,
and last the fallback (`malformed` after a failed decode, `non_canonical` otherwise).

`canonical_types` gives a struct the exact Python types its fields declare (an int
timestamp becomes a float, numpy rewards plain floats), as the encoder must write them.

Deliberately not here: the message types themselves (`swarm.wire.messages`).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable
from typing import TypeGuard

import msgspec

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason

S = typing.TypeVar("S", bound=msgspec.Struct)

# The limits every node's decoder applies to any value in a message (a value beyond them is
# `undecodable`, whatever its field): map entries, UTF-8 bytes of a string, bytes of a binary.
MAX_MAP_LEN = 64
MAX_STR_BYTES = 4 * 32_768
MAX_BIN_BYTES = 256 * 1024

_DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


@functools.cache
def _decoder(cls: type) -> msgspec.msgpack.Decoder:
    return msgspec.msgpack.Decoder(cls)


def decode_strict(
    data: bytes,
    cls: type[S],
    schema: int,
    max_array: int,
    claims: Callable[[dict], None] | None = None,
    *,
    fields_first: bool = False,
) -> S:
    """`data` decoded as `cls` with its "v" equal to `schema`; else `RejectedMessage`.

    `max_array` is the decoder's limit on array lengths; `claims(raw)` runs the caller's
    checks on the raw map that come before type errors (it raises `RejectedMessage`);
    `fields_first` checks the set of fields before the schema (envelopes), not after (bodies).
    """
    try:
        value = _decoder(cls).decode(data)
    except msgspec.ValidationError as e:
        raise diagnose(
            data,
            cls,
            schema,
            max_array,
            claims,
            fields_first=fields_first,
            fallback=Reason.MALFORMED,
            detail=str(e),
        ) from None
    except _DECODE_ERRORS as e:
        raise _undecodable(e) from None
    if value.v != schema:
        raise RejectedMessage(Reason.UNKNOWN_SCHEMA, f"{cls.__name__} schema {value.v!r}")
    return value


def diagnose(
    data: bytes,
    cls: type,
    schema: int,
    max_array: int,
    claims: Callable[[dict], None] | None = None,
    then: Callable[[], None] | None = None,
    *,
    fields_first: bool = False,
    fallback: Reason = Reason.NON_CANONICAL,
    detail: str = "",
) -> RejectedMessage:
    """The rejection for bytes that do not decode to `cls`, or do not re-encode to themselves.

    `then()` runs the caller's checks on the decoded value, if there is one (a body that
    decoded but is not canonical), after `claims` and before the types are compared.
    """
    name = cls.__name__
    try:
        raw = msgspec.msgpack.decode(data)
    except _DECODE_ERRORS as e:
        return _undecodable(e)
    beyond = _beyond_limits(raw, max_array)
    if beyond:
        return RejectedMessage(Reason.UNDECODABLE, beyond)
    if not isinstance(raw, dict):
        return RejectedMessage(Reason.MALFORMED, f"{name} is not a map")
    names = {wire for _, wire, _ in _fields(cls)}
    wrong_fields = set(raw) != names
    if fields_first and wrong_fields:
        return _fields_problem(name, names, raw)
    if raw.get("v") != schema:
        return RejectedMessage(Reason.UNKNOWN_SCHEMA, f"{name} schema {raw.get('v')!r}")
    if wrong_fields:
        return _fields_problem(name, names, raw)
    for check in (lambda: claims(raw)) if claims else None, then:
        try:
            if check is not None:
                check()
        except RejectedMessage as e:
            return e
    where = _int_for_float(cls, raw)
    if where:
        return RejectedMessage(Reason.MALFORMED, f"{name}.{where} must be a float")
    if fallback == Reason.NON_CANONICAL:
        detail = detail or f"{name} body is not in canonical form"
    return RejectedMessage(fallback, detail[:300])


def _undecodable(e: BaseException) -> RejectedMessage:
    return RejectedMessage(Reason.UNDECODABLE, f"{e.__class__.__name__}: {e}"[:200])


def _fields_problem(name: str, names: set[str], raw: dict) -> RejectedMessage:
    missing = sorted(names - set(raw))
    extra = sorted(map(str, set(raw) - names))
    return RejectedMessage(
        Reason.MALFORMED, f"{name} fields: missing {missing}, unexpected {extra}"
    )


def _beyond_limits(value: object, max_array: int) -> str | None:
    """What in a decoded value exceeds the decoder limits, if anything (walked without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            if len(item) > max_array:
                return f"array of {len(item)} items"
            stack.extend(item)
        elif isinstance(item, dict):
            if len(item) > MAX_MAP_LEN:
                return f"map of {len(item)} entries"
            if not all(isinstance(k, str | bytes) for k in item):
                return "map keys must be strings"
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, str):
            if len(item) > MAX_STR_BYTES // 4 and len(item.encode()) > MAX_STR_BYTES:
                return f"string of {len(item.encode())} bytes"
        elif isinstance(item, bytes):
            if len(item) > MAX_BIN_BYTES:
                return f"binary of {len(item)} bytes"
        elif isinstance(item, msgspec.msgpack.Ext):
            return "extension types are not allowed"
    return None


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, str, object], ...]:
    """(attribute, wire name, declared type without bounds) of each field of a struct."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, f.encode_name, hints[f.name]) for f in msgspec.structs.fields(cls))


def _is_struct(t: object) -> TypeGuard[type[msgspec.Struct]]:
    return isinstance(t, type) and issubclass(t, msgspec.Struct)


def _int_for_float(cls: type, raw: dict) -> str | None:
    """The first field declared a float that holds an integer (nested structs included)."""
    for _, wire, t in _fields(cls):
        value = raw.get(wire)
        if t is float and isinstance(value, int) and not isinstance(value, bool):
            return wire
        if _is_struct(t) and isinstance(value, dict):
            inner = _int_for_float(t, value)
            if inner:
                return f"{wire}.{inner}"
    return None


def canonical_types(value: S) -> S:
    """`value` with each scalar field (and each tuple of floats or booleans) converted to
    its declared type; nested structs likewise. Strings and other fields are left as they are."""
    changes = {}
    for name, _, t in _fields(type(value)):
        convert = _conversion(t)
        if convert is not None:
            changes[name] = convert(getattr(value, name))
    return msgspec.structs.replace(value, **changes) if changes else value


@functools.cache
def _conversion(t: object) -> Callable | None:
    if t in (float, int, bool, bytes):
        return t
    if _is_struct(t):
        return canonical_types
    args = typing.get_args(t)
    if (
        typing.get_origin(t) is tuple
        and len(args) == 2
        and args[1] is Ellipsis
        and args[0] in (float, bool)
    ):
        item = args[0]
        return lambda values: tuple(item(v) for v in values)
    return None

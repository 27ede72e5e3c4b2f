"""The proto JSON mapping of the API's messages, as the Connect protocol
sends them, and the protobuf binary decoding of error details.

Each generated message (tenure/messages.py) carries a table of its fields
(_FIELDS, rows of F); to_json and from_json read it. The JSON is proto3's
canonical mapping (https://protobuf.dev/programming-guides/json/): field
names in lowerCamelCase (either spelling is read), 64-bit integers as
strings, bytes as base64, enums by name, Timestamp as RFC 3339 in UTC,
Duration as seconds with an "s". Fields at their zero value are left out.
A field the table does not know (a newer server's) is skipped when read.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import math
import struct
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Type, TypeVar, Union

T = TypeVar("T")


class F(NamedTuple):
    """One field of a message: its proto name, JSON name, number, kind
    (str, bytes, bool, i32, u32, i64, u64, f64, enum, msg, dur, ts), its
    enum or message type, and whether it is repeated or optional."""

    name: str
    json: str
    number: int
    kind: str
    type: Optional[type]
    repeated: bool
    optional: bool


class CodecError(ValueError):
    """A message that cannot be encoded (a wrong type in a field), or an
    answer that does not decode as its message."""


# Encoding -----------------------------------------------------------------


def to_json(msg: Any) -> Dict[str, Any]:
    """msg as the JSON object the API reads."""
    out: Dict[str, Any] = {}
    for f in type(msg)._FIELDS:
        v = getattr(msg, f.name)
        if f.repeated:
            if v is None or len(v) == 0:
                continue
            if isinstance(v, (str, bytes)):
                raise CodecError(f"{type(msg).__name__}.{f.name} is a list; got {type(v).__name__}")
            out[f.json] = [_enc(f, x, msg) for x in v]
        elif v is None:
            continue
        elif not f.optional and _is_zero(f, v):
            continue
        else:
            out[f.json] = _enc(f, v, msg)
    return out


def _is_zero(f: F, v: Any) -> bool:
    if f.kind in ("msg", "dur", "ts"):
        return False  # None is unset; anything else is set
    if f.kind == "f64":
        return v == 0 and not (isinstance(v, float) and math.copysign(1, v) < 0)
    return not v


def _enc(f: F, v: Any, owner: Any) -> Any:
    k = f.kind
    try:
        if k == "str":
            if not isinstance(v, str):
                raise TypeError(f"want str, got {type(v).__name__}")
            return v
        if k == "bytes":
            if isinstance(v, str):
                v = v.encode()
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(f"want bytes, got {type(v).__name__}")
            return base64.b64encode(v).decode("ascii")
        if k == "bool":
            return bool(v)
        if k in ("i32", "u32"):
            return _int(v)
        if k in ("i64", "u64"):
            return str(_int(v))
        if k == "f64":
            x = float(v)
            if math.isnan(x):
                return "NaN"
            if math.isinf(x):
                return "Infinity" if x > 0 else "-Infinity"
            return x
        if k == "enum":
            return enum_name(f.type, v)
        if k == "msg":
            if isinstance(v, dict):
                v = f.type(**v)  # type: ignore[misc]
            if not isinstance(v, f.type):  # type: ignore[arg-type]
                raise TypeError(f"want {f.type.__name__}, got {type(v).__name__}")  # type: ignore[union-attr]
            return to_json(v)
        if k == "dur":
            return format_duration(v)
        if k == "ts":
            return format_timestamp(v)
    except (TypeError, ValueError) as e:
        raise CodecError(f"{type(owner).__name__}.{f.name}: {e}") from None
    raise CodecError(f"{type(owner).__name__}.{f.name}: unknown kind {k}")


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, enum.IntEnum)):
        if isinstance(v, float) and v.is_integer():
            return int(v)
        raise TypeError(f"want int, got {type(v).__name__}")
    return int(v)


def enum_name(cls: Any, v: Any) -> Any:
    """The JSON of enum value v: its full name, or its number if unknown."""
    if isinstance(v, str):
        v = cls[v.upper()[len(cls._proto_prefix):] if v.upper().startswith(cls._proto_prefix) else v.upper()]
    v = int(v)
    try:
        return cls._proto_prefix + cls(v).name
    except ValueError:
        return v


def as_timedelta(v: Union[timedelta, float, int]) -> timedelta:
    """v as a timedelta: a timedelta, or seconds."""
    if isinstance(v, timedelta):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"want a timedelta or seconds, got {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"duration {v} is not finite")
    return timedelta(seconds=v)


def format_duration(v: Union[timedelta, float, int]) -> str:
    """A duration as proto JSON: "1.5s", "-0.000001s"."""
    td = as_timedelta(v)
    us = (td.days * 86400 + td.seconds) * 1_000_000 + td.microseconds
    sign = "-" if us < 0 else ""
    s, frac = divmod(abs(us), 1_000_000)
    if frac == 0:
        return f"{sign}{s}s"
    return f"{sign}{s}.{frac:06d}".rstrip("0") + "s"


def format_timestamp(v: datetime) -> str:
    """A time as proto JSON (RFC 3339, UTC). A naive datetime is refused:
    its zone is unknown."""
    if not isinstance(v, datetime):
        raise TypeError(f"want a datetime, got {type(v).__name__}")
    if v.tzinfo is None or v.utcoffset() is None:
        raise ValueError(f"datetime {v} has no time zone; give an aware one, e.g. datetime.now(timezone.utc)")
    u = v.astimezone(timezone.utc)
    return u.strftime("%Y-%m-%dT%H:%M:%S") + (f".{u.microsecond:06d}" if u.microsecond else "") + "Z"


# Decoding -----------------------------------------------------------------

_by_json: Dict[type, Dict[str, F]] = {}


def _fields_by_name(cls: type) -> Dict[str, F]:
    d = _by_json.get(cls)
    if d is None:
        d = {}
        for f in cls._FIELDS:  # type: ignore[attr-defined]
            d[f.json] = f
            d[f.name] = f
        _by_json[cls] = d
    return d


def from_json(cls: Type[T], obj: Any) -> T:
    """The message of class cls that the JSON object obj holds."""
    if not isinstance(obj, dict):
        raise CodecError(f"{cls.__name__}: want a JSON object, got {type(obj).__name__}")
    fields = _fields_by_name(cls)
    kw: Dict[str, Any] = {}
    for key, v in obj.items():
        f = fields.get(key)
        if f is None or v is None:
            continue
        try:
            if f.repeated:
                kw[f.name] = [_dec(f, x) for x in v]
            else:
                kw[f.name] = _dec(f, v)
        except (TypeError, ValueError, KeyError, binascii.Error) as e:
            raise CodecError(f"{cls.__name__}.{f.name}: cannot decode {v!r}: {e}") from None
    return cls(**kw)


def _dec(f: F, v: Any) -> Any:
    k = f.kind
    if k == "str":
        return v if isinstance(v, str) else str(v)
    if k == "bytes":
        return decode_base64(v)
    if k in ("i32", "u32", "i64", "u64"):
        return int(v)
    if k == "bool":
        return bool(v)
    if k == "f64":
        return float(v)  # also "NaN", "Infinity", "-Infinity"
    if k == "enum":
        return decode_enum(f.type, v)
    if k == "msg":
        return from_json(f.type, v)  # type: ignore[arg-type]
    if k == "dur":
        return parse_duration(v)
    if k == "ts":
        return parse_timestamp(v)
    raise CodecError(f"unknown kind {k}")


def decode_base64(s: str) -> bytes:
    """Standard or URL-safe base64, padded or not."""
    if "-" in s or "_" in s:
        s = s.replace("-", "+").replace("_", "/")
    pad = -len(s) % 4
    return base64.b64decode(s + "=" * pad if pad else s)


_enum_names: Dict[type, Dict[str, Any]] = {}


def decode_enum(cls: Any, v: Any) -> Any:
    """The member of enum cls that v (a full name or a number) is. A name or
    number this client does not know (a newer server's) is its number, or
    0 for an unknown name."""
    if isinstance(v, int):
        try:
            return cls(v)
        except ValueError:
            return v
    names = _enum_names.get(cls)
    if names is None:
        names = {cls._proto_prefix + m.name: m for m in cls}
        _enum_names[cls] = names
    return names.get(v, cls(0))


def parse_duration(s: str) -> timedelta:
    """A proto JSON duration ("1.5s") as a timedelta (to the microsecond)."""
    if not s.endswith("s"):
        raise ValueError(f"duration {s!r} does not end in s")
    body = s[:-1]
    neg = body.startswith("-")
    if neg:
        body = body[1:]
    whole, _, frac = body.partition(".")
    us = int(whole or "0") * 1_000_000 + (int((frac + "000000")[:6]) if frac else 0)
    return timedelta(microseconds=-us if neg else us)


def parse_timestamp(s: str) -> datetime:
    """An RFC 3339 time ("2026-12-02T02:26:05.316878276Z") as an aware
    datetime in UTC, to the microsecond."""
    if len(s) < 20 or s[4] != "-" or s[10] not in "Tt":
        raise ValueError(f"time {s!r} is not RFC 3339")
    dt = datetime(int(s[0:4]), int(s[5:7]), int(s[8:10]), int(s[11:13]), int(s[14:16]), int(s[17:19]), tzinfo=timezone.utc)
    rest = s[19:]
    if rest.startswith("."):
        i = 1
        while i < len(rest) and rest[i].isdigit():
            i += 1
        digits, rest = rest[1:i], rest[i:]
        dt = dt.replace(microsecond=int((digits + "000000")[:6]))
    if rest in ("Z", "z"):
        return dt
    if len(rest) == 6 and rest[0] in "+-" and rest[3] == ":":
        off = timedelta(hours=int(rest[1:3]), minutes=int(rest[4:6]))
        return dt - off if rest[0] == "+" else dt + off
    raise ValueError(f"time {s!r} has no valid offset")


# Protobuf binary decoding (error details) ---------------------------------


def from_binary(cls: Type[T], data: bytes) -> T:
    """The message of class cls encoded in protobuf binary data, as a
    Connect error detail carries it. Unknown fields are skipped."""
    by_number = {f.number: f for f in cls._FIELDS}  # type: ignore[attr-defined]
    kw: Dict[str, Any] = {}
    pos, n = 0, len(data)
    while pos < n:
        key, pos = _varint(data, pos)
        num, wt = key >> 3, key & 7
        f = by_number.get(num)
        if wt == 0:
            raw, pos = _varint(data, pos)
            if f is not None:
                _put(kw, f, _from_varint(f, raw))
        elif wt == 1:
            if pos + 8 > n:
                raise CodecError(f"{cls.__name__}: truncated")
            chunk, pos = data[pos:pos + 8], pos + 8
            if f is not None and f.kind == "f64":
                _put(kw, f, struct.unpack("<d", chunk)[0])
        elif wt == 2:
            ln, pos = _varint(data, pos)
            if pos + ln > n:
                raise CodecError(f"{cls.__name__}: truncated")
            chunk, pos = data[pos:pos + ln], pos + ln
            if f is not None:
                _put_len(kw, f, chunk)
        elif wt == 5:
            pos += 4
        else:
            raise CodecError(f"{cls.__name__}: wire type {wt} is not supported")
    return cls(**kw)


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(data):
            raise CodecError("truncated varint")
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, pos
        shift += 7
        if shift > 63:
            raise CodecError("varint too long")


def _from_varint(f: F, raw: int) -> Any:
    if f.kind in ("i32", "i64") and raw >= 1 << 63:
        return raw - (1 << 64)
    if f.kind == "bool":
        return raw != 0
    if f.kind == "enum":
        return decode_enum(f.type, raw - (1 << 64) if raw >= 1 << 63 else raw)
    return raw


def _put(kw: Dict[str, Any], f: F, v: Any) -> None:
    if f.repeated:
        kw.setdefault(f.name, []).append(v)
    else:
        kw[f.name] = v


def _put_len(kw: Dict[str, Any], f: F, chunk: bytes) -> None:
    k = f.kind
    if k == "str":
        _put(kw, f, chunk.decode("utf-8"))
    elif k == "bytes":
        _put(kw, f, bytes(chunk))
    elif k == "msg":
        _put(kw, f, from_binary(f.type, chunk))  # type: ignore[arg-type]
    elif k in ("dur", "ts"):
        seconds, nanos = _seconds_nanos(chunk)
        if k == "dur":
            _put(kw, f, timedelta(seconds=seconds, microseconds=nanos // 1000))
        else:
            _put(kw, f, datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds, microseconds=nanos // 1000))
    elif f.repeated:  # packed scalars
        pos = 0
        while pos < len(chunk):
            if f.kind == "f64":
                _put(kw, f, struct.unpack("<d", chunk[pos:pos + 8])[0])
                pos += 8
            else:
                raw, pos = _varint(chunk, pos)
                _put(kw, f, _from_varint(f, raw))


def _seconds_nanos(chunk: bytes) -> Tuple[int, int]:
    seconds = nanos = 0
    pos = 0
    while pos < len(chunk):
        key, pos = _varint(chunk, pos)
        raw, pos = _varint(chunk, pos)
        if raw >= 1 << 63:
            raw -= 1 << 64
        if key == 0x08:
            seconds = raw
        elif key == 0x10:
            nanos = raw
    return seconds, nanos


# Arguments (JSON payloads) ------------------------------------------------


def encode_args(v: Any) -> bytes:
    """A task's arguments as its JSON payload: a dataclass as its fields,
    anything else as json.dumps makes it."""
    import json

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = dataclasses.asdict(v)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_args(payload: bytes, cls: Optional[Callable[..., Any]] = None) -> Any:
    """A JSON payload as Python objects; with cls, a dict of it as cls(**it)."""
    import json

    obj = json.loads(payload) if payload else None
    if cls is None:
        return obj
    if isinstance(obj, dict):
        return cls(**obj)
    raise ValueError(f"want a JSON object for {getattr(cls, '__name__', cls)}, got {type(obj).__name__}")


__all__: List[str] = []

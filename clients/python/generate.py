#!/usr/bin/env python3
"""Generates the Python client's messages and calls from proto/tenure/v1.

    python3 clients/python/generate.py           # writes tenure/messages.py and tenure/_calls.py
    python3 clients/python/generate.py --check   # exits 1 if they differ from what it would write

It reads the .proto files itself (standard library only: no protoc, no
package index), for the subset of proto3 the API uses: enums, messages
with scalar, enum, message, repeated and optional fields, reserved
numbers and names, oneofs (of fields without a label), google.protobuf.Duration
and Timestamp, and services of unary and server-streaming calls. Anything else in a file is an error naming its line, so a
construct the generator does not know never yields wrong code in silence.

What it writes:

- tenure/messages.py: an IntEnum per enum (its values without their
  prefix: TaskState.WAITING), a dataclass per message (the proto's field
  names, Python types, the proto's comments as docstrings), each with the
  table the JSON codec reads (tenure/_codec.py), and RPCS, every call of
  every service. A oneof's fields are fields of the message (None unless
  set), and a property named after the oneof returns the one that is set.
- tenure/_calls.py: the methods of Client and AsyncClient, one per call
  (snake_case: get_task_history), each taking the request as a message or
  as keyword arguments, one per field of the request. A unary call's
  method returns its response message; a server-streaming call's returns
  an iterator of them (Client: a generator, closable; AsyncClient: an
  async iterator), over the Connect streaming protocol (tenure/_base.py).
"""
from __future__ import annotations

import argparse
import keyword
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PROTO_DIR = os.path.join(REPO, "proto", "tenure", "v1")
PACKAGE = "tenure.v1"
OUT_MESSAGES = os.path.join(HERE, "tenure", "messages.py")
OUT_CALLS = os.path.join(HERE, "tenure", "_calls.py")

SCALARS = {
    "string": ("str", '""', "str"),
    "bytes": ("bytes", 'b""', "bytes"),
    "bool": ("bool", "False", "bool"),
    "int32": ("int", "0", "i32"),
    "uint32": ("int", "0", "u32"),
    "int64": ("int", "0", "i64"),
    "uint64": ("int", "0", "u64"),
    "double": ("float", "0.0", "f64"),
}
WELL_KNOWN = {
    "google.protobuf.Duration": ("timedelta", "dur"),
    "google.protobuf.Timestamp": ("datetime", "ts"),
}


class ProtoError(Exception):
    pass


@dataclass
class Field:
    name: str
    type: str
    number: int
    repeated: bool
    optional: bool
    doc: List[str]
    oneof: str = ""

    @property
    def attr(self) -> str:
        """The field's Python name: its proto name, with _ after a Python
        keyword (from_), as PEP 8 has it; its JSON name stays the proto's."""
        return self.name + "_" if keyword.iskeyword(self.name) else self.name


@dataclass
class Oneof:
    name: str
    doc: List[str]
    fields: List[str] = field(default_factory=list)


@dataclass
class Message:
    name: str
    doc: List[str]
    fields: List[Field] = field(default_factory=list)
    oneofs: List[Oneof] = field(default_factory=list)


@dataclass
class EnumValue:
    name: str
    number: int
    doc: List[str]


@dataclass
class Enum:
    name: str
    doc: List[str]
    values: List[EnumValue] = field(default_factory=list)


@dataclass
class Rpc:
    service: str
    name: str
    request: str
    response: str
    idempotent: bool
    doc: List[str]
    server_streaming: bool = False


@dataclass
class Service:
    name: str
    doc: List[str]
    rpcs: List[Rpc] = field(default_factory=list)


@dataclass
class Schema:
    enums: List[Enum] = field(default_factory=list)
    messages: List[Message] = field(default_factory=list)
    services: List[Service] = field(default_factory=list)


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
RE_FIELD = re.compile(rf"^(repeated |optional )?([A-Za-z_][A-Za-z0-9_.]*) ({IDENT}) = (\d+);$")
RE_ENUM_VALUE = re.compile(rf"^({IDENT}) = (\d+);$")
RE_RPC = re.compile(rf"^rpc ({IDENT})\(({IDENT})\) returns \((stream )?({IDENT})\)( \{{|;)$")
RE_RESERVED = re.compile(r'^reserved ((\d+(, )?)+|("[A-Za-z_0-9]+"(, )?)+);$')


def parse(paths: List[str]) -> Schema:
    """Parses the proto files at paths into one schema."""
    s = Schema()
    for path in paths:
        parse_file(path, s)
    return s


def parse_file(path: str, s: Schema) -> None:
    rel = os.path.relpath(path, REPO)
    doc: List[str] = []
    block = None  # the Message, Enum or Service being read
    in_rpc: Optional[Rpc] = None
    in_oneof: Optional[Oneof] = None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for no, raw in enumerate(lines, 1):
        where = f"{rel}:{no}"
        line = raw.strip()
        if line.startswith("//"):
            doc.append(line[2:][1:] if line[2:].startswith(" ") else line[2:])
            continue
        if "//" in line:
            raise ProtoError(f"{where}: a comment after code; put it on the line above")
        if not line:
            if block is None:
                doc = []
            continue
        if in_rpc is not None:
            if line == "option idempotency_level = NO_SIDE_EFFECTS;":
                in_rpc.idempotent = True
            elif line == "}":
                in_rpc = None
            else:
                raise ProtoError(f"{where}: unknown rpc option {line!r}")
            doc = []
            continue
        if block is None:
            if line.startswith(("syntax = ", "import ", "option ")):
                pass
            elif line.startswith("package "):
                if line != f"package {PACKAGE};":
                    raise ProtoError(f"{where}: package {line!r}, want {PACKAGE}")
            elif m := re.match(rf"^message ({IDENT}) \{{(\}})?$", line):
                msg = Message(m.group(1), doc)
                s.messages.append(msg)
                block = None if m.group(2) else msg
            elif m := re.match(rf"^enum ({IDENT}) \{{$", line):
                block = Enum(m.group(1), doc)
                s.enums.append(block)
            elif m := re.match(rf"^service ({IDENT}) \{{$", line):
                block = Service(m.group(1), doc)
                s.services.append(block)
            else:
                raise ProtoError(f"{where}: not understood at the top level: {line!r}")
            doc = []
            continue
        if line == "}":
            if in_oneof is not None:
                if not in_oneof.fields:
                    raise ProtoError(f"{where}: oneof {in_oneof.name} has no field")
                in_oneof = None
            else:
                block = None
            doc = []
            continue
        if isinstance(block, Message):
            if RE_RESERVED.match(line) and in_oneof is None:
                pass
            elif (m := re.match(rf"^oneof ({IDENT}) \{{$", line)) and in_oneof is None:
                name = m.group(1)
                if keyword.iskeyword(name) or name in {f.name for f in block.fields}:
                    raise ProtoError(f"{where}: oneof {name!r} is a Python keyword or the name of a field")
                in_oneof = Oneof(name, doc)
                block.oneofs.append(in_oneof)
            elif m := RE_FIELD.match(line):
                label, typ, name, number = m.groups()
                if keyword.iskeyword(name) and name + "_" in {f.name for f in block.fields}:
                    raise ProtoError(f"{where}: field {name!r} is a Python keyword, and {name}_ is taken")
                if in_oneof is not None and label:
                    raise ProtoError(f"{where}: a field of oneof {in_oneof.name} with a label ({label.strip()})")
                if name in {o.name for o in block.oneofs}:
                    raise ProtoError(f"{where}: field {name!r} has the name of a oneof")
                block.fields.append(Field(name, typ, int(number), label == "repeated ", label == "optional ", doc,
                                          in_oneof.name if in_oneof else ""))
                if in_oneof is not None:
                    in_oneof.fields.append(block.fields[-1].attr)
            else:
                raise ProtoError(f"{where}: not a field this generator knows (maps, nested types and nested oneofs are not supported): {line!r}")
        elif isinstance(block, Enum):
            m = RE_ENUM_VALUE.match(line)
            if not m:
                raise ProtoError(f"{where}: not an enum value: {line!r}")
            block.values.append(EnumValue(m.group(1), int(m.group(2)), doc))
        elif isinstance(block, Service):
            m = RE_RPC.match(line)
            if not m:
                raise ProtoError(f"{where}: not a unary or server-streaming rpc (client and bidirectional streaming are not supported): {line!r}")
            rpc = Rpc(block.name, m.group(1), m.group(2), m.group(4), False, doc, m.group(3) is not None)
            block.rpcs.append(rpc)
            if m.group(5) == " {":
                in_rpc = rpc
        doc = []
    if block is not None or in_rpc is not None or in_oneof is not None:
        raise ProtoError(f"{rel}: ends inside a block")


def snake(name: str) -> str:
    """GetTaskHistory -> get_task_history, WhoAmI -> who_am_i."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def json_name(name: str) -> str:
    """The proto JSON name of a field, as protoc makes it: last_5_minutes -> last5Minutes."""
    out, up = [], False
    for c in name:
        if c == "_":
            up = True
        elif up:
            out.append(c.upper())
            up = False
        else:
            out.append(c)
    return "".join(out)


def common_prefix(e: Enum) -> str:
    prefix = snake(e.name).upper() + "_"
    for v in e.values:
        if not v.name.startswith(prefix):
            raise ProtoError(f"enum {e.name}: value {v.name} lacks the prefix {prefix}")
    return prefix


def docstring(lines: List[str], indent: str) -> str:
    text = "\n".join(lines).strip()
    if not text:
        return ""
    text = text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    body = "\n".join((indent + l) if l else "" for l in text.split("\n"))
    if "\n" not in text:
        return f'{indent}"""{text}"""\n'
    return f'{indent}"""{body.lstrip()}\n{indent}"""\n'


class Types:
    def __init__(self, s: Schema):
        self.enums = {e.name: e for e in s.enums}
        self.messages = {m.name: m for m in s.messages}
        for name in self.enums:
            if name in self.messages:
                raise ProtoError(f"{name} is both an enum and a message")

    def resolve(self, f: Field, owner: str) -> Tuple[str, str, str, Optional[str]]:
        """Returns (python type, default, codec kind, referenced type) of f."""
        t = f.type
        if t.startswith(PACKAGE + "."):
            t = t[len(PACKAGE) + 1:]
        if t in SCALARS:
            py, default, kind = SCALARS[t]
            return py, default, kind, None
        if t in WELL_KNOWN:
            py, kind = WELL_KNOWN[t]
            return py, "None", kind, None
        if t in self.enums:
            e = self.enums[t]
            zero = [v for v in e.values if v.number == 0]
            if not zero:
                raise ProtoError(f"enum {t} has no zero value")
            return t, f"{t}.{zero[0].name[len(common_prefix(e)):]}", "enum", t
        if t in self.messages:
            return t, "None", "msg", t
        raise ProtoError(f"{owner}.{f.name}: unknown type {f.type}")


HEADER = "# Code generated by clients/python/generate.py from proto/tenure/v1. DO NOT EDIT.\n"


def gen_messages(s: Schema) -> str:
    ty = Types(s)
    out: List[str] = [HEADER, '"""The messages of the tenure.v1 API, generated from proto/tenure/v1.\n\n'
                      "Each message is a dataclass with the proto's field names; an unset field has\n"
                      "its zero value (\"\", 0, False, b\"\", an enum's UNSPECIFIED, an empty list),\n"
                      "or None for a message, a time (datetime, in UTC) or a duration (timedelta),\n"
                      "and for an optional scalar. Enums are IntEnums named without their prefix:\n"
                      "TaskState.WAITING is TASK_STATE_WAITING.\n"
                      '"""\n'
                      "from __future__ import annotations\n\n"
                      "import enum\n"
                      "import dataclasses\nfrom dataclasses import dataclass\n"
                      "from datetime import datetime, timedelta\n"
                      "from typing import ClassVar, Dict, List, NamedTuple, Optional, Tuple, Union\n\n"
                      "from ._codec import F\n\n"]
    names: List[str] = []
    for e in s.enums:
        prefix = common_prefix(e)
        names.append(e.name)
        out.append(f"\nclass {e.name}(enum.IntEnum):\n")
        out.append(docstring(e.doc, "    ") or f'    """{e.name}."""\n')
        for v in e.values:
            out.append(f"    {v.name[len(prefix):]} = {v.number}\n")
            d = docstring(v.doc, "    ")
            if d:
                out.append(d)
        out.append(f"\n\n{e.name}._proto_prefix = {prefix!r}  # type: ignore[attr-defined]\n\n")
    for m in s.messages:
        names.append(m.name)
        out.append(f"\n@dataclass\nclass {m.name}:\n")
        out.append(docstring(m.doc, "    ") or f'    """{m.name}."""\n')
        out.append("\n    _FIELDS: ClassVar[Tuple[F, ...]] = ()\n")
        for f in m.fields:
            py, default, _, ref = ty.resolve(f, m.name)
            if f.repeated:
                out.append(f"    {f.attr}: List[{py}] = dataclasses.field(default_factory=list)\n")
            elif f.optional or default == "None":
                out.append(f"    {f.attr}: Optional[{py}] = None\n")
            else:
                out.append(f"    {f.attr}: {py} = {default}\n")
            d = docstring(f.doc, "    ")
            if d:
                out.append(d)
        for o in m.oneofs:
            members = ", ".join(o.fields)
            types = sorted({ty.resolve(f, m.name)[0] for f in m.fields if f.oneof == o.name})
            rt = types[0] if len(types) == 1 else "Union[" + ", ".join(types) + "]"
            d = list(o.doc) + ([""] if o.doc else []) + textwrap.wrap(f"The field of oneof {o.name} that is set, or None: one of {members}.", 72)
            out.append(f"\n    @property\n    def {o.name}(self) -> Optional[{rt}]:\n")
            out.append(docstring(d, "        "))
            out.append(f"        return next((v for v in ({', '.join('self.' + n for n in o.fields)}) if v is not None), None)\n")
        out.append("\n")
    out.append("\n# The tables the JSON codec (tenure/_codec.py) reads: per field its name, JSON\n"
               "# name, number, kind, type (enum or message), repeated and optional.\n")
    for m in s.messages:
        rows = []
        for f in m.fields:
            _, _, kind, ref = ty.resolve(f, m.name)
            rows.append(f"    F({f.attr!r}, {json_name(f.name)!r}, {f.number}, {kind!r}, {ref or 'None'}, {f.repeated}, {f.optional}),\n")
        out.append(f"{m.name}._FIELDS = (\n{''.join(rows)})\n" if rows else f"{m.name}._FIELDS = ()\n")
    out.append("\n\nclass Rpc(NamedTuple):\n"
               '    """One call of the API: its service, its name, its message types,\n'
               '    whether it has no side effects (the proto\'s idempotency_level), and\n'
               '    whether the server answers with a stream of responses."""\n\n'
               "    service: str\n    name: str\n    request: type\n    response: type\n    no_side_effects: bool\n"
               "    server_streaming: bool = False\n\n"
               "    @property\n    def path(self) -> str:\n"
               '        """The call\'s HTTP path: /tenure.v1.TaskService/Submit."""\n'
               '        return "/" + self.service + "/" + self.name\n\n\n'
               "RPCS: Dict[str, Rpc] = {\n")
    for svc in s.services:
        for r in svc.rpcs:
            for t in (r.request, r.response):
                if t not in ty.messages:
                    raise ProtoError(f"rpc {svc.name}.{r.name}: unknown message {t}")
            out.append(f"    {r.name!r}: Rpc({PACKAGE + '.' + svc.name!r}, {r.name!r}, {r.request}, {r.response}, {r.idempotent}"
                       f"{', True' if r.server_streaming else ''}),\n")
    out.append("}\n\"\"\"Every call of the API, by name.\"\"\"\n")
    names.sort()
    out.append("\n__all__ = [\n" + "".join(f"    {n!r},\n" for n in names + ["RPCS", "Rpc"]) + "]\n")
    return "".join(out)


def gen_calls(s: Schema) -> str:
    ty = Types(s)
    msg_names = sorted({r.request for svc in s.services for r in svc.rpcs} | {r.response for svc in s.services for r in svc.rpcs})
    out: List[str] = [HEADER, '"""The calls of Client and AsyncClient, one method per call of the API."""\n'
                      "from __future__ import annotations\n\n"
                      "from datetime import datetime, timedelta\n"
                      "from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Optional, Sequence, Union\n\n"
                      "from . import messages as m\n"
                      "from .messages import RPCS\n\n"
                      "Duration = Union[timedelta, float, int, None]\n"
                      '"""A duration: a timedelta, or seconds."""\n\n'
                      "if TYPE_CHECKING:\n"
                      "    from ._base import _Base\n"
                      "else:\n"
                      "    _Base = object\n\n"]
    seen: Dict[str, str] = {}
    for asynchronous in (False, True):
        cls = "AsyncCalls" if asynchronous else "Calls"
        out.append(f"\nclass {cls}(_Base):\n")
        out.append(f'    """The API\'s calls{" as coroutines" if asynchronous else ""}: each takes its request message, or its\n'
                   '    fields as keyword arguments, and returns its response message (a\n'
                   f'    server-streaming call: {"an async iterator" if asynchronous else "a generator"} of them, read as they come).\n'
                   '    Errors are tenure.TenureError subclasses (tenure.LeaseLost, ...)."""\n')
        for svc in s.services:
            for r in svc.rpcs:
                name = snake(r.name)
                if not asynchronous:
                    if name in seen:
                        raise ProtoError(f"rpc {svc.name}.{r.name} and {seen[name]} are both {name}")
                    seen[name] = f"{svc.name}.{r.name}"
                req = ty.messages[r.request]
                params, kwargs = [], []
                for f in req.fields:
                    py, default, kind, ref = ty.resolve(f, req.name)
                    if ref:
                        py = "m." + py
                        if kind == "enum":
                            default = "m." + default
                    if kind == "dur":
                        py, default = "Duration", "None"
                    elif f.repeated:
                        py, default = f"Optional[Sequence[{py}]]", "None"
                    elif f.optional or default == "None":
                        py, default = f"Optional[{py}]", "None"
                    params.append(f"{f.attr}: {py} = {default}")
                    kwargs.append(f"{f.attr}={f.attr}")
                names = {f.attr for f in req.fields}
                extra = ""
                if {"kind", "payload"} <= names:
                    params.append("args: Any = None")
                    extra = ", args=args"
                sig = ", ".join(["self", f"request: Optional[m.{r.request}] = None", "/"] + (["*"] + params if params else []))
                kw = ", ".join(kwargs)
                aw = "await " if asynchronous else ""
                d = list(r.doc)
                if r.server_streaming:
                    it = "an async iterator" if asynchronous else "a generator (close it to end the stream early)"
                    d += ["", f"Request: {r.request}; answer: a stream of {r.response}, as {it}.",
                          "The stream opens when it is first read; an error the server ends it",
                          "with is raised there, as a unary call's."]
                    ret = f"{'AsyncIterator' if asynchronous else 'Iterator'}[m.{r.response}]"
                    call = f"self._stream(RPCS[{r.name!r}], request{extra}{', ' + kw if kw else ''})"
                    out.append(f"\n    def {name}({sig}) -> {ret}:\n")
                    out.append(docstring(d, "        "))
                    out.append(f"        return {call}  # type: ignore[no-any-return]\n")
                    continue
                d += ["", f"Request: {r.request}; answer: {r.response}."]
                if extra:
                    d += ["args, if given, is the task's arguments: JSON-encoded as its",
                          "payload, and, for a type made with tenure.kind, its kind and defaults."]
                out.append(f"\n    {'async ' if asynchronous else ''}def {name}({sig}) -> m.{r.response}:\n")
                out.append(docstring(d, "        "))
                call = f"self._call(RPCS[{r.name!r}], request{extra}{', ' + kw if kw else ''})"
                out.append(f"        return {aw}{call}  # type: ignore[no-any-return]\n")
    return "".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the generated files are not up to date")
    a = ap.parse_args()
    paths = sorted(os.path.join(PROTO_DIR, n) for n in os.listdir(PROTO_DIR) if n.endswith(".proto"))
    # errors.proto first so that the order is stable and readable: then
    # task, queue, worker, schedule, admin, events as the API reads.
    order = ["errors.proto", "task.proto", "queue.proto", "worker.proto", "schedule.proto", "admin.proto", "events.proto"]
    paths.sort(key=lambda p: (order.index(os.path.basename(p)) if os.path.basename(p) in order else len(order), p))
    try:
        schema = parse(paths)
        files = {OUT_MESSAGES: gen_messages(schema), OUT_CALLS: gen_calls(schema)}
    except ProtoError as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    stale = []
    for path, text in files.items():
        try:
            with open(path, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = None
        if old == text:
            continue
        stale.append(os.path.relpath(path, REPO))
        if not a.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    if a.check and stale:
        print("generate.py: out of date (run python3 clients/python/generate.py and commit): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

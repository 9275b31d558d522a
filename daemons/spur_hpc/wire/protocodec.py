"""Protobuf wire format for slurm.proto without the protobuf runtime.

The CLI must answer in a few tens of milliseconds, and importing google.protobuf plus the generated modules
costs 30-60 ms on its own. So the CLI reads the message layout from slurm.proto (shipped in the package) and
encodes and decodes with this module. tests/unit/test_wire.py checks the layout against the
generated descriptors, so the two cannot drift apart.

Decoded messages behave like generated ones for reading: one attribute per field, proto3 defaults for
absent fields, enums as ints, repeated fields as lists, maps as dicts. Unknown fields are skipped, so a
newer controller that appended fields still talks to an older CLI.
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

PROTO_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "proto", "slurm.proto")

_VARINT_TYPES = frozenset({"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool"})
_FIXED64_TYPES = frozenset({"double", "fixed64", "sfixed64"})
_FIXED32_TYPES = frozenset({"float", "fixed32", "sfixed32"})
_BYTES_TYPES = frozenset({"string", "bytes"})
_UNSIGNED_VARINT_TYPES = frozenset({"uint32", "uint64"})  # read as they are (_varint_value changes the others)
SCALAR_TYPES = _VARINT_TYPES | _FIXED64_TYPES | _FIXED32_TYPES | _BYTES_TYPES
_STRUCT_FORMATS = {"double": "<d", "float": "<f", "fixed64": "<Q", "sfixed64": "<q", "fixed32": "<I", "sfixed32": "<i"}
_MASK64 = (1 << 64) - 1
_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1), "sint32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1), "sint64": (-(2**63), 2**63 - 1), "uint64": (0, 2**64 - 1),
}  # fmt: skip


class ProtoError(Exception):
    """A malformed message, or a schema this module cannot read."""


class Field:
    __slots__ = ("name", "number", "type", "repeated", "map_types", "kind")

    def __init__(self, name: str, number: int, type_name: str, repeated: bool, map_types: tuple[str, str] | None):
        self.name = name
        self.number = number
        self.type = type_name
        self.repeated = repeated
        self.map_types = map_types
        self.kind = ""  # "scalar", "enum" or "message", set once every type is known

    def __repr__(self) -> str:
        return f"Field({self.name}={self.number}, {self.type}, repeated={self.repeated}, map={self.map_types})"


class Schema:
    """Messages, enums and services of one .proto file."""

    def __init__(self) -> None:
        self.package = ""
        self.messages: dict[str, dict[str, Field]] = {}
        self.enums: dict[str, dict[str, int]] = {}
        self.enum_names: dict[str, dict[int, str]] = {}
        self.services: dict[str, dict[str, tuple[str, str]]] = {}
        self._by_number: dict[str, dict[int, Field]] = {}
        self.layouts: dict[str, Any] = {}  # message name -> its _Layout, made by decode() when first needed

    def field_by_number(self, message: str, number: int) -> Field | None:
        return self._by_number[message].get(number)

    def enum_name(self, enum: str, value: int) -> str:
        return self.enum_names[enum].get(value, str(value))

    def enum_value(self, enum: str, name: str) -> int:
        try:
            return self.enums[enum][name]
        except KeyError:
            raise ProtoError(f"{name!r} is not a {enum} (known: {', '.join(self.enums[enum])})") from None

    def finish(self) -> None:
        for message, fields in self.messages.items():
            for field in fields.values():
                kinds = [field.map_types[1]] if field.map_types else [field.type]
                if field.map_types and field.map_types[0] not in SCALAR_TYPES:
                    raise ProtoError(f"{message}.{field.name}: map keys must be scalars")
                for type_name in kinds:
                    if type_name in SCALAR_TYPES:
                        kind = "scalar"
                    elif type_name in self.enums:
                        kind = "enum"
                    elif type_name in self.messages:
                        kind = "message"
                    else:
                        raise ProtoError(f"{message}.{field.name}: unknown type {type_name!r}")
                    field.kind = kind
            self._by_number[message] = {f.number: f for f in fields.values()}


# ------------------------------------------------------------------ .proto parsing


def _tokens(text: str) -> list[str]:
    """Words and punctuation, comments dropped; string methods only (`re` costs ~5 ms to import).

    Quoted strings are not kept whole: they only appear in statements the parser skips (syntax, option)."""
    while "/*" in text:
        start = text.index("/*")
        close = text.find("*/", start + 2)
        text = text[:start] + (" " if close < 0 else " " + text[close + 2 :])
    kept = []
    for line in text.splitlines():
        cut = line.find("//")
        kept.append(line if cut < 0 else line[:cut])
    flat = " ".join(kept)
    for mark in "{}()<>[]=;,":
        flat = flat.replace(mark, f" {mark} ")
    return flat.split()


class _Parser:
    def __init__(self, tokens: list[str], source: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.source = source

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if not token or (expected is not None and token != expected):
            raise ProtoError(f"{self.source}: expected {expected or 'more input'} near token {self.pos}, got {token!r}")
        self.pos += 1
        return token

    def skip_statement(self) -> None:
        depth = 0
        while True:
            token = self.take()
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
                if depth == 0:
                    return
            elif token == ";" and depth == 0:
                return


def parse_proto(text: str, source: str = "<proto>") -> Schema:
    """Parse the subset of proto3 that slurm.proto uses: messages, enums, maps, repeated fields, services."""
    schema = Schema()
    parser = _Parser(_tokens(text), source)
    while parser.peek():
        keyword = parser.take()
        if keyword == "package":
            schema.package = parser.take()
            parser.take(";")
        elif keyword == "message":
            _parse_message(parser, schema, parser.take())
        elif keyword == "enum":
            _parse_enum(parser, schema, parser.take())
        elif keyword == "service":
            _parse_service(parser, schema, parser.take())
        elif keyword in ("syntax", "option", "import"):
            parser.pos -= 1
            parser.skip_statement()
        else:
            raise ProtoError(f"{source}: unexpected {keyword!r} at top level")
    schema.finish()
    return schema


def _parse_message(parser: _Parser, schema: Schema, name: str) -> None:
    fields: dict[str, Field] = {}
    parser.take("{")
    open_oneofs = 0
    while True:
        token = parser.take()
        if token == "}":
            if open_oneofs:
                open_oneofs -= 1
                continue
            break
        if token in ("option", "reserved", "extensions"):
            parser.pos -= 1
            parser.skip_statement()
            continue
        if token == "oneof":  # members of a oneof are ordinary fields on the wire
            parser.take()
            parser.take("{")
            open_oneofs += 1
            continue
        if token == ";":
            continue
        if token in ("message", "enum"):
            raise ProtoError(f"{parser.source}: nested {token} in {name} is not supported by the CLI codec")
        repeated = token == "repeated"
        if token in ("repeated", "optional"):
            token = parser.take()
        map_types = None
        if token == "map":
            parser.take("<")
            key = parser.take()
            parser.take(",")
            value = parser.take()
            parser.take(">")
            map_types = (key, value)
            repeated = True
            token = f"map<{key},{value}>"
        field_name = parser.take()
        parser.take("=")
        number = int(parser.take())
        if parser.peek() == "[":
            while parser.take() != "]":
                pass
        parser.take(";")
        fields[field_name] = Field(field_name, number, token, repeated, map_types)
    schema.messages[name] = fields


def _parse_enum(parser: _Parser, schema: Schema, name: str) -> None:
    values: dict[str, int] = {}
    parser.take("{")
    while parser.peek() != "}":
        token = parser.take()
        if token in ("option", "reserved"):
            parser.pos -= 1
            parser.skip_statement()
            continue
        parser.take("=")
        values[token] = int(parser.take())
        if parser.peek() == "[":
            while parser.take() != "]":
                pass
        parser.take(";")
    parser.take("}")
    schema.enums[name] = values
    schema.enum_names[name] = {number: label for label, number in reversed(values.items())}


def _parse_service(parser: _Parser, schema: Schema, name: str) -> None:
    methods: dict[str, tuple[str, str]] = {}
    parser.take("{")
    while parser.peek() != "}":
        token = parser.take()
        if token != "rpc":
            parser.pos -= 1
            parser.skip_statement()
            continue
        method = parser.take()
        parser.take("(")
        request = parser.take()
        parser.take(")")
        parser.take("returns")
        parser.take("(")
        reply = parser.take()
        parser.take(")")
        if parser.peek() == "{":
            parser.skip_statement()
        else:
            parser.take(";")
        methods[method] = (request, reply)
    parser.take("}")
    schema.services[name] = methods


_SCHEMA: Schema | None = None


def schema() -> Schema:
    """The schema of the installed slurm.proto (parsed once per process)."""
    global _SCHEMA
    if _SCHEMA is None:
        try:
            with open(PROTO_PATH, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as exc:
            raise ProtoError(f"cannot read {PROTO_PATH} ({exc.strerror}); reinstall spur-hpc") from None
        _SCHEMA = parse_proto(text, PROTO_PATH)
    return _SCHEMA


# ------------------------------------------------------------------ decoded messages


class Message:
    """A decoded message: attribute access like a generated class."""

    def __init__(self, type_name: str, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        self.__dict__["_type"] = type_name

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items() if k != "_type")
        return f"{self._type}({fields})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and self.__dict__ == other.__dict__


def _default(field: Field, sch: Schema) -> Any:
    if field.map_types:
        return {}
    if field.repeated:
        return []
    if field.kind == "message":
        return new_message(field.type, sch)
    if field.kind == "enum":
        return 0
    if field.type == "string":
        return ""
    if field.type == "bytes":
        return b""
    if field.type == "bool":
        return False
    if field.type in ("double", "float"):
        return 0.0
    return 0


def new_message(type_name: str, sch: Schema | None = None) -> Message:
    sch = sch or schema()
    values = _fresh_values(_layout(type_name, sch))
    for name, message_type in _layout(type_name, sch).messages:
        values[name] = new_message(message_type, sch)
    return Message(type_name, values)


def _fresh_values(layout: _Layout) -> dict[str, Any]:
    """A message's fields before decoding (its message fields left out: they are added when absent)."""
    values = dict(layout.scalars)
    for name in layout.lists:
        values[name] = []
    for name in layout.maps:
        values[name] = {}
    return values


class _Layout:
    """How decode() fills one message type, worked out once per type: the scalar defaults to copy, the fields
    that need a fresh list, dict or message, and each field number's (field, element type)."""

    __slots__ = ("scalars", "lists", "maps", "messages", "by_number")

    def __init__(self, type_name: str, sch: Schema) -> None:
        fields = sch.messages[type_name].values()
        plain = [f for f in fields if not (f.map_types or f.repeated or f.kind == "message")]
        self.scalars = {f.name: _default(f, sch) for f in plain}
        self.lists = [f.name for f in fields if f.repeated and not f.map_types]
        self.maps = [f.name for f in fields if f.map_types]
        self.messages = [(f.name, f.type) for f in fields if f.kind == "message" and not (f.repeated or f.map_types)]
        self.by_number = {f.number: (f, "enum" if f.kind == "enum" else f.type) for f in fields}


def _layout(type_name: str, sch: Schema) -> _Layout:
    layout = sch.layouts.get(type_name)
    if layout is None:
        layout = sch.layouts[type_name] = _Layout(type_name, sch)
    return layout


# ------------------------------------------------------------------ decoding


def _read_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ProtoError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint longer than 10 bytes")


def _varint_value(type_name: str, raw: int) -> Any:
    if type_name == "bool":
        return raw != 0
    if type_name in ("sint32", "sint64"):
        return (raw >> 1) ^ -(raw & 1)
    if type_name in ("int32", "int64", "enum"):
        raw &= _MASK64
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    return raw


def _scalar_from_bytes(field_type: str, raw: bytes | memoryview) -> Any:
    if field_type == "string":
        return bytes(raw).decode("utf-8", errors="replace")
    return bytes(raw)


def decode(type_name: str, data: bytes | memoryview, sch: Schema | None = None) -> Message:
    """Bytes of message type_name -> Message (unknown fields skipped)."""
    sch = sch or schema()
    data = bytes(data)
    return _decode(type_name, data, 0, len(data), sch)


def _decode(type_name: str, data: bytes, pos: int, end: int, sch: Schema) -> Message:
    """data[pos:end] as a type_name. The CLI decodes replies of hundreds of jobs with this: positions into one
    bytes object (no slice per submessage), one-byte varints read inline, each type's layout worked out once."""
    layout = _layout(type_name, sch)
    values = _fresh_values(layout)
    by_number = layout.by_number
    while pos < end:
        key = data[pos]
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            if pos < end and data[pos] < 0x80:
                raw, pos = data[pos], pos + 1
            else:
                raw, pos = _read_varint(data, pos)
            start = stop = pos
        elif wire == 2:
            if pos < end and data[pos] < 0x80:
                length, pos = data[pos], pos + 1
            else:
                length, pos = _read_varint(data, pos)
            start, pos = pos, pos + length
            stop = pos
        elif wire == 1 or wire == 5:
            start, pos = pos, pos + (8 if wire == 1 else 4)
            stop = pos
        else:
            raise ProtoError(f"{type_name}: unsupported wire type {wire} for field {number}")
        if pos > end:
            raise ProtoError(f"{type_name}: truncated field {number}")
        entry = by_number.get(number)
        if entry is None:
            continue
        field, element_type = entry
        if field.map_types:
            key_value = _decode_map_entry(field, memoryview(data)[start:stop], sch)
            values[field.name][key_value[0]] = key_value[1]
            continue
        if field.kind == "message":
            if wire != 2:
                raise ProtoError(f"{type_name}: field {number} is a message but has wire type {wire}")
            value = _decode(field.type, data, start, stop, sch)
        elif wire == 2 and field.type not in _BYTES_TYPES:
            # packed repeated numbers
            values[field.name].extend(_decode_packed(element_type, memoryview(data)[start:stop]))
            continue
        elif wire == 0:
            value = raw if element_type in _UNSIGNED_VARINT_TYPES else _varint_value(element_type, raw)
        elif wire == 2:
            value = data[start:stop].decode("utf-8", errors="replace") if field.type == "string" else data[start:stop]
        else:
            value = struct.unpack(_STRUCT_FORMATS[field.type], data[start:stop])[0]
        if field.repeated:
            values[field.name].append(value)
        else:
            values[field.name] = value
    for name, message_type in layout.messages:
        if name not in values:
            values[name] = new_message(message_type, sch)  # absent: read as its defaults, as generated ones
    return Message(type_name, values)


def _decode_packed(element_type: str, chunk: memoryview) -> list[Any]:
    items: list[Any] = []
    if element_type in _STRUCT_FORMATS:
        fmt = _STRUCT_FORMATS[element_type]
        size = struct.calcsize(fmt)
        return [struct.unpack(fmt, chunk[i : i + size])[0] for i in range(0, len(chunk), size)]
    pos = 0
    while pos < len(chunk):
        raw, pos = _read_varint(chunk, pos)
        items.append(_varint_value(element_type, raw))
    return items


def _decode_map_entry(field: Field, chunk: memoryview, sch: Schema) -> tuple[Any, Any]:
    key_type, value_type = field.map_types  # type: ignore[misc]
    key: Any = _default(Field("key", 1, key_type, False, None), sch) if key_type in SCALAR_TYPES else ""
    value_field = Field("value", 2, value_type, False, None)
    value_field.kind = field.kind
    value: Any = _default(value_field, sch)
    pos = 0
    while pos < len(chunk):
        tag, pos = _read_varint(chunk, pos)
        number, wire = tag >> 3, tag & 7
        target_type = key_type if number == 1 else value_type
        if wire == 0:
            raw, pos = _read_varint(chunk, pos)
            decoded = _varint_value("enum" if number == 2 and field.kind == "enum" else target_type, raw)
        elif wire == 2:
            length, pos = _read_varint(chunk, pos)
            part = chunk[pos : pos + length]
            pos += length
            if number == 2 and field.kind == "message":
                decoded = decode(value_type, part, sch)
            else:
                decoded = _scalar_from_bytes(target_type, part)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            decoded = struct.unpack(_STRUCT_FORMATS[target_type], chunk[pos : pos + size])[0]
            pos += size
        else:
            raise ProtoError(f"map {field.name}: unsupported wire type {wire}")
        if number == 1:
            key = decoded
        elif number == 2:
            value = decoded
    return key, value


# ------------------------------------------------------------------ encoding


def _varint(value: int) -> bytes:
    value &= _MASK64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _encode_scalar(type_name: str, value: Any) -> tuple[int, bytes]:
    """-> (wire type, payload without the key)."""
    if type_name in _BYTES_TYPES:
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return 2, _varint(len(raw)) + raw
    if type_name in _STRUCT_FORMATS:
        return (1 if type_name in _FIXED64_TYPES else 5), struct.pack(_STRUCT_FORMATS[type_name], value)
    if type_name in ("sint32", "sint64"):
        return 0, _varint((value << 1) ^ (value >> 63))
    return 0, _varint(int(value))


def _is_default(value: Any) -> bool:
    return value in (0, "", b"", False, None) and not isinstance(value, Message)


def encode(type_name: str, values: Mapping[str, Any] | Message, sch: Schema | None = None) -> bytes:
    """A dict (or Message) of field values -> bytes. Enum values may be ints or names; unknown keys raise."""
    sch = sch or schema()
    fields = sch.messages[type_name]
    items = values.__dict__.items() if isinstance(values, Message) else values.items()
    out = bytearray()
    for name, value in sorted(items, key=lambda kv: fields[kv[0]].number if kv[0] in fields else -1):
        if name == "_type":
            continue
        field = fields.get(name)
        if field is None:
            raise ProtoError(f"{type_name} has no field {name!r}")
        if field.map_types:
            for key, item in value.items():
                entry = _encode_field(sch, Field("key", 1, field.map_types[0], False, None), key)
                value_field = Field("value", 2, field.map_types[1], False, None)
                value_field.kind = field.kind
                entry += _encode_field(sch, value_field, item)
                out += _varint((field.number << 3) | 2) + _varint(len(entry)) + entry
        elif field.repeated:
            if not value:
                continue
            if field.kind == "scalar" and field.type in _BYTES_TYPES or field.kind == "message":
                for item in value:
                    out += _encode_field(sch, field, item, force=True)
            else:  # proto3 packs repeated numbers
                packed = b"".join(_encode_field(sch, field, item, force=True, bare=True) for item in value)
                out += _varint((field.number << 3) | 2) + _varint(len(packed)) + packed
        else:
            out += _encode_field(sch, field, value)
    return bytes(out)


def _encode_field(sch: Schema, field: Field, value: Any, force: bool = False, bare: bool = False) -> bytes:
    if field.kind == "message":
        body = encode(field.type, value, sch)
        return _varint((field.number << 3) | 2) + _varint(len(body)) + body
    if field.kind == "enum":
        value = sch.enum_value(field.type, value) if isinstance(value, str) else int(value)
        wire, payload = 0, _varint(value)
    else:
        bounds = _INT_RANGES.get(field.type)
        if bounds and not bounds[0] <= value <= bounds[1]:  # the varint would wrap into another number
            raise ProtoError(f"{field.name} {value} is out of range: it must be from {bounds[0]} to {bounds[1]}")
        wire, payload = _encode_scalar(field.type, value)
    if bare:
        return payload
    if not force and _is_default(value):
        return b""
    return _varint((field.number << 3) | wire) + payload


# ------------------------------------------------------------------ JSON


def to_jsonable(message: Any, type_name: str, sch: Schema | None = None) -> dict[str, Any]:
    """A decoded or generated message -> plain dict with every field (enums by name), for `-o json`."""
    sch = sch or schema()
    out: dict[str, Any] = {}
    for field in sch.messages[type_name].values():
        value = getattr(message, field.name)
        out[field.name] = _jsonable_value(sch, field, value)
    return out


def _jsonable_value(sch: Schema, field: Field, value: Any) -> Any:
    if field.map_types:
        if field.kind == "message":
            return {k: to_jsonable(v, field.map_types[1], sch) for k, v in sorted(value.items())}
        if field.kind == "enum":
            return {k: sch.enum_name(field.map_types[1], v) for k, v in sorted(value.items())}
        return dict(sorted(value.items()))
    if field.repeated:
        single = Field(field.name, field.number, field.type, False, None)
        single.kind = field.kind
        return [_jsonable_value(sch, single, item) for item in value]
    if field.kind == "message":
        return to_jsonable(value, field.type, sch)
    if field.kind == "enum":
        return sch.enum_name(field.type, value)
    if isinstance(value, bytes):
        return value.hex()
    return value

# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Generated from daemons/spur_hpc/wire/hpack.py by tools/gen_module_utils.py: do not edit; change the source and run the tool.
"""HPACK (RFC 7541) header compression for the standard-library HTTP/2 client (wire.grpcwire).

Encoding is the simplest legal form (every header a literal, never indexed, no Huffman): requests are
tiny. Decoding is complete, because gRPC servers answer with indexed headers and Huffman-coded strings.
"""

from __future__ import annotations


class HpackError(Exception):
    """A header block that breaks RFC 7541."""


# RFC 7541 Appendix A
STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
)

# RFC 7541 Appendix B is a canonical Huffman code: codes follow from each symbol's bit length alone
# (shorter codes first, ties by symbol). Symbols per code length; 256 is EOS.
_HUFFMAN_LENGTHS = """
5: 48-50 97 99 101 105 111 115-116
6: 32 37 45-47 51-57 61 65 95 98 100 102-104 108-110 112 114 117
7: 58 66-87 89 106-107 113 118-122
8: 38 42 44 59 88 90
10: 33-34 40-41 63
11: 39 43 124
12: 35 62
13: 0 36 64 91 93 126
14: 94 125
15: 60 96 123
19: 92 195 208
20: 128 130-131 162 184 194 224 226
21: 153 161 167 172 176-177 179 209 216-217 227 229-230
22: 129 132-134 136 146 154 156 160 163-164 169-170 173 178 181 185-187 189-190 196 198 228 232-233
23: 1 135 137-141 143 147 149-152 155 157-158 165-166 168 174-175 180 182-183 188 191 197 231 239
24: 9 142 144-145 148 159 171 206 215 225 236-237
25: 199 207 234-235
26: 192-193 200-202 205 210 213 218-219 238 240 242-243 255
27: 203-204 211-212 214 221-223 241 244-248 250-254
28: 2-8 11-12 14-21 23-31 127 220 249
30: 10 13 22 256
"""

_EOS = 256
_huffman_codes: dict[tuple[int, int], int] | None = None


def _huffman_table() -> dict[tuple[int, int], int]:
    """(bit length, code) -> symbol, built from the canonical lengths."""
    global _huffman_codes
    if _huffman_codes is None:
        by_length: list[tuple[int, int]] = []
        for line in _HUFFMAN_LENGTHS.strip().splitlines():
            length_text, symbols = line.split(":")
            for part in symbols.split():
                first, _dash, last = part.partition("-")
                for symbol in range(int(first), int(last or first) + 1):
                    by_length.append((int(length_text), symbol))
        by_length.sort()
        table: dict[tuple[int, int], int] = {}
        code = -1
        previous_length = by_length[0][0]
        for length, symbol in by_length:
            code = (code + 1) << (length - previous_length)
            previous_length = length
            table[(length, code)] = symbol
        if len(table) != 257:
            raise HpackError("the Huffman table must hold 257 symbols")
        _huffman_codes = table
    return _huffman_codes


def huffman_decode(data: bytes) -> bytes:
    table = _huffman_table()
    out = bytearray()
    code = 0
    length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            if length < 5:
                continue
            symbol = table.get((length, code))
            if symbol is not None:
                if symbol == _EOS:
                    raise HpackError("EOS symbol inside a Huffman string")
                out.append(symbol)
                code = 0
                length = 0
            elif length > 30:
                raise HpackError("invalid Huffman code")
    # padding: fewer than 8 bits, all ones (the most significant bits of EOS)
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def _encode_integer(value: int, prefix_bits: int, first_byte_flags: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first_byte_flags | value])
    out = bytearray([first_byte_flags | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_integer(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    if pos >= len(data):
        raise HpackError("truncated integer")
    limit = (1 << prefix_bits) - 1
    value = data[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise HpackError("truncated integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos
        if shift > 35:
            raise HpackError("integer too large")


def _decode_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise HpackError("truncated string")
    huffman = data[pos] & 0x80
    length, pos = _decode_integer(data, pos, 7)
    raw = data[pos : pos + length]
    if len(raw) != length:
        raise HpackError("truncated string")
    pos += length
    if huffman:
        raw = huffman_decode(raw)
    return raw.decode("utf-8", errors="replace"), pos


def encode_headers(headers: list[tuple[str, str]]) -> bytes:
    """Literal header fields without indexing (RFC 7541 6.2.2), raw strings."""
    out = bytearray()
    for name, value in headers:
        name_bytes, value_bytes = name.encode(), value.encode()
        out.append(0x00)
        out += _encode_integer(len(name_bytes), 7, 0) + name_bytes
        out += _encode_integer(len(value_bytes), 7, 0) + value_bytes
    return bytes(out)


class HeaderDecoder:
    """Decodes header blocks of one connection (the dynamic table lives as long as the connection)."""

    def __init__(self, max_table_size: int = 4096) -> None:
        self.max_table_size = max_table_size
        self.table_size = max_table_size
        self.dynamic: list[tuple[str, str]] = []  # newest first
        self.dynamic_bytes = 0

    def _lookup(self, index: int) -> tuple[str, str]:
        if index <= 0:
            raise HpackError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        position = index - len(STATIC_TABLE) - 1
        if position >= len(self.dynamic):
            raise HpackError(f"header index {index} is beyond the table")
        return self.dynamic[position]

    def _add(self, name: str, value: str) -> None:
        size = len(name.encode()) + len(value.encode()) + 32
        self.dynamic.insert(0, (name, value))
        self.dynamic_bytes += size
        self._evict()

    def _evict(self) -> None:
        while self.dynamic_bytes > self.table_size and self.dynamic:
            name, value = self.dynamic.pop()
            self.dynamic_bytes -= len(name.encode()) + len(value.encode()) + 32

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        pos = 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed field
                index, pos = _decode_integer(block, pos, 7)
                headers.append(self._lookup(index))
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update
                size, pos = _decode_integer(block, pos, 5)
                if size > self.max_table_size:
                    raise HpackError(f"table size {size} above the limit {self.max_table_size}")
                self.table_size = size
                self._evict()
                continue
            incremental = first & 0xC0 == 0x40
            prefix = 6 if incremental else 4
            index, pos = _decode_integer(block, pos, prefix)
            if index:
                name = self._lookup(index)[0]
            else:
                name, pos = _decode_string(block, pos)
            value, pos = _decode_string(block, pos)
            if incremental:
                self._add(name, value)
            headers.append((name, value))
        return headers

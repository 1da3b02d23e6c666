#!/usr/bin/env python3
"""Writes the seed corpora in corpus-seed/ (run from anywhere; the files are
committed, so this only needs running again when the input layout changes).

Every seed starts with the two configuration bytes the targets read first:
FuzzFrameDecoder: config (bit 0 role: 0 server / 1 client; bits 1-3 deflate
preset; bits 4 and 7 maxMessageSize; bits 5-6 chunk spread), chunk seed.
FuzzHTTPParser: config (bits 0-1 limits preset; bits 2-3 chunk spread), chunk seed.
FuzzEngine starts with one config byte (bits 0-1 JSON limits preset, bits 2-3
engine limits preset, bit 4 failing reads of "fail…" names, bits 5-6 where
partial-log path replays start, bit 7 clock stands still), then one client
message per line.
FuzzImageDecoder seeds are whole image files (no configuration bytes): a
label with an EAN-13 and a Data Matrix drawn here, written as PGM/PNG by this
script and converted by the vips command line (libvips-tools) to JPEG, WebP,
GIF and, where libheif can encode, HEIC; plus an EXIF-rotated JPEG, a PNG with
alpha, tiny and damaged files. Without the vips command the image seeds are
left as they are.
"""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def ws_config(role_client, preset=0, max_index=0, chunks=0):
    # max_index: 0 -> 1 MiB, 1 -> 1 KiB, 2 -> 64 KiB, 3 -> 16 bytes
    return bytes([(1 if role_client else 0) | (preset << 1) | ((max_index & 1) << 4)
                  | (chunks << 5) | ((max_index >> 1) << 7), 0x2A])


def frame(opcode, payload, fin=True, rsv1=False, mask=None):
    head = bytes([(0x80 if fin else 0) | (0x40 if rsv1 else 0) | opcode])
    bit = 0x80 if mask else 0
    n = len(payload)
    if n <= 125:
        head += bytes([bit | n])
    elif n <= 0xFFFF:
        head += bytes([bit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", n)
    if mask:
        head += mask
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + payload


def deflate(data, wbits=15, finish=False, compressor=None):
    c = compressor or zlib.compressobj(6, zlib.DEFLATED, -wbits)
    assert c is not None
    out = c.compress(data)
    if finish:
        # RFC 7692 §7.2.3.4: after a BFINAL block the sender adds one 0x00
        # octet (an empty stored block's header) so the tail still applies.
        return out + c.flush(zlib.Z_FINISH) + b"\x00"
    out += c.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]


KEY = bytes([0x37, 0xFA, 0x21, 0x3D])
CLOSE_BYE = struct.pack(">H", 1000) + b"bye"


def ws_seeds():
    s = {}
    # Server side: clients mask every frame.
    s["server-plain"] = ws_config(False) + frame(1, b"Hello", mask=KEY) + frame(9, b"hi", mask=KEY) \
        + frame(2, bytes(range(200)), mask=KEY) + frame(8, CLOSE_BYE, mask=KEY)
    s["server-fragmented"] = ws_config(False, chunks=1) + frame(1, b"Hel", fin=False, mask=KEY) \
        + frame(9, b"", mask=KEY) + frame(0, "lo wörld €".encode(), mask=KEY) + frame(10, b"pong", mask=KEY)
    s["server-utf8-split"] = ws_config(False, chunks=2) + frame(1, b"\xe2\x82", fin=False, mask=KEY) \
        + frame(0, b"\xac\xf0\x9f", fin=False, mask=KEY) + frame(0, b"\x98\x80", mask=KEY) \
        + frame(8, struct.pack(">H", 4000) + "reason ✓".encode(), mask=KEY)
    s["server-deflate"] = ws_config(False, preset=1) + frame(1, deflate(b"Hello"), rsv1=True, mask=KEY) \
        + frame(2, deflate(bytes(300)), rsv1=True, mask=KEY) + frame(1, b"plain", mask=KEY)
    s["server-deflate-nocontext"] = ws_config(False, preset=2, chunks=3) \
        + frame(1, deflate(b"Hello, Hello, Hello"), rsv1=True, mask=KEY) \
        + frame(1, deflate(b"Hello, Hello, Hello"), rsv1=True, mask=KEY)
    s["server-deflate-limit"] = ws_config(False, preset=1, max_index=1) \
        + frame(1, deflate(b"a" * 5000), rsv1=True, mask=KEY)
    s["server-extended-length"] = ws_config(False, max_index=2) + frame(2, bytes(70000)[:300], mask=KEY) \
        + bytes([0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0x01, 0x00]) + KEY + bytes(256)
    # Client side: servers never mask. RFC 6455 §5.7 and RFC 7692 §7.2.3 examples.
    s["client-rfc6455"] = ws_config(True) + bytes.fromhex("810548656c6c6f") + bytes.fromhex("010348656c800 26c6f".replace(" ", "")) \
        + bytes.fromhex("890548656c6c6f") + bytes.fromhex("8a0548656c6c6f") + frame(2, bytes(256)) \
        + bytes.fromhex("880203e8")
    s["client-rfc7692"] = ws_config(True, preset=1) + bytes.fromhex("c107f248cdc9c90700") \
        + bytes.fromhex("c105f200110000") + bytes.fromhex("4103f248cd" "8004c9c90700") \
        + bytes.fromhex("c10b" "000500faff48656c6c6f00")  # RFC 7692 §7.2.3.3: a stored block
    s["client-deflate-bfinal"] = ws_config(True, preset=1, chunks=1) + frame(1, deflate(b"Hello final", finish=True), rsv1=True) \
        + frame(1, deflate(b"Hello again"), rsv1=True)
    s["client-deflate-window9"] = ws_config(True, preset=3) + frame(1, deflate(b"abcabcabc" * 40, wbits=9), rsv1=True)
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    s["client-deflate-takeover"] = ws_config(True, preset=1, max_index=3) + frame(1, deflate(b"0123456789", compressor=c), rsv1=True) \
        + frame(1, deflate(b"0123456789", compressor=c), rsv1=True)
    stored = zlib.compressobj(0, zlib.DEFLATED, -9)
    s["client-stored-block"] = ws_config(True, preset=7) + frame(2, deflate(b"stored!", compressor=stored), rsv1=True)
    return s


def http_seeds():
    s = {}
    cfg = bytes([0x00, 0x2A])
    s["get"] = cfg + b"GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: fuzz\r\nAccept: */*\r\n\r\n"
    s["post-pipelined"] = bytes([0x04, 0x07]) + b"POST /v1/records/a%2Fb?x=1&y=%20 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n" \
        b"Content-Type: application/json\r\n\r\nhello" b"GET /next HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
    s["chunked"] = bytes([0x08, 0x01]) + b"POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" \
        b"5\r\nhello\r\n1a; ext=\"v\";x\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nTrailer: yes\r\n\r\n"
    s["websocket-upgrade"] = cfg + b"GET /v1/ws?room=1 HTTP/1.1\r\nHost: localhost:8080\r\nUpgrade: websocket\r\n" \
        b"Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n" \
        b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"
    s["http10-keepalive"] = cfg + b"\r\nGET http://example.com/a/b?c HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" \
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
    s["expect-continue"] = bytes([0x0C, 0x09]) + b"PUT /v1/records/k HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n" \
        b"Content-Length: 3, 3\r\n\r\nabc"
    s["small-limits"] = bytes([0x01, 0x2A]) + b"GET /0123456789012345678901234567890123456789 HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\n" \
        b"C: 3\r\n\r\nPOST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + b"x" * 100 + b"\r\n0\r\n\r\n"
    s["obs-text"] = bytes([0x03, 0x11]) + b"GET /caf%C3%A9 HTTP/1.1\r\nHost: h\r\nX-Name: caf\xc3\xa9 \xff\t\r\n\r\n"
    return s


def engine_config(json_preset=0, engine_preset=0, failing_reads=False, late=0, still_clock=False):
    # json_preset: 0 small, 1 tiny, 2 protocol defaults, 3 small but 64 deep.
    # engine_preset: 0 4 KiB / 16 entries, 1 256 B / 4, 2 64 B / 1, 3 defaults.
    return bytes([json_preset | (engine_preset << 2) | (0x10 if failing_reads else 0) | (late << 5)
                  | (0x80 if still_clock else 0)])


def messages(*items):
    """One JSON text per line; strings are sent as they are (malformed JSON)."""
    out = b""
    for item in items:
        text = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        out += text.encode() + b"\n"
    return out


def engine_seeds():
    s = {}
    # A record's life: created whole, paths set, incremented, merged, a path
    # deleted, deleted, created again (version 1). orders/42 has path
    # subscribers on stage, items, items[0], items[1].qty and meta.tags.
    s["record-life"] = engine_config() + messages(
        {"id": 1, "op": "set", "name": "orders/42", "data": {"stage": "new", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}},
        {"id": 2, "op": "set", "name": "orders/42", "path": "stage", "value": "packed", "version": 1},
        {"id": 3, "op": "increment", "name": "orders/42", "path": "items[1].qty", "by": 3},
        {"id": 4, "op": "merge", "name": "orders/42", "data": {"stage": "ready", "meta": {"tags": ["x"]}, "note": None}},
        {"id": 5, "op": "delete", "name": "orders/42", "path": "items[0]"},
        {"id": 6, "op": "set", "name": "orders/42", "path": "items[1]", "value": {"sku": "c", "qty": 1}},
        {"id": 7, "op": "merge", "name": "orders/42", "data": {"items": [{"sku": "b", "qty": 5}]}},
        {"id": 8, "op": "delete", "name": "orders/42"},
        {"id": 9, "op": "increment", "name": "orders/42", "path": "count"},
        {"id": 10, "op": "set", "name": "orders/42", "data": {"stage": "new"}, "version": 1},
    )
    # Path subscriptions made after writes (the replay catches up over the
    # log), record creation by a path write, unsubscribe and reconnects.
    s["subscriptions"] = engine_config(late=2) + messages(
        {"id": 1, "op": "set", "name": "orders/7", "data": {"stage": "new", "items": [1, 2, 3]}},
        {"id": 1, "op": "subscribe", "name": "orders/7", "path": "items[1]"},
        {"id": 2, "op": "subscribe", "name": "orders/7", "path": "stage", "since": 0},
        {"id": 3, "op": "subscribe", "prefix": "orders/"},
        {"id": 3, "op": "subscribe", "list": "orders"},
        {"op": "delete", "name": "orders/7", "path": "items[0]"},
        {"op": "set", "name": "orders/7", "data": {"stage": "new", "items": [2, 3]}},
        {"op": "set", "name": "orders/7", "path": "items", "value": [9]},
        {"id": 2, "op": "unsubscribe", "name": "orders/7", "path": "stage"},
        {"id": 2, "op": "unsubscribe", "name": "orders/7", "path": "stage"},
        {"id": 5, "op": "hello", "protocol": [1], "client": "fuzz"},
        {"op": "addEntry", "list": "orders", "entry": "orders/7"},
        {"id": 1, "op": "subscribe", "topic": "scanner"},
        {"op": "publish", "topic": "scanner", "data": {"code": "4006381333931"}},
        {"id": 4, "op": "get", "prefix": "orders/", "after": "orders/1", "limit": 10},
        {"id": "ab", "op": "get", "name": "orders/7", "path": "items[0]"},
        {"op": "merge", "name": "orders/7", "data": {"stage": "done"}},
    )
    # Lists: append, insert, remove every occurrence or one index, replace,
    # conflicts, delete; the list limit of preset 1 (4 entries).
    s["lists"] = engine_config(engine_preset=1) + messages(
        {"op": "addEntry", "list": "orders", "entry": "orders/1"},
        {"op": "addEntry", "list": "orders", "entry": "orders/2", "at": 0},
        {"op": "addEntry", "list": "orders", "entry": "orders/1", "version": 2},
        {"op": "addEntry", "list": "orders", "entry": "orders/3", "at": 9},
        {"op": "addEntry", "list": "orders", "entry": "orders/4"},
        {"op": "addEntry", "list": "orders", "entry": "orders/5"},
        {"op": "removeEntry", "list": "orders", "entry": "orders/1"},
        {"op": "removeEntry", "list": "orders", "entry": "orders/2", "at": 1},
        {"op": "removeEntry", "list": "orders", "entry": "orders/2", "at": 0},
        {"op": "setEntries", "list": "tags", "entries": ["a", "b", "a", "c"], "version": 0},
        {"op": "setEntries", "list": "tags", "entries": ["a", "b", "c", "d", "e"]},
        {"op": "delete", "list": "tags", "version": 7},
        {"op": "delete", "list": "tags"},
        {"op": "removeEntry", "list": "tags", "entry": "a"},
    )
    # Atomic groups: one that commits (each op sees the ones before it), and
    # refusals at a later index (conflict, not_found, bad index, a name whose
    # read fails), which apply nothing.
    s["atomic"] = engine_config(failing_reads=True) + messages(
        {"id": 1, "op": "write", "idem": "k1", "ops": [
            {"op": "set", "name": "items/a", "data": {"stock": 4}},
            {"op": "increment", "name": "items/a", "path": "stock", "by": -1},
            {"op": "addEntry", "list": "orders", "entry": "orders/9"},
            {"op": "set", "name": "orders/9", "path": "items", "value": ["items/a"]}]},
        {"id": 2, "op": "write", "ops": [
            {"op": "delete", "name": "items/a"},
            {"op": "set", "name": "items/a", "data": {"stock": 1}, "version": 0},
            {"op": "merge", "name": "items/a", "data": {"x": 1}, "version": 3}]},
        {"id": 3, "op": "write", "ops": [
            {"op": "removeEntry", "list": "orders", "entry": "orders/9"},
            {"op": "delete", "name": "nothing/here"}]},
        {"id": 4, "op": "write", "ops": [
            {"op": "setEntries", "list": "orders", "entries": []},
            {"op": "addEntry", "list": "orders", "entry": "x", "at": 1}]},
        {"id": 5, "op": "write", "ops": [
            {"op": "set", "name": "ok/1", "data": {}},
            {"op": "set", "name": "fail/1", "data": {}}]},
        {"id": 6, "op": "write", "ops": [{"op": "set", "name": "a", "data": {}}, {"op": "frobnicate"}]},
        {"id": 7, "op": "write", "ops": [{"op": "set", "name": "a", "data": {}}, {"op": "set", "name": "b//c", "data": {}}]},
        {"id": 8, "op": "write", "ops": []},
    )
    # Increments: exact integers, doubles, overflow into a Double, numbers and
    # non-numbers, paths through scalars and past array ends.
    s["increments"] = engine_config() + messages(
        {"op": "increment", "name": "stats/scans", "path": "count"},
        {"op": "increment", "name": "stats/scans", "path": "count", "by": 9223372036854775806},
        {"op": "increment", "name": "stats/scans", "path": "count", "by": 2},
        {"op": "increment", "name": "stats/scans", "path": "ratio", "by": 0.5},
        {"op": "increment", "name": "stats/scans", "path": "ratio", "by": 1.7976931348623157e308},
        {"op": "increment", "name": "stats/scans", "path": "ratio", "by": 1.7976931348623157e308},
        {"op": "set", "name": "stats/scans", "path": "label", "value": "x"},
        {"op": "increment", "name": "stats/scans", "path": "label"},
        {"op": "increment", "name": "stats/scans", "path": "label.n"},
        {"op": "set", "name": "stats/scans", "path": "hist", "value": [0]},
        {"op": "increment", "name": "stats/scans", "path": "hist[1]"},
        {"op": "increment", "name": "stats/scans", "path": "hist[3]"},
        {"op": "increment", "name": "stats/scans", "path": "nothing[0]"},
        {"op": "set", "name": "stats/scans", "path": "nul", "value": None},
        {"op": "increment", "name": "stats/scans", "path": "nul"},
    )
    # Record size limit (preset 2: 64 bytes): growth by path writes until
    # too_large; a whole set over the limit.
    s["record-limit"] = engine_config(engine_preset=2, still_clock=True) + messages(
        {"op": "set", "name": "r", "data": {"a": "0123456789"}},
        {"op": "set", "name": "r", "path": "b", "value": "0123456789"},
        {"op": "set", "name": "r", "path": "c", "value": "0123456789"},
        {"op": "set", "name": "r", "path": "d", "value": "0123456789"},
        {"op": "merge", "name": "r", "data": {"a": None}},
        {"op": "set", "name": "r", "path": "d", "value": "0123456789"},
        {"op": "set", "name": "s", "data": {"long": "0123456789012345678901234567890123456789012345678901234567890"}},
    )
    # Decoding refusals: not JSON, not an object, no op, unknown op, wrong
    # field types, bad names and paths.
    s["decode-errors"] = engine_config(json_preset=1) + messages(
        "{not json",
        "[1,2]",
        {"id": 1},
        {"op": 7},
        {"op": "frobnicate"},
        {"id": 1.5, "op": "get", "name": "a"},
        {"op": "get"},
        {"op": "get", "name": "a", "list": "b"},
        {"op": "get", "prefix": "/a"},
        {"op": "set", "name": "a/", "data": {}},
        {"op": "set", "name": "a", "data": 1},
        {"op": "set", "name": "a", "path": "x..y", "value": 1},
        {"op": "set", "name": "a", "path": "[0]", "value": 1},
        {"op": "set", "name": "a", "path": "x[01]", "value": 1},
        {"op": "addEntry", "list": "l", "entry": "e", "at": -1},
        {"op": "setEntries", "list": "l", "entries": ["ok", ""]},
        {"op": "hello", "protocol": 0},
        {"op": "subscribe", "name": "a", "since": -1},
        {"op": "set", "name": "a", "data": {}, "idem": ""},
        {"op": "publish", "topic": "t"},
    )
    # The protocol's default JSON limits and record limit: deeper values.
    s["defaults"] = engine_config(json_preset=2, engine_preset=3) + messages(
        {"op": "subscribe", "name": "deep", "path": "a.b"},
        {"op": "set", "name": "deep", "path": "a.b.c.d.e.f.g.h", "value": [[[[[[[[1]]]]]]]]},
        {"op": "set", "name": "deep", "path": "a.b.c.d.e.f.g.h[0][0]", "value": {"x": [True, False, None]}},
        {"op": "merge", "name": "deep", "data": {"a": {"b": {"c": None}}, "é": "e\u0301"}},
        {"op": "delete", "name": "deep", "path": "a.b"},
        {"op": "subscribe", "name": "e\u0301"},
        {"op": "set", "name": "é", "data": {}},
    )
    return s


def write(target, seeds):
    folder = os.path.join(HERE, "corpus-seed", target)
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


# EAN-13 tables (GS1 General Specifications 5.2.1.2).
EAN_L = ["0001101", "0011001", "0010011", "0111101", "0100011", "0110001", "0101111", "0111011", "0110111", "0001011"]
EAN_PARITY = ["LLLLLL", "LLGLGG", "LLGGLG", "LLGGGL", "LGLLGG", "LGGLLG", "LGGGLL", "LGLGLG", "LGLGGL", "LGGLGL"]


def ean13(digits, height=30):
    d = [int(c) for c in digits]
    r = ["".join("1" if b == "0" else "0" for b in code) for code in EAN_L]
    g = [code[::-1] for code in r]
    bits = "101"
    for i, p in enumerate(EAN_PARITY[d[0]]):
        bits += EAN_L[d[i + 1]] if p == "L" else g[d[i + 1]]
    bits += "01010"
    for i in range(7, 13):
        bits += r[d[i]]
    bits += "101"
    return [[b == "1" for b in bits]] * height


# "SN-4711" as libdmtx's encoder draws it (12 × 12 modules, rows top down),
# so the seeds need no Data Matrix encoder here.
DATA_MATRIX_SN4711 = [[c == "1" for c in row] for row in """
101010101010 101110110011 100110001010 111100111101 100110110110 101110001011
111100100000 101000111111 110111100100 100001111101 110110100010 111111111111""".split()]


def label(width, height):
    """A grey label: a soft gradient with a faint pattern, an EAN-13 (2 px
    per module) and the Data Matrix (4 px per module), quiet zones white."""
    px = bytearray((170 + (x * 40) // width + ((x * 7 + y * 13) % 11)) for y in range(height) for x in range(width))

    def stamp(mark, scale, quiet, x0, y0):
        rows, cols = len(mark) + 2 * quiet, len(mark[0]) + 2 * quiet
        for row in range(rows * scale):
            for col in range(cols * scale):
                mr, mc = row // scale - quiet, col // scale - quiet
                black = 0 <= mr < len(mark) and 0 <= mc < len(mark[mr]) and mark[mr][mc]
                px[(y0 + row) * width + x0 + col] = 20 if black else 245

    stamp(ean13("4006381333931"), 2, 8, 4, 4)
    stamp(DATA_MATRIX_SN4711, 4, 2, width - 72, height - 72)
    return bytes(px)


def pgm(width, height, pixels):
    return b"P5 %d %d 255\n" % (width, height) + pixels


def png(width, height, colour_type, rows):
    """A PNG from rows of raw bytes (filter 0 each), written by hand."""
    def chunk(tag, body):
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))
    raw = b"".join(b"\x00" + row for row in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def exif_orientation(jpeg, orientation):
    """The JPEG with an APP1 Exif segment (big-endian TIFF, one IFD entry:
    Orientation) right after SOI."""
    tiff = b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1) \
        + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(">I", 0)
    body = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body + jpeg[2:]


def image_seeds():
    vips = shutil.which("vips")
    if vips is None:
        print("make-seeds.py: no vips command (apt-get install libvips-tools): image seeds left as they are")
        return None
    s = {}
    width, height = 256, 160
    pixels = label(width, height)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "label.pgm")
        with open(source, "wb") as f:
            f.write(pgm(width, height, pixels))

        def convert(name, target, src=source):
            out = os.path.join(tmp, target.split("[")[0])
            done = subprocess.run([vips, "copy", src, os.path.join(tmp, target)], capture_output=True)
            if done.returncode != 0:
                print("make-seeds.py: vips copy %s failed (%s): %s left out"
                      % (target, done.stderr.decode(errors="replace").strip().splitlines()[-1:], name))
                return None
            with open(out, "rb") as f:
                s[name] = f.read()
            return s[name]

        jpeg = convert("label.jpg", "label.jpg[Q=60,strip]")
        convert("label-progressive.jpg", "label-p.jpg[Q=50,interlace,strip]")
        convert("label.webp", "label.webp[Q=60,strip]")
        convert("label-lossless.webp", "label-l.webp[lossless,strip]")
        convert("label.gif", "label.gif")
        convert("label.heic", "label.heic[Q=40,strip]")
        convert("label.avif", "label.avif[Q=40,strip]")
        convert("label.png", "label.png[compression=9,strip]")
        if jpeg:
            # Orientation 6: stored sideways, shown turned 90° clockwise.
            s["label-exif-rotated.jpg"] = exif_orientation(jpeg, 6)
            s["label-truncated.jpg"] = jpeg[: len(jpeg) // 2]
            s["label-no-eoi.jpg"] = jpeg[:-2]
    # Grey with alpha (colour type 4), half transparent on the right.
    s["alpha.png"] = png(48, 32, 4, [bytes(v for x in range(48) for v in (x * 5, 255 if x < 24 else 40))
                                     for _ in range(32)])
    # RGB (colour type 2), a colour gradient.
    s["rgb.png"] = png(40, 24, 2, [bytes(v for x in range(40) for v in (x * 6, y * 10, 128)) for y in range(24)])
    s["one-pixel.png"] = png(1, 1, 0, [b"\x80"])
    # The smallest GIF: 1 × 1, a two-colour palette.
    s["one-pixel.gif"] = bytes.fromhex("47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b")
    s["not-an-image.txt"] = b"hello, this is text and no photo\n"
    return s


write("FuzzFrameDecoder", ws_seeds())
write("FuzzHTTPParser", http_seeds())
write("FuzzEngine", engine_seeds())
images = image_seeds()
if images is not None:
    write("FuzzImageDecoder", images)

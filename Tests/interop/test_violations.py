"""Protocol violations on raw sockets: the server must answer each with the
exact close code (RFC 6455 section 7.4.1) or HTTP status, and keep serving
other connections afterwards.
"""

from __future__ import annotations

import json
import ssl
import time
import zlib

import pytest

from rawws import (BINARY, CLOSE, CONT, PING, PONG, RSV1, RSV2, RSV3, TEXT, Buffered,
                   RawWebSocket, accept_for, assert_echo_works, build_frame,
                   close_payload, connect, handshake_request, http_exchange, read_http_response,
                   websocket_key)

KiB, MiB = 1024, 1024 * 1024


def violate(server, frames: list[bytes], code: int, **open_options) -> None:
    """Sends ``frames`` on a fresh /echo connection, expects a close frame
    with ``code`` then the end of the connection, then checks that a new
    connection still gets a correct echo."""
    ws = RawWebSocket.open(server.host, server.port, **open_options)
    try:
        for frame in frames:
            ws.send_raw(frame)
        ws.expect_close(code)
    finally:
        ws.close()
    assert_echo_works(server.host, server.port)


# --------------------------------------------------------------------------
# Framing

FRAMING_CASES = {
    "unmasked-client-frame": ([build_frame(TEXT, b"hello", mask=False)], 1002),
    "rsv1-without-deflate": ([build_frame(TEXT, b"hello", rsv=RSV1)], 1002),
    "rsv2": ([build_frame(TEXT, b"hello", rsv=RSV2)], 1002),
    "rsv3": ([build_frame(BINARY, b"hello", rsv=RSV3)], 1002),
    "rsv-on-ping": ([build_frame(PING, b"x", rsv=RSV2)], 1002),
    "reserved-opcode-3": ([build_frame(0x3, b"x")], 1002),
    "reserved-opcode-7": ([build_frame(0x7, b"")], 1002),
    "reserved-opcode-0xB": ([build_frame(0xB, b"x")], 1002),
    "reserved-opcode-0xF": ([build_frame(0xF, b"")], 1002),
    "ping-126-bytes": ([build_frame(PING, b"p" * 126)], 1002),
    "pong-126-bytes": ([build_frame(PONG, b"p" * 126)], 1002),
    "close-126-bytes": ([build_frame(CLOSE, close_payload(1000, b"r" * 124))], 1002),
    "fragmented-ping": ([build_frame(PING, b"x", fin=False)], 1002),
    "fragmented-close": ([build_frame(CLOSE, close_payload(1000), fin=False)], 1002),
    "continuation-without-start": ([build_frame(CONT, b"orphan")], 1002),
    "continuation-without-start-fin0": ([build_frame(CONT, b"orphan", fin=False)], 1002),
    "text-during-fragmented-text": (
        [build_frame(TEXT, b"first ", fin=False), build_frame(TEXT, b"second")], 1002),
    "binary-during-fragmented-text": (
        [build_frame(TEXT, b"first ", fin=False), build_frame(BINARY, b"second")], 1002),
    "text-during-fragmented-binary": (
        [build_frame(BINARY, b"a", fin=False), build_frame(CONT, b"b", fin=False),
         build_frame(TEXT, b"c")], 1002),
    "64-bit-length-msb-set": ([build_frame(BINARY, b"", length=1 << 63)], 1002),
}


@pytest.mark.parametrize("case", FRAMING_CASES.keys())
def test_framing_violation(tally, case):
    frames, code = FRAMING_CASES[case]
    violate(tally, frames, code)


def test_control_frame_of_125_bytes_is_fine(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(PING, bytes(range(125)))
    frame = ws.recv_frame()
    assert (frame.opcode, frame.payload, frame.fin) == (PONG, bytes(range(125)), True)
    ws.close()


# --------------------------------------------------------------------------
# UTF-8

UTF8_CASES = {
    "invalid-byte-ff": [build_frame(TEXT, b"abc\xff")],
    "overlong-slash": [build_frame(TEXT, b"\xc0\xaf")],
    "overlong-3-byte": [build_frame(TEXT, b"\xe0\x80\xaf")],
    "surrogate-d800": [build_frame(TEXT, b"a\xed\xa0\x80b")],
    "above-10ffff": [build_frame(TEXT, b"\xf4\x90\x80\x80")],
    "lone-continuation-byte": [build_frame(TEXT, b"ok\x80")],
    "truncated-at-message-end": [build_frame(TEXT, b"ab\xe2\x82")],
    "truncated-at-end-of-last-fragment": [
        build_frame(TEXT, b"complete ", fin=False), build_frame(CONT, b"\xf0\x9f\x98")],
    "invalid-in-second-fragment-then-final": [
        build_frame(TEXT, b"hello \xce", fin=False), build_frame(CONT, b"\xff world", fin=False),
        build_frame(CONT, b"!")],
}


@pytest.mark.parametrize("case", UTF8_CASES.keys())
def test_invalid_utf8_text(tally, case):
    violate(tally, UTF8_CASES[case], 1007)


def test_invalid_utf8_fails_fast_before_final_fragment(tally):
    """The bad byte is in the second of (so far) two non-final fragments:
    the server must close with 1007 without waiting for the message end
    (RFC 6455 8.1: fail as soon as the stream is known invalid)."""
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"hello \xce", fin=False)  # valid prefix, incomplete character
    ws.send(CONT, b"\xff more", fin=False)   # 0xCE 0xFF can never be valid
    ws.expect_close(1007, timeout=3)
    ws.close()
    assert_echo_works(tally.host, tally.port)


def test_utf8_character_split_across_fragments_is_fine(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    expected = "héllo 😀 €".encode()
    ws.send(TEXT, b"h\xc3", fin=False)
    ws.send(CONT, b"\xa9llo \xf0\x9f", fin=False)
    ws.send(CONT, b"\x98", fin=False)
    ws.send(CONT, b"\x80 \xe2\x82", fin=False)
    ws.send(CONT, b"\xac")
    assert ws.recv_message() == (TEXT, expected)
    ws.close()


def test_invalid_utf8_in_binary_is_fine(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(BINARY, b"\xff\xfe\xc0\xaf")
    assert ws.recv_message() == (BINARY, b"\xff\xfe\xc0\xaf")
    ws.close()


# --------------------------------------------------------------------------
# Close frames


@pytest.mark.parametrize("code", [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535])
def test_close_with_invalid_code(tally, code):
    violate(tally, [build_frame(CLOSE, close_payload(code))], 1002)


def test_close_with_one_byte_payload(tally):
    violate(tally, [build_frame(CLOSE, b"\x03")], 1002)


def test_close_with_invalid_utf8_reason(tally):
    violate(tally, [build_frame(CLOSE, close_payload(1000, b"bye \xff\xfe"))], 1007)


@pytest.mark.parametrize("code", [1000, 1001, 1003, 1007, 1008, 1011, 3000, 3999, 4000, 4999])
def test_valid_close_is_echoed(tally, code):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send_close(code, "good bye ✓".encode())
    frame = ws.recv_close()
    assert frame.close_code == code, frame
    ws.conn.wait_eof()  # the server ends TCP after the close handshake
    ws.close()
    assert_echo_works(tally.host, tally.port)


def test_empty_close_is_answered(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send_close(None)
    frame = ws.recv_close()
    assert frame.payload in (b"", close_payload(1000)), frame
    ws.conn.wait_eof()
    ws.close()


def test_close_in_the_middle_of_a_fragmented_message(tally):
    """Control frames may interleave with fragments; a close ends it all."""
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"partial", fin=False)
    ws.send_close(1000)
    assert ws.recv_close().close_code == 1000
    ws.conn.wait_eof()
    ws.close()


# --------------------------------------------------------------------------
# Pings


@pytest.mark.parametrize("payload", [b"", b"abc", bytes(range(125))], ids=["empty", "3", "125"])
def test_ping_gets_pong_with_same_payload(tally, payload):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(PING, payload)
    frame = ws.recv_frame()
    assert (frame.opcode, frame.fin, frame.rsv, frame.payload) == (PONG, True, 0, payload)
    ws.close()


def test_ping_between_fragments(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"first half, ", fin=False)
    ws.send(PING, b"in between")
    frame = ws.recv_frame()
    assert (frame.opcode, frame.payload) == (PONG, b"in between")
    ws.send(CONT, b"second half")
    assert ws.recv_message() == (TEXT, b"first half, second half")
    ws.close()


def test_unsolicited_pong_is_ignored(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(PONG, b"nobody asked")
    ws.send(TEXT, b"still here")
    assert ws.recv_message() == (TEXT, b"still here")
    ws.close()


# --------------------------------------------------------------------------
# Message size limit (--max-message-size 1M)


@pytest.fixture
def tally_1m(tally_factory):
    return tally_factory("--max-message-size", "1M")


def test_message_of_exactly_the_limit_is_echoed(tally_1m):
    ws = RawWebSocket.open(tally_1m.host, tally_1m.port)
    data = bytes(range(256)) * (MiB // 256)
    ws.send(BINARY, data)
    assert ws.recv_message() == (BINARY, data)
    for i in range(0, MiB, 64 * KiB):
        ws.send(CONT if i else BINARY, data[i:i + 64 * KiB], fin=i + 64 * KiB >= MiB)
    assert ws.recv_message() == (BINARY, data)
    ws.close()


def test_oversize_frame_header_is_refused_without_the_payload(tally_1m):
    """Only the header (announcing 1 MiB + 1) and a few payload bytes are
    sent: the server must decide from the header."""
    frame = build_frame(BINARY, b"", length=MiB + 1)
    violate(tally_1m, [frame + b"\x00" * 10], 1009)


def test_oversize_fragmented_message(tally_1m):
    fragments = [build_frame(BINARY if i == 0 else CONT, b"\xab" * (64 * KiB), fin=False)
                 for i in range(16)]  # exactly 1 MiB so far: still fine
    fragments.append(build_frame(CONT, b"!"))  # one byte over
    violate(tally_1m, fragments, 1009)


def test_oversize_text_fragments(tally_1m):
    fragments = [build_frame(TEXT, b"a" * (600 * KiB), fin=False),
                 build_frame(CONT, b"b" * (600 * KiB), fin=False)]
    violate(tally_1m, fragments, 1009)


# --------------------------------------------------------------------------
# permessage-deflate on raw frames

DEFLATE_OFFER = "permessage-deflate; client_no_context_takeover; server_no_context_takeover"


def deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-15)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]  # RFC 7692 7.2.1: strip the empty stored block's tail


def inflate(data: bytes) -> bytes:
    return zlib.decompressobj(wbits=-15).decompress(data + b"\x00\x00\xff\xff")


def open_deflate(server) -> RawWebSocket:
    ws = RawWebSocket.open(server.host, server.port, extensions=DEFLATE_OFFER)
    header = ws.response.header("sec-websocket-extensions") or ""
    assert header.startswith("permessage-deflate"), header
    return ws


def test_raw_deflate_message_is_echoed(tally):
    ws = open_deflate(tally)
    message = "compress me please ".encode() * 50
    ws.send(TEXT, deflate(message), rsv=RSV1)
    frame = ws.recv_frame()
    assert frame.opcode == TEXT and frame.fin
    assert (inflate(frame.payload) if frame.rsv == RSV1 else frame.payload) == message
    # A compressed message in fragments: RSV1 only on the first.
    compressed = deflate(message)
    ws.send(TEXT, compressed[:10], rsv=RSV1, fin=False)
    ws.send(CONT, compressed[10:])
    frame = ws.recv_frame()
    assert (inflate(frame.payload) if frame.rsv == RSV1 else frame.payload) == message
    ws.close()


def test_deflate_rsv1_on_continuation(tally):
    compressed = deflate(b"hello hello hello")
    violate(tally, [build_frame(TEXT, compressed[:5], rsv=RSV1, fin=False),
                    build_frame(CONT, compressed[5:], rsv=RSV1)], 1002, extensions=DEFLATE_OFFER)


def test_deflate_rsv1_on_ping(tally):
    violate(tally, [build_frame(PING, b"x", rsv=RSV1)], 1002, extensions=DEFLATE_OFFER)


def test_deflate_invalid_compressed_data(tally):
    # BTYPE=11 is reserved in DEFLATE: the stream is corrupt.
    violate(tally, [build_frame(BINARY, b"\xff\xff\xff\xff", rsv=RSV1)], 1007,
            extensions=DEFLATE_OFFER)


def test_deflate_bomb_over_the_limit(tally_1m):
    """A small compressed frame inflating to 2 MiB must be stopped at 1 MiB."""
    bomb = deflate(b"\x00" * (2 * MiB))
    assert len(bomb) < 4 * KiB
    violate(tally_1m, [build_frame(BINARY, bomb, rsv=RSV1)], 1009, extensions=DEFLATE_OFFER)


def test_deflate_invalid_utf8_after_inflating(tally):
    violate(tally, [build_frame(TEXT, deflate(b"abc\xff" * 20), rsv=RSV1)], 1007,
            extensions=DEFLATE_OFFER)


# --------------------------------------------------------------------------
# HTTP level


def assert_json_error(response, status: int) -> dict:
    assert response.status == status, (response.status, response.body)
    assert response.header("content-type", ).startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"]["code"], str)
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


def test_garbage_instead_of_http(tally):
    response, conn = http_exchange(tally.host, tally.port, b"\x00\x01\x02\x03 not http \xff\xfe\r\n\r\n")
    assert_json_error(response, 400)
    conn.wait_eof()
    assert_echo_works(tally.host, tally.port)


def client_hello() -> bytes:
    """The first flight of a real TLS client."""
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    assert hello[:1] == b"\x16"  # handshake record
    return hello


def test_tls_client_hello_on_plain_port(tally):
    response, conn = http_exchange(tally.host, tally.port, client_hello())
    assert_json_error(response, 400)
    conn.wait_eof()
    assert_echo_works(tally.host, tally.port)


def dribble(sock, data: bytes, delay: float) -> None:
    for i in range(len(data)):
        sock.sendall(data[i:i + 1])
        time.sleep(delay)


def test_request_dribbled_byte_by_byte(tally):
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    conn = Buffered(connect(tally.host, tally.port))
    dribble(conn.sock, request, 0.02)  # about 0.9 s
    response = read_http_response(conn)
    # A hub on PostgreSQL adds the store's figures to the body.
    assert response.status == 200 and response.json()["status"] == "ok"
    conn.sock.close()


def test_websocket_handshake_dribbled_byte_by_byte(tally):
    key = websocket_key()
    conn = Buffered(connect(tally.host, tally.port))
    dribble(conn.sock, handshake_request("/echo", key), 0.005)  # about 1 s
    response = read_http_response(conn)
    assert response.status == 101, response
    assert response.header("sec-websocket-accept") == accept_for(key)
    ws = RawWebSocket.from_handshaken(conn, response)
    # and the frame too, one byte at a time
    dribble(conn.sock, build_frame(TEXT, "dribbled ✓".encode()), 0.002)
    assert ws.recv_message() == (TEXT, "dribbled ✓".encode())
    ws.close()


def handshake_lines(**overrides) -> bytes:
    """A handshake with headers replaced (value) or removed (None)."""
    method = overrides.pop("method", "GET")
    headers = {"Host": "127.0.0.1", "Upgrade": "websocket", "Connection": "Upgrade",
               "Sec-WebSocket-Key": websocket_key(), "Sec-WebSocket-Version": "13"}
    for name, value in overrides.items():
        name = name.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    lines = [f"{method} /echo HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


HANDSHAKE_ERRORS = {
    "wrong-version-8": (dict(Sec_WebSocket_Version="8"), 426),
    "bad-key-too-short": (dict(Sec_WebSocket_Key="c2hvcnQ="), 400),
    "bad-key-not-base64": (dict(Sec_WebSocket_Key="!!!!not base64 at all!!"), 400),
    "missing-key": (dict(Sec_WebSocket_Key=None), 400),
    "missing-connection-upgrade": (dict(Connection="keep-alive"), 400),
    "post-with-upgrade": (dict(method="POST"), 405),
    "plain-get": (dict(Upgrade=None, Connection=None, Sec_WebSocket_Key=None,
                       Sec_WebSocket_Version=None), 426),
}


@pytest.mark.parametrize("case", HANDSHAKE_ERRORS.keys())
def test_handshake_error(tally, case):
    overrides, status = HANDSHAKE_ERRORS[case]
    response, conn = http_exchange(tally.host, tally.port, handshake_lines(**overrides))
    assert_json_error(response, status)
    assert response.header("sec-websocket-accept") is None
    if status == 426:
        assert response.header("sec-websocket-version") == "13"
    conn.sock.close()
    assert_echo_works(tally.host, tally.port)


def test_request_line_too_long(tally):
    response, conn = http_exchange(tally.host, tally.port,
                                   b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert_json_error(response, 414)
    conn.sock.close()


def test_too_many_headers(tally):
    headers = "".join(f"X-Header-{i}: value\r\n" for i in range(200))
    response, conn = http_exchange(tally.host, tally.port,
                                   f"GET /healthz HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())
    assert_json_error(response, 431)
    conn.sock.close()


def test_headers_too_large(tally):
    headers = "".join(f"X-Big-{i}: {'v' * 1000}\r\n" for i in range(40))  # 40 KiB, 41 headers
    response, conn = http_exchange(tally.host, tally.port,
                                   f"GET /healthz HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())
    assert_json_error(response, 431)
    conn.sock.close()


def test_body_too_large(tally):
    """Refused from the Content-Length alone: the body is never sent."""
    response, conn = http_exchange(
        tally.host, tally.port,
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2097152\r\n\r\n")
    assert_json_error(response, 413)
    conn.sock.close()


def request_line_of(length: int) -> bytes:
    """`GET /aaa… HTTP/1.1` of exactly ``length`` bytes (without CRLF)."""
    fixed = len(b"GET / HTTP/1.1")
    return b"GET /" + b"a" * (length - fixed) + b" HTTP/1.1"


def test_request_line_limit_boundary(tally):
    response, conn = http_exchange(tally.host, tally.port, request_line_of(8192) + b"\r\nHost: localhost\r\n\r\n")
    assert_json_error(response, 404)  # at the limit: parsed, and simply not found
    conn.sock.close()
    response, conn = http_exchange(tally.host, tally.port, request_line_of(8193) + b"\r\nHost: localhost\r\n\r\n")
    assert_json_error(response, 414)
    conn.sock.close()


def test_request_line_without_end_is_refused_early(tally):
    """20 KB and no line end: refused at the limit, not buffered for ever."""
    response, conn = http_exchange(tally.host, tally.port, b"GET /" + b"a" * 20_000)
    assert_json_error(response, 414)
    conn.sock.close()


@pytest.mark.parametrize("count, status", [(100, 200), (101, 431)])
def test_header_count_boundary(tally, count, status):
    headers = "".join(f"X-H{i}: v\r\n" for i in range(count - 1))  # plus Host
    response, conn = http_exchange(tally.host, tally.port,
                                   f"GET /healthz HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())
    assert response.status == status, (response.status, response.body)
    conn.sock.close()


@pytest.mark.parametrize("size, status", [(32_000, 200), (33_000, 431)])
def test_header_bytes_around_32_kib(tally, size, status):
    filler = b"f" * (size - len(b"Host: localhost\r\nX-Fill: \r\n"))
    response, conn = http_exchange(tally.host, tally.port,
                                   b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Fill: " + filler + b"\r\n\r\n")
    assert response.status == status, (response.status, response.body)
    conn.sock.close()


def test_body_for_a_route_without_one_is_refused_unread(tally):
    """A body for a route that takes none (POST /healthz: 405) is refused
    from the headers alone: the answer comes before a byte of the 1 MiB body
    is sent, and the connection closes instead of reading it."""
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1048576\r\n\r\n")
    response = read_http_response(conn)
    assert_json_error(response, 405)
    assert response.header("connection") == "close"
    conn.sock.close()


def test_body_one_byte_over_the_limit(tally):
    response, conn = http_exchange(
        tally.host, tally.port,
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1048577\r\n\r\n")
    assert_json_error(response, 413)
    conn.sock.close()


def test_chunked_body_for_a_route_without_one_is_refused_unread(tally):
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n")
    response = read_http_response(conn)
    assert_json_error(response, 405)
    assert response.header("connection") == "close"
    conn.sock.close()


def test_not_found(tally):
    response, conn = http_exchange(tally.host, tally.port, b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert assert_json_error(response, 404)["error"]["code"] == "not_found"
    conn.sock.close()


def test_method_not_allowed(tally):
    response, conn = http_exchange(tally.host, tally.port, b"DELETE /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert_json_error(response, 405)
    # Every GET route answers HEAD as well (RFC 9110 section 9.3.2).
    assert response.header("allow") == "GET, HEAD"
    conn.sock.close()


def test_keep_alive_two_requests(tally):
    conn = Buffered(connect(tally.host, tally.port))
    for path in ("/healthz", "/metrics"):
        conn.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        response = read_http_response(conn)
        assert response.status == 200, response
    conn.sock.close()


def test_head_is_get_without_a_body(tally):
    """RFC 9110 section 9.3.2: HEAD answers like GET, Content-Length included,
    but sends no body; the next request on the connection still parses."""
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    deadline = time.monotonic() + 5
    head = conn.read_until(b"\r\n\r\n", deadline).decode("latin-1")
    assert head.startswith("HTTP/1.1 200"), head
    # No body follows: the next bytes are the GET's status line, and the
    # HEAD's Content-Length is the GET's body's.
    following = read_http_response(conn)
    assert following.status == 200 and json.loads(following.body)["status"] == "ok"
    assert f"content-length: {len(following.body)}" in head.lower(), head
    conn.sock.close()


def test_pipelined_requests(tally):
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
                      b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    statuses = [read_http_response(conn).status for _ in range(4)]
    assert statuses == [200, 404, 200, 200]
    conn.wait_eof()  # Connection: close is honoured


def test_pipelined_upgrade_and_first_frame(tally):
    """Handshake and first frame in one write: the frame bytes after the
    request must not be lost."""
    key = websocket_key()
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(handshake_request("/echo", key) + build_frame(TEXT, b"right away"))
    response = read_http_response(conn)
    assert response.status == 101
    ws = RawWebSocket.from_handshaken(conn, response)
    assert ws.recv_message() == (TEXT, b"right away")
    ws.close()


def test_protocol_errors_are_counted(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"x", mask=False)
    ws.expect_close(1002)
    ws.close()
    response, conn = http_exchange(tally.host, tally.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    metrics = dict(line.rsplit(" ", 1) for line in response.body.decode().splitlines()
                   if line and not line.startswith("#"))
    assert int(metrics["tally_protocol_errors_total"]) >= 1
    conn.sock.close()


# --------------------------------------------------------------------------
# Handshake variants real clients send (must succeed)


@pytest.mark.parametrize("overrides", [
    dict(Connection="keep-alive, Upgrade"),   # Firefox
    dict(Upgrade="WebSocket", Connection="upgrade"),  # tokens are case-insensitive
    dict(Sec_WebSocket_Protocol="chat, superchat"),  # no subprotocol may be picked
    dict(Sec_WebSocket_Extensions="x-unknown-extension; foo=1"),  # ignored
], ids=["connection-token-list", "case-insensitive-tokens", "unknown-subprotocol",
        "unknown-extension"])
def test_handshake_variants_accepted(tally, overrides):
    key = websocket_key()
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(handshake_lines(Sec_WebSocket_Key=key, **overrides))
    response = read_http_response(conn)
    assert response.status == 101, response
    assert response.header("sec-websocket-accept") == accept_for(key)
    assert response.header("sec-websocket-protocol") is None
    assert response.header("sec-websocket-extensions") is None
    ws = RawWebSocket.from_handshaken(conn, response)
    ws.send(TEXT, b"variant")
    assert ws.recv_message() == (TEXT, b"variant")
    ws.close()


# --------------------------------------------------------------------------
# HTTP framing ambiguities (RFC 9112): refuse rather than guess

AMBIGUOUS_REQUESTS = {
    "content-length-and-transfer-encoding":
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "conflicting-content-lengths":
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "negative-content-length":
        b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: -1\r\n\r\n",
    "space-before-colon":
        b"GET /healthz HTTP/1.1\r\nHost : x\r\n\r\n",
    "obsolete-line-folding":
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Folded: a\r\n b\r\n\r\n",
    "missing-host":
        b"GET /healthz HTTP/1.1\r\n\r\n",
    "unsupported-version":
        b"GET /healthz HTTP/2.0\r\nHost: localhost\r\n\r\n",
}


@pytest.mark.parametrize("case", AMBIGUOUS_REQUESTS.keys())
def test_ambiguous_request_refused(tally, case):
    response, conn = http_exchange(tally.host, tally.port, AMBIGUOUS_REQUESTS[case])
    assert response.status in (400, 505), (response.status, response.body)
    assert_json_error(response, response.status)
    conn.sock.close()


def test_http_1_0_connection_closes_after_response(tally):
    response, conn = http_exchange(tally.host, tally.port, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert response.status == 200
    conn.wait_eof()


def test_expect_100_continue_gets_an_immediate_answer(tally):
    """RFC 9110 10.1.1: on `Expect: 100-continue` an HTTP/1.1 server MUST
    answer at once, with 100 (Continue) or a final status, without waiting
    for the body (curl sends this header for POST bodies over 1 KiB and then
    stalls for a second)."""
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n"
                      b"Expect: 100-continue\r\n\r\n")
    try:
        response = read_http_response(conn, timeout=2)
    except TimeoutError:
        pytest.fail("no 100 Continue or final response within 2 s: the server waits for a body "
                    "the client will not send until told to")
    assert response.status in (100, 405, 417), response
    conn.sock.close()


# --------------------------------------------------------------------------
# More handshake and negotiation details


def test_handshake_header_names_and_values_any_case(tally):
    key = websocket_key()
    request = (f"GET /echo HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: WEBSOCKET\r\n"
               f"connection: UPGRADE\r\nsec-websocket-key:   {key}  \r\n"
               f"sec-websocket-version: 13\r\n\r\n").encode()
    conn = Buffered(connect(tally.host, tally.port))
    conn.sock.sendall(request)
    response = read_http_response(conn)
    assert response.status == 101, response
    assert response.header("sec-websocket-accept") == accept_for(key)
    conn.sock.close()


def test_handshake_with_two_keys_is_refused(tally):
    request = handshake_lines().replace(b"\r\n\r\n", f"\r\nSec-WebSocket-Key: {websocket_key()}\r\n\r\n".encode())
    response, conn = http_exchange(tally.host, tally.port, request)
    assert_json_error(response, 400)
    conn.sock.close()


@pytest.mark.parametrize("offer, accepted", [
    ("permessage-deflate", True),
    ("permessage-deflate; client_max_window_bits", True),
    ("permessage-deflate; unknown_parameter=1", False),
    ("permessage-deflate; server_max_window_bits=16", False),
    ("permessage-deflate; server_max_window_bits=7", False),
    ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", False),
    ("permessage-deflate; unknown_parameter, permessage-deflate; server_no_context_takeover", True),
], ids=["plain", "client-bits-no-value", "unknown-param", "server-bits-16", "server-bits-7",
        "duplicate-param", "fallback-to-second-offer"])
def test_deflate_offers(tally, offer, accepted):
    """RFC 7692 5 and 7.1: an offer with unknown, invalid or duplicate
    parameters is declined; the next offer may still be accepted."""
    ws = RawWebSocket.open(tally.host, tally.port, extensions=offer)
    header = ws.response.header("sec-websocket-extensions")
    if accepted:
        assert header is not None and header.startswith("permessage-deflate"), header
        if "server_no_context_takeover" in offer:
            assert "server_no_context_takeover" in header
    else:
        assert header is None, header
    message = b"negotiated " * 20
    ws.send(TEXT, deflate(message) if accepted else message, rsv=RSV1 if accepted else 0)
    frame = ws.recv_frame()
    assert (inflate(frame.payload) if frame.rsv == RSV1 else frame.payload) == message
    ws.close()


def test_deflate_message_inflating_to_exactly_the_limit(tally_1m):
    ws = open_deflate(tally_1m)
    data = bytes(range(256)) * (MiB // 256)
    ws.send(BINARY, deflate(data), rsv=RSV1)
    frame = ws.recv_frame(timeout=10)
    assert frame.opcode == BINARY
    assert (inflate(frame.payload) if frame.rsv == RSV1 else frame.payload) == data
    ws.close()


def test_deflate_invalid_utf8_fails_fast(tally):
    """Compressed text whose second fragment inflates to invalid UTF-8:
    closed with 1007 before the final fragment."""
    compressor = zlib.compressobj(wbits=-15)
    first = compressor.compress(b"hello \xce") + compressor.flush(zlib.Z_SYNC_FLUSH)
    second = compressor.compress(b"\xff world") + compressor.flush(zlib.Z_SYNC_FLUSH)
    ws = open_deflate(tally)
    ws.send(TEXT, first, rsv=RSV1, fin=False)
    ws.send(CONT, second, fin=False)
    ws.expect_close(1007, timeout=3)
    assert_echo_works(tally.host, tally.port)


# --------------------------------------------------------------------------
# A stream of frames cut at arbitrary points


def test_stream_split_at_random_points(tally):
    """Frames of all header sizes, fragments, pings and masks, concatenated
    and delivered in randomly sized chunks (fixed seed): every frame
    boundary, header field and mask key gets split across reads."""
    import random
    rng = random.Random(6455)
    stream, expected = bytearray(), []
    for i in range(60):
        size = rng.choice([0, 1, 7, 125, 126, 127, 200, 65535, 65536, 70000])
        payload = bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64 + 1)
        payload = payload[:size]
        if i % 7 == 3:
            stream += build_frame(PING, payload[:125])
            expected.append((PONG, payload[:125]))
        elif i % 5 == 2 and size > 2:
            cut = size // 2
            stream += build_frame(BINARY, payload[:cut], fin=False)
            stream += build_frame(PING, b"mid")
            expected.append((PONG, b"mid"))
            stream += build_frame(CONT, payload[cut:])
            expected.append((BINARY, payload))
        else:
            stream += build_frame(BINARY, payload)
            expected.append((BINARY, payload))
    ws = RawWebSocket.open(tally.host, tally.port)
    position = 0
    while position < len(stream):
        n = rng.choice([1, 2, 3, 5, 13, 100, 1000, 4096, 20000])
        ws.send_raw(bytes(stream[position:position + n]))
        position += n
    received = []
    while len(received) < len(expected):
        frame = ws.recv_frame(timeout=10)
        if frame.opcode == PONG:
            received.append((PONG, frame.payload))
        else:
            parts = [frame.payload]
            while not frame.fin:
                frame = ws.recv_frame(timeout=10)
                parts.append(frame.payload)
            received.append((BINARY, b"".join(parts)))
    # Pongs may overtake echoes queued before them; compare each stream in order.
    assert [p for p in received if p[0] == PONG] == [p for p in expected if p[0] == PONG]
    assert [p for p in received if p[0] == BINARY] == [p for p in expected if p[0] == BINARY]
    ws.close()

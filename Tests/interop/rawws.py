"""Hand-built WebSocket frames and HTTP messages over raw sockets.

Nothing here hides protocol details: the violation tests need to put exact
bytes on the wire, and to read exactly what the server answers. Every read is
bounded by a deadline (``TIMEOUT`` unless told otherwise).
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field

TIMEOUT = 5.0
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Opcodes
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# RSV bits as they sit in the first header byte
RSV1, RSV2, RSV3 = 0x40, 0x20, 0x10


class ConnectionEnded(Exception):
    """The peer closed (EOF) or reset the TCP connection."""


def build_frame(opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0,
                mask: bool = True, length: int | None = None,
                mask_key: bytes | None = None) -> bytes:
    """One frame as a client would send it (masked unless ``mask=False``).

    ``length`` overrides the length announced in the header (the payload
    actually sent stays ``payload``), to announce more than we send.
    """
    first = (0x80 if fin else 0) | rsv | opcode
    n = len(payload) if length is None else length
    mask_bit = 0x80 if mask else 0
    if n < 126:
        header = struct.pack("!BB", first, mask_bit | n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, n)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, n)
    if not mask:
        return header + payload
    key = mask_key if mask_key is not None else os.urandom(4)
    return header + key + apply_mask(payload, key)


def apply_mask(payload: bytes, key: bytes) -> bytes:
    if not payload:
        return b""
    # XOR through big integers: fast enough for multi-megabyte payloads.
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    n = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return n.to_bytes(len(payload), "big")


def close_payload(code: int | None, reason: bytes = b"") -> bytes:
    return b"" if code is None else struct.pack("!H", code) + reason


@dataclass
class Frame:
    fin: bool
    rsv: int
    opcode: int
    payload: bytes

    @property
    def close_code(self) -> int | None:
        assert self.opcode == CLOSE
        return struct.unpack("!H", self.payload[:2])[0] if len(self.payload) >= 2 else None

    @property
    def close_reason(self) -> bytes:
        assert self.opcode == CLOSE
        return self.payload[2:]

    def __repr__(self) -> str:
        shown = self.payload[:40] + (b"..." if len(self.payload) > 40 else b"")
        return f"Frame(fin={self.fin}, rsv={self.rsv:#x}, opcode={self.opcode:#x}, len={len(self.payload)}, {shown!r})"


@dataclass
class Buffered:
    """A socket plus the bytes already read from it but not yet consumed."""

    sock: socket.socket
    buf: bytearray = field(default_factory=bytearray)

    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out waiting for the server")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(1 << 20)
        except socket.timeout:
            raise TimeoutError("timed out waiting for the server") from None
        except (ConnectionResetError, BrokenPipeError, ssl.SSLEOFError) as error:
            raise ConnectionEnded(str(error)) from None
        if not chunk:
            raise ConnectionEnded("EOF")
        self.buf += chunk

    def read_exact(self, n: int, deadline: float) -> bytes:
        while len(self.buf) < n:
            self._fill(deadline)
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_until(self, marker: bytes, deadline: float, limit: int = 1 << 20) -> bytes:
        while True:
            i = self.buf.find(marker)
            if i >= 0:
                out = bytes(self.buf[: i + len(marker)])
                del self.buf[: i + len(marker)]
                return out
            if len(self.buf) > limit:
                raise AssertionError(f"no {marker!r} within {limit} bytes")
            self._fill(deadline)

    def wait_eof(self, timeout: float = TIMEOUT) -> None:
        """Asserts the peer closes the connection (EOF or reset) in time,
        sending nothing more."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                self._fill(deadline)
                raise AssertionError(f"unexpected bytes after the end: {bytes(self.buf[:80])!r}")
        except ConnectionEnded:
            pass


# --------------------------------------------------------------------------
# HTTP


@dataclass
class HTTPResponse:
    status: int
    reason: str
    headers: dict[str, str]  # lower-cased names (last one wins)
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def json(self):
        import json
        return json.loads(self.body)


def connect(host: str, port: int, timeout: float = TIMEOUT) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_http_response(conn: Buffered, timeout: float = TIMEOUT) -> HTTPResponse:
    deadline = time.monotonic() + timeout
    head = conn.read_until(b"\r\n\r\n", deadline).decode("latin-1")
    lines = head.split("\r\n")
    version, status, *reason = lines[0].split(" ", 2)
    assert version == "HTTP/1.1", f"bad status line {lines[0]!r}"
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = b""
    if "content-length" in headers:
        body = conn.read_exact(int(headers["content-length"]), deadline)
    return HTTPResponse(int(status), reason[0] if reason else "", headers, body)


def http_exchange(host: str, port: int, raw: bytes, timeout: float = TIMEOUT) -> tuple[HTTPResponse, Buffered]:
    """Sends ``raw`` on a fresh connection and reads one response."""
    conn = Buffered(connect(host, port, timeout))
    conn.sock.sendall(raw)
    return read_http_response(conn, timeout), conn


def websocket_key() -> str:
    return base64.b64encode(os.urandom(16)).decode()


def accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def handshake_request(path: str = "/echo", key: str | None = None, extensions: str | None = None,
                      extra: str = "") -> bytes:
    key = key or websocket_key()
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if extensions:
        lines.append(f"Sec-WebSocket-Extensions: {extensions}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


# --------------------------------------------------------------------------
# WebSocket client


class RawWebSocket:
    """A client speaking hand-built frames. Checks what the server sends is
    well formed (unmasked, sane lengths) but nothing else."""

    def __init__(self, conn: Buffered, response: HTTPResponse):
        self.conn = conn
        self.response = response

    @classmethod
    def open(cls, host: str, port: int, path: str = "/echo", extensions: str | None = None,
             rcvbuf: int | None = None, timeout: float = TIMEOUT,
             tls: "ssl.SSLContext | None" = None) -> "RawWebSocket":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:  # must be set before connect to shrink the window
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.settimeout(timeout)
        sock.connect((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=host)
        conn = Buffered(sock)
        key = websocket_key()
        sock.sendall(handshake_request(path, key, extensions))
        response = read_http_response(conn, timeout)
        assert response.status == 101, f"handshake failed: {response}"
        assert response.header("sec-websocket-accept") == accept_for(key)
        return cls(conn, response)

    @classmethod
    def from_handshaken(cls, conn: Buffered, response: HTTPResponse) -> "RawWebSocket":
        assert response.status == 101, f"handshake failed: {response}"
        return cls(conn, response)

    # sending
    def send_raw(self, data: bytes) -> None:
        self.conn.sock.sendall(data)

    def send(self, opcode: int, payload: bytes = b"", **kwargs) -> None:
        self.send_raw(build_frame(opcode, payload, **kwargs))

    def send_close(self, code: int | None = 1000, reason: bytes = b"") -> None:
        self.send(CLOSE, close_payload(code, reason))

    # receiving
    def recv_frame(self, timeout: float = TIMEOUT) -> Frame:
        deadline = time.monotonic() + timeout
        b0, b1 = self.conn.read_exact(2, deadline)
        assert not b1 & 0x80, "the server masked a frame (RFC 6455 5.1 forbids it)"
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self.conn.read_exact(2, deadline))
        elif n == 127:
            (n,) = struct.unpack("!Q", self.conn.read_exact(8, deadline))
        payload = self.conn.read_exact(n, deadline)
        return Frame(bool(b0 & 0x80), b0 & 0x70, b0 & 0x0F, payload)

    def recv_message(self, timeout: float = TIMEOUT, answer_pings: bool = True) -> tuple[int, bytes]:
        """Next data message (reassembled); control frames in between must
        not be CLOSE. Pings are answered unless told otherwise. Returns
        (opcode, payload)."""
        deadline = time.monotonic() + timeout
        opcode, parts = None, []
        while True:
            frame = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if frame.opcode == PING:
                if answer_pings:
                    self.send(PONG, frame.payload)
                continue
            if frame.opcode == PONG:
                continue
            assert frame.opcode != CLOSE, f"server closed: {frame.close_code} {frame.close_reason!r}"
            if opcode is None:
                assert frame.opcode in (TEXT, BINARY), f"unexpected {frame}"
                opcode = frame.opcode
            else:
                assert frame.opcode == CONT, f"unexpected {frame}"
            parts.append(frame.payload)
            if frame.fin:
                return opcode, b"".join(parts)

    def recv_close(self, timeout: float = TIMEOUT, skip_data: bool = False) -> Frame:
        """Reads frames until the server's close frame. Pings are skipped;
        data frames only if ``skip_data``."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if frame.opcode == CLOSE:
                return frame
            if frame.opcode in (PING, PONG) or skip_data:
                continue
            raise AssertionError(f"expected a close frame, got {frame}")

    def expect_close(self, code: int, timeout: float = TIMEOUT) -> Frame:
        """The server must send a close frame with ``code`` and then end the
        TCP connection."""
        try:
            frame = self.recv_close(timeout)
        except ConnectionEnded as error:
            raise AssertionError(f"connection ended ({error}) without a close frame; expected {code}") from None
        assert frame.close_code == code, (
            f"expected close code {code}, got {frame.close_code} reason {frame.close_reason!r}")
        frame.close_reason.decode("utf-8")  # the reason must itself be valid UTF-8
        # The server started (or answered) the close: after its close frame,
        # it must drop the TCP connection (RFC 6455 7.1.1). If the server
        # started it, it may wait for our close frame first: send one.
        try:
            self.send_close(code if code not in (1005, 1006, 1015) else 1000)
        except OSError:
            pass
        self.conn.wait_eof()
        self.close()
        return frame

    def close(self) -> None:
        try:
            self.conn.sock.close()
        except OSError:
            pass


def assert_echo_works(host: str, port: int, message: bytes = "héllo ✓".encode(),
                      tls: "ssl.SSLContext | None" = None) -> None:
    """A fresh connection gets a correct echo (text and binary), then closes cleanly."""
    ws = RawWebSocket.open(host, port, tls=tls)
    try:
        ws.send(TEXT, message)
        assert ws.recv_message() == (TEXT, message)
        ws.send(BINARY, message[::-1])
        assert ws.recv_message() == (BINARY, message[::-1])
        ws.send_close(1000)
        frame = ws.recv_close()
        assert frame.close_code == 1000
        ws.conn.wait_eof()
    finally:
        ws.close()

"""The fault-injecting proxy (faultproxy.py) itself: each mode against a
small echo server on 127.0.0.1, then a sync client through it to a real hub.
Every wait is bounded; the proxy and the echo server are closed at teardown."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from websockets.exceptions import ConnectionClosed

from faultproxy import FaultProxy
from synclib import SyncClient, get_record, wait_until


class EchoServer:
    """A threaded TCP echo server on 127.0.0.1 (one thread per connection)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.host, self.port = self.listener.getsockname()
        self.closed = threading.Event()
        self.connections = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn):
        conn.settimeout(0.2)
        with conn:
            while not self.closed.is_set():
                try:
                    data = conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                try:
                    conn.sendall(data)
                except OSError:
                    return

    def close(self):
        self.closed.set()
        self.listener.close()
        self.thread.join(2)


@pytest.fixture
def echo():
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo):
    proxy = FaultProxy(echo)
    yield proxy
    proxy.close()


def connect(proxy, timeout: float = 2.0) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exactly(sock: socket.socket, count: int, timeout: float = 2.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_pass_forwards_and_counts(proxy):
    with connect(proxy) as sock:
        payload = bytes(range(256)) * 400  # 100 KiB
        sock.sendall(payload)
        assert recv_exactly(sock, len(payload)) == payload
    # a chunk is counted right after the proxy has sent it
    wait_until(lambda: proxy.bytes_down >= len(payload), 2, "the proxy to count what it sent")
    stats = proxy.stats()
    assert stats.accepted == 1
    assert stats.bytes_up == len(payload) and stats.bytes_down == len(payload)


def test_delay_holds_each_chunk(proxy):
    proxy.delay(150)
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"ping")
        assert recv_exactly(sock, 4) == b"ping"
        elapsed = time.monotonic() - start
    assert 0.3 <= elapsed < 2.0, f"one round trip (two chunks of 150 ms) took {elapsed:.3f}s"
    proxy.passthrough()
    with connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(b"pong")
        assert recv_exactly(sock, 4) == b"pong"
        assert time.monotonic() - start < 0.25


def test_cut_closes_both_sides_now(proxy, echo):
    with connect(proxy) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        proxy.cut()
        sock.settimeout(2)
        assert sock.recv(10) == b"", "the client side was not closed"
    assert proxy.stats().cuts == 1
    wait_until(lambda: proxy.open_connections() == 0, 2, "the cut links to close")
    # cut is a moment: new connections pass
    with connect(proxy) as sock:
        sock.sendall(b"b")
        assert recv_exactly(sock, 1) == b"b"


def test_down_closes_every_new_connection_until_healed(proxy, echo):
    proxy.down()
    before = echo.connections
    for _ in range(3):
        with connect(proxy) as sock:
            sock.settimeout(2)
            try:
                assert sock.recv(10) == b""
            except ConnectionResetError:
                pass
    assert proxy.stats().refused == 3 and echo.connections == before
    proxy.passthrough()
    with connect(proxy) as sock:
        sock.sendall(b"up")
        assert recv_exactly(sock, 2) == b"up"


def test_blackhole_forwards_nothing_keeps_sockets_and_heals_without_loss(proxy, echo):
    with connect(proxy) as old:
        old.sendall(b"1")
        assert recv_exactly(old, 1) == b"1"
        proxy.blackhole()
        old.sendall(b"lost?")
        new = connect(proxy)  # accepted, but not connected upstream
        new.sendall(b"held")
        for sock in (old, new):
            sock.settimeout(0.4)
            with pytest.raises(socket.timeout):
                sock.recv(10)
        assert proxy.open_connections() == 2
        up = proxy.bytes_up
        proxy.passthrough()
        assert recv_exactly(old, 5) == b"lost?", "bytes sent into the black hole were not kept"
        assert recv_exactly(new, 4) == b"held"
        assert proxy.bytes_up == up + 9  # counted before the echo could come back
        new.close()


def test_reset_mid_frame_forwards_n_bytes_then_rst(proxy):
    with connect(proxy) as sock:
        sock.sendall(b"x")
        assert recv_exactly(sock, 1) == b"x"
        proxy.reset_mid_frame(after=7)
        sock.sendall(b"0123456789abcdef")
        got = b""
        sock.settimeout(2)
        with pytest.raises(ConnectionResetError):
            while True:
                chunk = sock.recv(100)
                if not chunk:
                    break
                got += chunk
        assert got == b"0123456"
    assert proxy.wait_resets(1, timeout=1)
    assert proxy.mode == "pass", "once: the proxy passes again after one reset"
    with connect(proxy) as sock:
        sock.sendall(b"again")
        assert recv_exactly(sock, 5) == b"again"


def test_retarget_and_close(echo):
    other = EchoServer()
    proxy = FaultProxy(("127.0.0.1", 9))  # nothing listens on port 9: the connection is closed
    try:
        with connect(proxy) as sock:
            sock.settimeout(2)
            try:
                assert sock.recv(1) == b""
            except ConnectionResetError:
                pass
        assert proxy.stats().upstream_failures == 1
        proxy.retarget(other)
        with connect(proxy) as sock:
            sock.sendall(b"ok")
            assert recv_exactly(sock, 2) == b"ok"
        held = connect(proxy)
        held.sendall(b"z")
        assert recv_exactly(held, 1) == b"z"
    finally:
        proxy.close()
        other.close()
    held.settimeout(2)
    assert held.recv(1) == b""  # closed by close()
    held.close()
    with pytest.raises(OSError):
        socket.create_connection((proxy.host, proxy.port), timeout=1).close()
    assert not [t for t in threading.enumerate() if t.name.startswith("proxy-")], "proxy threads left running"


def test_sync_client_through_the_proxy(tally):
    """A WebSocket sync session through the proxy: passes, and a reset in
    the middle of a reply ends the connection without the write being lost."""
    proxy = FaultProxy(tally)
    try:
        client = SyncClient(proxy)
        assert client.ok("set", name="px/a", data={"n": 1})["version"] == 1
        proxy.reset_mid_frame(after=3)
        with pytest.raises((ConnectionClosed, OSError)):
            client.request("set", name="px/a", data={"n": 2}, idem="px-2")
        client.close()
        assert proxy.wait_resets(1, timeout=2)
        # the write was committed although its reply was cut: the retry is answered from the key
        assert get_record(tally, "px/a").json()["data"] == {"n": 2}
        with SyncClient(proxy) as again:
            retry = again.ok("set", name="px/a", data={"n": 2}, idem="px-2")
            assert retry["version"] == 2
    finally:
        proxy.close()

"""Server lifecycle: graceful shutdown, keepalive pings and idle timeout,
slow-consumer disconnects, and the /metrics counters that record them."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.request
from contextlib import ExitStack

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from rawws import (BINARY, CLOSE, PING, TEXT, Buffered, ConnectionEnded, RawWebSocket,
                   build_frame, connect as tcp_connect)

TIMEOUT = 5


def ws_client(server, client_ssl_context=None, **kwargs):
    options = dict(open_timeout=TIMEOUT, close_timeout=TIMEOUT, ping_interval=None, max_size=None)
    if server.tls:
        options["ssl"] = client_ssl_context
    options.update(kwargs)
    return connect(server.ws_url(), **options)


def metrics(server, client_ssl_context=None) -> dict[str, float]:
    with urllib.request.urlopen(server.url("/metrics"), timeout=TIMEOUT,
                                context=client_ssl_context if server.tls else None) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


@pytest.fixture
def closing():
    """An ExitStack closed at teardown: clients opened with
    closing.enter_context(...) are closed even when the test fails."""
    with ExitStack() as stack:
        yield stack


def wait_for(predicate, timeout: float = TIMEOUT, interval: float = 0.05):
    """Polls until predicate() is truthy; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


# --------------------------------------------------------------------------
# Graceful shutdown


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
def test_shutdown_closes_websockets_with_1001(tally_factory, client_ssl_context, closing, tls, sig):
    server = tally_factory(tls=tls)
    clients = [closing.enter_context(ws_client(server, client_ssl_context, compression=c))
               for c in ("deflate", None, "deflate")]
    for i, ws in enumerate(clients):  # all really open and served
        ws.send(f"before shutdown {i}")
        assert ws.recv(timeout=TIMEOUT) == f"before shutdown {i}"
    idle_tcp = None
    if not tls:
        # An idle keep-alive HTTP connection must not hold the shutdown up.
        idle_tcp = tcp_connect(server.host, server.port)
        idle_tcp.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")

    started = time.monotonic()
    server.send_signal(sig)
    for ws in clients:
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=TIMEOUT)
        assert ws.protocol.close_rcvd is not None, "no close frame from the server"
        assert ws.protocol.close_rcvd.code == 1001
        assert ws.protocol.close_rcvd.reason == "server shutting down"
    code = server.wait(TIMEOUT)
    elapsed = time.monotonic() - started
    assert code == 0, server.stderr()[-4000:]
    assert elapsed < 3, f"shutdown took {elapsed:.1f}s"
    if idle_tcp:
        idle_tcp.close()


def test_shutdown_raw_client_gets_close_frame(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"hi")
    assert ws.recv_message() == (TEXT, b"hi")
    tally.send_signal(signal.SIGTERM)
    frame = ws.recv_close()
    assert (frame.close_code, frame.close_reason) == (1001, b"server shutting down")
    ws.send_close(1001)
    ws.conn.wait_eof()
    # Close our end too: the server half-closes and waits (up to its 5 s
    # close timeout) for our FIN before it lets the connection go.
    ws.close()
    assert tally.wait(TIMEOUT) == 0


def test_shutdown_during_a_fragmented_message(tally):
    ws = RawWebSocket.open(tally.host, tally.port)
    ws.send(TEXT, b"half a message", fin=False)
    ws.send(PING, b"sync")  # the pong proves the fragment was read
    assert ws.recv_frame().payload == b"sync"
    tally.send_signal(signal.SIGTERM)
    assert ws.recv_close().close_code == 1001
    ws.send_close(1001)
    ws.conn.wait_eof()
    ws.close()
    assert tally.wait(TIMEOUT) == 0


def test_shutdown_with_a_client_that_never_answers_the_close(tally):
    """The server waits for the client's close frame only up to its close
    timeout (5 s), then exits anyway."""
    ws = RawWebSocket.open(tally.host, tally.port)
    started = time.monotonic()
    tally.send_signal(signal.SIGTERM)
    assert ws.recv_close().close_code == 1001
    assert tally.wait(8) == 0
    assert time.monotonic() - started < 7
    ws.close()


# --------------------------------------------------------------------------
# Keepalive pings and idle timeout


def test_idle_client_is_pinged_then_closed(tally_factory, closing):
    server = tally_factory("--ping-interval", "0.2", "--idle-timeout", "1")
    # websockets answers pings automatically (its reader thread), and sends
    # no pings of its own here: only its pongs keep it alive.
    polite = closing.enter_context(ws_client(server, compression=None))
    mute = RawWebSocket.open(server.host, server.port)  # never answers pings
    opened = time.monotonic()

    pings = []
    while True:
        frame = mute.recv_frame(timeout=3)
        if frame.opcode == PING:
            pings.append(time.monotonic() - opened)
            continue
        assert frame.opcode == CLOSE, f"unexpected {frame}"
        break
    closed_after = time.monotonic() - opened
    assert pings, "the silent client was never pinged"
    assert pings[0] < 0.9, f"first ping after {pings[0]:.2f}s with --ping-interval 0.2"
    assert frame.close_code == 1001, (frame.close_code, frame.close_reason)
    assert 0.8 <= closed_after <= 2.5, f"closed after {closed_after:.2f}s with --idle-timeout 1"
    mute.send_close(1001)
    mute.conn.wait_eof()
    mute.close()

    time.sleep(max(0.0, 2.2 - (time.monotonic() - opened)))
    polite.send("still open after 2 s")  # raises if closed
    assert polite.recv(timeout=TIMEOUT) == "still open after 2 s"
    assert polite.protocol.close_rcvd is None
    assert metrics(server)["tally_idle_timeouts_total"] >= 1
    polite.close()


def test_active_client_is_not_timed_out(tally_factory):
    """Messages count as activity: a client that talks every 0.15 s but
    never answers pings is still open after 2 s (idle timeout 1 s)."""
    server = tally_factory("--ping-interval", "0.2", "--idle-timeout", "1")
    ws = RawWebSocket.open(server.host, server.port)
    deadline = time.monotonic() + 2
    i = 0
    while time.monotonic() < deadline:
        ws.send(TEXT, f"tick {i}".encode())
        opcode, payload = ws.recv_message(answer_pings=False)
        assert (opcode, payload) == (TEXT, f"tick {i}".encode())
        i += 1
        time.sleep(0.15)
    ws.send_close(1000)
    assert ws.recv_close().close_code == 1000
    ws.close()


# --------------------------------------------------------------------------
# Slow consumer


def test_slow_consumer_is_disconnected(tally_factory, closing):
    server = tally_factory("--max-outbound", "64K")
    bystander = closing.enter_context(ws_client(server, compression=None))

    # A tiny receive window, and we never read: the echoes pile up in the
    # server's outbound queue.
    slow = RawWebSocket.open(server.host, server.port, rcvbuf=4096)
    frame = build_frame(BINARY, os.urandom(256 * 1024))
    sent, send_error = 0, None
    slow.conn.sock.settimeout(TIMEOUT)
    for _ in range(100):  # 25 MiB at most
        try:
            slow.conn.sock.sendall(frame)
        except (ConnectionResetError, BrokenPipeError) as error:
            send_error = error
            break
        except socket.timeout:
            pytest.fail(f"the server stopped reading after {sent} messages but did not "
                        f"disconnect the slow consumer")
        sent += 1

    assert wait_for(lambda: metrics(server)["tally_slow_consumer_disconnects_total"] >= 1), (
        f"no slow-consumer disconnect after {sent} messages of 256 KiB (send error: {send_error})")

    # The other client is still served.
    bystander.send(b"are you there?")
    assert bystander.recv(timeout=TIMEOUT) == b"are you there?"
    bystander.close()

    # Now read what the slow client was sent: echoes, then 1008 or a reset.
    slow.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    try:
        close = slow.recv_close(timeout=TIMEOUT, skip_data=True)
    except ConnectionEnded:
        close = None  # the connection was reset/closed without a close frame: allowed
    print(f"slow consumer: {sent} messages sent, send error {send_error!r}, close frame {close}")
    if close is not None:
        assert close.close_code == 1008, (close.close_code, close.close_reason)
        assert close.close_reason.startswith(b"slow consumer"), close.close_reason
    slow.close()


# --------------------------------------------------------------------------
# /metrics

COUNTERS = ["tally_connections_accepted_total", "tally_websocket_upgrades_total",
            "tally_http_requests_total", "tally_messages_in_total", "tally_messages_out_total",
            "tally_bytes_in_total", "tally_bytes_out_total", "tally_slow_consumer_disconnects_total",
            "tally_protocol_errors_total", "tally_idle_timeouts_total",
            "tally_tls_handshake_failures_total", "tally_http_read_pauses_total"]
GAUGES = ["tally_connections_open", "tally_websockets_open"]


def test_metrics_counters(tally, closing):
    before = metrics(tally)
    assert set(COUNTERS + GAUGES) <= set(before), sorted(set(COUNTERS + GAUGES) - set(before))
    assert before["tally_websockets_open"] == 0

    ws = closing.enter_context(ws_client(tally, compression="deflate"))
    for i in range(5):
        ws.send(f"count me {i}")
        assert ws.recv(timeout=TIMEOUT) == f"count me {i}"
    violator = RawWebSocket.open(tally.host, tally.port)
    violator.send(TEXT, b"x", mask=False)
    violator.expect_close(1002)
    violator.close()

    during = metrics(tally)
    assert during["tally_websockets_open"] == 1
    assert during["tally_websocket_upgrades_total"] - before["tally_websocket_upgrades_total"] == 2
    assert during["tally_messages_in_total"] - before["tally_messages_in_total"] == 5
    assert during["tally_messages_out_total"] - before["tally_messages_out_total"] == 5
    assert during["tally_protocol_errors_total"] - before["tally_protocol_errors_total"] == 1
    assert during["tally_http_requests_total"] > before["tally_http_requests_total"]
    assert during["tally_bytes_in_total"] > before["tally_bytes_in_total"]
    assert during["tally_bytes_out_total"] > before["tally_bytes_out_total"]
    assert during["tally_connections_accepted_total"] >= before["tally_connections_accepted_total"] + 3

    ws.close()
    assert wait_for(lambda: metrics(tally)["tally_websockets_open"] == 0)
    # Only the /metrics request's own connection is left open.
    assert wait_for(lambda: metrics(tally)["tally_connections_open"] == 1)


def test_metrics_count_tls_handshake_failures(tally_factory, client_ssl_context):
    server = tally_factory(tls=True)
    plain = Buffered(tcp_connect(server.host, server.port))
    plain.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")  # HTTP on a TLS port
    try:
        plain.wait_eof()
    except AssertionError:
        pass  # a TLS alert may come back first; what matters is the count
    plain.sock.close()
    assert wait_for(lambda: metrics(server, client_ssl_context)["tally_tls_handshake_failures_total"] >= 1)
    with ws_client(server, client_ssl_context) as ws:  # still serving TLS
        ws.send("secure")
        assert ws.recv(timeout=TIMEOUT) == "secure"

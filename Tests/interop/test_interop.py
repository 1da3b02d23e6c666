"""Interop with a third-party implementation: Python `websockets` 17.x.

(a) websockets client -> tally server (/echo)
(b) tally client (`tally echo-check`) -> websockets echo server

Both with and without permessage-deflate and TLS.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import threading

import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.sync.client import connect
from websockets.sync.server import serve

from conftest import TALLY_BIN, tally_process

KiB, MiB = 1024, 1024 * 1024
SIZES = [0, 1, 125, 126, 127, 65535, 65536, 1 * MiB, 16 * MiB]
TIMEOUT = 10


def text_of_size(n: int) -> str:
    """A str whose UTF-8 encoding is exactly n bytes, with 1- to 4-byte
    characters (so fragment and frame boundaries can fall inside one)."""
    unit = "aé€😀"  # 1 + 2 + 3 + 4 bytes
    return unit * (n // 10) + "x" * (n % 10)


def binary_of_size(n: int) -> bytes:
    return os.urandom(n)  # incompressible: exercises deflate's worst case


# --------------------------------------------------------------------------
# (a) websockets client -> tally server


@pytest.fixture(scope="module")
def tally_plain(tmp_path_factory):
    with tally_process([], tmp_path_factory.mktemp("tally") / "stderr") as server:
        yield server
    assert server.exit_code == 0, server.stderr()[-4000:]


@pytest.fixture(scope="module")
def tally_tls(tmp_path_factory, tls_cert):
    cert, key = tls_cert
    args = ["--tls-cert", str(cert), "--tls-key", str(key)]
    with tally_process(args, tmp_path_factory.mktemp("tally-tls") / "stderr") as server:
        yield server
    assert server.exit_code == 0, server.stderr()[-4000:]


@pytest.fixture(params=[False, True], ids=["ws", "wss"])
def echo_server(request):
    return request.getfixturevalue("tally_tls" if request.param else "tally_plain")


def ws_connect(server, client_ssl_context, **kwargs):
    options = dict(open_timeout=TIMEOUT, close_timeout=TIMEOUT, max_size=None, ping_interval=None)
    if server.tls:
        options["ssl"] = client_ssl_context
    options.update(kwargs)
    return connect(server.ws_url(), **options)


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_negotiated_extension_header(echo_server, client_ssl_context, compression):
    with ws_connect(echo_server, client_ssl_context, compression=compression) as ws:
        header = ws.response.headers.get("Sec-WebSocket-Extensions")
        if compression:
            assert header is not None and header.split(";")[0].strip() == "permessage-deflate", header
            assert [type(e).__name__ for e in ws.protocol.extensions] == ["PerMessageDeflate"]
        else:
            assert header is None
            assert ws.protocol.extensions == []


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_echo_sizes(echo_server, client_ssl_context, compression, size):
    text, data = text_of_size(size), binary_of_size(size)
    assert len(text.encode()) == size
    with ws_connect(echo_server, client_ssl_context, compression=compression) as ws:
        ws.send(text)
        echoed = ws.recv(timeout=TIMEOUT)
        assert isinstance(echoed, str) and echoed == text
        ws.send(data)
        echoed = ws.recv(timeout=TIMEOUT)
        assert isinstance(echoed, bytes) and echoed == data


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_fragmented_sends(echo_server, client_ssl_context, compression):
    with ws_connect(echo_server, client_ssl_context, compression=compression) as ws:
        # Fragment boundaries inside multi-byte characters are fine on the
        # wire; websockets splits str fragments on characters, so build bytes
        # fragments for binary and str fragments for text.
        ws.send(["hé", "", "llo ", "wörld ", "😀"])
        assert ws.recv(timeout=TIMEOUT) == "héllo wörld 😀"
        ws.send([b"\x00\x01", b"", b"\x02", b"\xff" * 300])
        assert ws.recv(timeout=TIMEOUT) == b"\x00\x01\x02" + b"\xff" * 300

        big = binary_of_size(1 * MiB + 3)
        ws.send(big[i:i + 64 * KiB] for i in range(0, len(big), 64 * KiB))
        assert ws.recv(timeout=TIMEOUT) == big

        text = text_of_size(300 * KiB)
        ws.send(text[i:i + 10_000] for i in range(0, len(text), 10_000))
        assert ws.recv(timeout=TIMEOUT) == text


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_many_messages_one_connection(echo_server, client_ssl_context, compression):
    """Deflate keeps its context across messages (context takeover): many
    similar messages in a row catch a desynchronised window."""
    with ws_connect(echo_server, client_ssl_context, compression=compression) as ws:
        for i in range(300):
            message = f"message {i}: " + "tally " * (i % 50)
            ws.send(message if i % 3 else message.encode())
            assert ws.recv(timeout=TIMEOUT) == (message if i % 3 else message.encode())


@pytest.mark.parametrize("params", [
    dict(client_no_context_takeover=True, server_no_context_takeover=True),
    dict(server_max_window_bits=10, client_max_window_bits=9),
    dict(server_max_window_bits=9),
], ids=["no-context-takeover", "window-bits-10-9", "server-window-9"])
def test_deflate_parameters(tally_plain, client_ssl_context, params):
    factory = ClientPerMessageDeflateFactory(**params)
    with ws_connect(tally_plain, client_ssl_context, compression=None, extensions=[factory]) as ws:
        header = ws.response.headers.get("Sec-WebSocket-Extensions")
        assert header is not None and header.startswith("permessage-deflate"), header
        assert len(ws.protocol.extensions) == 1
        for i in range(20):
            message = ("window " * 400 + str(i)) if i % 2 else binary_of_size(5000) + b"z" * 5000
            ws.send(message)
            assert ws.recv(timeout=TIMEOUT) == message


def test_deflate_server_window_8_is_declined(tally_plain, client_ssl_context):
    """zlib cannot compress with a 256-byte window, so an offer requiring
    server_max_window_bits=8 is declined (RFC 7692 7.1.2.1 allows that) and
    the connection works uncompressed."""
    factory = ClientPerMessageDeflateFactory(server_max_window_bits=8)
    with ws_connect(tally_plain, client_ssl_context, compression=None, extensions=[factory]) as ws:
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        ws.send("still works " * 100)
        assert ws.recv(timeout=TIMEOUT) == "still works " * 100


def test_default_max_message_size_is_16_mib(tally_plain, client_ssl_context):
    """16 MiB is echoed (test_echo_sizes); one byte more is closed with 1009."""
    with ws_connect(tally_plain, client_ssl_context, compression=None) as ws:
        ws.send(b"\x00" * (16 * MiB + 1))
        with pytest.raises(ConnectionClosedError) as info:
            ws.recv(timeout=TIMEOUT)
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009, info.value


# --------------------------------------------------------------------------
# (b) tally client -> websockets echo server


class FrameLog(logging.Handler):
    """Collects the websockets server's frame debug lines ("< CONT ...")."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


class WebsocketsEchoServer:
    """A websockets echo server on 127.0.0.1 in a thread of its own."""

    def __init__(self, compression, ssl_context):
        self.extensions: list[str | None] = []
        self.frames = FrameLog()
        self.logger = logging.getLogger(f"interop.echo.{id(self)}")
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self.frames)
        self.server = serve(self._echo, "127.0.0.1", 0, compression=compression, ssl=ssl_context,
                            max_size=None, logger=self.logger, ping_interval=None)
        self.port = self.server.socket.getsockname()[1]
        self.url = f"{'wss' if ssl_context else 'ws'}://127.0.0.1:{self.port}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _echo(self, ws):
        self.extensions.append(ws.response.headers.get("Sec-WebSocket-Extensions"))
        for message in ws:
            ws.send(message)

    def stop(self):
        self.server.shutdown()
        self.thread.join(TIMEOUT)


@pytest.fixture
def websockets_echo(request, server_ssl_context):
    servers = []

    def start(compression="deflate", tls=False):
        server = WebsocketsEchoServer(compression, server_ssl_context if tls else None)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def echo_check(url: str, *args: str, timeout: float = 40) -> subprocess.CompletedProcess:
    return subprocess.run([str(TALLY_BIN), "echo-check", url, *args], capture_output=True,
                          text=True, timeout=timeout)


def echo_check_against(handler, *args: str, **serve_options) -> subprocess.CompletedProcess:
    """Runs `tally echo-check` against a websockets server on 127.0.0.1 that
    answers with ``handler``, in a thread of its own for the duration."""
    with serve(handler, "127.0.0.1", 0, max_size=None, **serve_options) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        try:
            return echo_check(f"ws://127.0.0.1:{port}/", *args)
        finally:
            server.shutdown()
            thread.join(TIMEOUT)


def assert_all_passed(result: subprocess.CompletedProcess, cases: int) -> None:
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0 and summary == f"{cases} passed, 0 failed", (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")


@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
def test_echo_check_against_websockets(websockets_echo, tls_cert, tls, compression):
    server = websockets_echo(compression="deflate", tls=tls)
    args = [] if compression else ["--no-compression"]
    if tls:
        args += ["--ca", str(tls_cert[0])]
    # Default sizes: 0 ... 16 MiB, text and binary, plus the close handshake.
    result = echo_check(server.url, *args)
    assert_all_passed(result, 9 * 2 + 1)
    assert len(server.extensions) == 1
    if compression:
        assert server.extensions[0] is not None and server.extensions[0].startswith("permessage-deflate")
    else:
        assert server.extensions[0] is None


@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
def test_echo_check_when_server_refuses_deflate(websockets_echo, tls_cert, tls):
    server = websockets_echo(compression=None, tls=tls)
    args = ["--ca", str(tls_cert[0])] if tls else []
    result = echo_check(server.url, *args, "--sizes", "0,1,126,65536,1048576")
    assert_all_passed(result, 5 * 2 + 1)
    assert server.extensions == [None]


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "plain"])
@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
def test_echo_check_fragmented(websockets_echo, tls_cert, tls, compression):
    server = websockets_echo(compression="deflate", tls=tls)
    args = ["--fragment", "1000", "--sizes", "0,1,999,1000,1001,65536,1048576"]
    if not compression:
        args.append("--no-compression")
    if tls:
        args += ["--ca", str(tls_cert[0])]
    result = echo_check(server.url, *args)
    assert_all_passed(result, 7 * 2 + 1)
    continuations = [line for line in server.frames.lines if line.startswith("< CONT")]
    # 1048576 / 1000 -> 1049 fragments per message, two messages: well over 2000.
    assert len(continuations) >= 2000, f"only {len(continuations)} continuation frames received"


def test_echo_check_insecure_and_untrusted(websockets_echo):
    server = websockets_echo(tls=True)
    result = echo_check(server.url, "--insecure", "--sizes", "0,100")
    assert_all_passed(result, 2 * 2 + 1)
    # Without --ca or --insecure the self-signed certificate must be refused.
    result = echo_check(server.url, "--sizes", "0", timeout=TIMEOUT)
    assert result.returncode != 0, result.stdout


# --------------------------------------------------------------------------
# More websockets client -> tally


def test_no_compression_flag_refuses_deflate(tally_factory, client_ssl_context):
    server = tally_factory("--no-compression")
    with ws_connect(server, client_ssl_context, compression="deflate") as ws:
        assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
        ws.send("uncompressed " * 100)
        assert ws.recv(timeout=TIMEOUT) == "uncompressed " * 100


def test_no_echo_flag_removes_the_endpoint(tally_factory, client_ssl_context):
    from websockets.exceptions import InvalidStatus
    server = tally_factory("--no-echo")
    with pytest.raises(InvalidStatus) as info:
        with ws_connect(server, client_ssl_context):
            pass
    assert info.value.response.status_code == 404


@pytest.mark.parametrize("tls", [False, True], ids=["ws", "wss"])
def test_concurrent_clients(tally_factory, client_ssl_context, tls):
    """24 clients in threads, half with deflate, each sending 40 messages of
    assorted sizes: every echo matches and stays on its own connection."""
    import random
    server = tally_factory(tls=tls)
    errors: list[BaseException] = []

    def client(n: int) -> None:
        rng = random.Random(n)
        try:
            with ws_connect(server, client_ssl_context,
                            compression="deflate" if n % 2 else None) as ws:
                for i in range(40):
                    size = rng.choice([0, 10, 125, 126, 1000, 65536, 200_000])
                    message = (f"client {n} message {i} " * (size // 20 + 1))[:size]
                    ws.send(message if i % 2 else message.encode())
                    assert ws.recv(timeout=TIMEOUT) == (message if i % 2 else message.encode())
        except BaseException as error:  # reported below with the client number
            errors.append(AssertionError(f"client {n}: {error!r}"))

    threads = [threading.Thread(target=client, args=(n,)) for n in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "clients still running after 30 s"
    assert not errors, errors[:3]


# --------------------------------------------------------------------------
# More tally client -> websockets servers


def test_echo_check_against_server_with_deflate_parameters(tls_cert):
    """websockets negotiates small windows and no context takeover: the
    client must honour the parameters in the response."""
    from websockets.extensions.permessage_deflate import ServerPerMessageDeflateFactory
    factory = ServerPerMessageDeflateFactory(server_max_window_bits=10, client_max_window_bits=10,
                                             server_no_context_takeover=True,
                                             client_no_context_takeover=True,
                                             require_client_max_window_bits=False)
    seen = []

    def echo(ws):
        seen.append(ws.response.headers.get("Sec-WebSocket-Extensions"))
        for message in ws:
            ws.send(message)

    result = echo_check_against(echo, "--sizes", "0,1,125,4000,65536,1048576",
                                compression=None, extensions=[factory])
    assert_all_passed(result, 6 * 2 + 1)
    assert seen and "server_no_context_takeover" in seen[0] and "server_max_window_bits=10" in seen[0], seen


def test_echo_check_against_fragmenting_and_pinging_server():
    """The server answers in 1000-byte fragments and pings between them:
    the client reassembles, answers the pings, and is not confused."""
    pings = itertools.count()

    def echo(ws):
        for message in ws:
            chunks = [message[i:i + 1000] for i in range(0, len(message), 1000)] or [message]

            def fragments():
                for k, chunk in enumerate(chunks):
                    if k % 50 == 1:
                        ws.ping(f"between fragments {next(pings)}".encode())  # control frame mid-message
                    yield chunk
            ws.send(fragments())

    result = echo_check_against(echo, "--sizes", "0,1,999,1000,1001,65536,1048576",
                                compression="deflate", ping_interval=0.05, ping_timeout=5)
    assert_all_passed(result, 7 * 2 + 1)


def test_echo_check_detects_a_wrong_echo():
    """echo-check must really compare: a server that flips one byte fails."""
    def bad_echo(ws):
        for message in ws:
            if len(message) > 10:
                message = message[:5] + (b"X" if isinstance(message, bytes) else "X") + message[6:]
            ws.send(message)

    result = echo_check_against(bad_echo, "--sizes", "1,1000")
    assert result.returncode == 1, result.stdout
    assert result.stdout.strip().splitlines()[-1].endswith("2 failed"), result.stdout


def test_echo_check_against_tally(tally_factory, tls_cert):
    """Our client against our server, over TLS, fragmented: the two halves agree."""
    server = tally_factory(tls=True)
    result = echo_check(server.ws_url(), "--ca", str(tls_cert[0]), "--fragment", "4096",
                        "--sizes", "0,1,4095,4096,4097,1048576")
    assert_all_passed(result, 6 * 2 + 1)

"""A fault-injecting TCP proxy for the tests, run in-process on 127.0.0.1.

    proxy = FaultProxy(server)            # forwards 127.0.0.1:proxy.port -> server
    proxy.url                             # "ws://127.0.0.1:PORT": give it to the client
    proxy.cut()                           # close both sides of every connection now
    proxy.down()                          # cut, and close every new connection at once
    proxy.delay(50)                       # hold each chunk 50 ms before forwarding it
    proxy.blackhole()                     # accept, forward nothing, keep sockets open
    proxy.reset_mid_frame(after=5)        # the next server->client bytes: pass 5, then RST
    proxy.passthrough()                   # back to normal (black-holed data flows on)
    proxy.retarget(new_server)            # a restarted hub listens on a new port
    proxy.close()                         # clean shutdown: listener and sockets closed,
                                          # threads joined

Modes switch at runtime and apply to connections already open as well as new
ones. What each does:

- ``pass``: bytes are forwarded as they come, both ways (``delay_ms`` may be
  set with it: each chunk is held that long first — that is the ``delay``
  mode).
- ``cut``: every open connection is closed on both sides (FIN), now. With
  ``refuse`` (``down()``) the proxy keeps closing every connection it
  accepts, as an unreachable hub would, until another mode is set.
- ``blackhole``: nothing is read or forwarded in either direction; sockets
  stay open (a partition: the peers see silence, not a close). New
  connections are accepted but get no upstream connection. When the mode
  changes back, data the kernel buffered meanwhile flows on (TCP loses
  nothing), and held new connections are connected upstream.
- ``reset``: on each connection (or, with ``once``, the first one to get
  there), the next ``after`` bytes the server sends are forwarded, then the
  client side is closed with an RST (SO_LINGER 0) and the server side closed:
  a reply cut mid-frame. ``once`` puts the proxy back to ``pass`` after it.

Counters (``stats()``): bytes forwarded each way, connections accepted and
open, cuts, resets, refused connections, failed upstream connects.

One thread per connection owns both of its sockets (select with a short
timeout), so only that thread ever closes them; control methods set flags
the thread acts on within ``TICK`` seconds.
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

HOST = "127.0.0.1"
TICK = 0.02  # how often a connection thread looks at the mode
CONNECT_TIMEOUT = 5.0
SEND_TIMEOUT = 10.0  # a peer that reads nothing for this long loses the connection

MODES = ("pass", "cut", "blackhole", "reset")


@dataclass
class _Link:
    client: socket.socket
    number: int
    upstream: socket.socket | None = None
    stop: bool = False  # close both sides (FIN) at the next tick
    reset_generation: int = 0  # the reset arming this link has taken its budget from
    reset_budget: int | None = None  # server->client bytes left before the RST
    thread: threading.Thread | None = None
    bytes_up: int = 0
    bytes_down: int = 0


@dataclass
class ProxyStats:
    accepted: int = 0
    open: int = 0
    bytes_up: int = 0  # client -> server, forwarded
    bytes_down: int = 0  # server -> client, forwarded
    cuts: int = 0  # connections closed by cut/down
    refused: int = 0  # connections closed at accept while down
    resets: int = 0  # connections ended with an RST
    upstream_failures: int = 0  # the target did not accept
    extra: dict = field(default_factory=dict)


class FaultProxy:
    """See the module docstring. ``target`` is a TallyServer-like object
    (``host``, ``port``; or ``proxy_address``, where a proxy in front of
    it goes) or a ``(host, port)`` tuple. The proxy itself looks
    like a plain-HTTP TallyServer (``host``, ``port``, ``tls``, ``url()``,
    ``ws_url()``), so synclib's clients and REST helpers work through it."""

    tls = False

    def __init__(self, target, *, name: str = "proxy"):
        self.name = name
        self._target = self._address(target)
        self._lock = threading.Lock()
        self._mode = "pass"
        self._delay_ms = 0.0
        self._refuse = False
        self._reset_after = 0
        self._reset_once = True
        self._reset_generation = 0
        self._links: list[_Link] = []
        self._stats = ProxyStats()
        self._closed = threading.Event()
        self._changed = threading.Condition(self._lock)
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(TICK * 5)
        self.host = HOST
        self.port = self._listener.getsockname()[1]
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"{name}-accept", daemon=True)
        self._accept_thread.start()

    # -- addresses ----------------------------------------------------------

    @staticmethod
    def _address(target) -> tuple[str, int]:
        if isinstance(target, tuple):
            return target
        # A server may say where a proxy in front of it forwards to (conftest's
        # pair of hubs: the second one).
        return getattr(target, "proxy_address", None) or (target.host, target.port)

    @property
    def target(self) -> tuple[str, int]:
        with self._lock:
            return self._target

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    def ws_url(self, path: str = "/v1/ws") -> str:
        return f"ws://{self.host}:{self.port}{path}"

    def http_url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def retarget(self, target) -> None:
        """New connections go to ``target`` (open ones keep their upstream)."""
        with self._lock:
            self._target = self._address(target)

    # -- modes ----------------------------------------------------------------

    @property
    def mode(self) -> str:
        with self._lock:
            return self._mode

    def set_mode(self, mode: str, *, delay_ms: float = 0.0, after: int = 0, once: bool = True,
                 refuse: bool = False) -> None:
        """Switches to ``mode`` (one of MODES). ``delay_ms`` holds every
        forwarded chunk (``pass``/``reset``); ``after``/``once`` arm ``reset``;
        ``refuse`` keeps ``cut`` closing new connections."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r} (one of {MODES})")
        if after < 0 or delay_ms < 0:
            raise ValueError("after and delay_ms must be >= 0")
        with self._changed:
            self._mode = mode
            self._delay_ms = float(delay_ms)
            self._refuse = refuse and mode == "cut"
            if mode == "reset":
                self._reset_after = after
                self._reset_once = once
                self._reset_generation += 1
            if mode == "cut":
                for link in self._links:
                    link.stop = True
                    self._stats.cuts += 1
                self._mode = "cut" if self._refuse else "pass"
            self._changed.notify_all()

    def passthrough(self) -> None:
        self.set_mode("pass")

    def delay(self, ms: float) -> None:
        """Every chunk, both ways, is held ``ms`` milliseconds."""
        self.set_mode("pass", delay_ms=ms)

    def cut(self) -> None:
        """Closes both sides of every open connection now; new ones pass."""
        self.set_mode("cut")

    def down(self) -> None:
        """Cut, and keep closing every new connection (the hub looks down)
        until another mode is set."""
        self.set_mode("cut", refuse=True)

    def blackhole(self) -> None:
        self.set_mode("blackhole")

    def reset_mid_frame(self, after: int = 5, *, once: bool = True, delay_ms: float = 0.0) -> None:
        self.set_mode("reset", after=after, once=once, delay_ms=delay_ms)

    # -- counters -------------------------------------------------------------

    def stats(self) -> ProxyStats:
        with self._lock:
            s = self._stats
            return ProxyStats(s.accepted, sum(1 for _ in self._links), s.bytes_up, s.bytes_down, s.cuts,
                              s.refused, s.resets, s.upstream_failures, dict(s.extra))

    @property
    def bytes_up(self) -> int:
        return self.stats().bytes_up

    @property
    def bytes_down(self) -> int:
        return self.stats().bytes_down

    def open_connections(self) -> int:
        with self._lock:
            return len(self._links)

    def wait_accepted(self, count: int, timeout: float = 10.0) -> bool:
        """Waits (bounded) until ``count`` connections have been accepted in
        total; whether they were."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._stats.accepted < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def wait_resets(self, count: int = 1, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._stats.resets < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    # -- shutdown -------------------------------------------------------------

    def close(self, timeout: float = 5.0) -> None:
        """Stops accepting, closes every connection, joins the threads."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._changed:
            for link in self._links:
                link.stop = True
            self._changed.notify_all()
        self._accept_thread.join(timeout)
        self._listener.close()
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [link.thread for link in self._links if link.thread]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the threads ----------------------------------------------------------

    def _accept_loop(self) -> None:
        number = 0
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._changed:
                self._stats.accepted += 1
                refuse = self._mode == "cut" and self._refuse or self._closed.is_set()
                if refuse:
                    self._stats.refused += 1
                self._changed.notify_all()
            if refuse:
                _close(client)
                continue
            number += 1
            link = _Link(client, number)
            link.thread = threading.Thread(target=self._run, args=(link,), name=f"{self.name}-{number}", daemon=True)
            with self._lock:
                self._links.append(link)
            link.thread.start()

    def _run(self, link: _Link) -> None:
        rst = False
        try:
            if not self._connect_upstream(link):
                return
            rst = self._pump(link)
        except OSError:
            pass
        finally:
            if rst:
                # SO_LINGER 0: close() sends RST and drops unsent data.
                try:
                    link.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
                link.client.close()
            else:
                _close(link.client)
            if link.upstream is not None:
                _close(link.upstream)
            with self._changed:
                if link in self._links:
                    self._links.remove(link)
                if rst:
                    self._stats.resets += 1
                self._changed.notify_all()

    def _connect_upstream(self, link: _Link) -> bool:
        # A black-holed new connection waits (accepted, silent) for the mode to change.
        with self._changed:
            while self._mode == "blackhole" and not link.stop and not self._closed.is_set():
                self._changed.wait(TICK * 5)
            if link.stop or self._closed.is_set():
                return False
            target = self._target
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT)
        except OSError:
            with self._lock:
                self._stats.upstream_failures += 1
            return False
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.settimeout(SEND_TIMEOUT)
        link.client.settimeout(SEND_TIMEOUT)
        link.upstream = upstream
        return True

    def _pump(self, link: _Link) -> bool:
        """Forwards until a side closes or the link is stopped. True when the
        link must end with an RST."""
        client, upstream = link.client, link.upstream
        while True:
            with self._lock:
                if link.stop or self._closed.is_set():
                    return False
                mode, delay = self._mode, self._delay_ms / 1000.0
                if mode == "reset" and link.reset_generation != self._reset_generation:
                    link.reset_generation = self._reset_generation
                    link.reset_budget = self._reset_after
                elif mode != "reset":
                    link.reset_budget = None
            if mode == "blackhole":
                with self._changed:
                    if self._mode == "blackhole" and not link.stop and not self._closed.is_set():
                        self._changed.wait(TICK * 5)
                continue
            ready, _, _ = select.select([client, upstream], [], [], TICK)
            with self._lock:
                # Bytes that arrived after a switch to the black hole wait in
                # the socket: the mode is read again once they are there.
                if ready and self._mode == "blackhole":
                    continue
            for source in ready:
                data = source.recv(65536)
                if not data:
                    return False
                if delay:
                    time.sleep(delay)
                if source is client:
                    upstream.sendall(data)
                    with self._lock:
                        link.bytes_up += len(data)
                        self._stats.bytes_up += len(data)
                    continue
                budget = link.reset_budget
                if budget is not None:
                    with self._lock:
                        if self._mode != "reset":  # switched away meanwhile (once: another link fired)
                            budget = link.reset_budget = None
                if budget is not None and budget < len(data):
                    if budget:
                        client.sendall(data[:budget])
                    with self._changed:
                        link.bytes_down += budget
                        self._stats.bytes_down += budget
                        if self._reset_once and self._mode == "reset":
                            self._mode = "pass"
                            self._changed.notify_all()
                    return True
                client.sendall(data)
                with self._lock:
                    link.bytes_down += len(data)
                    self._stats.bytes_down += len(data)
                    if budget is not None:
                        link.reset_budget = budget - len(data)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()

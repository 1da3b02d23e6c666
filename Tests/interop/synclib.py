"""Helpers for the sync-protocol tests (Protocol/PROTOCOL.md).

`SyncClient` wraps one WebSocket connection to `/v1/ws`: `request` sends a
message with a fresh `id` and returns its reply, buffering the pushes that
arrive before it (and checking that the reply is the next one, since replies
come in request order); `ok`/`fail` also check the outcome; `next_push`
returns pushes in arrival order. `barrier()` is a request whose reply proves
that every push caused by a write acknowledged before it was sent has
arrived (guarantee 4), so "nothing else was pushed" is checked without sleeps.

The REST helpers speak http.client and return `Response` (status, lower-cased
headers, body, json()).

`run_tally` runs one `tally` command (the binary under test, $TALLY_BIN) with
a bounded time and returns a `CLIResult`; `cli_env` is the clean environment
the CLI tests give it. `wait_until` polls a condition with a deadline;
`run_threads` runs callables on threads and re-raises the first failure.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

from conftest import TALLY_BIN

WS_PATH = "/v1/ws"
TIMEOUT = 10.0

# recv_reply expectations about the reply's `id`
ANY_ID = object()
NO_ID = object()


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def without_id(reply: dict) -> dict:
    return {k: v for k, v in reply.items() if k != "id"}


class ProtocolError(AssertionError):
    pass


@dataclass
class Push:
    message: dict
    raw: str

    def __getitem__(self, key):
        return self.message[key]

    def get(self, key, default=None):
        return self.message.get(key, default)


class SyncClient:
    """One connection to the hub's sync endpoint. Not thread-safe: one
    thread per client."""

    def __init__(self, server, *, hello: bool | dict = True, timeout: float = TIMEOUT,
                 compression: str | None = None, ssl_context=None, id_prefix: str | None = None):
        self.server = server
        self.timeout = timeout
        options = dict(open_timeout=timeout, close_timeout=2, ping_interval=None, max_size=None,
                       compression=compression, max_queue=None, legacy=True)
        if server.tls:
            options["ssl"] = ssl_context
        self.ws = connect(server.ws_url(WS_PATH), **options)
        self._ids = itertools.count(1)
        self._id_prefix = id_prefix
        self.pushes: deque[Push] = deque()
        self.hello_reply: dict | None = None
        if hello:
            fields = hello if isinstance(hello, dict) else {}
            self.hello_reply = self.ok("hello", **{"protocol": 1, "client": "interop-tests/1", **fields})

    # -- plumbing ---------------------------------------------------------

    def next_id(self):
        n = next(self._ids)
        return f"{self._id_prefix}-{n}" if self._id_prefix else n

    def send(self, message: dict) -> None:
        self.ws.send(dumps(message))

    def send_raw(self, data: str | bytes) -> None:
        """Sends ``data`` as it is: str as a text frame, bytes as binary."""
        self.ws.send(data)

    def _recv(self, timeout: float) -> tuple[dict, str]:
        raw = self.ws.recv(timeout=timeout)
        if isinstance(raw, bytes):
            raise ProtocolError(f"the hub sent a binary frame: {raw[:200]!r}")
        try:
            message = json.loads(raw)
        except ValueError as error:
            raise ProtocolError(f"the hub sent invalid JSON ({error}): {raw[:300]!r}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"the hub sent a non-object: {raw[:300]!r}")
        return message, raw

    def recv_reply(self, expect_id=ANY_ID, timeout: float | None = None, raw: bool = False):
        """The next reply (pushes before it are buffered). ``expect_id``: the
        id it must carry (NO_ID: none; ANY_ID: not checked)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no reply (expected id {expect_id!r}) within {timeout or self.timeout}s")
            message, text = self._recv(remaining)
            if "op" in message:
                if "id" in message:
                    raise ProtocolError(f"a push carries an id: {text[:300]}")
                self.pushes.append(Push(message, text))
                continue
            if expect_id is NO_ID:
                assert "id" not in message, f"reply to a message without id carries one: {text[:300]}"
            elif expect_id is not ANY_ID:
                assert "id" in message and message["id"] == expect_id and \
                    type(message["id"]) is type(expect_id), (
                        f"expected the reply to id {expect_id!r} (replies come in request order), "
                        f"got {text[:300]}")
            return (message, text) if raw else message

    def request(self, op: str, *, raw: bool = False, **fields):
        """Sends {"op": op, "id": <fresh>, **fields}; returns the reply
        (and its text with ``raw``). An explicit ``id`` field is used as is."""
        message = {"op": op, **fields}
        if "id" not in message:
            message["id"] = self.next_id()
        self.send(message)
        return self.recv_reply(message["id"], raw=raw)

    def ok(self, op: str, **fields) -> dict:
        reply = self.request(op, **fields)
        assert reply.get("ok") is True, f"{op} {dumps(fields)[:300]} failed: {dumps(reply)[:600]}"
        return reply

    def fail(self, op: str, code: str, **fields) -> dict:
        """Expects an error reply with ``code``; returns the error object."""
        reply = self.request(op, **fields)
        return expect_error(reply, code, f"{op} {dumps(fields)[:300]}")

    # -- pushes -----------------------------------------------------------

    def next_push(self, timeout: float | None = None) -> Push:
        if self.pushes:
            return self.pushes.popleft()
        message, text = self._recv(timeout or self.timeout)
        if "op" not in message:
            raise ProtocolError(f"expected a push, got a reply: {text[:300]}")
        return Push(message, text)

    def take_pushes(self, count: int, timeout: float | None = None) -> list[Push]:
        deadline = time.monotonic() + (timeout or self.timeout)
        pushes = []
        while len(pushes) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{len(pushes)} of {count} pushes arrived: "
                                   f"{[p.message for p in pushes]}")
            pushes.append(self.next_push(remaining))
        return pushes

    def barrier(self) -> dict:
        """A cheap request (get by an unused prefix). When its reply
        arrives, every push due to a write acknowledged (to anyone) before
        it was sent is in self.pushes. Returns the reply (its `seq` is the head)."""
        reply = self.ok("get", prefix="~barrier/", limit=1)
        assert reply.get("records") == [], reply
        return reply

    def drain(self) -> list[Push]:
        """barrier(), then everything buffered."""
        self.barrier()
        pushes = list(self.pushes)
        self.pushes.clear()
        return pushes

    def head(self) -> int:
        return self.barrier()["seq"]

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def expect_error(reply: dict, code: str, what: str = "the request") -> dict:
    assert reply.get("ok") is False, f"{what}: expected error {code}, got {dumps(reply)[:600]}"
    error = reply.get("error")
    assert isinstance(error, dict), f"{what}: error reply without an error object: {dumps(reply)[:600]}"
    assert error.get("code") == code, f"{what}: expected error {code}, got {dumps(error)[:600]}"
    assert isinstance(error.get("message"), str) and error["message"], (
        f"{what}: error {code} without a message: {dumps(error)}")
    return error


def fresh_head(server) -> int:
    """The hub's head seq, from the `hello` reply of a new connection."""
    with SyncClient(server) as client:
        seq = client.hello_reply["seq"]
        assert isinstance(seq, int) and seq >= 0, client.hello_reply
        return seq


def check_push_shape(push: dict) -> None:
    """Members every change push has (PROTOCOL.md, Pushes)."""
    assert push["op"] == "change", push
    assert isinstance(push["seq"], int) and push["seq"] >= 1, push
    assert isinstance(push["time"], int) and push["time"] > 1_600_000_000_000, push
    assert isinstance(push["version"], int) and push["version"] >= 1, push
    assert ("name" in push) != ("list" in push), push
    kind = push["kind"]
    if "name" in push:
        members = {"set": {"data"}, "setPath": {"path", "value"}, "deletePath": {"path"}, "delete": set()}
    else:
        members = {"addEntry": {"entry", "index"}, "removeEntry": {"entry", "indexes"},
                   "setEntries": {"entries"}, "delete": set()}
    assert kind in members, push
    assert members[kind] <= set(push), push


# --------------------------------------------------------------------------
# REST


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(f"HTTP {self.status}: body is not JSON: {self.body[:300]!r}") from None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    def error_code(self) -> str:
        body = self.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), dict), (
            f"HTTP {self.status}: not an error envelope: {self.body[:300]!r}")
        assert isinstance(body["error"].get("message"), str), body
        return body["error"]["code"]


def rest(server, method: str, path: str, body: Any = None, headers: dict | None = None,
         timeout: float = TIMEOUT) -> Response:
    """One request on a fresh connection. ``body``: bytes are sent as they
    are; anything else as JSON."""
    headers = dict(headers or {})
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    if server.tls:
        raise NotImplementedError("REST helpers speak plain HTTP")
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return Response(response.status, {k.lower(): v for k, v in response.getheaders()},
                        response.read())
    finally:
        conn.close()


def metric(server, name: str) -> float:
    """The value of a metric without labels (the sum over its series when it
    has labels)."""
    response = rest(server, "GET", "/metrics")
    assert response.status == 200, (response.status, response.body[:300])
    total, found = 0.0, False
    for line in response.body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"/metrics has no {name}"
    return total


def record_path(name: str) -> str:
    """/v1/records/{name}: slashes as they are, the rest percent-encoded."""
    return "/v1/records/" + urllib.parse.quote(name, safe="/")


def list_path(name: str) -> str:
    return "/v1/lists/" + urllib.parse.quote(name, safe="/")


def etag(version: int) -> str:
    return f'"{version}"'


def get_record(server, name: str) -> Response:
    return rest(server, "GET", record_path(name))


def put_record(server, name: str, data: Any, headers: dict | None = None) -> Response:
    return rest(server, "PUT", record_path(name), data, headers)


def all_changes(server, since: int = 0, limit: int | None = None,
                timeout: float = 30.0) -> tuple[int, int, list[dict]]:
    """GET /v1/changes?since=… page by page until `more` is false.
    Returns (head, floor, changes)."""
    changes: list[dict] = []
    deadline = time.monotonic() + timeout
    head = floor = None
    while True:
        query = f"since={since}" + (f"&limit={limit}" if limit else "")
        response = rest(server, "GET", f"/v1/changes?{query}")
        assert response.status == 200, (response.status, response.body[:300])
        page = response.json()
        head = page["seq"] if head is None else head
        floor = page["floor"] if floor is None else floor
        changes += page["changes"]
        if not page["more"]:
            return head, floor, changes
        assert page["changes"], f"more: true with no changes: {page}"
        since = page["changes"][-1]["seq"]
        assert time.monotonic() < deadline, "paging /v1/changes took too long"


# --------------------------------------------------------------------------
# A client-side model of records, to replay pushes and compare with the hub


def parse_path(path: str) -> list[str | int]:
    """`items[2].qty` -> ["items", 2, "qty"] (the simple paths the tests use)."""
    segments: list[str | int] = []
    for part in path.split("."):
        key, _, rest = part.partition("[")
        segments.append(key)
        if rest:
            for index in ("[" + rest).split("[")[1:]:
                segments.append(int(index.rstrip("]")))
    return segments


def set_at(data: dict, path: str, value: Any) -> None:
    *parents, last = parse_path(path)
    node: Any = data
    for segment in parents:
        if isinstance(segment, int):
            node = node[segment]
        else:
            node = node.setdefault(segment, {})
    if isinstance(last, int) and last == len(node):
        node.append(value)
    else:
        node[last] = value


def delete_at(data: dict, path: str) -> None:
    *parents, last = parse_path(path)
    node: Any = data
    for segment in parents:
        node = node[segment]
    del node[last]


def apply_push(records: dict[str, dict], push: dict) -> None:
    """Applies a record change push to {name: {"version", "data"}}."""
    import copy
    name = push["name"]
    kind = push["kind"]
    if kind == "delete":
        records.pop(name, None)
        return
    record = records.setdefault(name, {"version": 0, "data": {}})
    if kind == "set":
        record["data"] = copy.deepcopy(push["data"])
    elif kind == "setPath":
        set_at(record["data"], push["path"], copy.deepcopy(push["value"]))
    elif kind == "deletePath":
        delete_at(record["data"], push["path"])
    else:
        raise AssertionError(f"unknown record change kind: {push}")
    record["version"] = push["version"]


# --------------------------------------------------------------------------
# Running the CLI


class CLIResult:
    """How one `tally` command ended: argv (without the binary), exit
    status, stdout and stderr as text, and how long it took."""

    def __init__(self, argv: list[str], rc: int, out: str, err: str, elapsed: float):
        self.argv, self.rc, self.out, self.err, self.elapsed = argv, rc, out, err, elapsed

    def __repr__(self) -> str:
        return (f"`tally {' '.join(self.argv)}` -> exit {self.rc} in {self.elapsed:.2f}s\n"
                f"stdout: {self.out[-3000:]!r}\nstderr: {self.err[-3000:]!r}")

    def json(self):
        try:
            return json.loads(self.out)
        except ValueError:
            raise AssertionError(f"stdout is not one JSON value: {self!r}") from None

    def json_values(self) -> list:
        """stdout as JSON: one value (a list is spread) or one value per line."""
        text = self.out.strip()
        if not text:
            return []
        try:
            value = json.loads(text)
            return value if isinstance(value, list) else [value]
        except ValueError:
            pass
        try:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError:
            raise AssertionError(f"stdout is neither JSON nor JSON lines: {self!r}") from None

    @property
    def lines(self) -> list[str]:
        return self.out.strip().splitlines()

    def ok(self) -> "CLIResult":
        assert self.rc == 0, self
        return self


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without TALLY_* and XDG_DATA_HOME, with
    HOME at ``home``: the CLI finds no hub, token or store but the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_") and k != "XDG_DATA_HOME"}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def run_tally(args, env: dict[str, str], timeout: float) -> CLIResult:
    """Runs `tally ARGS…` (stdin closed) and waits at most ``timeout``
    seconds for it; a command that takes longer fails the test."""
    argv = [str(a) for a in args]
    start = time.monotonic()
    try:
        done = subprocess.run([str(TALLY_BIN), *argv], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"`tally {' '.join(argv)}` did not finish within {timeout}s") from None
    return CLIResult(argv, done.returncode, done.stdout.decode(errors="replace"),
                     done.stderr.decode(errors="replace"), time.monotonic() - start)


def run_threads(targets, timeout: float) -> None:
    """Runs each callable in its own thread; re-raises the first failure."""
    errors: list[BaseException] = []

    def wrap(target):
        def run():
            try:
                target()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)
        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if errors:
        raise errors[0]
    stuck = [t for t in threads if t.is_alive()]
    assert not stuck, f"{len(stuck)} threads still running after {timeout}s"


def wait_until(predicate, timeout: float, what, interval: float = 0.1):
    """Polls ``predicate`` until it returns a true value (returned) or the
    time is up (the test fails); ``what`` (a string or a callable giving
    one) says what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


# --------------------------------------------------------------------------
# Long-running commands

LINE_TIMEOUT = 5.0


class LongRunning:
    """A `tally watch`/`tally on` process; stdout and stderr lines are read
    by threads into queues."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.argv = argv
        self.process = subprocess.Popen([str(TALLY_BIN), *argv], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.out: queue.Queue[str | None] = queue.Queue()
        self.err: queue.Queue[str | None] = queue.Queue()
        self.err_seen: list[str] = []
        for stream, q in ((self.process.stdout, self.out), (self.process.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, q), daemon=True).start()

    @staticmethod
    def _pump(stream, q: queue.Queue) -> None:
        for raw in iter(stream.readline, b""):
            q.put(raw.decode(errors="replace").rstrip("\n"))
        q.put(None)

    def describe(self) -> str:
        while True:
            try:
                line = self.err.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.err_seen.append(line)
        return (f"`tally {' '.join(self.argv)}` (pid {self.process.pid}, "
                f"exit {self.process.poll()}); stderr: {self.err_seen[-20:]!r}")

    def line(self, timeout: float = LINE_TIMEOUT) -> str:
        try:
            line = self.out.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output line within {timeout}s from {self.describe()}") from None
        if line is None:
            self.out.put(None)
            raise AssertionError(f"stdout closed: {self.describe()}")
        return line

    def json_line(self, timeout: float = LINE_TIMEOUT) -> dict:
        line = self.line(timeout)
        try:
            value = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r} from {self.describe()}") from None
        assert isinstance(value, dict), line
        return value

    def json_lines(self, count: int, timeout: float = LINE_TIMEOUT) -> list[dict]:
        return [self.json_line(timeout) for _ in range(count)]

    def no_line(self, wait: float = 0.3) -> None:
        try:
            line = self.out.get(timeout=wait)
        except queue.Empty:
            return
        raise AssertionError(f"unexpected output {line!r} from {self.describe()}")

    def stderr_matching(self, text: str, timeout: float = LINE_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        for line in self.err_seen:
            if text in line.lower():
                return line
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self.err.get(timeout=max(0.0, remaining))
            except queue.Empty:
                raise AssertionError(f"no stderr line with {text!r} within {timeout}s: "
                                     f"{self.describe()}") from None
            if line is None:
                self.err.put(None)
                raise AssertionError(f"stderr closed without {text!r}: {self.describe()}")
            self.err_seen.append(line)
            if text in line.lower():
                return line

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM by PID, then SIGKILL after a bounded wait."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(3)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        return self.process.returncode

"""Helpers for the tests of several hubs on one PostgreSQL database.

`PgServer` is a private PostgreSQL server (scripts/pg-test-cluster.sh) that a
test can stop and start again on the same port, ask SQL of, and whose
sessions it can terminate. The `pg_server` and `hub_cluster` fixtures in
conftest.py start one per module and three hubs on a fresh database of it.

`FailoverWriter` and `FailoverSubscriber` are sync clients (the `websockets`
package) that survive losing their hub, as the CLI's does: on a closed
connection they connect to the next hub of their list and go on — a writer
sends the write it had in flight again with the same idempotency key, a
subscriber subscribes again with `since` = the last seq it applied and
checks that what follows continues its sequence without a gap or a
duplicate. A write refused with `unavailable` (the hub cannot reach
PostgreSQL) is sent again after a short pause, with the same key.

`RestFailoverWriter` does the same over REST: every PUT carries an
`Idempotency-Key`, and a PUT whose connection fails (refused, or cut
before the answer came) is sent again with the same key to the next hub.

`Load` runs such writers and subscribers on a prefix until stopped and then
checks that every acknowledged write is in the change log exactly once and
that every subscriber saw the log; `head_of`, `wait_for_head` and
`changes_after` read a hub's head and log.
"""

from __future__ import annotations

import http.client
import itertools
import json
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import connect

from conftest import REPO
from synclib import all_changes, dumps, record_path, rest, run_threads, wait_until

PG_SCRIPT = REPO / "scripts" / "pg-test-cluster.sh"
WS_PATH = "/v1/ws"
# What a lost or refused connection raises (a killed hub: refused; a hub
# that closed us: ConnectionClosed; a hub that never answered: TimeoutError).
CONNECTION_LOST = (ConnectionClosed, InvalidHandshake, InvalidURI, OSError, TimeoutError)
# Errors a client retries with the same idempotency key: nothing was
# acknowledged (PROTOCOL.md, Errors).
RETRIED_CODES = ("unavailable", "storage_failed", "shutting_down")
RETRY_PAUSE = 0.1
SUBSCRIBE_BUDGET = 30.0


class Refused(Exception):
    """A hello refused with ``code`` (e.g. `unavailable`: the hub cannot
    read its store to answer it)."""

    def __init__(self, code: str | None, reply: dict):
        super().__init__(f"hello refused: {reply}")
        self.code = code


class PgServer:
    """A private PostgreSQL server for one test module: trust auth, superuser
    `tally`, 127.0.0.1 on a free port. Its directory is under /tmp, which the
    `postgres` user can reach when the tests run as root."""

    def __init__(self, directory: Path, url: str):
        self.directory = directory
        self.url = url
        self.port = int((directory / "port").read_text().strip())

    @classmethod
    def start(cls) -> "PgServer":
        directory = Path(tempfile.mkdtemp(prefix="tally-pg-interop-"))
        directory.rmdir()  # the script makes it (and must find it empty)
        started = run_script("start", directory, timeout=120)
        return cls(directory, started.stdout.strip().splitlines()[-1])

    def createdb(self, name: str) -> str:
        """A new database; its URL."""
        made = run_script("createdb", self.directory, name, timeout=60)
        return made.stdout.strip().splitlines()[-1]

    def sql(self, statement: str) -> list[list[str]]:
        """Runs ``statement`` in database postgres; its rows' fields as text."""
        done = run_script("sql", self.directory, statement, timeout=30)
        return [line.split("|") for line in done.stdout.splitlines() if line]

    def terminate_sessions(self, like: str = "tally%") -> int:
        """Ends every session whose application_name is LIKE ``like`` (the
        hubs' writer, reader and watcher); how many were ended."""
        rows = self.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        f"WHERE application_name LIKE '{like}'")
        return sum(1 for row in rows if row[0] == "t")

    def sessions(self, like: str = "tally%") -> int:
        rows = self.sql(f"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE '{like}'")
        return int(rows[0][0])

    def stop_server(self) -> None:
        """Stops the server (fast: sessions end at once); the data stays."""
        run_script("stop-server", self.directory, timeout=60)

    def start_server(self) -> None:
        """Starts it again on the same port."""
        run_script("start-server", self.directory, timeout=120)

    @property
    def running(self) -> bool:
        return (self.directory / "data" / "postmaster.pid").exists()

    def destroy(self) -> None:
        """Stops the server and removes its directory."""
        if self.directory.exists():
            subprocess.run(["bash", str(PG_SCRIPT), "stop", str(self.directory)], capture_output=True, timeout=120)


def run_script(command: str, directory: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", str(PG_SCRIPT), command, str(directory), *args],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"pg-test-cluster.sh {command} failed ({done.returncode}): {done.stderr}"
    return done


def database_name(test_name: str) -> str:
    """A database name for a test (PostgreSQL folds and limits names)."""
    return "t_" + "".join(c if c.isalnum() else "_" for c in test_name.lower())[:50]


@dataclass
class HubCluster:
    """Hubs sharing one database of ``pg``."""

    pg: PgServer
    url: str
    hubs: list  # conftest.TallyServer


# --------------------------------------------------------------------------
# Clients that fail over


def open_ws(server, timeout: float):
    return connect(server.ws_url(WS_PATH), open_timeout=timeout, close_timeout=1, ping_interval=None,
                   max_size=None, max_queue=None, legacy=True)


class Connection:
    """One sync connection with request ids and replies in order; pushes
    go to ``on_push(message, raw)``."""

    def __init__(self, server, client: str, timeout: float, hello: dict | None = None):
        self.server = server
        self.timeout = timeout
        self.ws = open_ws(server, timeout)
        self.ids = itertools.count(1)
        self.hello = self.request({"op": "hello", "protocol": 1, "client": client, **(hello or {})})
        if self.hello.get("ok") is not True:
            self.close()
            raise Refused(self.hello.get("error", {}).get("code"), self.hello)

    def request(self, message: dict, on_push=None) -> dict:
        message = {**message, "id": next(self.ids)}
        self.ws.send(dumps(message))
        deadline = time.monotonic() + self.timeout
        while True:
            raw = self.ws.recv(timeout=max(0.01, deadline - time.monotonic()))
            reply = json.loads(raw)
            if "op" in reply:
                assert on_push is not None, f"a push on a connection without subscriptions: {raw[:300]}"
                on_push(reply, raw)
                continue
            assert reply.get("id") == message["id"], f"replies come in request order: sent {message}, got {raw[:300]}"
            return reply

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass


@dataclass
class Ack:
    """A write the hub acknowledged: what was sent and the reply."""

    message: dict
    reply: dict
    hub: int  # index of the hub that answered
    attempts: int


class FailoverClient:
    """What a writer and a subscriber that fail over share: the hubs, the
    one in use (``at``, moved on by one at each failure; with
    ``failover=False`` a failure fails the test instead), the connection to
    it, and how often each error code was retried."""

    def __init__(self, hubs: list, start: int, name: str, *, failover: bool, timeout: float):
        self.hubs = hubs
        self.at = start
        self.name = name
        self.failover = failover
        self.timeout = timeout
        self.connection: Connection | None = None
        self.retried: dict[str, int] = {}  # error code -> how often it was retried (hellos too)

    @property
    def hub_index(self) -> int:
        return self.at % len(self.hubs)

    def count_retry(self, code: str | None, what) -> None:
        """A refusal that says nothing was done (``RETRIED_CODES``); any
        other fails the test."""
        assert code in RETRIED_CODES, f"{self.name}: {what}"
        self.retried[code] = self.retried.get(code, 0) + 1

    def close(self) -> None:
        if self.connection:
            self.connection.close()
            self.connection = None


class FailoverWriter(FailoverClient):
    """Writes through one hub of ``hubs`` at a time; every write carries an
    idempotency key and is sent until it is acknowledged (or refused for
    good), moving to the next hub when the connection is lost."""

    def __init__(self, hubs: list, start: int, name: str, *, failover: bool = True, timeout: float = 10.0):
        super().__init__(hubs, start, name, failover=failover, timeout=timeout)
        self.keys = itertools.count(1)
        self.acks: list[Ack] = []
        self.refusals: list[tuple[dict, dict]] = []  # (message, error) refused for good
        self.reconnects = 0

    def _connect(self, deadline: float) -> Connection:
        while self.connection is None:
            hub = self.hubs[self.hub_index]
            try:
                self.connection = Connection(hub, self.name, self.timeout)
            except CONNECTION_LOST + (Refused,) as error:
                if isinstance(error, Refused):
                    self.count_retry(error.code, error)
                if not self.failover or time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: cannot connect to {hub.url()}: {error!r}") from None
                self.at += 1
                time.sleep(RETRY_PAUSE)
        return self.connection

    def _lost(self, error: BaseException, deadline: float) -> None:
        if self.connection:
            self.connection.close()
        self.connection = None
        if not self.failover or time.monotonic() > deadline:
            raise AssertionError(f"{self.name}: connection to hub {self.hub_index} lost: {error!r}") from error
        self.reconnects += 1
        self.at += 1

    def write(self, message: dict, *, expect: tuple[str, ...] = (), budget: float = 60.0) -> dict:
        """Sends ``message`` (plus an idempotency key) until it is answered:
        returns the ok reply, or the error when its code is in ``expect``
        (anything else fails the test)."""
        message = {**message, "idem": message.get("idem") or f"{self.name}-{next(self.keys)}"}
        deadline = time.monotonic() + budget
        attempts = 0
        while True:
            attempts += 1
            connection = self._connect(deadline)
            try:
                reply = connection.request(message)
            except CONNECTION_LOST as error:
                self._lost(error, deadline)
                continue
            if reply.get("ok") is True:
                self.acks.append(Ack(message, reply, self.hub_index, attempts))
                return reply
            code = reply.get("error", {}).get("code")
            if code in expect:
                self.refusals.append((message, reply["error"]))
                return reply
            self.count_retry(code, f"{dumps(message)[:300]} refused: {dumps(reply)[:600]}")
            assert time.monotonic() < deadline, f"{self.name}: {dumps(message)[:300]} still refused: {dumps(reply)[:600]}"
            if code == "shutting_down":
                self._lost(AssertionError(code), deadline)
            time.sleep(RETRY_PAUSE)

@dataclass
class RestAck:
    """A REST write a hub acknowledged: the record, the key it carried, the
    seq it was given, the hub that answered and how many tries it took
    (more than one: a hub was lost with the write in flight, or said 503)."""

    name: str
    data: dict
    key: str
    seq: int
    hub: int
    attempts: int


# What a lost hub does to an HTTP request: refused, reset, or the answer
# cut short (http.client's RemoteDisconnected is an OSError too).
REST_LOST = (OSError, http.client.HTTPException)


class RestFailoverWriter:
    """Creates records with `PUT /v1/records/{name}` through one hub of
    ``hubs`` at a time (``at``, moved on by one whenever a connection
    fails), each write with an `Idempotency-Key` it keeps until the write
    is acknowledged: a write lost with its hub may have landed, and the
    next hub answers its key with the first reply instead of applying it
    again. A 503 (the hub cannot reach PostgreSQL) is tried again on the
    same hub after a pause."""

    def __init__(self, hubs: list, start: int, name: str, *, timeout: float = 10.0):
        self.hubs = hubs
        self.at = start
        self.name = name
        self.timeout = timeout
        self.acks: list[RestAck] = []
        self.refusals: list[tuple[int, str | None, str]] = []  # (status, Retry-After, code) of each 503
        self.lost = 0  # connections that failed under a write

    @property
    def hub_index(self) -> int:
        return self.at % len(self.hubs)

    def put(self, name: str, data: dict, key: str, *, budget: float = 60.0) -> RestAck:
        """Sends the PUT until a hub answers 200 or 201 (anything else but
        503 fails the test); returns the acknowledgement."""
        deadline = time.monotonic() + budget
        attempts = 0
        while True:
            attempts += 1
            hub = self.hub_index
            try:
                response = rest(self.hubs[hub], "PUT", record_path(name), data, {"Idempotency-Key": key},
                                timeout=self.timeout)
            except REST_LOST as error:
                assert time.monotonic() < deadline, f"{self.name}: {name} never acknowledged: {error!r}"
                self.lost += 1
                self.at += 1
                time.sleep(RETRY_PAUSE)
                continue
            if response.status in (200, 201):
                ack = RestAck(name, data, key, response.json()["seq"], hub, attempts)
                self.acks.append(ack)
                return ack
            assert response.status == 503 and time.monotonic() < deadline, (
                f"{self.name}: PUT {name} answered {response.status}: {response.body[:300]!r}")
            self.refusals.append((response.status, response.header("Retry-After"), response.error_code()))
            time.sleep(RETRY_PAUSE)


class FailoverSubscriber(FailoverClient):
    """Follows ``target`` (`{"prefix": P}` or `{"list": L}`: the subscribe
    message's target) through one hub of ``hubs`` at a time. The first
    subscribe takes a snapshot; after a lost connection (or a refused
    subscribe) it subscribes on the next hub with ``since`` = the last seq
    it applied. The tests make no change outside the target, so every
    change must be the one after the last (gap-free, no duplicate), whether
    it came live or in a resume's replay, and a resume's replay must reach
    the head its reply names; ``changes`` maps seq to the parsed change,
    ``raw`` seq to the bytes of a live push."""

    def __init__(self, hubs: list, start: int, name: str, target: dict, *, failover: bool = True,
                 timeout: float = 10.0):
        super().__init__(hubs, start, name, failover=failover, timeout=timeout)
        self.target = target
        self.snapshot: dict | None = None
        self.seq: int | None = None  # the last seq applied
        self.changes: dict[int, dict] = {}
        self.raw: dict[int, str] = {}
        self.resumes: list[tuple[int, int]] = []  # (hub, since) of every resume

    def _apply(self, change: dict, raw: str | None) -> None:
        assert change.get("op") == "change", f"{self.name}: unexpected push {change}"
        seq = change["seq"]
        assert seq == self.seq + 1, (
            f"{self.name}: after seq {self.seq} got {seq} ({'a duplicate' if seq <= self.seq else 'a gap'}; "
            f"resumes {self.resumes})")
        self.seq = seq
        self.changes[seq] = change
        if raw is not None:
            self.raw[seq] = raw

    def subscribe(self, deadline: float) -> None:
        """Connects to the current hub (or, failing, the next ones) and
        subscribes: a snapshot the first time, a resume after."""
        while True:
            hub_index = self.hub_index
            try:
                self.connection = Connection(self.hubs[hub_index], self.name, self.timeout)
                message = {"op": "subscribe", **self.target}
                if self.seq is not None:
                    message["since"] = self.seq
                reply = self.connection.request(message, on_push=self._apply)
                if reply.get("ok") is True:
                    break
                code = reply.get("error", {}).get("code")
                self.count_retry(code, f"subscribe refused: {reply}")
            except Refused as error:
                self.count_retry(error.code, error)
            except CONNECTION_LOST as error:
                if not self.failover:
                    raise AssertionError(f"{self.name}: subscribe on hub {hub_index} failed: {error!r}") from None
            if self.connection:
                self.connection.close()
                self.connection = None
            assert self.failover and time.monotonic() < deadline, (
                f"{self.name}: could not subscribe again since {self.seq} before the deadline")
            self.at += 1
            time.sleep(RETRY_PAUSE)
        if self.seq is None:
            assert "resnapshot" not in reply, reply
            self.snapshot = reply
            self.seq = reply["seq"]
            return
        assert "resnapshot" not in reply, f"{self.name}: resume since {self.seq} on hub {hub_index} resnapshots"
        self.resumes.append((hub_index, self.seq))
        for change in reply["changes"]:
            self._apply(change, None)
        assert reply["seq"] == self.seq, f"{self.name}: the replay ends at {self.seq}, the reply says {reply['seq']}"

    def follow(self, until, deadline: float) -> None:
        """Applies pushes until ``until()`` says the wanted head, reached;
        subscribes again wherever the connection is lost."""
        while True:
            target = until()
            if target is not None and self.seq >= target:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: at seq {self.seq}, waiting for {target}, out of time "
                                     f"(resumes {self.resumes})")
            if self.connection is None:
                self.subscribe(deadline)
                continue
            try:
                raw = self.connection.ws.recv(timeout=0.2)
            except TimeoutError:
                continue
            except CONNECTION_LOST as error:
                self.connection.close()
                self.connection = None
                if not self.failover:
                    raise AssertionError(f"{self.name}: connection lost: {error!r}") from None
                self.at += 1
                continue
            message = json.loads(raw)
            assert "op" in message, f"{self.name}: a reply without a request: {raw[:300]}"
            self._apply(message, raw)

    def drop(self) -> None:
        """Closes the connection from another thread, as a network would:
        the following thread subscribes again."""
        connection = self.connection
        if connection:
            connection.close()


# --------------------------------------------------------------------------
# Hub state


def health(server) -> tuple[int, dict]:
    """GET /healthz: (status, body)."""
    response = rest(server, "GET", "/healthz", timeout=5)
    return response.status, response.json()


def changes_after(hub, since: int) -> list[dict]:
    """The change log of ``hub`` after ``since``, every page."""
    return all_changes(hub, since)[2]


def head_of(hub) -> int:
    """The seq a new connection's hello reports on ``hub``."""
    connection = Connection(hub, "head-probe", 10)
    try:
        return connection.hello["seq"]
    finally:
        connection.close()


def wait_for_head(hubs, seq: int, timeout: float = 20.0) -> None:
    """Until every hub has applied the changes up to ``seq``."""
    for hub in hubs:
        wait_until(lambda: head_of(hub) >= seq, timeout, lambda: f"{hub.url()} to reach seq {seq}")


def acked_changes(writers) -> list[tuple[int, str, int]]:
    """(seq, name, version) of every change the writers were told of."""
    out = []
    for writer in writers:
        for ack in writer.acks:
            for result in ack.reply.get("results") or [ack.reply]:
                out.append((result["seq"], result["name"], result["version"]))
    return sorted(out)


def subscribe_all(subscribers) -> None:
    deadline = time.monotonic() + SUBSCRIBE_BUDGET
    run_threads([lambda s=s: s.subscribe(deadline) for s in subscribers], timeout=SUBSCRIBE_BUDGET + 5)


def follow_all(subscribers, until, budget: float) -> None:
    deadline = time.monotonic() + budget
    try:
        run_threads([lambda s=s: s.follow(until, deadline) for s in subscribers], timeout=budget + 10)
    finally:
        for subscriber in subscribers:
            subscriber.close()


# --------------------------------------------------------------------------
# Load through faults


class Load:
    """Writers and subscribers on a prefix, through failover clients, until
    stopped. Each write is one change: a set at a path of the writer's own
    record (a new path each time) or an increment of its member of a
    counter record, so the log shows whether it landed once; a REST
    writer's creates a record of its own (`<prefix>rest<r>-<k>`). A test
    may add writers of its own (``add_writer``)."""

    def __init__(self, hubs, prefix: str, writers_on: list[int], subscribers_on: list[int], rest_on: list[int] = ()):
        self.hubs = hubs
        self.prefix = prefix
        self.counter = f"{prefix}counter"
        self.writers = [FailoverWriter(hubs, h, f"{prefix}w{i}") for i, h in enumerate(writers_on)]
        self.subscribers = [FailoverSubscriber(hubs, h, f"{prefix}s{i}", {"prefix": prefix}) for i, h in enumerate(subscribers_on)]
        self.rest_writers = [RestFailoverWriter(hubs, h, f"rest{r}") for r, h in enumerate(rest_on)]
        self.own_writers: list = []
        self.extra: list[tuple[str, int]] = []  # (name, seq) of writes the test made itself
        self.stop = threading.Event()
        self.head: int | None = None
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    @property
    def rest_acks(self) -> list[list[tuple[str, int]]]:
        """(name, seq) of each REST writer's acknowledged writes."""
        return [[(ack.name, ack.seq) for ack in writer.acks] for writer in self.rest_writers]

    @property
    def rest_refusals(self) -> list[list[tuple[int, str | None, str]]]:
        """(status, Retry-After, code) of each REST writer's 503s."""
        return [writer.refusals for writer in self.rest_writers]

    def acks(self) -> int:
        return sum(len(w.acks) for w in self.writers) + sum(len(w.acks) for w in self.rest_writers)

    def add_writer(self, write) -> None:
        """A writer of the test's own, started with the others (call before
        ``start``): ``write()`` is called again and again until the load
        stops."""
        self.own_writers.append(write)

    def _guard(self, body):
        def run():
            try:
                body()
            except BaseException as error:  # noqa: BLE001 - re-raised by finish()
                self.errors.append(error)
                self.stop.set()
        return run

    def _write(self, writer: FailoverWriter) -> None:
        k = 0
        while not self.stop.is_set():
            if k % 2 == 0:
                writer.write({"op": "set", "name": f"{writer.name}", "path": f"k{k}", "value": k})
            else:
                writer.write({"op": "increment", "name": self.counter, "path": writer.name[len(self.prefix):]})
            k += 1
        writer.close()

    def _rest_write(self, writer: RestFailoverWriter) -> None:
        k = 0
        while not self.stop.is_set():
            name = f"{self.prefix}{writer.name}-{k}"
            writer.put(name, {"k": k}, f"{name}-key")
            k += 1

    def _own_write(self, write) -> None:
        while not self.stop.is_set():
            write()

    def start(self) -> None:
        subscribe_all(self.subscribers)
        targets = [lambda w=w: self._write(w) for w in self.writers]
        targets += [lambda w=w: self._rest_write(w) for w in self.rest_writers]
        targets += [lambda w=w: self._own_write(w) for w in self.own_writers]
        self._run(targets)
        self._run([lambda s=s: s.follow(lambda: self.head, time.monotonic() + 120) for s in self.subscribers])

    def _run(self, targets) -> None:
        threads = [threading.Thread(target=self._guard(t), daemon=True) for t in targets]
        self.threads += threads
        for thread in threads:
            thread.start()

    def add_subscriber(self, hub: int) -> FailoverSubscriber:
        """A subscriber that starts now (its first subscribe may have to
        wait for the store)."""
        subscriber = FailoverSubscriber(self.hubs, hub, f"{self.prefix}s{len(self.subscribers)}",
                                        {"prefix": self.prefix})
        self.subscribers.append(subscriber)

        def run():
            deadline = time.monotonic() + 120
            subscriber.subscribe(deadline)
            subscriber.follow(lambda: self.head, deadline)
        self._run([run])
        return subscriber

    def wait_for_acks(self, more: int, timeout: float = 30.0) -> None:
        """Until ``more`` writes more than now are acknowledged."""
        target = self.acks() + more
        wait_until(lambda: self.acks() >= target or self.errors, timeout,
                   lambda: f"{target} acknowledged writes (have {self.acks()})")
        self.raise_errors()

    def raise_errors(self) -> None:
        if self.errors:
            raise self.errors[0]

    def finish(self, live_hubs, timeout: float = 60.0) -> None:
        """Stops the writers (each ends with its write acknowledged), then
        lets the subscribers reach the head every live hub agrees on."""
        self.stop.set()
        writers = len(self.writers) + len(self.rest_writers) + len(self.own_writers)
        for thread in self.threads[:writers]:
            thread.join(timeout)
        assert not any(t.is_alive() for t in self.threads[:writers]), "a writer did not finish"
        self.raise_errors()
        acked = [ack.reply["seq"] for writer in self.writers for ack in writer.acks]
        acked += [seq for acks in self.rest_acks for _, seq in acks]
        head = max([head_of(hub) for hub in live_hubs] + acked)
        wait_for_head(live_hubs, head)
        self.head = head
        for thread in self.threads[writers:]:
            thread.join(timeout)
        self.raise_errors()
        assert not any(t.is_alive() for t in self.threads), "a load thread did not finish"

    def close(self) -> None:
        self.stop.set()
        self.head = self.head or 0
        for thread in self.threads:
            thread.join(5)
        for client in self.writers + self.subscribers:
            client.close()

    def stats(self) -> str:
        """What the clients went through, for failure messages."""
        writers = [(w.name, len(w.acks), w.reconnects, w.retried) for w in self.writers]
        writers += [(w.name, len(w.acks), w.lost, len(w.refusals)) for w in self.rest_writers]
        subscribers = [(s.name, s.seq, s.resumes, s.retried) for s in self.subscribers]
        return f"writers (acks, reconnects, retried): {writers}; subscribers (seq, resumes, retried): {subscribers}"

    def check(self, hub) -> list[dict]:
        """Every acknowledged write is in the log exactly once, with the
        seq it was acknowledged with, and nothing else is; every
        subscriber saw exactly the log. Returns the log."""
        log = changes_after(hub, 0)
        assert [c["seq"] for c in log] == list(range(1, self.head + 1)), "the log is gap-free"
        by_seq = {c["seq"]: c for c in log}
        expected_paths = set()
        increments: dict[str, int] = {}
        for writer in self.writers:
            for ack in writer.acks:
                change = by_seq[ack.reply["seq"]]
                message = ack.message
                if message["op"] == "set":
                    assert (change["name"], change["path"], change["value"]) == (
                        message["name"], message["path"], message["value"]), (ack, change)
                    expected_paths.add((message["name"], message["path"]))
                else:
                    assert (change["name"], change["path"]) == (self.counter, message["path"]), (ack, change)
                    increments[message["path"]] = increments.get(message["path"], 0) + 1
        others = {}  # seq -> name: the REST writes and the test's own (`extra`)
        for name, seq in [pair for acks in self.rest_acks for pair in acks] + self.extra:
            assert by_seq[seq]["name"] == name, (name, by_seq[seq])
            others[seq] = name
        acked = sum(len(w.acks) for w in self.writers) + len(others)
        assert len(log) == acked, f"{len(log)} changes in the log for {acked} acknowledged writes"
        seen_paths = [(c["name"], c["path"]) for c in log
                      if c["name"] != self.counter and c["seq"] not in others]
        assert sorted(seen_paths) == sorted(expected_paths), "each acknowledged set is in the log once"
        counter = rest(hub, "GET", record_path(self.counter)).json()
        assert counter["data"] == increments, "each acknowledged increment counted once"
        for subscriber in self.subscribers:
            assert subscriber.seq == self.head, subscriber.name
            first = subscriber.snapshot["seq"]
            assert [subscriber.changes[s] for s in range(first + 1, self.head + 1)] == log[first:], (
                f"{subscriber.name} saw the log")
        return log

"""The offline mirror (issue 5), black box: `tally mirror run|get|set|del|ls|
status|conflicts` and `tally verify` against a real hub, through the
fault-injecting proxy (faultproxy.py) the tests start in-process.

The acceptance tests of the issue:
- writes made offline (while `mirror run` runs and the hub is out of reach)
  reach the hub exactly once, with the connection cut, delayed, black-holed
  (longer than the mirror's dead-connection timeout) or reset in the middle
  of a reply while the outbox replays: checked on the hub's records and,
  change by change, in `/v1/changes` (each write is one change, in order,
  none missing or repeated);
- the hub restarting (SIGTERM or SIGKILL) during the replay loses nothing
  and duplicates nothing;
- `tally mirror run` SIGKILLed while it pulls 9,000 missed changes and at
  random points of the replay resumes correctly: after each kill the store
  opens, its resume point is not ahead of its data, no entry has left the
  outbox before the hub had it, nothing landed twice; then it converges;
- changes and deletes missed offline reach the mirror, by resume and by a
  fresh snapshot (over the hub's replay limit);
- conflicting edits on two mirrors (one after the other, and at the same
  moment) end in one state on both mirrors and the hub; the conflict is
  recorded (hub record `conflicts/…` and `tally mirror conflicts`) only under
  `--policy PREFIX=both`, and resolving it puts the mirror's value everywhere;
- a stage advanced on two offline mirrors ends at the furthest legal stage
  (ready; or cancelled when one mirror cancelled), whichever reconciles first;
- `tally verify` exits 0 when mirror and hub agree, 1 (naming each record)
  when they do not; `tally mirror status --json` (online, server, lastSeq,
  outbox, conflicts, lastError; never online once the run is gone); one
  `mirror run` per store; the hub's `/v1/admin/clients` and `/metrics`.

Every hub and proxy binds 127.0.0.1; every process is stopped by its PID
(SIGTERM, which must exit 0, then SIGKILL after a bounded wait); every wait
is bounded. The interfaces are those of docs/mirror.md.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import TALLY_BIN, settle
from faultproxy import FaultProxy
from synclib import (CLIResult, SyncClient, all_changes, apply_push, cli_env, get_record, put_record, record_path, rest,
                     run_tally, wait_until)

CLI_TIMEOUT = 20.0  # one short mirror command
CONVERGE_TIMEOUT = 60.0  # reconnect backoff (cap 30 s, full jitter) + retryAfterMs (≤ 5 s) + replay
OFFLINE_TIMEOUT = 10.0
STOP_TIMEOUT = 8.0


def server_url(server) -> str:
    return f"ws://{server.host}:{server.port}"


# --------------------------------------------------------------------------
# A mirror: its store and its `tally mirror run` process


# `tally mirror status --json` (docs/mirror.md, "Status and sync health").
STATUS_KEYS = {"store", "online", "running", "server", "lastSeq", "outbox", "failed", "conflicts", "lastError",
               "patterns", "client", "resync"}


def status_field(status: dict, key: str):
    assert key in STATUS_KEYS and key in status, f"`tally mirror status --json` has no {key}: {status}"
    return status[key]


class Mirror:
    def __init__(self, directory: Path, name: str, url: str, patterns: list[str], policies: list[str]):
        self.directory = directory
        self.name = name
        self.store = directory / f"{name}.sqlite"
        self.url = url
        self.patterns = patterns
        self.policies = policies
        self.home = directory / "home"
        self.home.mkdir(exist_ok=True)
        self.env = cli_env(self.home)
        self.process: subprocess.Popen | None = None
        self.runs = 0
        self.logs: list[Path] = []

    # -- the run process --------------------------------------------------

    def start(self) -> subprocess.Popen:
        assert self.process is None or self.process.poll() is not None, "mirror run is already running"
        self.runs += 1
        log = self.directory / f"{self.name}-run{self.runs}.log"
        self.logs.append(log)
        argv = [str(TALLY_BIN), "mirror", "run", "--store", str(self.store), "--server", self.url]
        for policy in self.policies:
            argv += ["--policy", policy]
        argv += self.patterns
        with open(log, "wb") as out:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            env=self.env)
        # The first run creates the store; `mirror status` on a store that does
        # not exist yet is an error (exit 1), so wait for the file.
        wait_until(lambda: self.store.exists() or self.process.poll() is not None, 10,
                   lambda: f"mirror run to create its store\n{self.describe()}", 0.01)
        return self.process

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signals our run process by PID and reaps it (SIGKILL after a bounded wait)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT)
        return self.process.returncode

    def kill(self) -> int | None:
        return self.stop(signal.SIGKILL)

    def log(self, tail: int = 3000) -> str:
        text = ""
        for path in self.logs[-2:]:
            try:
                text += f"--- {path.name}\n" + path.read_text(errors="replace")[-tail:]
            except OSError:
                pass
        return text

    def describe(self) -> str:
        state = "not started" if self.process is None else (
            "running" if self.process.poll() is None else f"exited {self.process.returncode}")
        return f"mirror {self.name} ({state}, pid {self.process and self.process.pid}); log:\n{self.log()}"

    # -- commands -----------------------------------------------------------

    def cli(self, sub: str, *args, timeout: float = CLI_TIMEOUT) -> CLIResult:
        return run_tally(["mirror", sub, "--store", self.store, *args], self.env, timeout)

    def set(self, name: str, *args) -> dict:
        result = self.cli("set", name, *args, "--json")
        assert result.rc == 0, f"{result!r}\n{self.describe()}"
        body = result.json()
        assert body.get("pending") is True and body.get("name") == name, f"not a pending local write: {result!r}"
        return body

    def delete(self, name: str, *args) -> dict:
        result = self.cli("del", name, *args, "--json")
        assert result.rc == 0, f"{result!r}\n{self.describe()}"
        body = result.json()
        assert body.get("pending") is True, f"not a pending local write: {result!r}"
        return body

    def get(self, name: str) -> dict | None:
        result = self.cli("get", name, "--json")
        if result.rc == 1 and ("not_found" in result.err + result.out or "not found" in result.err.lower()):
            return None
        assert result.rc == 0, result
        return result.json()

    def ls(self, prefix: str) -> dict[str, dict]:
        """{name: envelope} of the local records under prefix."""
        result = self.cli("ls", prefix, "--json")
        assert result.rc == 0, result
        records = {}
        for value in result.json_values():
            for envelope in (value.get("records") if isinstance(value, dict) and "records" in value else [value]):
                assert isinstance(envelope, dict) and "name" in envelope and "data" in envelope, (
                    f"`mirror ls --json` gave something that is not a record envelope: {envelope!r}; {result!r}")
                records[envelope["name"]] = envelope
        return records

    def status(self) -> dict:
        result = self.cli("status", "--json")
        assert result.rc == 0, f"{result!r}\n{self.describe()}"
        body = result.json()
        assert isinstance(body, dict), result
        return body

    def outbox(self) -> int:
        return status_field(self.status(), "outbox")

    def conflicts(self) -> list[dict]:
        result = self.cli("conflicts", "--json")
        assert result.rc == 0, result
        values = result.json_values()
        if len(values) == 1 and isinstance(values[0], dict) and "conflicts" in values[0]:
            values = values[0]["conflicts"]
        return values

    def verify(self, server=None, *, store_url: bool = False) -> CLIResult:
        args = ["verify", "--store", self.store]
        if not store_url:
            args += ["--server", server_url(server)]
        return run_tally(args, self.env, timeout=60)


@pytest.fixture
def mirrors(tmp_path, tally_factory):
    """``mirrors(url, *patterns, policies=[...], name=...)`` -> Mirror; every
    run process is stopped (by PID) at teardown, before the hubs."""
    made: list[Mirror] = []

    def make(url: str, *patterns: str, policies=(), name: str | None = None) -> Mirror:
        directory = tmp_path / (name or f"m{len(made)}")
        directory.mkdir()
        mirror = Mirror(directory, name or f"m{len(made)}", url, list(patterns), list(policies))
        made.append(mirror)
        return mirror

    yield make
    problems = []
    for mirror in made:
        if mirror.process is not None and mirror.process.poll() is None:
            code = mirror.stop()
            if code not in (0, None):
                problems.append(f"mirror {mirror.name}: SIGTERM at teardown gave exit {code}\n{mirror.log()}")
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def proxies():
    made: list[FaultProxy] = []

    def make(server) -> FaultProxy:
        proxy = FaultProxy(server, name=f"proxy{len(made)}")
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


# --------------------------------------------------------------------------
# What the hub holds


def hub_records(server, prefix: str) -> dict[str, dict]:
    found, after = {}, None
    while True:
        path = f"/v1/records?prefix={prefix}&limit=1000" + (f"&after={after}" if after else "")
        response = rest(server, "GET", path)
        assert response.status == 200, (response.status, response.body[:300])
        body = response.json()
        for envelope in body["records"]:
            found[envelope["name"]] = envelope
        if not body.get("more"):
            return found
        after = body["records"][-1]["name"]


def hub_head(server) -> int:
    response = rest(server, "GET", "/v1/changes?since=0&limit=1")
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()["seq"]


def last_matching_seq(server, prefixes: list[str]) -> int:
    """The seq of the last change to a record under one of ``prefixes``
    (what a mirror of them must have applied)."""
    _, _, changes = all_changes(server, since=0, limit=1000)
    seqs = [c["seq"] for c in changes if "name" in c and any(c["name"].startswith(p) for p in prefixes)]
    return max(seqs, default=0)


def changes_since(server, since: int, prefix: str) -> list[dict]:
    _, _, changes = all_changes(server, since=since, limit=1000)
    return [c for c in changes if c.get("name", "").startswith(prefix)]


def states_per_change(before: dict[str, dict], changes: list[dict]) -> dict[str, list]:
    """Replays ``changes`` over ``before`` ({name: data}); for each name, the
    record's data after each of its changes (None: deleted)."""
    model = {name: {"version": 0, "data": copy.deepcopy(data)} for name, data in before.items()}
    states: dict[str, list] = {}
    for change in changes:
        apply_push(model, change)
        record = model.get(change["name"])
        states.setdefault(change["name"], []).append(copy.deepcopy(record["data"]) if record else None)
    return states


def conflict_records(server) -> dict[str, dict]:
    return hub_records(server, "conflicts/")


# --------------------------------------------------------------------------
# Waiting


def wait_online(mirror: Mirror, online: bool = True, timeout: float = OFFLINE_TIMEOUT) -> dict:
    last = {}

    def check():
        nonlocal last
        last = mirror.status()
        return status_field(last, "online") is online

    wait_until(check, timeout, lambda: f"status online={online}; last status {last}\n{mirror.describe()}", 0.1)
    return last


def converge(mirror: Mirror, server, prefixes: list[str], timeout: float = CONVERGE_TIMEOUT,
             conflicts: int | None = 0) -> dict:
    """Waits until the mirror is online with an empty outbox, has applied the
    hub's last change under ``prefixes``, and `tally verify` finds no
    difference. Returns the last status."""
    last: dict = {}
    verify: CLIResult | None = None

    def check():
        nonlocal last, verify
        if not mirror.alive():
            pytest.fail(f"mirror run died: {mirror.describe()}")
        last = mirror.status()
        if status_field(last, "online") is not True or status_field(last, "outbox") != 0:
            return False
        if status_field(last, "lastSeq") < last_matching_seq(server, prefixes):
            return False
        verify = mirror.verify(server)
        return verify.rc == 0

    wait_until(check, timeout, lambda: (f"mirror {mirror.name} to converge with the hub (head {hub_head(server)}, "
                                        f"last change under {prefixes}: {last_matching_seq(server, prefixes)}); "
                                        f"last status {last}; last verify {verify!r}\n{mirror.describe()}"), 0.25)
    if conflicts is not None:
        assert status_field(last, "conflicts") == conflicts, last
    return last


def assert_same_as_hub(mirror: Mirror, server, prefix: str) -> dict[str, dict]:
    hub = hub_records(server, prefix)
    local = mirror.ls(prefix)
    assert sorted(local) == sorted(hub), (
        f"mirror {mirror.name} has {sorted(set(local) - set(hub))} the hub has not, "
        f"misses {sorted(set(hub) - set(local))}")
    for name, envelope in hub.items():
        assert local[name]["data"] == envelope["data"], (
            f"{name}: mirror {mirror.name} has {local[name]['data']}, the hub {envelope['data']}")
        assert local[name]["version"] == envelope["version"], (
            f"{name}: mirror {mirror.name} has version {local[name]['version']}, the hub {envelope['version']}")
    return hub


def start_synced(mirror: Mirror, server, prefixes: list[str]) -> None:
    mirror.start()
    converge(mirror, server, prefixes)


def go_offline(proxy: FaultProxy, *mirrors_: Mirror) -> None:
    proxy.down()
    for mirror in mirrors_:
        wait_online(mirror, False)


def count_landed(server, prefix: str, since: int) -> int:
    """Changes under ``prefix`` after seq ``since`` on the hub (-1: no answer)."""
    try:
        return len(changes_since(server, since, prefix))
    except (OSError, AssertionError):
        return -1


class LandingWatcher:
    """Polls the hub (directly, not through the proxy) and calls ``action``
    once ``count`` changes under ``prefix`` after ``since`` have landed."""

    def __init__(self, server, prefix: str, since: int, count: int, action):
        self.server, self.prefix, self.since, self.count, self.action = server, prefix, since, count, action
        self.landed_at_action: int | None = None
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def landed(self) -> int:
        return count_landed(self.server, self.prefix, self.since)

    def _run(self):
        try:
            deadline = time.monotonic() + CONVERGE_TIMEOUT
            while not self.stop.is_set() and time.monotonic() < deadline:
                try:
                    landed = self.landed()
                except OSError:
                    landed = -1
                if landed >= self.count:
                    self.landed_at_action = landed
                    self.action()
                    return
                time.sleep(0.01)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def join(self):
        self.stop.set()
        self.thread.join(15)
        assert self.error is None, f"watcher failed: {self.error!r}"


# --------------------------------------------------------------------------
# Offline writes and their exactly-once check


class OfflineWrites:
    """Writes made with `tally mirror set|del` and the state each must leave
    on the hub, in order, per record."""

    def __init__(self, mirror: Mirror, prefix: str):
        self.mirror = mirror
        self.prefix = prefix
        self.count = 0
        self.expected: dict[str, list] = {}  # name -> data after each write (None: deleted)
        self.current: dict[str, dict | None] = {}

    def seed(self, server, records: dict[str, dict]) -> None:
        for name, data in records.items():
            assert put_record(server, name, data).status in (200, 201)
            self.current[name] = copy.deepcopy(data)

    def _record(self, name: str, data: dict | None) -> None:
        self.count += 1
        self.current[name] = copy.deepcopy(data)
        self.expected.setdefault(name, []).append(copy.deepcopy(data))

    def set(self, name: str, data: dict) -> None:
        body = self.mirror.set(name, json.dumps(data))
        self._record(name, data)
        return body

    def set_path(self, name: str, key: str, value) -> None:
        self.mirror.set(name, key, json.dumps(value))
        data = copy.deepcopy(self.current.get(name) or {})
        data[key] = value
        self._record(name, data)

    def delete(self, name: str) -> None:
        self.mirror.delete(name)
        self._record(name, None)

    def standard_batch(self, creates: int = 20, updates: int = 5) -> None:
        """Creates, path updates then a whole-record set of one record, a
        delete, and an update of a record created offline."""
        for i in range(creates):
            self.set(f"{self.prefix}new{i}", {"i": i, "pad": "x" * (i * 7)})
        for k in range(1, updates + 1):
            self.set_path(f"{self.prefix}upd", "n", k)
        self.set(f"{self.prefix}upd", {"n": updates + 1, "tag": "whole"})
        self.delete(f"{self.prefix}gone")
        self.set_path(f"{self.prefix}new0", "extra", "yes")

    def check_exactly_once(self, server, since: int, before: dict[str, dict]) -> None:
        """Every write made offline is one change on the hub after ``since``,
        in order, with the data the write left locally; nothing else changed
        under the prefix; the hub's records end as the mirror's writes left them."""
        changes = changes_since(server, since, self.prefix)
        states = states_per_change(before, changes)
        for name, expected in self.expected.items():
            got = states.get(name, [])
            assert got == expected, (
                f"{name}: the offline writes were {expected}, the hub's changes to it since seq {since} left "
                f"{got} ({'missing' if len(got) < len(expected) else 'duplicated' if len(got) > len(expected) else 'different'}); "
                f"changes: {[c for c in changes if c['name'] == name]}")
        others = sorted(set(states) - set(self.expected))
        assert not others, f"records changed that no offline write touched: {others}"
        assert len(changes) == self.count, f"{len(changes)} changes on the hub for {self.count} offline writes"
        hub = hub_records(server, self.prefix)
        for name, data in self.current.items():
            if data is None:
                assert name not in hub, f"{name} was deleted offline but is on the hub: {hub[name]}"
            else:
                assert name in hub and hub[name]["data"] == data, f"{name}: hub has {hub.get(name)}, expected {data}"


def seed_notes(server, prefix: str = "notes/") -> dict[str, dict]:
    records = {f"{prefix}keep": {"v": 0}, f"{prefix}upd": {"n": 0}, f"{prefix}gone": {"x": 1}}
    for name, data in records.items():
        assert put_record(server, name, data).status in (200, 201)
    return records


# --------------------------------------------------------------------------
# Offline writes reach the hub exactly once


FAULTS = ["none", "cut", "delay", "blackhole", "reset"]
# The mirror's dead-connection timeout (docs/mirror.md: pings after 3 s of
# silence, given up after 10 s), with some slack: the black hole lasts until
# the mirror has noticed it.
BLACKHOLE_SECONDS = 12.0
CREATES, UPDATES = 20, 12


@pytest.mark.parametrize("fault", FAULTS)
def test_offline_writes_reach_the_hub_exactly_once(tally, proxies, mirrors, fault):
    prefix = "notes/"
    seed = seed_notes(tally, prefix)
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, tally, [prefix])
    assert mirror.get(f"{prefix}upd")["data"] == {"n": 0}

    go_offline(proxy, mirror)
    mark = hub_head(tally)
    writes = OfflineWrites(mirror, prefix)
    writes.current.update(copy.deepcopy(seed))
    writes.standard_batch(CREATES, UPDATES)
    # Applied locally at once, while `mirror run` runs and the hub is out of reach.
    assert mirror.get(f"{prefix}upd")["data"] == {"n": UPDATES + 1, "tag": "whole"}
    assert mirror.get(f"{prefix}gone") is None
    assert mirror.get(f"{prefix}new3")["data"] == {"i": 3, "pad": "x" * 21}
    assert status_field(mirror.status(), "outbox") == writes.count
    assert hub_head(tally) == mark, "an offline write reached the hub while it was out of reach"

    rng = random.Random()
    fired = threading.Event()
    watcher = None
    if fault == "none":
        proxy.passthrough()
    elif fault == "delay":
        proxy.delay(40)
    else:
        def act():
            if fault == "cut":
                proxy.cut()
            elif fault == "blackhole":
                proxy.blackhole()
                # Silence, not a close: only the mirror's dead-connection timeout notices it.
                wait_online(mirror, False, timeout=BLACKHOLE_SECONDS + OFFLINE_TIMEOUT)
                proxy.delay(20)
            elif fault == "reset":
                proxy.reset_mid_frame(after=rng.randint(1, 12), delay_ms=20)
            fired.set()

        # The creates (one per record) go out together; one record's writes go one
        # at a time, 20 ms per chunk each way: the fault lands in that stretch.
        proxy.delay(20)
        watcher = LandingWatcher(tally, prefix, mark, rng.randint(CREATES + 1, writes.count - 3), act)
    converge(mirror, tally, [prefix], timeout=CONVERGE_TIMEOUT + (BLACKHOLE_SECONDS if fault == "blackhole" else 0))
    if watcher:
        watcher.join()
        assert fired.is_set(), f"the {fault} never happened (landed: {watcher.landed()})"
        print(f"{fault} after {watcher.landed_at_action} of {writes.count} writes had landed; "
              f"proxy {proxy.stats()}")
        assert watcher.landed_at_action < writes.count, f"the {fault} came after the replay"
    if fault == "reset":
        assert proxy.stats().resets >= 1 or proxy.mode == "reset", proxy.stats()
    proxy.passthrough()

    writes.check_exactly_once(tally, mark, seed)
    assert_same_as_hub(mirror, tally, prefix)
    assert conflict_records(tally) == {}

    # Online, a write goes straight through.
    mark = hub_head(tally)
    mirror.set(f"{prefix}live", json.dumps({"online": True}))
    wait_until(lambda: get_record(tally, f"{prefix}live").status == 200, 15,
               lambda: f"an online mirror write to reach the hub\n{mirror.describe()}")
    converge(mirror, tally, [prefix])
    assert [c["name"] for c in changes_since(tally, mark, prefix)] == [f"{prefix}live"]


# --------------------------------------------------------------------------
# The hub restarts during the replay


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_hub_restart_during_replay_loses_and_duplicates_nothing(tally_factory, proxies, mirrors, how):
    prefix = "notes/"
    server = tally_factory()
    seed = seed_notes(server, prefix)
    proxy = proxies(server)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, server, [prefix])
    go_offline(proxy, mirror)
    mark = hub_head(server)
    writes = OfflineWrites(mirror, prefix)
    writes.current.update(copy.deepcopy(seed))
    writes.standard_batch(creates=40, updates=15)

    restarted = {}

    def restart():
        restarted["server"] = tally_factory.restart(server, kill=how == "sigkill")
        proxy.retarget(restarted["server"])

    proxy.delay(20)
    watcher = LandingWatcher(server, prefix, mark, random.randint(41, writes.count - 3), restart)
    wait_until(lambda: "server" in restarted or watcher.error, 30,
               lambda: f"the replay to start (landed {watcher.landed()})\n{mirror.describe()}")
    watcher.join()
    server = restarted["server"]
    print(f"hub restarted ({how}) after {watcher.landed_at_action} of {writes.count} writes had landed")
    converge(mirror, server, [prefix])
    proxy.passthrough()
    writes.check_exactly_once(server, mark, seed)
    assert_same_as_hub(mirror, server, prefix)
    # The log has no gap and no repeat across the restart.
    head, floor, changes = all_changes(server, since=0, limit=1000)
    assert [c["seq"] for c in changes] == list(range(floor + 1, head + 1))


# --------------------------------------------------------------------------
# The mirror is SIGKILLed mid-reconcile


def write_missed_changes(server, prefix: str, count: int, records: int = 1000, batch: int = 500) -> dict[str, dict]:
    """``count`` changes written straight to the hub (atomic writes of
    ``batch`` sets) over ``records`` records; returns the records' final data."""
    final = {}
    with SyncClient(server) as client:
        done = 0
        while done < count:
            ops = []
            for k in range(done, min(count, done + batch)):
                name = f"{prefix}r{k % records}"
                final[name] = {"k": k, "pad": "m" * 40}
                ops.append({"op": "set", "name": name, "data": final[name]})
            client.ok("write", ops=ops)
            done += len(ops)
    return final


def check_resume_point_not_ahead(mirror: Mirror, server, prefix: str, what: str) -> int:
    """Every hub change under ``prefix`` at or below the mirror's last seq is
    in the mirror's copy (the resume point never runs ahead of the data).
    Returns that last seq."""
    last_seq = status_field(mirror.status(), "lastSeq")
    local = mirror.ls(prefix)
    latest: dict[str, int] = {}
    for change in changes_since(server, 0, prefix):
        if change["seq"] <= last_seq:
            latest[change["name"]] = change["seq"]
    behind = {name: (local.get(name, {}).get("seq"), seq) for name, seq in latest.items()
              if local.get(name, {}).get("seq", 0) < seq}
    assert not behind, (f"{what}: the mirror's last seq is {last_seq} but it lacks changes at or below it "
                        f"(name: (mirror's seq, hub change)): {dict(list(behind.items())[:10])}")
    return last_seq


# Under the hub's replay limit (a resume of more than 10,000 changes is
# answered with a snapshot), so the mirror catches up change by change.
MISSED = 9_000
PULL_PROGRESS = re.compile(r"resync: applying \d+% (\d+)/(\d+) \(prefix:notes/\)")


def test_mirror_sigkilled_mid_reconcile_resumes(tally, proxies, mirrors):
    """`mirror run` is SIGKILLed during the pull of 9,000 missed changes
    (twice when the first kill leaves more than a chunk to pull), then at random points of the outbox replay; after each kill the store opens,
    its resume point is not ahead of its data, no entry has left the outbox
    before the hub had it, and what landed landed once. A last run converges:
    every offline write on the hub once, every missed change in the mirror."""
    seed_value = random.randrange(1 << 30)
    rng = random.Random(seed_value)
    print(f"seed {seed_value}")
    prefix, missed_prefix, mine = "notes/", "notes/hub/", "notes/mine/"
    seed_notes(tally, prefix)
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, tally, [prefix])
    assert mirror.stop() == 0, f"SIGTERM did not stop mirror run cleanly\n{mirror.describe()}"
    seq_before = status_field(mirror.status(), "lastSeq")

    # Offline: local writes with no `mirror run` at all, and changes on the hub the mirror misses.
    mark = hub_head(tally)
    writes = OfflineWrites(mirror, mine)
    for i in range(40):
        writes.set(f"{mine}w{i}", {"i": i})
    for k in range(1, 9):  # one record's writes go one at a time: a long stretch to kill in
        for i in range(3):
            writes.set_path(f"{mine}w{i}", "k", k)
    missed = write_missed_changes(tally, missed_prefix, MISSED)
    after_missed = hub_head(tally)
    total = writes.count
    kills = []

    def after_kill(cycle: int, note: str) -> tuple[int, int]:
        assert mirror.process.returncode == -signal.SIGKILL, mirror.describe()
        settle(tally)  # the hub that answered the mirror may be another of the pair (conftest)
        landed = count_landed(tally, mine, mark)
        status = mirror.status()  # the store opens and reads after the crash
        depth = status_field(status, "outbox")
        last_seq = check_resume_point_not_ahead(mirror, tally, missed_prefix, f"cycle {cycle}")
        kills.append((cycle, note, landed, depth, last_seq))
        # An entry leaves the outbox only after the hub has it.
        assert total - landed <= depth <= total, (
            f"cycle {cycle}: the outbox holds {depth} entries and {landed} of {total} writes are on the hub: "
            f"an entry left the outbox before the hub had it (kills {kills})")
        # Whatever landed landed once and in order so far.
        states = states_per_change({}, changes_since(tally, mark, mine))
        for name, got in states.items():
            assert got == writes.expected[name][:len(got)], f"cycle {cycle}: {name} went {got}"
        return landed, last_seq

    # Cycles 0 and 1: during the pull, which `mirror run` applies in chunks of
    # 2,000 changes, each stored with its resume point, and reports with a
    # line "resync: applying P% DONE/TOTAL (prefix:notes/)" after the first
    # chunk (stderr not a terminal). The kill comes a random moment (0-0.2 s)
    # after that line. The outbox goes out only after the pull.
    for cycle in (0, 1):
        pending = after_missed - status_field(mirror.status(), "lastSeq")
        if pending <= 2000:
            break
        mirror.start()
        log = mirror.logs[-1]
        pause = rng.uniform(0, 0.2)
        wait_until(lambda: not mirror.alive() or PULL_PROGRESS.search(log.read_text(errors="replace")),
                   CONVERGE_TIMEOUT, lambda: f"a first chunk of the pull\n{mirror.describe()}", interval=0.005)
        time.sleep(pause)
        assert mirror.alive(), f"mirror run ended by itself\n{mirror.describe()}"
        mirror.kill()
        landed, last_seq = after_kill(cycle, f"{pause:.2f}s after the first chunk of {pending}")
        if last_seq < after_missed:
            assert landed == 0, (f"killed during the pull (last seq {last_seq} < {after_missed}), yet {landed} "
                                 f"outbox writes had reached the hub: the outbox went out before the pull was done")

    # Cycles 2-4: during the replay, once a random number of writes has landed.
    proxy.delay(10)
    for cycle in range(2, 5):
        already = count_landed(tally, mine, mark)
        if already >= total - 1:
            break
        target = rng.randint(already + 1, total - 1)
        pause = rng.random() * 0.03
        fired = threading.Event()
        mirror.start()
        watcher = LandingWatcher(tally, mine, mark, target, lambda: (time.sleep(pause), mirror.kill(), fired.set()))
        wait_until(lambda: fired.is_set() or not mirror.alive() or watcher.error, CONVERGE_TIMEOUT,
                   lambda: f"cycle {cycle}: {target} writes to land\n{mirror.describe()}")
        watcher.join()
        assert fired.is_set(), f"cycle {cycle}: mirror run ended by itself\n{mirror.describe()}"
        after_kill(cycle, f"{target} landed")
    print(f"kills (cycle, when, landed, outbox, lastSeq) of {total} writes, pull to seq {after_missed}: {kills}")

    proxy.passthrough()
    mirror.start()
    converge(mirror, tally, [prefix])
    writes.check_exactly_once(tally, mark, {})
    local = mirror.ls(missed_prefix)
    assert {n: e["data"] for n, e in local.items()} == missed, "missed hub changes are not all in the mirror"
    assert status_field(mirror.status(), "lastSeq") >= after_missed
    assert_same_as_hub(mirror, tally, prefix)


@pytest.mark.parametrize("missed", [100, 10_100], ids=["resume", "resnapshot"])
def test_changes_and_deletes_missed_offline_reach_the_mirror(tally, proxies, mirrors, missed):
    """Records deleted and changed on the hub while the mirror was stopped:
    after a resume (a few changes) or a fresh snapshot (over the hub's replay
    limit of 10,000 changes), the deleted ones are gone from the mirror too."""
    prefix = "notes/"
    for i in range(10):
        assert put_record(tally, f"{prefix}d{i}", {"i": i}).status == 201
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, tally, [prefix])
    assert mirror.stop() == 0
    for i in range(5):
        assert rest(tally, "DELETE", f"/v1/records/{prefix}d{i}").status == 200
    write_missed_changes(tally, f"{prefix}hub/", missed, records=100)
    mirror.start()
    converge(mirror, tally, [prefix])
    local = mirror.ls(prefix)
    assert not [f"{prefix}d{i}" for i in range(5) if f"{prefix}d{i}" in local], (
        f"records deleted on the hub while offline are still in the mirror: {sorted(local)[:10]}")
    assert_same_as_hub(mirror, tally, prefix)


# --------------------------------------------------------------------------
# Conflicting edits on two mirrors


def two_mirrors(tally, proxies, mirrors, prefix: str, policies=()) -> tuple[Mirror, Mirror, FaultProxy, FaultProxy]:
    pa, pb = proxies(tally), proxies(tally)
    a = mirrors(pa.url, prefix, policies=policies, name="a")
    b = mirrors(pb.url, prefix, policies=policies, name="b")
    for mirror in (a, b):
        start_synced(mirror, tally, [prefix])
    go_offline(pa, a)
    go_offline(pb, b)
    return a, b, pa, pb


CONFLICT_START = {"title": "t0", "qty": 1, "color": "red", "note": "n0"}
CONFLICT_PREFIX, CONFLICT_NAME = "notes/", "notes/c"


def conflicting_edits(a: Mirror, b: Mirror, name: str) -> None:
    a.set(name, "title", "from-A")
    a.set(name, "qty", "2")
    b.set(name, "title", "from-B")
    b.set(name, "color", "blue")
    assert a.get(name)["data"] == {**CONFLICT_START, "title": "from-A", "qty": 2}
    assert b.get(name)["data"] == {**CONFLICT_START, "title": "from-B", "color": "blue"}


def offline_conflict(tally, proxies, mirrors, policy: str) -> tuple[Mirror, Mirror, FaultProxy, FaultProxy]:
    """CONFLICT_NAME edited on two offline mirrors (``conflicting_edits``)
    under ``policy`` for CONFLICT_PREFIX ("default": none given)."""
    put_record(tally, CONFLICT_NAME, CONFLICT_START)
    policies = [] if policy == "default" else [f"{CONFLICT_PREFIX}={policy}"]
    a, b, pa, pb = two_mirrors(tally, proxies, mirrors, CONFLICT_PREFIX, policies)
    conflicting_edits(a, b, CONFLICT_NAME)
    return a, b, pa, pb


@pytest.mark.parametrize("policy", ["default", "hub", "client", "both"])
def test_conflicting_edits_on_two_mirrors_end_in_one_state(tally, proxies, mirrors, policy):
    """A reconciles first, then B: title changed on both (the policy
    decides; `both` records a conflict), qty only on A, color only on B (both
    merge)."""
    prefix, name = CONFLICT_PREFIX, CONFLICT_NAME
    a, b, pa, pb = offline_conflict(tally, proxies, mirrors, policy)

    pa.passthrough()
    converge(a, tally, [prefix])
    assert get_record(tally, name).json()["data"] == {**CONFLICT_START, "title": "from-A", "qty": 2}
    pb.passthrough()
    expected_conflicts = 1 if policy == "both" else 0
    converge(b, tally, [prefix], conflicts=expected_conflicts)
    converge(a, tally, [prefix])

    title = "from-B" if policy == "client" else "from-A"
    expected = {**CONFLICT_START, "title": title, "qty": 2, "color": "blue"}
    hub = get_record(tally, name).json()
    assert hub["data"] == expected, f"policy {policy}: the hub has {hub['data']}, expected {expected}"
    for mirror in (a, b):
        assert_same_as_hub(mirror, tally, prefix)

    records = conflict_records(tally)
    assert a.conflicts() == [], "A met no conflict"
    if policy != "both":
        assert records == {}, f"policy {policy} records no conflict, the hub has {records}"
        assert b.conflicts() == []
        return
    [(conflict_name, conflict)] = records.items()
    data = conflict["data"]
    assert {k: data.get(k) for k in ("name", "field", "local", "hub", "base", "policy", "resolved")} == {
        "name": name, "field": "title", "local": "from-B", "hub": "from-A", "base": "t0", "policy": "both",
        "resolved": False}, data
    assert isinstance(data.get("created"), int) and isinstance(data.get("mirror"), str) and data["mirror"], data
    [listed] = b.conflicts()
    assert listed.get("name") == name and listed.get("field") == "title", listed
    assert str(listed.get("id")) in conflict_name, f"the local conflict {listed} is not {conflict_name}"

    # Resolving it by taking B's side puts B's title everywhere and closes the conflict.
    resolved = b.cli("conflicts", "resolve", str(listed["id"]), "--take", "local")
    assert resolved.rc == 0, resolved
    wait_until(lambda: get_record(tally, name).json()["data"]["title"] == "from-B", 20,
               lambda: f"the resolution to reach the hub: {get_record(tally, name).json()}\n{b.describe()}")
    for mirror in (a, b):
        converge(mirror, tally, [prefix])
        assert mirror.get(name)["data"] == {**expected, "title": "from-B"}
    assert conflict_records(tally)[conflict_name]["data"]["resolved"] is True
    assert [c for c in b.conflicts() if not c.get("resolved")] == []


@pytest.mark.parametrize("policy", ["default", "both"])
def test_concurrent_conflicting_edits_converge(tally, proxies, mirrors, policy):
    """Both mirrors reconcile at the same moment: whichever lands first,
    all three end in the same state; one-sided fields merge."""
    prefix, name = CONFLICT_PREFIX, CONFLICT_NAME
    a, b, pa, pb = offline_conflict(tally, proxies, mirrors, policy)
    pa.passthrough()
    pb.passthrough()
    converge(a, tally, [prefix], conflicts=None)
    converge(b, tally, [prefix], conflicts=None)
    converge(a, tally, [prefix], conflicts=None)
    hub = get_record(tally, name).json()["data"]
    assert hub["title"] in ("from-A", "from-B") and hub["qty"] == 2 and hub["color"] == "blue", hub
    for mirror in (a, b):
        assert_same_as_hub(mirror, tally, prefix)
    records = conflict_records(tally)
    open_local = len(a.conflicts()) + len(b.conflicts())
    if policy == "both":
        assert len(records) == 1 and open_local == 1, (records, a.conflicts(), b.conflicts())
        [conflict] = records.values()
        assert conflict["data"]["hub"] == hub["title"], (conflict, hub)
    else:
        assert records == {} and open_local == 0, (records, a.conflicts(), b.conflicts())


@pytest.mark.parametrize("how", ["rest-local", "atomic-local", "rest-hub"])
def test_a_conflict_resolved_on_the_hub_is_closed_by_its_mirror(tally, proxies, mirrors, how):
    """A conflict recorded by B (policy `both`) resolved on the hub, as a
    dashboard does, while B's `mirror run` runs: `PATCH
    /v1/records/conflicts/<id>` `{"resolved":true,"take":"local"}` → B closes
    it (`mirror conflicts --all --json`) and writes its value, which ends on
    the hub and both mirrors; the same in one atomic write that also sets the
    value → closed, and B writes nothing more (no version moves again);
    `take: hub` → closed, nothing written."""
    prefix, name = CONFLICT_PREFIX, CONFLICT_NAME
    a, b, pa, pb = offline_conflict(tally, proxies, mirrors, "both")
    pa.passthrough()
    converge(a, tally, [prefix])
    pb.passthrough()
    converge(b, tally, [prefix], conflicts=1)
    merged = {**CONFLICT_START, "title": "from-A", "qty": 2, "color": "blue"}
    assert get_record(tally, name).json()["data"] == merged
    [listed] = b.conflicts()
    conflict_name = f"conflicts/{listed['id']}"
    record = get_record(tally, conflict_name).json()
    assert record["data"]["resolved"] is False and record["data"]["mirror"] == status_field(b.status(), "client"), record

    take = "hub" if how == "rest-hub" else "local"
    if how == "atomic-local":
        with SyncClient(tally) as client:
            reply = client.ok("write", ops=[
                {"op": "set", "name": name, "path": "title", "value": "from-B"},
                {"op": "set", "name": conflict_name, "path": "resolved", "value": True},
                {"op": "set", "name": conflict_name, "path": "take", "value": "local"},
                {"op": "set", "name": conflict_name, "path": "resolvedBy", "value": "dashboard"}])
        written = {r["name"]: r["version"] for r in reply["results"]}
    else:
        response = rest(tally, "PATCH", record_path(conflict_name), {"resolved": True, "take": take})
        assert response.status == 200, (response.status, response.body[:300])
        written = {conflict_name: response.json()["version"], name: get_record(tally, name).json()["version"]}

    def closed():
        result = b.cli("conflicts", "--all", "--json")
        assert result.rc == 0, result
        [entry] = result.json()["conflicts"]
        return entry["resolved"] == take and entry

    wait_until(closed, 20, lambda: f"B to close the conflict (take {take})\n{b.describe()}")
    assert b.conflicts() == [], "`mirror conflicts` still lists the conflict as open"
    for mirror in (b, a):
        converge(mirror, tally, [prefix])
    expected = {**merged, "title": "from-B"} if take == "local" else merged
    hub = get_record(tally, name).json()
    assert hub["data"] == expected, f"{how}: the hub has {hub['data']}, expected {expected}"
    for mirror in (a, b):
        assert mirror.get(name)["data"] == expected
        assert_same_as_hub(mirror, tally, prefix)
    # Resolved on the hub: B leaves the conflicts record as the resolver wrote it.
    assert get_record(tally, conflict_name).json()["version"] == written[conflict_name]
    if how != "rest-local":
        # Nothing for B to write: the record's version has not moved again.
        assert hub["version"] == written[name], f"{how}: B wrote {name} again: {hub}"


# --------------------------------------------------------------------------
# Stages edited on two offline mirrors


@pytest.mark.parametrize("first", ["a", "b"])
@pytest.mark.parametrize("case", ["ready", "cancelled"])
def test_stage_edited_on_two_offline_mirrors_ends_at_the_furthest_legal_stage(tally, proxies, mirrors, first, case):
    """`ready`: A advances received → in-progress, B received → in-progress →
    ready, offline; the order ends at ready (history received, in-progress,
    ready — each transition once) whichever reconciles first. `cancelled`: A
    cancels, B goes to ready; cancelled is further along and legal from
    ready, and nothing leaves it: the order ends cancelled either way."""
    prefix, name = "orders/", "orders/o1"
    assert put_record(tally, "items/x", {"name": "x", "stock": 5}).status == 201
    assert put_record(tally, name, {"item": "items/x", "qty": 1}).status == 201
    a, b, pa, pb = two_mirrors(tally, proxies, mirrors, prefix)
    assert a.get(name)["data"]["stage"] == "received"

    if case == "ready":
        a.set(name, "stage", "in-progress")
        expected_history = ["received", "in-progress", "ready"]
    else:
        a.set(name, "stage", "cancelled")
        expected_history = None  # received→cancelled or received→in-progress→ready→cancelled
    b.set(name, "stage", "in-progress")
    b.set(name, "stage", "ready")
    assert b.get(name)["data"]["stage"] == "ready"

    order = [(a, pa), (b, pb)] if first == "a" else [(b, pb), (a, pa)]
    for mirror, proxy in order:
        proxy.passthrough()
        converge(mirror, tally, [prefix])
    for mirror, _ in order:
        converge(mirror, tally, [prefix])

    record = get_record(tally, name).json()
    stage = record["data"]["stage"]
    assert stage == case, f"the order ended at {stage}, expected {case}; history {record['data']['history']}"
    history = [h["to"] for h in record["data"]["history"]]
    assert history[0] == "received" and history[-1] == case, history
    assert len(history) == len(set(history)), f"a stage was entered twice: {history}"
    if expected_history:
        assert history == expected_history, history
    for mirror in (a, b):
        assert_same_as_hub(mirror, tally, prefix)
        assert mirror.conflicts() == []
    assert conflict_records(tally) == {}
    stats = get_record(tally, "stats/orders").json()["data"]
    assert stats["counts"][case] == 1 and stats["total"] == 1, stats


# --------------------------------------------------------------------------
# tally verify, status, run lock, hub health


def test_verify_exit_status_and_differences(tally, proxies, mirrors):
    prefix = "notes/"
    seed_notes(tally, prefix)
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, tally, [prefix])
    ok = mirror.verify(tally)
    assert ok.rc == 0, ok
    via_store = mirror.verify(store_url=True)  # the hub URL the store remembers (the proxy's)
    assert via_store.rc == 0, via_store

    assert mirror.stop() == 0
    # The hub changes one record behind the mirror's back; the mirror changes another locally.
    assert put_record(tally, "notes/keep", {"v": "hub-side"}).status == 200
    mirror.set("notes/upd", "n", "41")
    assert put_record(tally, "notes/extra", {"only": "hub"}).status == 201
    differ = mirror.verify(tally)
    assert differ.rc == 1, differ
    text = differ.out + differ.err
    for name in ("notes/keep", "notes/upd", "notes/extra"):
        assert name in text, f"verify does not name {name}: {differ!r}"

    mirror.start()
    converge(mirror, tally, [prefix])
    again = mirror.verify(tally)
    assert again.rc == 0, again
    assert get_record(tally, "notes/upd").json()["data"] == {"n": 41}
    assert mirror.get("notes/keep")["data"] == {"v": "hub-side"}


def test_status_json_fields(tally, proxies, mirrors):
    prefix = "notes/"
    seed_notes(tally, prefix)
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, prefix)
    start_synced(mirror, tally, [prefix])
    status = mirror.status()
    assert STATUS_KEYS <= set(status), f"missing {STATUS_KEYS - set(status)}: {status}"
    assert status_field(status, "online") is True and status_field(status, "running") is True
    assert status_field(status, "server") == proxy.url, status
    assert status_field(status, "patterns") == [prefix], status
    assert status_field(status, "client").startswith("mirror:"), status
    assert status_field(status, "failed") == 0, status
    assert status_field(status, "lastSeq") == last_matching_seq(tally, [prefix]), status
    assert status_field(status, "outbox") == 0 and status_field(status, "conflicts") == 0, status
    assert status_field(status, "lastError") in (None, ""), status

    go_offline(proxy, mirror)
    for i in range(3):
        mirror.set(f"notes/s{i}", json.dumps({"i": i}))
    status = wait_until(lambda: (lambda s: s if status_field(s, "lastError") else None)(mirror.status()),
                        OFFLINE_TIMEOUT, "a last error while the hub is out of reach")
    assert status_field(status, "online") is False and status_field(status, "outbox") == 3, status
    assert isinstance(status_field(status, "lastError"), str), status
    text = mirror.cli("status")
    assert text.rc == 0 and "offline" in text.out.lower() and "3" in text.out, text

    proxy.passthrough()
    status = converge(mirror, tally, [prefix])
    assert status_field(status, "outbox") == 0

    assert mirror.stop() == 0
    stopped = mirror.status()
    assert status_field(stopped, "online") is False and status_field(stopped, "running") is False, (
        f"no mirror run is running, status says {stopped}")


RESYNC_RECORDS = 15_000  # over the hub's 10,000 records per snapshot reply: the rest comes in pages
RESYNC_DELAY_MS = 100  # per proxied chunk: receiving the snapshot takes seconds, whatever the CPU


def test_status_shows_resync_progress_of_a_large_snapshot(tally, proxies, mirrors):
    """`mirror status` shows the phase of the resync `mirror run` is in —
    connecting while the hub does not answer (a black hole), then receiving
    the snapshot page by page and applying it (slowed down by the proxy so a
    poll is sure to see it) — and `"resync": null` once it is over; never a
    resync of a run that was killed. `mirror run` prints one line per phase
    on stderr (not a terminal)."""
    write_missed_changes(tally, "items/", RESYNC_RECORDS, records=RESYNC_RECORDS)
    proxy = proxies(tally)
    proxy.blackhole()
    mirror = mirrors(proxy.url, "items/")

    def resync_when(predicate) -> dict:
        def check():
            resync = status_field(mirror.status(), "resync")
            return predicate(resync) and resync
        return wait_until(check, OFFLINE_TIMEOUT, lambda: f"a resync state; {mirror.describe()}", 0.05)

    # A run killed mid-resync leaves its last state in the store; status shows none.
    mirror.start()
    resync_when(lambda r: r is not None and r["phase"] in ("connecting", "waiting"))
    mirror.kill()
    killed = mirror.status()
    assert status_field(killed, "running") is False and killed["resync"] is None, killed

    mirror.start()
    connecting = resync_when(lambda r: r is not None and r["phase"] == "connecting")
    assert set(connecting) == {"phase", "target", "done", "total"}, connecting
    assert connecting["done"] >= 1 and connecting["total"] is None, connecting
    text = mirror.cli("status")
    assert text.rc == 0 and re.search(r"^\s+resync\s+(connecting|waiting)", text.out, re.M), text

    proxy.delay(RESYNC_DELAY_MS)
    seen: list[dict] = []

    def over():
        status = mirror.status()
        if status["resync"] is not None:
            seen.append(status["resync"])
            return False
        return status_field(status, "online") is True and status_field(status, "lastSeq") >= hub_head(tally)

    wait_until(over, CONVERGE_TIMEOUT, lambda: f"the resync to end; seen {seen[-5:]}\n{mirror.describe()}", 0.05)
    progress = [r for r in seen if r["phase"] in ("receiving", "applying") and r["done"] > 0]
    assert progress, f"no snapshot progress among the states polled: {seen}"
    for state in progress:
        assert state["target"] == "prefix:items/", state
        assert state["done"] <= RESYNC_RECORDS and state["total"] in (None, RESYNC_RECORDS), state
    print(f"{len(seen)} resync states polled, e.g. {progress[:3]}")
    assert_same_as_hub(mirror, tally, "items/")
    idle = mirror.cli("status")
    assert idle.rc == 0 and not re.search(r"^\s+resync\s", idle.out, re.M), idle
    log = mirror.log(tail=100_000)
    assert re.search(r"tally: resync: receiving \d+ records \(prefix:items/\)", log), log
    assert f"tally: resync: applying 100% {RESYNC_RECORDS}/{RESYNC_RECORDS} (prefix:items/)" in log, log


def test_status_after_sigkill_does_not_claim_online(tally, proxies, mirrors):
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, "notes/")
    start_synced(mirror, tally, ["notes/"])
    mirror.kill()
    status = mirror.status()
    assert status_field(status, "online") is False, (
        f"mirror run was SIGKILLed (nothing runs on the store), yet status says {status}")


def test_one_mirror_run_per_store(tally, proxies, mirrors):
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, "notes/")
    start_synced(mirror, tally, ["notes/"])
    second = run_tally(["mirror", "run", "--store", mirror.store, "--server", proxy.url, "notes/"], mirror.env,
                       timeout=15)
    assert second.rc != 0 and second.err.strip(), f"a second mirror run on the same store: {second!r}"
    assert mirror.alive()


def test_hub_reports_the_mirror_in_admin_clients_and_metrics(tally, proxies, mirrors):
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, "notes/")
    seed_notes(tally)
    start_synced(mirror, tally, ["notes/"])

    def mine():
        response = rest(tally, "GET", "/v1/admin/clients")
        assert response.status == 200, (response.status, response.body[:300])
        body = response.json()
        found = [c for c in body["clients"] if str(c.get("client", "")).startswith("mirror:")]
        return found and found[0]["outbox"] == 0 and found[0]["lag"] == body["head"] - found[0]["seq"] and \
            found[0]["lag"] == 0 and (body, found[0])

    body, client = wait_until(mine, 15, lambda: f"/v1/admin/clients to show the mirror caught up: "
                                                f"{rest(tally, 'GET', '/v1/admin/clients').body[:1000]!r}")
    assert {"session", "client", "user", "connectedMs", "seq", "lag", "outbox", "lastAckMs"} <= set(client), client
    metrics = rest(tally, "GET", "/metrics").body.decode()
    for metric in ("tally_client_lag_max", "tally_client_outbox_total", "tally_clients"):
        assert any(line.startswith(metric) for line in metrics.splitlines()), f"/metrics has no {metric}"


# --------------------------------------------------------------------------
# A replayed order for an item that does not exist


def test_an_order_for_a_missing_item_is_refused_on_replay_and_reported(tally, proxies, mirrors):
    """The hub refuses an order whose item does not exist when it is made
    (`not_found` naming the item). Made offline in a mirror and replayed,
    the refusal is kept: `mirror status` counts it as failed, lists it with
    the hub's reason (`refused`, and in the text) and says it in lastError;
    the local copy drops the order, the hub never has it, and the writes
    around it go through."""
    assert put_record(tally, "items/drill-01", {"name": "Drill", "stock": 5}).status == 201
    prefixes = ["orders/", "items/"]
    proxy = proxies(tally)
    mirror = mirrors(proxy.url, *prefixes)
    start_synced(mirror, tally, prefixes)

    go_offline(proxy, mirror)
    mirror.set("orders/before", json.dumps({"item": "items/drill-01", "qty": 1}))
    mirror.set("orders/typo", json.dumps({"item": "items/drlil-01", "qty": 2}))
    mirror.set("orders/after", json.dumps({"item": "items/drill-01", "qty": 1}))
    assert mirror.get("orders/typo") is not None  # offline, the local copy has it
    proxy.passthrough()

    status = wait_until(lambda: (lambda s: s if status_field(s, "failed") == 1 and status_field(s, "outbox") == 0
                                 else None)(mirror.status()),
                        CONVERGE_TIMEOUT, lambda: f"the refused order to be set aside\n{mirror.describe()}")
    last_error = status_field(status, "lastError")
    assert "not_found" in last_error and "items/drlil-01" in last_error and "orders/typo" in last_error, status
    refused = status["refused"]
    assert [(r["name"], r["op"]) for r in refused] == [("orders/typo", "set")], status
    assert "items/drlil-01" in refused[0]["error"] and "not_found" in refused[0]["error"], status
    text = mirror.cli("status")
    assert text.rc == 0 and "orders/typo" in text.out and "items/drlil-01" in text.out, text
    assert "refused" in mirror.log(20000) and "items/drlil-01" in mirror.log(20000)

    assert get_record(tally, "orders/typo").status == 404
    assert get_record(tally, "orders/before").json()["data"]["stage"] == "received"
    assert get_record(tally, "orders/after").json()["data"]["stage"] == "received"
    wait_until(lambda: mirror.get("orders/typo") is None, CONVERGE_TIMEOUT,
               lambda: f"the local copy to drop the refused order\n{mirror.describe()}")
    status = converge(mirror, tally, prefixes)
    assert status_field(status, "failed") == 1, status

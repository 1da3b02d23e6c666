"""The client commands, black box: `tally get|set|del|watch|list|emit|on`
against a real `tally serve` (README "Client commands", PROTOCOL.md).

Each command runs as a subprocess with `--server ws://127.0.0.1:PORT` (one
test uses $TALLY_URL and the http:// form instead). What a command says it
did is checked against the hub over REST (`GET /v1/records/...`,
`/v1/lists/...`, `/v1/changes`), and refused commands are checked to have
written nothing (the hub's head seq is unchanged).

Long-running commands (`watch`, `on`) run under Popen with reader threads;
each is stopped by its PID (SIGTERM, then SIGKILL) before the hub stops.
Before writing, a test waits for the hub's `tally_subscriptions` gauge to
show the watchers subscribed, so no live change can be missed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

import pytest

from synclib import CLIResult, LongRunning, all_changes, get_record, list_path, metric, put_record, rest, run_tally

RUN_TIMEOUT = 15.0  # one short command; the contract's bound is lower where it matters
LINE_TIMEOUT = 5.0
COMMANDS = ["get", "set", "del", "watch", "list", "emit", "on"]


# --------------------------------------------------------------------------
# Helpers


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without an inherited TALLY_URL or TALLY_SERVER, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_URL", "TALLY_SERVER")}
    env.update(extra)
    return env


Result = CLIResult


def run(*args: str, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT) -> CLIResult:
    return run_tally(args, env or clean_env(), timeout)


def server_url(server) -> str:
    return f"ws://{server.host}:{server.port}"


def cli(server, *args: str, **kwargs) -> Result:
    """`tally COMMAND --server ws://127.0.0.1:PORT ARGS...` (the option goes
    right after the command, so a test's trailing arguments stay last)."""
    command, *rest_args = args
    return run(command, "--server", server_url(server), *rest_args, **kwargs)


def head(server) -> int:
    response = rest(server, "GET", "/v1/changes?since=0&limit=1")
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()["seq"]


def record(server, name: str) -> dict | None:
    """The REST envelope, or None for 404."""
    response = get_record(server, name)
    if response.status == 404:
        return None
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def list_envelope(server, name: str) -> dict | None:
    response = rest(server, "GET", list_path(name))
    if response.status == 404:
        return None
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def wait_subscriptions(server, count: int, timeout: float = LINE_TIMEOUT) -> None:
    """Waits until the hub holds ``count`` subscriptions (the watchers we
    started have subscribed), so live changes cannot be missed."""
    deadline = time.monotonic() + timeout
    while True:
        current = metric(server, "tally_subscriptions")
        if current >= count:
            return
        assert time.monotonic() < deadline, f"only {current} of {count} subscriptions after {timeout}s"
        time.sleep(0.02)


def dead_port() -> socket.socket:
    """A socket bound to a free port that does not listen: a connection to
    its port is refused, and nobody else can take the port meanwhile."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def spawn(tally_factory):
    """Starts long-running commands; stops them (by PID) at teardown, before
    the hubs (this fixture is set up after `tally_factory`)."""
    started: list[LongRunning] = []

    def start(server, *args: str, env: dict[str, str] | None = None) -> LongRunning:
        argv = [str(a) for a in args]
        if server:
            argv[1:1] = ["--server", server_url(server)]
        process = LongRunning(argv, env or clean_env())
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


def write_seq(result: Result) -> int:
    """The seq a `--json` write printed."""
    body = result.ok().json()
    assert isinstance(body.get("seq"), int), result
    return body["seq"]


# --------------------------------------------------------------------------
# get


def test_get_prints_the_record_data(tally):
    data = {"stage": "received", "items": [{"sku": "a", "qty": 2}], "note": "héllo ✓", "n": 1.5}
    assert put_record(tally, "jobs/1", data).status == 201
    got = cli(tally, "get", "jobs/1").ok()
    assert got.json() == data
    assert got.err == ""
    assert cli(tally, "get", "jobs/1", "--path", "stage").ok().json() == "received"
    assert cli(tally, "get", "jobs/1", "--path", "items[0].qty").ok().json() == 2
    assert cli(tally, "get", "jobs/1", "--path", "items[0]").ok().json() == {"sku": "a", "qty": 2}


def test_get_large_record(tally):
    data = {"blob": "x" * 200_000, "list": list(range(5000))}
    assert put_record(tally, "big/1", data).status == 201
    assert cli(tally, "get", "big/1").ok().json() == data


def test_get_json_envelope_matches_rest(tally):
    put_record(tally, "jobs/2", {"stage": "new"})
    put_record(tally, "jobs/2", {"stage": "ready"})
    body = cli(tally, "get", "jobs/2", "--json").ok().json()
    assert {"name", "version", "seq", "data"} <= set(body), body
    rest_body = record(tally, "jobs/2")
    for key in ("name", "version", "seq", "data"):
        assert body[key] == rest_body[key], (key, body, rest_body)
    assert (body["name"], body["version"], body["data"]) == ("jobs/2", 2, {"stage": "ready"})
    assert "\n" not in cli(tally, "get", "jobs/2", "--json").out.rstrip("\n"), "--json is one line"


def test_get_unknown_record(tally):
    result = cli(tally, "get", "jobs/missing")
    assert result.rc != 0, result
    assert result.rc == 1, result
    assert "jobs/missing" in result.err, result
    assert result.out == "", result
    json_result = cli(tally, "get", "jobs/missing", "--json")
    assert json_result.rc == 1 and "jobs/missing" in json_result.err, json_result


def test_get_missing_path(tally):
    put_record(tally, "jobs/3", {"stage": "new"})
    result = cli(tally, "get", "jobs/3", "--path", "nope")
    assert result.rc == 1 and result.err.strip(), result


# --------------------------------------------------------------------------
# set


def test_set_bare_word_is_a_string(tally):
    put_record(tally, "jobs/1", {"stage": "new", "qty": 2})
    cli(tally, "set", "jobs/1", "stage", "ready").ok()
    body = record(tally, "jobs/1")
    assert body["data"] == {"stage": "ready", "qty": 2}
    assert body["version"] == 2


@pytest.mark.parametrize("text, value", [
    ("ready", "ready"),
    ("hello world", "hello world"),
    ("7f3c", "7f3c"),
    ('"quoted"', "quoted"),
    ('"42"', "42"),
    ("42", 42),
    ("-3", -3),
    ("2.5", 2.5),
    ("1e3", 1000),
    ("true", True),
    ("false", False),
    ("null", None),
    ("[1,\"x\",{\"a\":null}]", [1, "x", {"a": None}]),
    ('{"a":{"b":[1,2]}}', {"a": {"b": [1, 2]}}),
])
def test_set_path_value_is_json_or_a_bare_string(tally, text, value):
    cli(tally, "set", "vals/1", "v", text).ok()
    assert record(tally, "vals/1")["data"] == {"v": value}


def test_set_path_creates_record_and_parents(tally):
    cli(tally, "set", "jobs/4", "meta.tags", '["a"]').ok()
    body = record(tally, "jobs/4")
    assert (body["version"], body["data"]) == (1, {"meta": {"tags": ["a"]}})
    cli(tally, "set", "jobs/4", "meta.tags[1]", "b").ok()
    assert record(tally, "jobs/4")["data"] == {"meta": {"tags": ["a", "b"]}}


def test_set_whole_record(tally):
    first = cli(tally, "set", "jobs/5", '{"stage":"new","qty":2}').ok()
    assert "jobs/5" in first.out, first
    body = record(tally, "jobs/5")
    assert (body["version"], body["data"]) == (1, {"stage": "new", "qty": 2})
    # a whole-record set replaces: qty goes
    cli(tally, "set", "jobs/5", '{"stage":"ready"}').ok()
    body = record(tally, "jobs/5")
    assert (body["version"], body["data"]) == (2, {"stage": "ready"})


@pytest.mark.parametrize("value", ["ready", "5", "[1,2]", '"s"', "null", "true"])
def test_set_whole_record_needs_an_object(tally, value):
    put_record(tally, "jobs/6", {"keep": 1})
    before = head(tally)
    result = cli(tally, "set", "jobs/6", value)
    assert result.rc == 2, result
    assert result.err.strip() and result.out == "", result
    assert head(tally) == before
    assert record(tally, "jobs/6")["data"] == {"keep": 1}
    fresh = cli(tally, "set", "jobs/new", value)
    assert fresh.rc == 2, fresh
    assert record(tally, "jobs/new") is None
    assert head(tally) == before


def test_set_json_output(tally):
    result = cli(tally, "set", "jobs/7", "stage", "new", "--json").ok()
    body = result.json()
    assert {"name", "version", "seq"} <= set(body), body
    envelope = record(tally, "jobs/7")
    assert (body["name"], body["version"], body["seq"]) == ("jobs/7", envelope["version"], envelope["seq"])
    second = cli(tally, "set", "jobs/7", '{"stage":"x"}', "--json").ok().json()
    assert (second["name"], second["version"]) == ("jobs/7", 2)
    assert second["seq"] > body["seq"]
    assert record(tally, "jobs/7")["seq"] == second["seq"]


def test_set_if_version_mismatch_is_a_conflict(tally):
    put_record(tally, "jobs/8", {"stage": "new"})
    put_record(tally, "jobs/8", {"stage": "packed"})
    before = head(tally)
    for args in (["stage", "shipped"], ['{"stage":"shipped"}']):
        result = cli(tally, "set", "jobs/8", *args, "--if-version", "1")
        assert result.rc == 1, result
        assert "conflict" in result.err.lower(), result
        assert result.out == "", result
    body = record(tally, "jobs/8")
    assert (body["version"], body["data"]) == (2, {"stage": "packed"})
    assert head(tally) == before, "a refused write wrote something"
    # the right version goes through
    ok = cli(tally, "set", "jobs/8", "stage", "shipped", "--if-version", "2", "--json").ok().json()
    assert ok["version"] == 3
    assert record(tally, "jobs/8")["data"] == {"stage": "shipped"}


def test_set_if_version_zero_creates_only(tally):
    created = cli(tally, "set", "jobs/9", '{"stage":"new"}', "--if-version", "0", "--json").ok().json()
    assert created["version"] == 1
    before = head(tally)
    again = cli(tally, "set", "jobs/9", '{"stage":"other"}', "--if-version", "0")
    assert again.rc == 1 and "conflict" in again.err.lower(), again
    path_again = cli(tally, "set", "jobs/9", "stage", "other", "--if-version=0")
    assert path_again.rc == 1 and "conflict" in path_again.err.lower(), path_again
    body = record(tally, "jobs/9")
    assert (body["version"], body["data"]) == (1, {"stage": "new"})
    assert head(tally) == before


def test_set_idem_retry_applies_once(tally):
    first = cli(tally, "set", "jobs/10", "stage", "ready", "--idem", "k-1", "--json").ok().json()
    before = head(tally)
    retry = cli(tally, "set", "jobs/10", "stage", "ready", "--idem", "k-1", "--json").ok().json()
    assert (retry["name"], retry["version"], retry["seq"]) == (first["name"], first["version"], first["seq"])
    body = record(tally, "jobs/10")
    assert body["version"] == first["version"] == 1
    assert head(tally) == before, "the retry wrote a change"
    # the key names the request: a retry with other content applies nothing either
    cli(tally, "set", "jobs/10", "stage", "other", "--idem", "k-1").ok()
    assert record(tally, "jobs/10")["data"] == {"stage": "ready"}
    assert head(tally) == before
    # another key is another write
    third = cli(tally, "set", "jobs/10", "stage", "other", "--idem", "k-2", "--json").ok().json()
    assert third["version"] == 2
    assert record(tally, "jobs/10")["data"] == {"stage": "other"}


# --------------------------------------------------------------------------
# del


def test_del_record(tally):
    put_record(tally, "jobs/11", {"stage": "new"})
    result = cli(tally, "del", "jobs/11", "--json").ok().json()
    assert (result["name"], result["version"]) == ("jobs/11", 2)
    assert record(tally, "jobs/11") is None
    _, _, changes = all_changes(tally)
    assert changes[-1]["name"] == "jobs/11" and changes[-1]["kind"] == "delete"
    assert changes[-1]["seq"] == result["seq"]
    again = cli(tally, "del", "jobs/11")
    assert again.rc == 1 and "jobs/11" in again.err, again


def test_del_path(tally):
    put_record(tally, "jobs/12", {"stage": "new", "items": [1, 2, 3], "meta": {"a": 1, "b": 2}})
    cli(tally, "del", "jobs/12", "stage").ok()
    assert record(tally, "jobs/12")["data"] == {"items": [1, 2, 3], "meta": {"a": 1, "b": 2}}
    cli(tally, "del", "jobs/12", "items[0]").ok()
    cli(tally, "del", "jobs/12", "meta.a").ok()
    body = record(tally, "jobs/12")
    assert (body["version"], body["data"]) == (4, {"items": [2, 3], "meta": {"b": 2}})
    before = head(tally)
    missing = cli(tally, "del", "jobs/12", "nope")
    assert missing.rc == 1, missing
    assert head(tally) == before


def test_del_if_version_mismatch(tally):
    put_record(tally, "jobs/13", {"stage": "new"})
    before = head(tally)
    result = cli(tally, "del", "jobs/13", "--if-version", "5")
    assert result.rc == 1 and "conflict" in result.err.lower(), result
    assert record(tally, "jobs/13")["data"] == {"stage": "new"}
    assert head(tally) == before
    cli(tally, "del", "jobs/13", "--if-version", "1").ok()
    assert record(tally, "jobs/13") is None


# --------------------------------------------------------------------------
# watch


def test_watch_record_json(tally, spawn):
    watcher = spawn(tally, "watch", "jobs/20", "--json")
    wait_subscriptions(tally, 1)
    seqs = [
        write_seq(cli(tally, "set", "jobs/20", '{"stage":"new","qty":1}', "--json")),
        write_seq(cli(tally, "set", "jobs/20", "qty", "2", "--json")),
    ]
    cli(tally, "set", "jobs/21", "stage", "other").ok()  # not watched
    cli(tally, "set", "jobs/200", "stage", "other").ok()  # not watched either
    seqs.append(write_seq(cli(tally, "del", "jobs/20", "--json")))
    lines = watcher.json_lines(3)
    for line in lines:
        assert {"name", "seq", "version"} <= set(line), line
    assert [line["name"] for line in lines] == ["jobs/20"] * 3
    assert [line["seq"] for line in lines] == seqs
    assert [line["version"] for line in lines] == [1, 2, 3]
    assert [line.get("kind") for line in lines] == ["set", "setPath", "delete"]
    assert lines[0]["data"] == {"stage": "new", "qty": 1}
    assert (lines[1]["path"], lines[1]["value"]) == ("qty", 2)
    watcher.no_line()
    assert watcher.alive()


def test_watch_text_prints_each_change(tally, spawn):
    put_record(tally, "jobs/22", {"stage": "new"})
    watcher = spawn(tally, "watch", "jobs/22")
    wait_subscriptions(tally, 1)
    seqs = [write_seq(cli(tally, "set", "jobs/22", "stage", value, "--json"))
            for value in ("packed", "shipped")]
    # skip the snapshot of the current state, if one is printed
    seen = []
    while len(seen) < 2:
        line = watcher.line()
        if str(seqs[0]) in line.split() or seen:
            seen.append(line)
    for line, seq, value in zip(seen, seqs, ("packed", "shipped")):
        assert "jobs/22" in line and str(seq) in line.split() and value in line, seen
    watcher.no_line()


def test_watch_prefix_sees_matching_names_only(tally, spawn):
    watcher = spawn(tally, "watch", "jobs/", "--json")
    wait_subscriptions(tally, 1)
    expected = []
    for name, args in [("jobs/1", ['{"a":1}']), ("other/1", ['{"a":1}']),
                       ("ordersX", ['{"a":1}']), ("jobs/2/x", ["a", "2"]),
                       ("orders", ['{"a":1}']), ("jobs/1", ["a", "3"])]:
        seq = write_seq(cli(tally, "set", name, *args, "--json"))
        if name.startswith("jobs/"):
            expected.append((name, seq))
    seq = write_seq(cli(tally, "del", "jobs/1", "--json"))
    expected.append(("jobs/1", seq))
    lines = watcher.json_lines(len(expected))
    assert [(line["name"], line["seq"]) for line in lines] == expected
    assert all("version" in line for line in lines), lines
    watcher.no_line()


def test_watch_path_sees_changes_under_the_path_only(tally, spawn):
    put_record(tally, "jobs/23", {"stage": "new", "qty": 1})
    watcher = spawn(tally, "watch", "jobs/23", "--path", "stage", "--json")
    wait_subscriptions(tally, 1)
    cli(tally, "set", "jobs/23", "qty", "2").ok()
    cli(tally, "set", "jobs/23", "stagehand", "bob").ok()
    staged = write_seq(cli(tally, "set", "jobs/23", "stage", "packed", "--json"))
    cli(tally, "set", "jobs/23", "qty", "3").ok()
    deleted = write_seq(cli(tally, "del", "jobs/23", "--json"))
    lines = watcher.json_lines(2)
    assert [line["seq"] for line in lines] == [staged, deleted], lines
    assert (lines[0]["name"], lines[0]["path"], lines[0]["value"]) == ("jobs/23", "stage", "packed")
    assert lines[1]["kind"] == "delete"
    watcher.no_line()


def test_watch_since_replays_then_follows(tally, spawn):
    seqs = []
    for i in range(5):
        seqs.append(write_seq(cli(tally, "set", "jobs/24", "step", str(i), "--json")))
        cli(tally, "set", "other/24", "step", str(i)).ok()  # interleaved, not watched
    watcher = spawn(tally, "watch", "jobs/24", "--since", str(seqs[1]), "--json")
    replayed = watcher.json_lines(3)
    assert [line["seq"] for line in replayed] == seqs[2:], replayed
    assert [line["value"] for line in replayed] == [2, 3, 4]
    assert [line["version"] for line in replayed] == [3, 4, 5]
    wait_subscriptions(tally, 1)
    live = write_seq(cli(tally, "set", "jobs/24", "step", "5", "--json"))
    line = watcher.json_line()
    assert (line["seq"], line["value"]) == (live, 5)
    watcher.no_line()


def test_watch_prefix_since(tally, spawn):
    start = head(tally)
    expected = []
    for i in range(3):
        for name in (f"p/{i}", f"q/{i}"):
            seq = write_seq(cli(tally, "set", name, "i", str(i), "--json"))
            if name.startswith("p/"):
                expected.append((name, seq))
    watcher = spawn(tally, "watch", "p/", "--since", str(start), "--json")
    lines = watcher.json_lines(3)
    assert [(line["name"], line["seq"]) for line in lines] == expected
    watcher.no_line()


def test_watch_empty_prefix_sees_every_record(tally, spawn):
    expected = [write_seq(cli(tally, "set", name, "n", "1", "--json")) for name in ("a", "b/c", "zz/1")]
    watcher = spawn(tally, "watch", "", "--since", "0", "--json")
    assert [line["seq"] for line in watcher.json_lines(3)] == expected
    wait_subscriptions(tally, 1)
    live = write_seq(cli(tally, "set", "q", "n", "1", "--json"))
    assert watcher.json_line()["seq"] == live


@pytest.mark.parametrize("command", [["watch", "jobs/"], ["on", "scanner"]])
def test_interrupt_stops_watch_and_on(tally, spawn, command):
    process = spawn(tally, *command, "--json")
    wait_subscriptions(tally, 1)
    os.kill(process.process.pid, signal.SIGINT)
    try:
        process.process.wait(3)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running 3 s after SIGINT: {process.describe()}") from None


def test_watch_since_older_than_the_log_is_not_silent(tally_factory, spawn):
    server = tally_factory("--retain-changes", "2")
    for i in range(6):
        cli(server, "set", "jobs/50", "n", str(i)).ok()
    assert rest(server, "GET", "/v1/changes?since=1").status == 410  # the log no longer reaches seq 1
    watcher = spawn(server, "watch", "jobs/50", "--since", "1", "--json")
    wait_subscriptions(server, 1)
    watcher.stderr_matching("no longer reaches back to seq 1", timeout=5.0)
    snapshot = watcher.json_line()
    assert snapshot["op"] == "snapshot" and snapshot["name"] == "jobs/50", snapshot
    assert snapshot["data"] == {"n": 5} and snapshot["version"] == 6, snapshot


def test_watch_reconnects_when_the_hub_goes_away(tally_factory, spawn):
    server = tally_factory()
    watcher = spawn(server, "watch", "jobs/", "--json")
    wait_subscriptions(server, 1)
    seq = write_seq(cli(server, "set", "jobs/30", "stage", "new", "--json"))
    assert watcher.json_line()["seq"] == seq
    server.kill()
    watcher.stderr_matching("reconnecting", timeout=5.0)
    # It keeps retrying (once a second) instead of exiting.
    with pytest.raises(subprocess.TimeoutExpired):
        watcher.process.wait(timeout=1.5)
    watcher.no_line(0.1)


def test_watch_resumes_after_a_restart_on_the_same_port(tally_factory, spawn):
    first = tally_factory()
    port, data_dir = first.port, first.data_dir
    watcher = spawn(first, "watch", "jobs/", "--json")
    wait_subscriptions(first, 1)
    seq = write_seq(cli(first, "set", "jobs/31", "n", "0", "--json"))
    assert watcher.json_line()["seq"] == seq
    assert first.stop() == 0
    watcher.stderr_matching("reconnecting", timeout=5.0)
    second = tally_factory("--port", str(port), "--data", str(data_dir))
    assert second.port == port
    # written before the watcher is back (it retries every second): replayed from its last seq
    missed = [write_seq(cli(second, "set", "jobs/31", "n", str(i), "--json")) for i in (1, 2)]
    cli(second, "set", "other/31", "n", "1").ok()
    lines = watcher.json_lines(2, timeout=8.0)
    assert [line["seq"] for line in lines] == missed, lines
    wait_subscriptions(second, 1)
    live = write_seq(cli(second, "set", "jobs/31", "n", "3", "--json"))
    line = watcher.json_line()
    assert (line["seq"], line["value"], line["version"]) == (live, 3, 4)
    watcher.no_line()


# --------------------------------------------------------------------------
# list


def test_list_add_show_remove(tally):
    cli(tally, "list", "add", "open", "jobs/1").ok()
    cli(tally, "list", "add", "open", "jobs/2").ok()
    added = cli(tally, "list", "add", "open", "jobs/0", "--at", "0", "--json").ok().json()
    assert added["version"] == 3
    cli(tally, "list", "add", "open", "jobs/1").ok()
    assert list_envelope(tally, "open")["entries"] == ["jobs/0", "jobs/1", "jobs/2", "jobs/1"]

    shown = cli(tally, "list", "show", "open").ok()
    assert shown.out.splitlines() == ["jobs/0", "jobs/1", "jobs/2", "jobs/1"]
    envelope = cli(tally, "list", "show", "open", "--json").ok().json()
    rest_envelope = list_envelope(tally, "open")
    assert envelope["entries"] == rest_envelope["entries"]
    assert (envelope["version"], envelope["seq"]) == (rest_envelope["version"], rest_envelope["seq"])
    assert (envelope["version"], envelope["seq"]) == (4, added["seq"] + 1)

    cli(tally, "list", "remove", "open", "jobs/1", "--at", "3").ok()
    assert list_envelope(tally, "open")["entries"] == ["jobs/0", "jobs/1", "jobs/2"]
    cli(tally, "list", "remove", "open", "jobs/0").ok()
    assert list_envelope(tally, "open")["entries"] == ["jobs/1", "jobs/2"]
    assert cli(tally, "list", "show", "open").ok().out.splitlines() == ["jobs/1", "jobs/2"]

    before = head(tally)
    missing = cli(tally, "list", "remove", "open", "jobs/9")
    assert missing.rc == 1 and missing.err.strip(), missing
    unknown = cli(tally, "list", "show", "nolist")
    assert unknown.rc == 1 and "nolist" in unknown.err, unknown
    assert head(tally) == before


def test_list_remove_every_occurrence(tally):
    for entry in ("a/1", "b/1", "a/1", "a/1"):
        cli(tally, "list", "add", "dups", entry).ok()
    cli(tally, "list", "remove", "dups", "a/1").ok()
    assert list_envelope(tally, "dups")["entries"] == ["b/1"]


# --------------------------------------------------------------------------
# emit / on


def test_emit_and_on(tally, spawn):
    plain = spawn(tally, "on", "scanner")
    whole = spawn(tally, "on", "scanner", "--json")
    wait_subscriptions(tally, 2)
    emitted = cli(tally, "emit", "scanner", '{"code":"0042"}').ok()
    assert "2" in emitted.out, emitted
    assert cli(tally, "emit", "other", '{"code":"x"}', "--json").ok().json()["delivered"] == 0
    cli(tally, "emit", "scanner", "hello").ok()
    delivered = cli(tally, "emit", "scanner", "42", "--json").ok().json()
    assert delivered["delivered"] == 2
    assert [json.loads(plain.line()) for _ in range(3)] == [{"code": "0042"}, "hello", 42]
    events = whole.json_lines(3)
    assert [(e.get("op"), e.get("topic"), e.get("data")) for e in events] == [
        ("event", "scanner", {"code": "0042"}), ("event", "scanner", "hello"), ("event", "scanner", 42)]
    plain.no_line(0.1)
    whole.no_line(0.1)
    # events are not stored
    assert head(tally) == 0


# --------------------------------------------------------------------------
# Where the hub is


def test_tally_url_and_http_forms(tally):
    put_record(tally, "jobs/40", {"stage": "new"})
    base = f"http://{tally.host}:{tally.port}"
    for url in (base, base + "/", f"ws://{tally.host}:{tally.port}/v1/ws"):
        got = run("get", "jobs/40", env=clean_env(TALLY_URL=url))
        assert got.ok().json() == {"stage": "new"}, url
    run("set", "jobs/40", "stage", "ready", env=clean_env(TALLY_URL=base)).ok()
    assert record(tally, "jobs/40")["data"] == {"stage": "ready"}
    assert run("get", "jobs/40", "--server", base).ok().json() == {"stage": "ready"}
    # --server wins over TALLY_URL
    sock = dead_port()
    try:
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        overridden = run("get", "jobs/40", "--server", base, env=clean_env(TALLY_URL=dead))
        assert overridden.ok().json() == {"stage": "ready"}
        refused = run("get", "jobs/40", env=clean_env(TALLY_URL=dead))
        assert refused.rc == 1 and f"127.0.0.1:{sock.getsockname()[1]}" in refused.err, refused
    finally:
        sock.close()


@pytest.mark.parametrize("args", [
    ["get", "jobs/1"],
    ["get", "jobs/1", "--json"],
    ["set", "jobs/1", "stage", "ready"],
    ["set", "jobs/1", '{"a":1}'],
    ["del", "jobs/1"],
    ["watch", "jobs/1"],
    ["watch", "jobs/"],
    ["list", "show", "open"],
    ["list", "add", "open", "jobs/1"],
    ["emit", "scanner", "1"],
    ["on", "scanner"],
])
def test_unreachable_hub(args):
    sock = dead_port()
    try:
        port = sock.getsockname()[1]
        url = f"ws://127.0.0.1:{port}"
        result = run(*args, "--server", url, timeout=12)
    finally:
        sock.close()
    assert result.rc == 1, result
    assert f"127.0.0.1:{port}" in result.err, result
    assert result.out == "", result
    assert result.elapsed < 10, result


def test_hub_that_never_answers():
    """A listener that accepts and stays silent: still an error, in bounded time."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    try:
        result = run("get", "jobs/1", "--server", f"ws://127.0.0.1:{port}", timeout=12)
    finally:
        listener.close()
    assert result.rc == 1, result
    assert f"127.0.0.1:{port}" in result.err, result
    assert result.elapsed < 10, result


# --------------------------------------------------------------------------
# Usage


@pytest.mark.parametrize("args", [
    ["get"],
    ["get", "a", "b"],
    ["get", "/x"],
    ["get", "x/"],
    ["get", "a//b"],
    ["get", "jobs/1", "--bogus"],
    ["get", "jobs/1", "--path"],
    ["get", "jobs/1", "--json=1"],
    ["set"],
    ["set", "jobs/1"],
    ["set", "/x", '{"a":1}'],
    ["set", "jobs/1", "a", "b", "c"],
    ["set", "jobs/1", '{"a":1}', "--frobnicate"],
    ["set", "jobs/1", "stage", "x", "--if-version", "abc"],
    ["set", "jobs/1", "stage", "x", "--if-version", "-1"],
    ["set", "jobs/1", "stage", "x", "--if-version", "1.5"],
    ["set", "jobs/1", "stage", "x", "--if-version", ""],
    ["del"],
    ["del", "/x"],
    ["del", "jobs/1", "--if-version", "x"],
    ["watch"],
    ["watch", "/x"],
    ["watch", "a//b"],
    ["watch", "jobs/1", "--since", "abc"],
    ["watch", "jobs/1", "--since", "-1"],
    ["watch", "jobs/", "--path", "stage"],
    ["list"],
    ["list", "show"],
    ["list", "frob", "open"],
    ["list", "show", "/x"],
    ["list", "add", "open", "x", "--at", "-1"],
    ["emit"],
    ["emit", "scanner"],
    ["emit", "/x", "1"],
    ["on"],
    ["on", "/x"],
    ["on", "a", "b"],
])
def test_usage_errors(module_tally, args):
    before = head(module_tally)
    result = cli(module_tally, *args)
    assert result.rc == 2, result
    assert result.err.strip(), result
    assert result.out == "", result
    assert result.elapsed < 10, result
    assert head(module_tally) == before


@pytest.mark.parametrize("args", [
    ["list", "add", "open"],
    ["list", "show", "open", "extra"],
    ["list", "add", "open", "/bad"],
])
def test_list_usage_errors_do_not_need_the_hub(args):
    sock = dead_port()
    try:
        result = run(*args, "--server", f"ws://127.0.0.1:{sock.getsockname()[1]}")
    finally:
        sock.close()
    assert result.rc == 2, result


@pytest.mark.parametrize("args", [
    ["list", "add", "open"],
    ["list", "show", "open", "extra"],
    ["list", "add", "open", "/bad"],
])
def test_list_usage_errors_with_a_hub(module_tally, args):
    before = head(module_tally)
    result = cli(module_tally, *args)
    assert result.rc == 2 and result.err.strip(), result
    assert head(module_tally) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command):
    result = run(command, "--help")
    assert result.rc == 0, result
    assert result.out.startswith(f"Usage: tally {command}"), result
    assert "--server" in result.out and "--json" in result.out, result
    # --help needs no hub, and wins over the other arguments
    sock = dead_port()
    try:
        with_args = run(command, "x", "--help", "--server", f"ws://127.0.0.1:{sock.getsockname()[1]}")
    finally:
        sock.close()
    assert with_args.rc == 0 and with_args.out.startswith(f"Usage: tally {command}"), with_args


@pytest.mark.parametrize("args, says", [
    (["--durability", "fast"], "--durability must be full, normal or off"),
    (["--retain-changes", "0"], "--retain-changes must be a whole number"),
    (["--retain-age", "-1"], "--retain-age must be a number of seconds"),
    (["--max-record-size", "lots"], "--max-record-size must be a size"),
    (["--retain-bytes", "0"], "--retain-bytes must be a size"),
    (["--blob-quota", "10T"], "--blob-quota must be a size"),
    (["--data", ""], "--data needs a directory"),
])
def test_serve_refuses_bad_storage_flags(tmp_path, args, says):
    result = run("serve", "--port", "0", "--data", str(tmp_path / "d"), *args)
    assert result.rc == 2 and says in result.err, result
    assert not (tmp_path / "d").exists(), "a refused start must not create the store"


def test_serve_refuses_a_bad_config_file_with_the_path_of_the_entry(tmp_path):
    config = tmp_path / "tally.json"
    config.write_text('{"port": 8080, "retention": {"changes": "many"}}')
    result = run("serve", "--config", str(config), "--data", str(tmp_path / "d"))
    assert result.rc == 2, result
    assert "$.retention.changes" in result.err and str(config) in result.err, result
    assert not (tmp_path / "d").exists(), "a refused config must not create the store"

"""Several hubs for one client (issue 16, failover), black box:

- every command that takes `--server` takes a comma-separated list (and
  `$TALLY_SERVER`), tries the hubs in order and moves past one that cannot
  be reached: `get`, `set`, `del`, `list show`, `order new|advance|ls`,
  `resolve`, `intake new`, `verify`, `watch`, `mirror run`;
- a bad list is a usage error (exit 2) naming the bad element; when no hub
  answers, the error names every hub tried (exit 1); the clear-text token
  rule holds for every hub of the list;
- a write whose connection is lost after it was sent goes to the next hub
  only with an idempotency key, and the error says why not otherwise;
- `watch` moves to the next hub when its hub stops and resumes there from
  the last seq it printed;
- the hub's `unavailable` (its database out of reach) is exit 1 with the
  hub's message;
- `tally serve --peers` and the config's `peers`: `GET /v1/hubs`, the
  dashboard's Content-Security-Policy, and pages of a peer let in.

Two independent hubs (each its own SQLite store) stand for a cluster: they
do not share seqs, so what is checked is the moving, and that a resume
carries `since` (the second hub, further along, answers it with its changes
after that seq instead of a snapshot). Fake hubs (a `websockets` server in a
thread) answer what a real hub does not do on demand. Everything binds
127.0.0.1; hubs and long-running commands are stopped by PID; every wait is
bounded.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import threading

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect
from websockets.sync.server import serve

from conftest import REPO, TALLY_BIN
from synclib import LongRunning, cli_env, get_record, put_record, rest, run_tally, wait_until

RUN_TIMEOUT = 20.0
WAIT = 15.0


# --------------------------------------------------------------------------
# Helpers


@pytest.fixture
def env(tmp_path):
    """The environment without TALLY_* (no hub but the test's), HOME here."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return cli_env(home)


def run(*args, env, timeout: float = RUN_TIMEOUT):
    return run_tally(args, env, timeout)


def ws(server) -> str:
    return f"ws://127.0.0.1:{server.port}"


@pytest.fixture
def dead():
    """URLs of ports bound but not listening: connections are refused, and
    nobody can take the ports meanwhile."""
    sockets = []

    def make() -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        return f"ws://127.0.0.1:{sock.getsockname()[1]}"

    yield make
    for sock in sockets:
        sock.close()


class FakeHub:
    """A WebSocket endpoint answering each request with ``answer(request)``:
    a dict (sent as the reply, with the request's id) or None (close the
    connection, the request unanswered)."""

    def __init__(self, answer):
        self.answer = answer
        self.received: list[dict] = []
        self.server = serve(self._handle, "127.0.0.1", 0, ping_interval=None)
        self.url = f"ws://127.0.0.1:{self.server.socket.getsockname()[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _handle(self, connection):
        for text in connection:
            request = json.loads(text)
            self.received.append(request)
            reply = self.answer(request)
            if reply is None:
                connection.close(1001, "fake hub drops it")
                return
            connection.send(json.dumps({**reply, "id": request.get("id")}))

    def stop(self):
        self.server.shutdown()
        self.thread.join(5)


@pytest.fixture
def fake_hub():
    started = []

    def start(answer):
        hub = FakeHub(answer)
        started.append(hub)
        return hub

    yield start
    for hub in started:
        hub.stop()


def jpeg(seed: int) -> bytes:
    rng = random.Random(seed)
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + rng.randbytes(512) + b"\xff\xd9"


# --------------------------------------------------------------------------
# One-shot commands past a hub that cannot be reached


def test_one_shot_commands_move_past_a_dead_hub(tally, dead, env, tmp_path):
    hubs = f"{dead()},{ws(tally)}"
    assert run("set", "items/drill", '{"sku":"DRILL-1","stock":5}', "--server", hubs, env=env).rc == 0
    assert get_record(tally, "items/drill").json()["data"]["sku"] == "DRILL-1"
    got = run("get", "items/drill", "--json", "--server", hubs, env=env)
    assert got.rc == 0 and got.json()["data"]["stock"] == 5, got
    assert run("set", "notes/1", "text", "hello", "--server", hubs, env=env).rc == 0
    assert run("del", "notes/1", "text", "--server", hubs, env=env).rc == 0
    assert get_record(tally, "notes/1").json()["data"] == {}
    assert run("list", "add", "shelf", "items/drill", "--server", hubs, env=env).rc == 0
    shown = run("list", "show", "shelf", "--server", hubs, env=env)
    assert shown.rc == 0 and shown.out.split() == ["items/drill"], shown

    made = run("order", "new", "items/drill", "--qty", "2", "--server", hubs, env=env)
    assert made.rc == 0, made
    order = made.out.strip().splitlines()[-1]
    advanced = run("order", "advance", order, "--server", hubs, env=env)
    assert advanced.rc == 0 and "received → in-progress" in advanced.out, advanced
    listed = run("order", "ls", "--server", hubs, env=env)
    assert listed.rc == 0 and order in listed.out, listed

    found = run("resolve", "DRILL-1", "--server", hubs, env=env)
    assert found.rc == 0 and found.out.splitlines()[0] == "items/drill", found

    photo = tmp_path / "photo.jpg"
    photo.write_bytes(jpeg(1))
    intake = run("intake", "new", "--photo", photo, "--code", "FO-1", "--server", hubs,
                 "--outbox", tmp_path / "outbox.sqlite", "--quiet", "--analysis-wait", "1", env=env, timeout=60)
    assert intake.rc == 0, intake
    job = intake.out.strip().splitlines()[-1]
    assert get_record(tally, job).json()["data"]["stage"] == "done"


def test_tally_server_takes_a_list_and_the_flag_wins(tally, dead, env):
    put_record(tally, "notes/2", {"n": 2})
    listed = run("get", "notes/2", env={**env, "TALLY_SERVER": f"{dead()}, {ws(tally)}"})
    assert listed.rc == 0 and listed.json() == {"n": 2}, listed
    # TALLY_SERVER wins over TALLY_URL (kept for compatibility) …
    over_url = run("get", "notes/2", env={**env, "TALLY_SERVER": ws(tally), "TALLY_URL": dead()})
    assert over_url.rc == 0, over_url
    assert run("get", "notes/2", env={**env, "TALLY_URL": ws(tally)}).rc == 0
    # … and --server over both.
    flag = run("get", "notes/2", "--server", ws(tally), env={**env, "TALLY_SERVER": dead()})
    assert flag.rc == 0, flag


@pytest.mark.parametrize("command", [
    ["get", "notes/1"],
    ["set", "notes/1", "n", "1"],
    ["watch", "notes/"],
    ["order", "ls"],
    ["resolve", "X-1"],
    ["verify"],
    ["mirror", "run", "orders/"],
    ["intake", "resume"],
])
@pytest.mark.parametrize("given, says", [
    ("ws://127.0.0.1:1,,ws://127.0.0.1:2", "hub 2 of 'ws://127.0.0.1:1,,ws://127.0.0.1:2' is empty"),
    ("ws://127.0.0.1:1,", "hub 2 of 'ws://127.0.0.1:1,' is empty"),
    ("ws://127.0.0.1:1,nonsense", "hub 2, 'nonsense', is not a hub URL"),
    ("ftp://127.0.0.1:1", "hub 1, 'ftp://127.0.0.1:1', is not a hub URL"),
    ("ws://127.0.0.1:99999,ws://127.0.0.1:2", "hub 1, 'ws://127.0.0.1:99999', is not a hub URL"),
])
def test_a_bad_list_is_a_usage_error_naming_the_element(command, given, says, env, tmp_path):
    extra = ["--store", str(tmp_path / "m.sqlite")] if command[0] in ("verify", "mirror") else []
    if command[0] == "intake":
        extra = ["--outbox", str(tmp_path / "outbox.sqlite")]
    flag = run(*command, *extra, "--server", given, env=env)
    assert flag.rc == 2, flag
    assert f"--server: {says}" in flag.err, flag
    variable = run(*command, *extra, env={**env, "TALLY_SERVER": given})
    assert variable.rc == 2 and f"TALLY_SERVER: {says}" in variable.err, variable


def test_when_no_hub_answers_every_one_is_named(dead, env):
    one, two = dead(), dead()
    for command in (["get", "notes/1"], ["set", "notes/1", "n", "1"], ["resolve", "X-1"], ["watch", "notes/"]):
        result = run(*command, "--server", f"{one},{two}", env=env)
        assert result.rc == 1, result
        assert "cannot reach any of the 2 hubs" in result.err, result
        assert one.removeprefix("ws://") in result.err and two.removeprefix("ws://") in result.err, result
        assert result.out == "", result


def test_the_clear_text_token_rule_covers_every_hub(tally, env):
    result = run("get", "notes/1", "--token", "t", "--server", f"{ws(tally)},ws://10.0.0.5:8080", env=env)
    assert result.rc == 1, result
    assert "refusing to send the token in plain text to ws://10.0.0.5:8080" in result.err, result


# --------------------------------------------------------------------------
# A write lost after it was sent


def test_a_write_lost_after_sending_goes_on_only_with_its_key(tally, fake_hub, env):
    dropper = fake_hub(lambda request: None)
    hubs = f"{dropper.url},{ws(tally)}"
    unkeyed = run("set", "notes/3", "n", "1", "--server", hubs, env=env)
    assert unkeyed.rc == 1, unkeyed
    assert "not sent to another hub" in unkeyed.err and "--idem" in unkeyed.err, unkeyed
    assert get_record(tally, "notes/3").status == 404
    assert len(dropper.received) == 1

    keyed = run("set", "notes/3", "n", "1", "--idem", "failover-1", "--server", hubs, env=env)
    assert keyed.rc == 0, keyed
    assert dropper.received[-1].get("idem") == "failover-1"
    assert get_record(tally, "notes/3").json()["data"] == {"n": 1}
    # A read is always safe to ask again.
    read = run("get", "notes/3", "--server", hubs, env=env)
    assert read.rc == 0 and read.json() == {"n": 1}, read


def test_unavailable_is_exit_1_with_the_hubs_message(fake_hub, env):
    sick = fake_hub(lambda request: {"ok": False, "error": {
        "code": "unavailable", "message": "the hub cannot reach its database; retry with the same idempotency key"}})
    for command in (["get", "notes/1"], ["set", "notes/1", "n", "1", "--idem", "k"]):
        result = run(*command, "--server", sick.url, env=env)
        assert result.rc == 1, result
        assert "the hub cannot reach its database" in result.err and "(unavailable)" in result.err, result


# --------------------------------------------------------------------------
# Long-running clients


def test_watch_moves_to_the_next_hub_and_resumes_from_its_last_seq(tally_factory, env):
    first, second = tally_factory(), tally_factory()
    for n in range(3):
        put_record(second, f"jobs/b{n}", {"n": n})    # seqs 1…3 on the second hub
    watcher = LongRunning(["watch", "jobs/", "--json", "--server", f"{ws(first)},{ws(second)}"], env)
    try:
        wait_until(lambda: rest(first, "GET", "/metrics").body.find(b"tally_subscriptions 1") >= 0, WAIT,
                   "the watcher's subscription")
        put_record(first, "jobs/a0", {"n": 0})          # seq 1 on the first hub
        assert watcher.json_line(WAIT)["name"] == "jobs/a0"
        assert first.stop() == 0
        moved = watcher.stderr_matching("reconnected to", timeout=WAIT)
        assert f"127.0.0.1:{second.port}" in moved, moved
        # Resumed with since = 1: the second hub's changes after seq 1, not a snapshot.
        lines = watcher.json_lines(2, timeout=WAIT)
        assert [(line["name"], line["seq"]) for line in lines] == [("jobs/b1", 2), ("jobs/b2", 3)], lines
        put_record(second, "jobs/b3", {"n": 3})
        assert watcher.json_line(WAIT)["name"] == "jobs/b3"
    finally:
        watcher.stop()


def test_mirror_run_keeps_the_list_and_verify_takes_it(tally, dead, env, tmp_path):
    put_record(tally, "notes/m1", {"n": 1})
    store = tmp_path / "m.sqlite"
    hubs = f"{dead()},{ws(tally)}"
    log = open(tmp_path / "mirror.log", "wb")
    mirror = subprocess.Popen([str(TALLY_BIN), "mirror", "run", "--store", str(store), "--server", hubs, "notes/"],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def status():
            result = run("mirror", "status", "--json", "--store", store, env=env)
            return result.json() if result.rc == 0 else None
        live = wait_until(lambda: (s := status()) and s["online"] and s, WAIT,
                          lambda: f"the mirror online; log: {(tmp_path / 'mirror.log').read_text()[-2000:]}")
        assert live["server"] == hubs, live
        assert live["connectedTo"] == f"{ws(tally)}/v1/ws", live
        wait_until(lambda: run("mirror", "get", "notes/m1", "--store", store, env=env).rc == 0, WAIT, "notes/m1")
        text = run("mirror", "status", "--store", store, env=env)
        assert f"(connected to {ws(tally)}/v1/ws)" in text.out, text
    finally:
        os.kill(mirror.pid, signal.SIGTERM)
        mirror.wait(10)
        log.close()
    # verify without --server uses the stored list; with it, the list given.
    assert run("verify", "--store", store, env=env).rc == 0
    assert run("verify", "--store", store, "--server", hubs, env=env).rc == 0


# --------------------------------------------------------------------------
# The hub's side: peers


def csp(server) -> str:
    response = rest(server, "GET", "/")
    assert response.status == 200, response.status
    return response.header("Content-Security-Policy") or ""


def test_serve_peers_are_listed_and_the_board_may_connect_to_them(tally_factory):
    server = tally_factory("--web", str(REPO / "Clients"), "--peers", "ws://10.0.0.2:8080, http://10.0.0.3:9090/")
    listed = rest(server, "GET", "/v1/hubs")
    assert listed.status == 200 and listed.json() == {"hubs": ["ws://10.0.0.2:8080/v1/ws", "ws://10.0.0.3:9090/v1/ws"]}
    assert "connect-src 'self' ws://10.0.0.2:8080 ws://10.0.0.3:9090;" in csp(server)
    alone = tally_factory("--web", str(REPO / "Clients"))
    assert rest(alone, "GET", "/v1/hubs").json() == {"hubs": []}
    assert "connect-src 'self';" in csp(alone)


def test_config_peers_and_the_flag_over_them(tally_factory, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"peers": ["ws://10.0.0.2:8080", "wss://hub-3.example"]}))
    from_file = tally_factory("--config", str(config))
    assert rest(from_file, "GET", "/v1/hubs").json() == {"hubs": ["ws://10.0.0.2:8080/v1/ws",
                                                                  "wss://hub-3.example/v1/ws"]}
    flagged = tally_factory("--config", str(config), "--peers", "ws://10.0.0.9:8080")
    assert rest(flagged, "GET", "/v1/hubs").json() == {"hubs": ["ws://10.0.0.9:8080/v1/ws"]}


@pytest.mark.parametrize("peers, says", [
    ("ws://10.0.0.2:8080,,ws://10.0.0.3:8080", "--peers: hub 2 of 'ws://10.0.0.2:8080,,ws://10.0.0.3:8080' is empty"),
    ("ws://10.0.0.2:8080,10.0.0.3:8080", "--peers: hub 2, '10.0.0.3:8080', must be a hub's URL"),
])
def test_bad_peers_are_a_usage_error(peers, says, tmp_path):
    result = subprocess.run([str(TALLY_BIN), "serve", "--port", "0", "--data", str(tmp_path / "d"), "--peers", peers],
                            capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result
    assert says in result.stderr, result.stderr


def test_a_page_from_a_peer_may_open_a_websocket_here(tally_factory):
    server = tally_factory("--peers", "http://127.0.0.1:9001")
    with connect(f"{ws(server)}/v1/ws", origin="http://127.0.0.1:9001", subprotocols=["tally.v1"]) as client:
        client.send(json.dumps({"op": "hello", "protocol": 1, "id": 1}))
        assert json.loads(client.recv(timeout=5))["ok"] is True
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{ws(server)}/v1/ws", origin="http://127.0.0.1:9002", subprotocols=["tally.v1"])
    assert refused.value.response.status_code == 403

"""Auth and roles (Protocol/PROTOCOL.md, "Auth"), black box, on hubs started
with a config that has users (tokens given as tokenSha256 and as tokenEnv):

- who may connect: tokens in hello or in the upgrade's Authorization header;
  `unauthorized` before hello, hello with a bad token → `unauthorized` then
  close 1008, a bad header → HTTP 401, REST without a token → 401;
- what each role may do: dashboard read-only, client creates orders and
  reads only its own, staff cannot delete workflow records, nobody writes
  `stats/`, a role defined by the config;
- the metrics `tally_auth_failures_total` and `tally_denied_total`;
- open mode: says so on start, acts as admin, and `tally serve` refuses a
  non-loopback --host without users (only the refusal is tested: no test
  listens beyond 127.0.0.1);
- the CLI's --token.

Every hub binds 127.0.0.1 (conftest) and is stopped by its PID.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
import uuid

import pytest
from websockets.exceptions import ConnectionClosed

from authlib import AuthClient, Tokens, drain_via, rest_as, sha256_hex, start_hub, upgrade_refusal
from conftest import TALLY_BIN, TallyFactory
from synclib import dumps, expect_error, metric, record_path, rest


def uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def hub(tmp_path_factory, request):
    """One hub with users for the module: (server, tokens)."""
    tokens = Tokens()
    factory = TallyFactory(tmp_path_factory.mktemp("auth"), request)
    server = start_hub(factory, tokens.config(), tokens.env())
    yield server, tokens
    factory.finish()


@pytest.fixture
def as_user(hub):
    """as_user("ana") -> an AuthClient that said hello with ana's token."""
    server, tokens = hub
    opened = []

    def open_client(user: str, **options):
        client = AuthClient(server, token=tokens[user], **options)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


def closed_code(client: AuthClient, timeout: float = 5.0) -> int | None:
    """Waits (bounded) for the hub to close the connection; its close code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frame = client.ws.recv(timeout=max(0.05, deadline - time.monotonic()))
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
        except TimeoutError:
            break
        raise AssertionError(f"expected the hub to close the connection, got {frame[:300]!r}")
    raise AssertionError(f"the hub did not close the connection within {timeout}s")


def forbidden(client, op: str, role: str, operation: str, target: str, **fields) -> dict:
    """Expects `forbidden` naming the role, the operation and the target name."""
    error = client.fail(op, "forbidden", **fields)
    assert (error["role"], error["operation"], error["name"]) == (role, operation, target), error
    # an advance's message says "may not move NAME from … to …"
    for word in (role, target) if operation == "advance" else (role, operation, target):
        assert word in error["message"], f"the message names role, operation and name: {error}"
    return error


# --------------------------------------------------------------------------
# Who may connect


def test_hello_with_a_token_says_who_and_which_role(hub, as_user):
    server, tokens = hub
    for user, (role, how) in tokens.users.items():
        reply = as_user(user).hello_reply
        assert (reply["user"], reply["role"]) == (user, role), f"{user} ({how}): {reply}"


def test_messages_before_hello_are_unauthorized(hub, as_user):
    server, tokens = hub
    admin = as_user("root")
    admin.ok("set", name="notes/pre-hello", data={"v": 1})
    head = admin.head()
    failures = metric(server, "tally_auth_failures_total")
    with AuthClient(server, hello=False) as anonymous:
        for op, fields in [("get", dict(name="notes/pre-hello")),
                           ("get", dict(prefix="")),
                           ("subscribe", dict(prefix="")),
                           ("subscribe", dict(topic="scanner")),
                           ("set", dict(name="notes/pre-hello", data={"v": 2})),
                           ("delete", dict(name="notes/pre-hello")),
                           ("write", dict(ops=[{"op": "set", "name": "notes/x", "data": {}}])),
                           ("publish", dict(topic="scanner", data=1)),
                           ("advance", dict(name="orders/x"))]:
            anonymous.fail(op, "unauthorized", **fields)
        # still open; a hello with a good token opens the door
        reply = anonymous.ok("hello", protocol=1, token=tokens["wall"])
        assert (reply["user"], reply["role"]) == ("wall", "dashboard"), reply
        assert anonymous.ok("get", name="notes/pre-hello")["data"] == {"v": 1}
    assert admin.head() == head, "an unauthorized message changed something"
    assert metric(server, "tally_auth_failures_total") > failures


@pytest.mark.parametrize("token", ["wrong", "", "SHA", "ROOT-UPPER", None])
def test_hello_with_a_bad_token_is_unauthorized_then_closed_1008(hub, token):
    server, tokens = hub
    if token == "SHA":
        token = sha256_hex(tokens["root"])  # the hash is not the token
    elif token == "ROOT-UPPER":
        token = tokens["root"].upper()
    failures = metric(server, "tally_auth_failures_total")
    with AuthClient(server, hello=False) as client:
        fields = {"protocol": 1} if token is None else {"protocol": 1, "token": token}
        client.fail("hello", "unauthorized", **fields)
        assert closed_code(client) == 1008
    assert metric(server, "tally_auth_failures_total") > failures


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer ", "Basic cm9vdDpyb290", "wrong"])
def test_upgrade_with_a_bad_authorization_header_is_401(hub, header):
    server, tokens = hub
    failures = metric(server, "tally_auth_failures_total")
    response = upgrade_refusal(server, header)
    assert response.status == 401, (response.status, response.body[:300])
    assert response.error_code() == "unauthorized", response.body
    assert "bearer" in (response.header("www-authenticate") or "").lower(), response.headers
    assert metric(server, "tally_auth_failures_total") > failures


def test_a_good_header_on_the_upgrade_needs_no_hello(hub):
    server, tokens = hub
    with AuthClient(server, header=tokens["ana"], hello=False) as staff:
        staff.ok("set", name=f"notes/{uid()}", data={"by": "header"})
    with AuthClient(server, header=tokens["wall"], hello=False) as viewer:
        assert viewer.ok("get", prefix="notes/", limit=1)["records"]
        forbidden(viewer, "set", "dashboard", "create", "notes/by-wall", name="notes/by-wall", data={})
    with AuthClient(server, header=tokens["carl"], hello={"protocol": 1}) as client:
        assert (client.hello_reply.get("user"), client.hello_reply.get("role")) == ("carl", "client"), \
            client.hello_reply


def test_rest_needs_a_token(hub):
    server, tokens = hub
    name = f"notes/rest-{uid()}"
    assert rest_as(server, tokens["ana"], "PUT", record_path(name), {"v": 1}).status == 201
    failures = metric(server, "tally_auth_failures_total")
    for token in (None, "wrong", sha256_hex(tokens["ana"])):
        for method, path, body in [("GET", record_path(name), None),
                                   ("PUT", record_path(name), {"v": 2}),
                                   ("DELETE", record_path(name), None),
                                   ("GET", "/v1/records?prefix=notes/", None),
                                   ("GET", "/v1/changes?since=0", None),
                                   ("GET", "/v1/lists/orders", None),
                                   ("POST", "/v1/events/scanner", {"x": 1})]:
            response = rest_as(server, token, method, path, body)
            assert response.status == 401, f"{method} {path} with token {token!r}: {response.status} {response.body[:200]!r}"
            assert response.error_code() == "unauthorized"
            assert "bearer" in (response.header("www-authenticate") or "").lower(), response.headers
    assert metric(server, "tally_auth_failures_total") >= failures + 21
    response = rest_as(server, tokens["wall"], "GET", record_path(name))
    assert response.status == 200 and response.json()["data"] == {"v": 1}, response.body
    assert rest(server, "GET", "/healthz").status == 200
    assert rest(server, "GET", "/metrics").status == 200
    response = rest_as(server, tokens["wall"], "PUT", record_path(name), {"v": 3})
    assert (response.status, response.error_code()) == (403, "forbidden"), response.body
    error = response.json()["error"]
    assert (error["role"], error["operation"], error["name"]) == ("dashboard", "write", name), error


# --------------------------------------------------------------------------
# What each role may do


def test_idempotency_keys_belong_to_their_user(hub, as_user):
    """Reusing another user's key neither replays that user's answer nor
    skips the write; a read-only user's reuse is still refused."""
    server, tokens = hub
    ana, sam, wall = as_user("ana"), as_user("sam"), as_user("wall")
    key = f"k-{uid()}"
    first = ana.ok("set", name=f"notes/{uid()}", data={"by": "ana"}, idem=key)
    assert ana.ok("set", name="notes/ignored", data={}, idem=key)["seq"] == first["seq"]  # a retry
    other = f"notes/{uid()}"
    mine = sam.ok("set", name=other, data={"by": "sam"}, idem=key)
    assert mine["name"] == other and mine["seq"] > first["seq"]
    forbidden(wall, "set", "dashboard", "create", "notes/by-wall", name="notes/by-wall", data={}, idem=key)


def test_dashboard_is_read_only(hub, as_user):
    server, tokens = hub
    admin, wall = as_user("root"), as_user("wall")
    item = f"items/{uid()}"
    admin.ok("set", name=item, data={"stock": 4})
    admin.ok("set", name=f"orders/{uid()}", data={"item": item, "qty": 1})
    admin.ok("addEntry", list="shelf", entry=item)
    head = admin.head()
    denied = metric(server, "tally_denied_total")

    assert wall.ok("get", name=item)["data"] == {"stock": 4}
    wall.ok("get", list="orders")
    wall.ok("get", prefix="orders/")
    wall.ok("subscribe", prefix="")
    wall.ok("subscribe", name="stats/orders")
    wall.ok("subscribe", list="orders")
    wall.ok("subscribe", topic="scanner")

    forbidden(wall, "set", "dashboard", "write", item, name=item, data={"stock": 0})
    forbidden(wall, "set", "dashboard", "create", "items/new-by-wall", name="items/new-by-wall", data={})
    forbidden(wall, "set", "dashboard", "write", item, name=item, path="stock", value=0)
    forbidden(wall, "merge", "dashboard", "write", item, name=item, data={"stock": 0})
    forbidden(wall, "increment", "dashboard", "write", item, name=item, path="stock")
    forbidden(wall, "delete", "dashboard", "delete", item, name=item)
    forbidden(wall, "addEntry", "dashboard", "write", "shelf", list="shelf", entry="items/x")
    forbidden(wall, "setEntries", "dashboard", "write", "shelf", list="shelf", entries=[])
    forbidden(wall, "delete", "dashboard", "delete", "shelf", list="shelf")
    forbidden(wall, "publish", "dashboard", "publish", "scanner", topic="scanner", data={"code": "1"})
    error = wall.fail("write", "forbidden", ops=[{"op": "set", "name": item, "path": "stock", "value": 1}])
    assert error["index"] == 0 and error["role"] == "dashboard", error
    assert metric(server, "tally_denied_total") >= denied + 11
    assert admin.head() == head, "a forbidden write changed something"
    assert wall.drain() == [], "a forbidden write was pushed"


def test_client_creates_orders_and_reads_only_its_own(hub, as_user):
    server, tokens = hub
    admin, staff, cleo, carl = as_user("root"), as_user("ana"), as_user("cleo"), as_user("carl")
    item = f"items/{uid()}"
    admin.ok("set", name=item, data={"stock": 9, "sku": "cup"})
    mine, theirs = f"orders/{uid()}", f"orders/{uid()}"

    reply = cleo.ok("set", name=mine, data={"item": item, "qty": 2})
    carl.ok("set", name=theirs, data={"item": item, "qty": 1})
    assert admin.ok("get", name=mine)["data"]["owner"] == "cleo"
    assert admin.ok("get", name=theirs)["data"]["owner"] == "carl"
    assert mine in admin.ok("get", list="orders")["entries"], "a client's order is listed"
    assert cleo.ok("get", name=mine)["version"] == reply["version"]
    assert cleo.ok("get", name=item)["data"]["stock"] == 9
    cleo.ok("get", prefix="items/")
    cleo.ok("subscribe", prefix="items/")
    cleo.ok("subscribe", name=mine)

    head = admin.head()
    forbidden(cleo, "get", "client", "read", theirs, name=theirs)
    forbidden(cleo, "subscribe", "client", "subscribe", theirs, name=theirs)
    forbidden(cleo, "subscribe", "client", "subscribe", "orders/", prefix="orders/")
    forbidden(cleo, "get", "client", "read", "orders/", prefix="orders/")
    cleo.fail("subscribe", "forbidden", prefix="")
    cleo.fail("subscribe", "forbidden", prefix="orders")
    forbidden(cleo, "get", "client", "read", "orders", list="orders")
    forbidden(cleo, "subscribe", "client", "subscribe", "orders", list="orders")
    cleo.fail("get", "forbidden", name="stats/orders")
    forbidden(cleo, "merge", "client", "write", mine, name=mine, data={"qty": 3})
    forbidden(cleo, "set", "client", "write", mine, name=mine, data={"item": item, "qty": 3})
    forbidden(cleo, "advance", "client", "advance", mine, name=mine, to="cancelled")
    forbidden(cleo, "delete", "client", "delete", mine, name=mine)
    forbidden(cleo, "set", "client", "write", item, name=item, path="stock", value=0)
    forbidden(cleo, "set", "client", "create", "items/by-cleo", name="items/by-cleo", data={})
    forbidden(cleo, "set", "client", "create", "orders/a/b", name="orders/a/b", data={"item": item, "qty": 1})
    forbidden(cleo, "set", "client", "create", "notes/by-cleo", name="notes/by-cleo", data={})
    forbidden(cleo, "publish", "client", "publish", "scanner", topic="scanner", data=1)
    assert admin.head() == head, "a forbidden request changed something"

    # Its own order's changes reach it; another's do not.
    staff.ok("advance", name=mine, to="in-progress")
    staff.ok("advance", name=theirs, to="in-progress")
    admin.ok("set", name=item, path="location", value="B2")
    pushes = drain_via(cleo, "items/~barrier/")
    assert sorted(p["name"] for p in pushes) == sorted([mine, item]), [p.message for p in pushes]


def test_staff_cannot_delete_workflow_records(hub, as_user):
    server, tokens = hub
    admin, staff = as_user("root"), as_user("ana")
    item = f"items/{uid()}"
    staff.ok("set", name=item, data={"stock": 1})
    order, job = f"orders/{uid()}", f"intake/{uid()}"
    staff.ok("set", name=order, data={"item": item, "qty": 1})
    staff.ok("set", name=job, data={"code": "x"})
    staff.ok("advance", name=order, to="in-progress")
    staff.ok("merge", name=order, data={"note": "staff may write"})
    staff.ok("publish", topic="scanner", data={"code": "1"})
    forbidden(staff, "delete", "staff", "delete", order, name=order)
    forbidden(staff, "delete", "staff", "delete", job, name=job)
    staff.fail("write", "forbidden", ops=[{"op": "delete", "name": order}])
    assert admin.ok("get", name=order)["data"]["stage"] == "in-progress"
    staff.ok("delete", name=item)
    admin.ok("delete", name=order)
    admin.ok("delete", name=job)
    expect_error(admin.request("get", name=order), "not_found")


def test_nobody_writes_stats(hub, as_user):
    server, tokens = hub
    admin = as_user("root")
    item = f"items/{uid()}"
    admin.ok("set", name=item, data={"stock": 1})
    admin.ok("set", name=f"orders/{uid()}", data={"item": item, "qty": 1})  # stats/orders exists

    def without_id(reply):
        return {k: v for k, v in reply.items() if k != "id"}

    for user, role in [("root", "admin"), ("ana", "staff"), ("pat", "packer"), ("wall", "dashboard")]:
        client = as_user(user)
        before = without_id(admin.ok("get", name="stats/orders"))
        head = admin.head()
        fresh = f"stats/{uid()}"
        for op, fields in [
                ("set", dict(name="stats/orders", data={})),
                ("set", dict(name="stats/orders", path="total", value=1)),
                ("increment", dict(name="stats/orders", path="total")),
                ("merge", dict(name="stats/orders", data={"total": 1})),
                ("delete", dict(name="stats/orders")),
                ("set", dict(name=fresh, data={})),
                ("write", dict(ops=[{"op": "set", "name": fresh, "data": {}}]))]:
            error = client.fail(op, "forbidden", **fields)
            name = fields.get("name", fresh)
            assert (error["role"], error["name"]) == (role, name), error
        assert without_id(admin.ok("get", name="stats/orders")) == before, "stats changed"
        assert admin.head() == head


def test_a_role_from_the_config(hub, as_user):
    server, tokens = hub
    admin, pat = as_user("root"), as_user("pat")
    assert pat.hello_reply["role"] == "packer"
    item = f"items/{uid()}"
    admin.ok("set", name=item, data={"stock": 2})
    order = f"orders/{uid()}"
    admin.ok("set", name=order, data={"item": item, "qty": 1})

    pat.ok("set", name=item, path="location", value="A1")
    pat.ok("merge", name=item, data={"stock": 3})
    pat.ok("subscribe", name=item)
    assert pat.ok("get", name=order)["data"]["qty"] == 1
    forbidden(pat, "set", "packer", "create", "items/by-pat", name="items/by-pat", data={})
    forbidden(pat, "delete", "packer", "delete", item, name=item)
    forbidden(pat, "subscribe", "packer", "subscribe", order, name=order)
    forbidden(pat, "merge", "packer", "write", order, name=order, data={"note": 1})
    forbidden(pat, "advance", "packer", "advance", order, name=order)
    forbidden(pat, "get", "packer", "read", "notes/x", name="notes/x")
    forbidden(pat, "publish", "packer", "publish", "scanner", topic="scanner", data=1)
    assert admin.ok("get", name=item)["data"] == {"stock": 3, "location": "A1"}


def test_denials_are_counted(hub, as_user):
    server, tokens = hub
    wall = as_user("wall")
    denied = metric(server, "tally_denied_total")
    for _ in range(3):
        wall.fail("set", "forbidden", name="notes/counted", data={})
    assert metric(server, "tally_denied_total") == denied + 3


# --------------------------------------------------------------------------
# Open mode


def read_stdout_rest(server, timeout: float = 1.0) -> str:
    """What the hub printed on stdout after its listening line (bounded)."""
    out = b""
    fd = server.process.stdout.fileno()
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return out.decode(errors="replace")
        chunk = os.read(fd, 4096)
        if not chunk:
            return out.decode(errors="replace")
        out += chunk


def test_open_mode_says_so_and_acts_as_admin(tally, sync_client):
    client = sync_client(tally, hello={"client": "open-check"})
    assert (client.hello_reply["user"], client.hello_reply["role"]) == ("open-check", "admin")
    client.ok("set", name="notes/open", data={})
    client.ok("delete", name="notes/open")
    deadline = time.monotonic() + 5
    said = ""
    while time.monotonic() < deadline:
        said = tally.stderr() + read_stdout_rest(tally, 0.2)
        if "open" in said.lower():
            break
    assert "open" in said.lower(), f"the hub does not say it runs in open mode:\n{said[-2000:]}"
    assert rest(tally, "GET", "/v1/records/notes/none").status == 404, "open REST needs no token"


def test_open_mode_on_a_non_loopback_address_is_refused(tmp_path):
    """Only the refusal: the hub must exit 2 before listening. Should it
    start listening anyway, it is killed (by PID) at once."""
    argv = [str(TALLY_BIN), "serve", "--host", "0.0.0.0", "--port", "0", "--data", str(tmp_path / "data")]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        out = b""
        deadline = time.monotonic() + 10
        while process.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([process.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(process.stdout.fileno(), 4096)
                out += chunk
                if b"listening" in out:
                    os.kill(process.pid, signal.SIGKILL)
                    pytest.fail(f"`{' '.join(argv)}` listened on 0.0.0.0 in open mode: {out!r}")
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            pytest.fail(f"`{' '.join(argv)}` neither exited nor listened within 10 s")
        err = process.stderr.read().decode(errors="replace")
        assert process.returncode == 2, f"exit {process.returncode}; stderr: {err}"
        assert "--open" in err, f"the refusal says how to allow it: {err}"
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        process.stdout.close()
        process.stderr.close()


# --------------------------------------------------------------------------
# CLI --token


def cli(server, *args: str, env_extra: dict | None = None, timeout: float = 15.0):
    argv = [str(TALLY_BIN), args[0], "--server", f"ws://{server.host}:{server.port}", *args[1:]]
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_URL", "TALLY_TOKEN")}
    env.update(env_extra or {})
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(argv)}` did not finish within {timeout}s")
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def test_cli_with_a_token(hub, as_user):
    server, tokens = hub
    admin = as_user("root")
    name = f"notes/cli-{uid()}"
    rc, out, err = cli(server, "set", name, '{"v":1}', "--token", tokens["ana"])
    assert rc == 0, (rc, out, err)
    assert admin.ok("get", name=name)["data"] == {"v": 1}
    rc, out, err = cli(server, "get", name, "--token", tokens["wall"])
    assert rc == 0 and '"v"' in out, (rc, out, err)
    rc, out, err = cli(server, "get", name, env_extra={"TALLY_TOKEN": tokens["wall"]})
    assert rc == 0 and '"v"' in out, (rc, out, err)

    head = admin.head()
    for extra in (["--token", "wrong"], []):
        rc, out, err = cli(server, "set", name, '{"v":2}', *extra)
        assert rc != 0, (extra, rc, out, err)
        assert "unauthorized" in (out + err).lower(), (extra, out, err)
    rc, out, err = cli(server, "set", name, '{"v":2}', "--token", tokens["wall"])
    assert rc != 0 and "forbidden" in (out + err).lower(), (rc, out, err)
    assert admin.head() == head

    item = f"items/{uid()}"
    admin.ok("set", name=item, data={"stock": 5})
    rc, out, err = cli(server, "order", "new", item, "--qty", "1", "--token", tokens["cleo"])
    assert rc == 0, (rc, out, err)
    order = out.strip().splitlines()[-1].strip()
    assert admin.ok("get", name=order)["data"]["owner"] == "cleo"
    rc, out, err = cli(server, "order", "advance", order, "--token", tokens["cleo"])
    assert rc != 0 and "forbidden" in (out + err).lower(), (rc, out, err)
    rc, out, err = cli(server, "order", "advance", order, "--token", tokens["ana"])
    assert rc == 0, (rc, out, err)
    assert admin.ok("get", name=order)["data"]["stage"] == "in-progress"


@pytest.mark.parametrize("server_url", ["ws://192.0.2.1:9", "http://192.0.2.1:9/", "ws://[2001:db8::1]:9",
                                        "ws://tally.example:8080"])
@pytest.mark.parametrize("command", [["get", "notes/x"], ["set", "notes/x", "n", "1"], ["watch", "notes/"],
                                     ["order", "ls"], ["emit", "t", "{}"]])
def test_the_cli_never_sends_a_token_in_plain_text_off_this_machine(server_url, command):
    """Refused before any connection is tried (TEST-NET addresses would only
    time out), with a message saying how to proceed; TALLY_TOKEN counts too."""
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_URL", "TALLY_TOKEN")}
    for extra, env_extra in ((["--token", "secret"], {}), ([], {"TALLY_TOKEN": "secret"})):
        argv = [str(TALLY_BIN), *command, "--server", server_url, *extra]
        started = time.monotonic()
        done = subprocess.run(argv, capture_output=True, timeout=15, stdin=subprocess.DEVNULL, env={**env, **env_extra})
        err = done.stderr.decode(errors="replace")
        assert done.returncode == 1, (argv, done.returncode, err)
        assert "plain text" in err and "--insecure" in err and "wss://" in err, err
        assert time.monotonic() - started < 3, "the refusal must come before any connection attempt"


def test_a_token_may_go_in_plain_text_to_loopback(hub, as_user):
    server, tokens = hub
    for host in ("127.0.0.1", "localhost"):
        done = subprocess.run([str(TALLY_BIN), "get", "stats/orders", "--server", f"ws://{host}:{server.port}",
                               "--token", tokens["wall"]], capture_output=True, timeout=15, stdin=subprocess.DEVNULL)
        assert done.returncode in (0, 1), done
        assert b"plain text" not in done.stderr, done.stderr

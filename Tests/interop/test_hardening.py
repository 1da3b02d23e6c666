"""Hardening, black box: no web page can drive an open hub, every role gets
only what it may, and no client — with or without a token — can stall or
bloat the hub (README "Security").

- browser origins: cross-site WebSocket upgrades and simple POSTs are
  refused (403 origin_not_allowed) in open mode and on a hub with users; a
  rebound `Host` is refused in open mode (403 host_not_allowed); writes need
  `Content-Type: application/json` (415); --allow-origin / --allow-host;
- authorization on every path: an advance's `data` needs the write rule;
  a role that may write but not read gets no data back (REST answers,
  `conflict` details, increment replies);
- limits before authentication: bodies are refused from their headers (no
  `100 Continue`, no memory), an HTTP client that never reads is capped,
  a closed connection's queued work is dropped, subscriptions per
  connection are capped, unauthenticated connections are capped, `/echo`
  is off on a hub with users, refusal logs are rate-limited;
- the decoding and limit bugs: a broken `%` in a query, a double-decoded
  resolve code, REST records above 1 MiB with --max-record-size.

Every hub binds 127.0.0.1 (conftest) and is stopped by its PID.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
import uuid

import pytest

from authlib import AuthClient, Tokens, rest_as, start_hub
from rawws import Buffered, RawWebSocket, connect, handshake_request, read_http_response
from synclib import SyncClient, dumps, expect_error, metric, record_path, rest, wait_until

MiB = 1 << 20


def uid() -> str:
    return uuid.uuid4().hex[:10]


def rss_bytes(server) -> int:
    with open(f"/proc/{server.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def raw_request(server, method: str, path: str, headers: dict[str, str], body: bytes = b""):
    """One request with exactly these headers (Host included when given)."""
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers.items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    conn = Buffered(connect(server.host, server.port))
    try:
        conn.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return read_http_response(conn)
    finally:
        conn.sock.close()


def upgrade(server, headers: str, path: str = "/v1/ws"):
    """The response to a WebSocket handshake with extra header lines."""
    request = handshake_request(path, extra=headers).replace(b"Host: 127.0.0.1\r\n", b"")
    if b"\r\nHost:" not in request:
        request = request.replace(b"\r\n", f"\r\nHost: 127.0.0.1:{server.port}\r\n".encode(), 1)
    conn = Buffered(connect(server.host, server.port))
    try:
        conn.sock.sendall(request)
        return read_http_response(conn)
    finally:
        conn.sock.close()


def error_code(response) -> str:
    return json.loads(response.body)["error"]["code"]


# --------------------------------------------------------------------------
# Browser origins and DNS rebinding


def test_cross_origin_upgrade_and_simple_post_are_refused_in_open_mode(tally):
    own = f"http://127.0.0.1:{tally.port}"
    refused = upgrade(tally, "Origin: https://evil.example\r\n")
    assert refused.status == 403 and error_code(refused) == "origin_not_allowed", refused
    assert "--allow-origin https://evil.example" in json.loads(refused.body)["error"]["message"]
    assert upgrade(tally, f"Origin: {own}\r\n").status == 101  # the board, same origin
    assert upgrade(tally, "").status == 101                      # not a browser
    # http://localhost:PORT is the same hub under another loopback name.
    local = upgrade(tally, f"Host: localhost:{tally.port}\r\nOrigin: http://localhost:{tally.port}\r\n")
    assert local.status == 101

    topic, entry_list, order = f"t-{uid()}", f"l-{uid()}", f"orders/{uid()}"
    SyncClient(tally).ok("set", name="items/x", data={"stock": 1})
    SyncClient(tally).ok("set", name=order, data={"item": "items/x", "qty": 1})
    watcher = SyncClient(tally)
    watcher.ok("subscribe", topic=topic)
    host = f"127.0.0.1:{tally.port}"
    for path, body in [(f"/v1/events/{topic}", b'{"x":1}'), (f"/v1/lists/{entry_list}/entries", b'"a/b"'),
                       (f"/v1/records/{order}/advance", b'{"to":"in-progress"}')]:
        # A page's form or fetch without preflight: text/plain and its Origin.
        response = raw_request(tally, "POST", path, {"Host": host, "Origin": "https://evil.example",
                                                     "Content-Type": "text/plain"}, body)
        assert response.status == 403 and error_code(response) == "origin_not_allowed", (path, response)
        # Without an Origin (curl) but not declared as JSON: 415, nothing done.
        response = raw_request(tally, "POST", path, {"Host": host, "Content-Type": "text/plain"}, body)
        assert response.status == 415 and error_code(response) == "unsupported_media_type", (path, response)
    assert rest(tally, "GET", f"/v1/lists/{entry_list}").status == 404
    assert SyncClient(tally).ok("get", name=order)["data"]["stage"] == "received"
    assert watcher.drain() == []
    # The same POST declared as JSON from the hub's own page goes through.
    response = raw_request(tally, "POST", f"/v1/events/{topic}",
                           {"Host": host, "Origin": own, "Content-Type": "application/json"}, b'{"x":1}')
    assert response.status == 200, response
    assert watcher.next_push()["data"] == {"x": 1}


def test_a_rebound_host_is_refused_in_open_mode(tally):
    for headers in [{"Host": f"evil.example:{tally.port}"},
                    {"Host": f"evil.example:{tally.port}", "Origin": f"http://evil.example:{tally.port}"}]:
        response = raw_request(tally, "GET", "/v1/records?prefix=", headers)
        assert response.status == 403 and error_code(response) == "host_not_allowed", response
        assert "--allow-host evil.example" in json.loads(response.body)["error"]["message"]
    # The rebound page is same-origin with itself: the Host check is what stops it.
    refused = upgrade(tally, f"Host: evil.example:{tally.port}\r\nOrigin: http://evil.example:{tally.port}\r\n")
    assert refused.status == 403 and error_code(refused) == "host_not_allowed"
    for host in [f"127.0.0.1:{tally.port}", f"localhost:{tally.port}", f"[::1]:{tally.port}", "app.localhost"]:
        assert raw_request(tally, "GET", "/healthz", {"Host": host}).status == 200, host


def test_allowed_origins_and_hosts(tally_factory):
    server = tally_factory("--allow-origin", "https://app.example", "--allow-host", "tally.lan")
    assert upgrade(server, "Origin: https://app.example\r\n").status == 101
    assert upgrade(server, "Origin: https://other.example\r\n").status == 403
    assert raw_request(server, "GET", "/healthz", {"Host": f"tally.lan:{server.port}"}).status == 200
    assert raw_request(server, "GET", "/healthz", {"Host": "other.lan"}).status == 403


def test_origins_on_a_hub_with_users(tally_factory):
    tokens = Tokens()
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    bearer = f"Authorization: Bearer {tokens['root']}\r\n"
    refused = upgrade(server, bearer + "Origin: https://evil.example\r\n")
    assert refused.status == 403 and error_code(refused) == "origin_not_allowed"
    assert upgrade(server, bearer).status == 101
    response = raw_request(server, "POST", "/v1/events/t",
                           {"Host": f"127.0.0.1:{server.port}", "Origin": "https://evil.example",
                            "Authorization": f"Bearer {tokens['root']}", "Content-Type": "text/plain"}, b"1")
    assert response.status == 403 and error_code(response) == "origin_not_allowed"
    # Tokens protect a hub with users: any Host is answered.
    assert raw_request(server, "GET", "/healthz", {"Host": "tally.example"}).status == 200


# --------------------------------------------------------------------------
# Authorization on every path

PACKER_CONFIG = {
    "roles": {
        "packer": [{"names": "orders/**", "allow": ["read", "subscribe"]},
                   {"names": "items/**", "allow": ["read", "write"]}],
        "dropbox": [{"names": "inbox/**", "allow": ["create", "write"]}],
    },
    "workflows": {"orders/": {"roles": {"*": ["admin", "staff"],
                                        "in-progress->ready": ["admin", "staff", "packer"]}}},
}


@pytest.fixture(scope="module")
def roles_hub(tmp_path_factory, request):
    from conftest import TallyFactory
    tokens = Tokens({"root": ("admin", "sha"), "pat": ("packer", "sha"), "drop": ("dropbox", "sha")})
    factory = TallyFactory(tmp_path_factory.mktemp("roles"), request)
    config = tokens.config()
    config.update(PACKER_CONFIG)
    server = start_hub(factory, config, tokens.env())
    yield server, tokens
    factory.finish()


def test_an_advance_patch_needs_the_write_rule(roles_hub):
    server, tokens = roles_hub
    root = AuthClient(server, token=tokens["root"])
    item, order = f"items/{uid()}", f"orders/{uid()}"
    root.ok("set", name=item, data={"stock": 10})
    root.ok("set", name=order, data={"item": item, "qty": 2})
    root.ok("advance", name=order, to="in-progress")
    path = record_path(order) + "/advance"
    refused = rest_as(server, tokens["pat"], "POST", path, {"to": "ready", "data": {"qty": 9}})
    assert refused.status == 403 and refused.json()["error"]["code"] == "forbidden", refused.body
    assert "write" in refused.json()["error"]["message"]
    data = root.ok("get", name=order)["data"]
    assert data["qty"] == 2 and data["stage"] == "in-progress"
    # Over WebSocket too, and the same transition without data is the packer's to make.
    pat = AuthClient(server, token=tokens["pat"])
    pat.fail("advance", "forbidden", name=order, to="ready", data={"qty": 9})
    moved = rest_as(server, tokens["pat"], "POST", path, {"to": "ready"})
    assert moved.status == 200, moved.body
    assert root.ok("get", name=order)["data"]["qty"] == 2


def test_a_write_only_role_gets_no_data_back(roles_hub):
    server, tokens = roles_hub
    name = f"inbox/{uid()}"
    created = rest_as(server, tokens["drop"], "PUT", record_path(name), {"secret": 1, "n": 1})
    assert created.status == 201, created.body
    assert "data" not in created.json() and created.json()["version"] == 1
    patched = rest_as(server, tokens["drop"], "PATCH", record_path(name), {"other": 2})
    assert patched.status == 200 and "data" not in patched.json(), patched.body
    assert rest_as(server, tokens["drop"], "GET", record_path(name)).status == 403
    stale = rest_as(server, tokens["drop"], "PUT", record_path(name), {"x": 1}, {"If-Match": '"1"'})
    assert stale.status == 412 and "data" not in stale.json()["error"], stale.body
    drop = AuthClient(server, token=tokens["drop"])
    conflict = drop.fail("set", "conflict", name=name, data={"x": 1}, version=1)
    assert "data" not in conflict and conflict["version"] == 2
    assert "value" not in drop.ok("increment", name=name, path="n")
    # An admin, who may read, still gets everything.
    root = AuthClient(server, token=tokens["root"])
    assert root.fail("set", "conflict", name=name, data={}, version=1)["data"]["secret"] == 1
    assert root.ok("increment", name=name, path="n")["value"] == 3


# --------------------------------------------------------------------------
# Limits that hold before authentication


def test_unauthenticated_bodies_are_refused_from_their_headers(tally_factory):
    tokens = Tokens({"root": ("admin", "sha")})
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    sha = hashlib.sha256(b"x").hexdigest()
    before = rss_bytes(server)
    open_sockets = []
    for n in range(100):
        # Within each route's limit: a photo up to 16 MiB, a record up to 2 MiB.
        path, size, kind = ((f"/v1/blobs/{sha}", 16 * MiB, "image/png") if n % 2
                            else ("/v1/records/notes/x", MiB, "application/json"))
        conn = Buffered(connect(server.host, server.port))
        conn.sock.sendall((f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n"
                           f"Content-Length: {size}\r\nExpect: 100-continue\r\n\r\n").encode())
        response = read_http_response(conn)
        assert response.status == 401, response  # no 100 Continue first
        try:
            conn.sock.sendall(b"\0" * (256 * 1024))  # the body, sent anyway
        except OSError:
            pass
        open_sockets.append(conn.sock)
    grown = rss_bytes(server) - before
    for sock in open_sockets:
        sock.close()
    assert grown < 10 * MiB, f"the hub grew by {grown / MiB:.1f} MiB for 100 refused uploads"


def test_a_client_that_never_reads_is_capped(tally):
    count = 4000  # about 6 KiB of /metrics each: some 24 MiB of answers
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((tally.host, tally.port))
    sock.settimeout(30)
    before = rss_bytes(tally)
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    sock.sendall(request * count)
    # The hub stops reading this connection once 1 MiB of answers wait.
    wait_until(lambda: metric(tally, "tally_http_read_pauses_total") >= 1, 30, "the hub to pause reading")
    grown = rss_bytes(tally) - before
    assert grown < 8 * MiB, f"the hub grew by {grown / MiB:.1f} MiB for a client that does not read"
    # Nothing was dropped: reading now gets every answer, in order.
    conn = Buffered(sock)
    for _ in range(count):
        assert read_http_response(conn, timeout=30).status == 200
    sock.close()


def test_a_closed_connections_queued_snapshots_are_dropped(tally):
    writer = SyncClient(tally)
    prefix = f"bulk-{uid()}/"
    ops = [{"op": "set", "name": f"{prefix}{n:05}", "data": {"n": n, "pad": "x" * 200}} for n in range(5000)]
    for start in range(0, 5000, 500):
        writer.ok("write", ops=ops[start:start + 500], atomic=True)
    before = rss_bytes(tally)
    requests = metric(tally, "tally_requests_total")
    raw = RawWebSocket.open(tally.host, tally.port, "/v1/ws")
    message = json.dumps({"op": "subscribe", "prefix": prefix}).encode()
    from rawws import build_frame
    frames = b"".join(build_frame(1, message, mask=True) for _ in range(1000))
    raw.send_raw(frames)
    raw.conn.sock.close()
    started = time.monotonic()
    other = SyncClient(tally)
    other.ok("get", name=f"{prefix}00001")
    waited = time.monotonic() - started
    assert waited < 5, f"another client waited {waited:.1f} s behind a closed connection's snapshots"
    # Once the hub has seen the close (which comes after all 1,000 requests),
    # it has answered few of them: the rest were skipped, not built.
    other.close()
    wait_until(lambda: metric(tally, "tally_sessions") == 1, 120, "the hub to see the connection close")
    answered = metric(tally, "tally_requests_total") - requests
    assert answered < 500, f"the hub answered {answered:.0f} requests of a connection that had closed"
    grown = rss_bytes(tally) - before
    assert grown < 200 * MiB, f"the hub grew by {grown / MiB:.0f} MiB"


def test_subscriptions_per_connection_are_capped(tally_factory):
    server = tally_factory("--max-subscriptions", "50")
    client = SyncClient(server)
    name = f"capped/{uid()}"
    for n in range(50):
        client.ok("subscribe", name=name, path=f"f{n}")
    error = client.fail("subscribe", "too_many_subscriptions", name=name, path="f50")
    assert error["limit"] == 50
    client.ok("subscribe", name=name, path="f0")  # one it has is not a new one
    client.ok("unsubscribe", name=name, path="f0")
    client.ok("subscribe", name=name, path="f50")


def test_unauthenticated_connections_are_capped(tally_factory):
    tokens = Tokens({"root": ("admin", "sha")})
    server = start_hub(tally_factory, tokens.config(), tokens.env(), "--max-unauthenticated", "3")
    waiting = [AuthClient(server, hello=False) for _ in range(3)]
    refused = upgrade(server, "")
    assert refused.status == 503 and error_code(refused) == "too_many_connections", refused
    # A token in the upgrade is not waiting to authenticate.
    assert upgrade(server, f"Authorization: Bearer {tokens['root']}\r\n").status == 101
    waiting[0].ok("hello", protocol=1, token=tokens["root"])
    wait_until(lambda: upgrade(server, "").status == 101, 5, "a slot freed by a hello")
    for client in waiting:
        client.close()


def test_echo_is_off_on_a_hub_with_users_unless_asked(tally_factory):
    tokens = Tokens({"root": ("admin", "sha")})
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    assert upgrade(server, "", path="/echo").status == 404
    asked = start_hub(tally_factory, tokens.config(), tokens.env(), "--echo")
    assert upgrade(asked, "", path="/echo").status == 101


def test_refusal_logs_are_rate_limited(tally_factory):
    tokens = Tokens({"root": ("admin", "sha")})
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    conn = Buffered(connect(server.host, server.port))
    conn.sock.sendall(b"GET /v1/records/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 2000)
    for _ in range(2000):
        assert read_http_response(conn).status == 401
    conn.sock.close()
    lines = [line for line in server.stderr().splitlines() if "event=auth.failed" in line]
    assert 1 <= len(lines) <= 40, f"{len(lines)} log lines for 2000 refusals"
    # The next window's first line says how many were dropped.
    def reported():
        assert rest(server, "GET", "/v1/records/x").status == 401
        return any("suppressed=" in line for line in server.stderr().splitlines() if "event=auth.failed" in line)
    wait_until(reported, 10, "a log line with the count of suppressed lines")


# --------------------------------------------------------------------------
# Decoding and limits


def test_a_broken_escape_in_a_query_is_refused(tally):
    SyncClient(tally).ok("set", name=f"q/{uid()}", data={})
    response = rest(tally, "GET", "/v1/records?prefix=%FF")
    assert response.status == 400 and response.json()["error"]["code"] == "bad_field", response.body
    assert rest(tally, "GET", "/v1/records?prefix=%G1").status == 400


def test_resolve_decodes_the_code_once(tally):
    client = SyncClient(tally)
    item = f"items/{uid()}"
    client.ok("set", name=item, data={"name": "odd", "sku": "A%41"})
    response = rest(tally, "GET", "/v1/resolve/A%2541")
    assert response.status == 200, response.body
    assert response.json()["code"] == "A%41" and response.json()["name"] == item


def test_rest_takes_records_as_large_as_the_hub_allows(tally_factory):
    server = tally_factory("--max-record-size", "4M")
    # Strings stay under the message limit (256 KiB each); the record is 3 MiB.
    data = {f"part{n}": "x" * (100 * 1024) for n in range(30)}
    response = rest(server, "PUT", record_path(f"big/{uid()}"), data)
    assert response.status == 201, response.body[:300]
    too_big = rest(server, "PUT", record_path(f"big/{uid()}"), {f"part{n}": "x" * (100 * 1024) for n in range(50)})
    assert too_big.status == 413 and too_big.json()["error"]["code"] == "too_large", too_big.body[:300]

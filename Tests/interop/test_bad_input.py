"""Bad input gets a clear error and changes nothing (PROTOCOL.md, Errors).

Every case: the error reply has the exact code (and `field`/`offset` where
the spec says), the connection still works afterwards where the spec keeps
it open, and NOTHING was written: the head seq in a fresh `hello` reply is
unchanged and the records the message named do not exist (or are unchanged).
Transport-level problems close the connection with the RFC 6455 code.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import time

import pytest

from rawws import TEXT, Buffered, RawWebSocket, apply_mask, connect, read_http_response
from synclib import ANY_ID, NO_ID, WS_PATH, expect_error, fresh_head, record_path, rest

KiB, MiB = 1024, 1024 * 1024
EXISTING = "bad/existing"
EXISTING_DATA = {"n": 1, "arr": [1, 2], "text": "t", "obj": {"k": "v"}}


@pytest.fixture(scope="module")
def hub(module_tally):
    """One hub for the module, with one record the cases must not change."""
    from synclib import SyncClient
    with SyncClient(module_tally) as client:
        client.ok("set", name=EXISTING, data=EXISTING_DATA)
    return module_tally


@pytest.fixture
def untouched(hub, sync_client):
    """Checks, after the test, that the hub's head did not move, the
    existing record is as it was, and the hub is still running."""
    before = fresh_head(hub)
    client = sync_client(hub)
    existing = client.ok("get", name=EXISTING)
    yield
    assert hub.alive(), f"the hub died: {hub.stderr()[-3000:]}"
    assert fresh_head(hub) == before, "a refused message was written (the head seq moved)"
    now = client.ok("get", name=EXISTING)
    assert (now["version"], now["data"]) == (existing["version"], existing["data"])


def exchange(client, message, expect_id=ANY_ID) -> dict:
    """Sends ``message`` (a dict as JSON, a str as it is) and returns the reply."""
    client.send_raw(message if isinstance(message, str) else json.dumps(message))
    return client.recv_reply(expect_id)


def names_field(reported, field: str) -> bool:
    """`field` names the field: exactly, or an element of it (`entries[0]`)."""
    return isinstance(reported, str) and (reported == field or reported.startswith((field + "[", field + ".")))


def assert_not_written(client, *names: str) -> None:
    for name in names:
        expect_error(client.request("get", name=name), "not_found", f"get {name}")


# --------------------------------------------------------------------------
# Frames that are not messages


BAD_JSON = {
    "truncated": '{"op":"set","name":"bad/j1","data":{',
    "missing-comma": '{"op":"set" "name":"bad/j2","data":{}}',
    "single-quotes": "{'op':'set','name':'bad/j3','data':{}}",
    "empty-frame": "",
    "trailing-garbage": '{"op":"set","name":"bad/j4","data":{}} x',
    "nan": '{"op":"set","name":"bad/j5","data":{"a":NaN}}',
    "number-out-of-range": '{"op":"set","name":"bad/j6","data":{"a":1e999}}',
    "control-char-in-string": '{"op":"set","name":"bad/j7","data":{"a":"x\ty"}}',
    "leading-zero": '{"op":"set","name":"bad/j8","data":{"a":01}}',
    "bad-escape": '{"op":"set","name":"bad/j9","data":{"a":"\\x"}}',
}


@pytest.mark.parametrize("case", BAD_JSON.keys())
def test_malformed_json(hub, sync_client, untouched, case):
    client = sync_client(hub)
    reply = exchange(client, BAD_JSON[case], NO_ID)
    error = expect_error(reply, "bad_json", case)
    assert isinstance(error.get("offset"), int) and error["offset"] >= 0, error
    client.barrier()  # still open, still working
    assert_not_written(client, *(f"bad/j{i}" for i in range(1, 10)))


@pytest.mark.parametrize("text", ["[1,2]", '"set"', "42", "null", "true"])
def test_not_an_object_is_bad_message(hub, sync_client, untouched, text):
    client = sync_client(hub)
    expect_error(exchange(client, text, NO_ID), "bad_message", text)
    client.barrier()


def test_missing_op_and_unknown_op(hub, sync_client, untouched):
    client = sync_client(hub)
    expect_error(exchange(client, {"id": 5, "name": "bad/noop", "data": {}}, 5), "bad_message")
    expect_error(exchange(client, {"id": "u1", "op": "frobnicate", "name": "bad/noop"}, "u1"), "unknown_op")
    expect_error(exchange(client, {"op": "SET", "name": "bad/noop", "data": {}}, NO_ID), "unknown_op")
    expect_error(exchange(client, {"op": "hello", "protocol": 1}, NO_ID), "bad_message")  # after the first
    client.barrier()
    assert_not_written(client, "bad/noop")


def test_unknown_members_are_ignored(hub, sync_client):
    client = sync_client(hub)
    reply = client.ok("get", name=EXISTING, futureField={"x": 1}, another=[1])
    assert reply["data"] == EXISTING_DATA


# --------------------------------------------------------------------------
# Fields of the wrong type or out of range: bad_field naming the field

WRONG_FIELDS = [
    ({"op": "set", "name": 5, "data": {}}, "name"),
    ({"op": "set", "name": "bad/f", "data": "text"}, "data"),
    ({"op": "set", "name": "bad/f", "data": [1]}, "data"),
    ({"op": "set", "name": "bad/f", "data": None}, "data"),
    ({"op": "set", "name": "bad/f", "path": "a"}, "value"),
    ({"op": "set", "name": "bad/f", "data": {}, "version": "3"}, "version"),
    ({"op": "set", "name": "bad/f", "data": {}, "version": -1}, "version"),
    ({"op": "set", "name": "bad/f", "data": {}, "version": 1.5}, "version"),
    ({"op": "set", "name": "bad/f", "data": {}, "idem": ""}, "idem"),
    ({"op": "set", "name": "bad/f", "data": {}, "idem": "k" * 257}, "idem"),
    ({"op": "set", "name": "bad/f", "data": {}, "idem": 7}, "idem"),
    ({"op": "merge", "name": EXISTING, "data": "x"}, "data"),
    ({"op": "increment", "name": "bad/f", "path": "n", "by": "1"}, "by"),
    ({"op": "increment", "name": "bad/f", "path": 3}, "path"),
    ({"op": "get", "name": EXISTING, "path": 5}, "path"),
    ({"op": "get", "prefix": "bad/", "limit": "10"}, "limit"),
    ({"op": "get", "prefix": "bad/", "limit": -1}, "limit"),
    ({"op": "get", "prefix": "bad/", "after": 3}, "after"),
    ({"op": "subscribe", "prefix": "bad/", "since": -1}, "since"),
    ({"op": "subscribe", "prefix": "bad/", "since": "0"}, "since"),
    ({"op": "subscribe", "list": ["bad"]}, "list"),
    ({"op": "addEntry", "list": "bad/l", "entry": 5}, "entry"),
    ({"op": "addEntry", "list": "bad/l", "entry": "e", "at": "0"}, "at"),
    ({"op": "addEntry", "list": "bad/l", "entry": "e", "at": -1}, "at"),
    ({"op": "setEntries", "list": "bad/l", "entries": "e"}, "entries"),
    ({"op": "setEntries", "list": "bad/l", "entries": [1]}, "entries"),
    ({"op": "write", "ops": "x"}, "ops"),
    ({"op": "write", "ops": []}, "ops"),
    ({"op": "write", "ops": [{"op": "set", "name": "bad/f", "data": {}}] * 1001}, "ops"),
    ({"op": "write", "ops": [{"op": "set", "name": "bad/f", "data": {}}, {"op": "set", "name": "bad/g", "data": 5}]}, "data"),
    ({"op": "publish", "topic": 3, "data": 1}, "topic"),
    ({"op": "publish", "topic": "bad"}, "data"),
    ({"op": "get", "name": EXISTING, "id": {"a": 1}}, "id"),
    ({"op": "get", "name": EXISTING, "id": "i" * 129}, "id"),
    ({"op": "get", "name": EXISTING, "id": 1.5}, "id"),
]


@pytest.mark.parametrize("message, field", WRONG_FIELDS,
                         ids=[f"{m['op']}-{f}-{i}" for i, (m, f) in enumerate(WRONG_FIELDS)])
def test_wrong_field_type(hub, sync_client, untouched, message, field):
    client = sync_client(hub)
    reply = exchange(client, message, ANY_ID)
    error = expect_error(reply, "bad_field", json.dumps(message)[:200])
    if message["op"] == "write" and field not in ("ops",):
        assert field in str(error.get("field")), error
        assert error.get("index") == 1, error
    else:
        assert names_field(error.get("field"), field), error
    if "id" in message and field != "id":
        assert reply.get("id") == message["id"]
    client.barrier()
    assert_not_written(client, "bad/f", "bad/g")
    expect_error(client.request("get", list="bad/l"), "not_found")


@pytest.mark.parametrize("fields, field", [
    ({"protocol": "one"}, "protocol"),
    ({"protocol": 1, "client": 5}, "client"),
    ({"protocol": 1, "client": "c" * 129}, "client"),
    ({"protocol": 1, "since": -4}, "since"),
    ({"protocol": 1, "token": 5}, "token"),
], ids=["protocol", "client-type", "client-long", "since", "token"])
def test_wrong_hello_field(hub, sync_client, untouched, fields, field):
    client = sync_client(hub, hello=False)
    error = client.fail("hello", "bad_field", **fields)
    assert error.get("field") == field, error
    client.barrier()


# --------------------------------------------------------------------------
# Paths

# Errors in the text itself (the reply says where: `offset`)
SYNTAX_ERRORS = {"a..b", "a[x]", "a[-1]", ".a", "a.", "a[1", "a]", "a[]"}
BAD_PATH_SYNTAX = ["a..b", "a[x]", "a[1000001]", "a[-1]", ".a", "a.", "a[1", "a]", "a[]",
                   "a" * 1025, ".".join(["a"] * 33)]


@pytest.mark.parametrize("path", BAD_PATH_SYNTAX, ids=lambda p: p if len(p) < 20 else f"{len(p)}-bytes")
def test_bad_path_syntax(hub, sync_client, untouched, path):
    client = sync_client(hub)
    for op, fields in [("set", dict(name="bad/p", path=path, value=1)),
                       ("set", dict(name=EXISTING, path=path, value=1)),
                       ("increment", dict(name="bad/p", path=path)),
                       ("delete", dict(name=EXISTING, path=path)),
                       ("get", dict(name=EXISTING, path=path)),
                       ("subscribe", dict(name=EXISTING, path=path))]:
        error = client.fail(op, "bad_path", **fields)
        if path in SYNTAX_ERRORS:
            assert isinstance(error.get("offset"), int), f"{op} {path}: no offset: {error}"
    client.barrier()
    assert_not_written(client, "bad/p")


def test_path_must_start_with_a_key(hub, sync_client, untouched):
    """"The first segment is a key": `[0]` is not a path, whatever the op
    (a subscription to it could never match anything)."""
    client = sync_client(hub)
    for op, fields in [("set", dict(value=1)), ("increment", {}), ("get", {}), ("delete", {}),
                       ("subscribe", {})]:
        client.fail(op, "bad_path", name=EXISTING, path="[0]", **fields)
    client.barrier()


def test_path_limits_are_inclusive(hub, sync_client):
    client = sync_client(hub)
    deep = ".".join(["a"] * 32)
    client.ok("set", name="bad/limits-ok", path=deep, value=1)
    assert client.ok("get", name="bad/limits-ok", path=deep)["value"] == 1
    client.ok("set", name="bad/limits-ok", path="k" * 1024, value=2)
    client.ok("set", name="bad/limits-ok", path="arr", value=[])
    client.ok("set", name="bad/limits-ok", path="arr[0]", value=0)  # one past the end: append
    client.ok("set", name="bad/limits-ok", path="arr[1]", value=1)
    client.ok("delete", name="bad/limits-ok")


@pytest.mark.parametrize("op, fields", [
    ("set", dict(path="n.x", value=1)),        # through a number
    ("set", dict(path="text[0]", value=1)),    # index into a string
    ("set", dict(path="arr[3]", value=1)),     # past one-past-the-end
    ("set", dict(path="arr.x", value=1)),      # key into an array
    ("set", dict(path="obj[0]", value=1)),     # index into an object
    ("set", dict(path="missing[0]", value=1)),  # parent objects are created, arrays are not
    ("increment", dict(path="arr[5]")),
], ids=["through-number", "index-string", "past-end", "key-in-array", "index-object", "missing-array",
        "increment-past-end"])
def test_path_that_does_not_fit_the_record(hub, sync_client, untouched, op, fields):
    client = sync_client(hub)
    client.fail(op, "bad_path", name=EXISTING, **fields)
    client.barrier()


def test_delete_through_a_scalar_is_refused(hub, sync_client, untouched):
    """PROTOCOL.md reads both ways here (bad_path: "through a scalar";
    delete at a path: "no value there -> not_found"): either code, nothing
    removed."""
    client = sync_client(hub)
    reply = client.request("delete", name=EXISTING, path="n.x")
    assert reply["ok"] is False and reply["error"]["code"] in ("bad_path", "not_found"), reply
    client.barrier()


def test_other_refusals_keep_the_connection(hub, sync_client, untouched):
    client = sync_client(hub)
    client.fail("increment", "not_a_number", name=EXISTING, path="text")
    client.fail("increment", "not_a_number", name=EXISTING, path="obj")
    client.fail("delete", "not_found", name=EXISTING, path="nope")
    client.fail("delete", "not_found", name="bad/none")
    client.fail("merge", "not_found", name="bad/none", data={"a": 1})
    client.fail("removeEntry", "not_found", list="bad/none", entry="x")
    client.fail("unsubscribe", "not_subscribed", name=EXISTING)
    client.fail("get", "not_found", name=EXISTING, path="arr[2]")
    client.barrier()
    assert_not_written(client, "bad/none")


# --------------------------------------------------------------------------
# Names

BAD_NAMES = {
    "513-bytes": "n" * 513,
    "257-two-byte-chars": "é" * 257,  # 257 characters, 514 bytes
    "empty": "",
    "nul": "a\u0000b",
    "soh": "a\u0001b",
    "newline": "a\nb",
    "unit-separator": "a\u001fb",
    "del": "a\u007fb",
    "leading-slash": "/a",
    "trailing-slash": "a/",
    "double-slash": "a//b",
}


@pytest.mark.parametrize("case", BAD_NAMES.keys())
def test_bad_names(hub, sync_client, untouched, case):
    bad = BAD_NAMES[case]
    client = sync_client(hub)
    for op, fields, field in [
        ("set", dict(name=bad, data={}), "name"),
        ("set", dict(name=bad, path="a", value=1), "name"),
        ("get", dict(name=bad), "name"),
        ("subscribe", dict(name=bad), "name"),
        ("addEntry", dict(list=bad, entry="bad/e"), "list"),
        ("addEntry", dict(list="bad/l", entry=bad), "entry"),
        ("setEntries", dict(list="bad/l", entries=["bad/e", bad]), "entries"),
        ("subscribe", dict(topic=bad), "topic"),
        ("publish", dict(topic=bad, data=1), "topic"),
        ("write", dict(ops=[{"op": "set", "name": "bad/w", "data": {}}, {"op": "set", "name": bad, "data": {}}]), "name"),
    ]:
        error = client.fail(op, "bad_name", **fields)
        assert field in str(error.get("field")), f"{op} {fields}: {error}"
    if case not in ("empty", "trailing-slash", "leading-slash", "double-slash"):
        error = client.fail("subscribe", "bad_name", prefix=bad)
        assert error.get("field") == "prefix", error
    client.barrier()
    assert_not_written(client, "bad/w", "bad/e")
    expect_error(client.request("get", list="bad/l"), "not_found")


def test_name_length_limit_is_512_bytes(hub, sync_client):
    client = sync_client(hub)
    for name in ["n" * 512, "é" * 256, "x/" * 255 + "yy"]:
        assert len(name.encode()) == 512
        client.ok("set", name=name, data={})
        client.ok("delete", name=name)
    client.ok("subscribe", prefix="")  # the empty prefix is fine
    client.ok("subscribe", prefix="bad/")  # a prefix may end with a slash


# --------------------------------------------------------------------------
# Nesting and size limits of JSON


def nested(depth: int, open_: str = "[", close: str = "]", inner: str = "1") -> str:
    return open_ * depth + inner + close * depth


@pytest.mark.parametrize("value", [
    nested(10_000), nested(100_000), nested(10_000, '{"a":', "}"), nested(65),
], ids=["arrays-10000", "arrays-100000", "objects-10000", "arrays-65"])
def test_deep_nesting_is_bad_json_and_the_connection_stays(hub, sync_client, untouched, value):
    client = sync_client(hub)
    text = '{"op":"set","name":"bad/deep","data":{"v":' + value + "}}"
    expect_error(exchange(client, text, ANY_ID), "bad_json")
    client.barrier()
    assert_not_written(client, "bad/deep")


@pytest.mark.parametrize("value", [
    "[" + ",".join(["0"] * 100_001) + "]",
    "{" + ",".join(f'"k{i}":0' for i in range(10_001)) + "}",
    '"' + "s" * (256 * KiB + 1) + '"',
], ids=["array-100001", "object-10001-members", "string-256KiB+1"])
def test_json_over_the_limits_is_bad_json(hub, sync_client, untouched, value):
    client = sync_client(hub)
    text = '{"op":"set","name":"bad/big-json","data":{"v":' + value + "}}"
    expect_error(exchange(client, text, ANY_ID), "bad_json")
    client.barrier()
    assert_not_written(client, "bad/big-json")


def test_json_at_the_limits_is_fine(hub, sync_client):
    client = sync_client(hub)
    client.ok("set", name="bad/at-limits", data={"a": [0] * 100_000})
    client.ok("set", name="bad/at-limits", data={f"k{i}": 0 for i in range(10_000)})
    client.ok("set", name="bad/at-limits", data={"s": "s" * (256 * KiB)})
    client.ok("delete", name="bad/at-limits")


# --------------------------------------------------------------------------
# Record size, frame size, binary and invalid frames


def test_record_over_the_size_limit_is_too_large(hub, sync_client, untouched):
    client = sync_client(hub)
    chunk = "x" * (128 * KiB)
    error = client.fail("set", "too_large", name="bad/large", data={"chunks": [chunk] * 16})  # 2 MiB
    assert error["limit"] == MiB
    client.fail("set", "too_large", name=EXISTING, path="chunks", value=[chunk] * 9)
    client.fail("write", "too_large", ops=[{"op": "set", "name": "bad/large2", "data": {}},
                                           {"op": "set", "name": "bad/large", "data": {"c": [chunk] * 9}}])
    client.barrier()
    assert_not_written(client, "bad/large", "bad/large2")
    expect_error(client.request("get", list="bad/large"), "not_found")


def test_merge_growing_past_the_limit(hub, sync_client):
    client = sync_client(hub)
    chunk = "x" * (128 * KiB)
    created = client.ok("set", name="bad/grow", data={"c": [chunk] * 7})  # 896 KiB
    head = client.head()
    client.fail("merge", "too_large", name="bad/grow", data={"d": [chunk] * 2})
    client.fail("set", "too_large", name="bad/grow", path="c[7]", value=chunk)
    assert client.head() == head
    assert client.ok("get", name="bad/grow")["version"] == created["version"]
    client.ok("delete", name="bad/grow")


def test_max_record_size_flag(tally_factory, sync_client):
    server = tally_factory("--max-record-size", "4096")
    client = sync_client(server)
    client.ok("set", name="small/ok", data={"s": "x" * 4000})
    error = client.fail("set", "too_large", name="small/no", data={"s": "x" * 5000})
    assert error["limit"] == 4096
    client.fail("set", "too_large", name="small/ok", path="t", value="y" * 200)
    assert client.ok("get", name="small/ok")["version"] == 1
    client.fail("get", "not_found", name="small/no")


def test_binary_frame_is_refused_and_not_applied(hub, sync_client, untouched):
    client = sync_client(hub)
    client.send_raw(json.dumps({"op": "set", "name": "bad/binary", "data": {}}).encode())
    expect_error(client.recv_reply(NO_ID), "binary_not_supported")
    client.barrier()
    assert_not_written(client, "bad/binary")


def test_invalid_utf8_closes_with_1007(hub, untouched):
    ws = RawWebSocket.open(hub.host, hub.port, path=WS_PATH)
    ws.send(TEXT, b'{"op":"set","name":"bad/utf8","data":{"a":"\xff\xfe"}}')
    ws.expect_close(1007)
    with_client_check_not_written(hub, "bad/utf8")


def with_client_check_not_written(server, *names: str) -> None:
    from synclib import SyncClient
    with SyncClient(server) as client:
        assert_not_written(client, *names)


def stream_huge_text_frame(server, total: int, prefix: bytes, suffix: bytes,
                           timeout: float = 30.0) -> tuple[RawWebSocket, int]:
    """Sends one masked text frame announcing ``total`` payload bytes:
    ``prefix``, 'x' filler, ``suffix``; streamed from one 1 MiB masked chunk
    (bounded memory), stopping as soon as the server says anything or
    stops reading. Returns the socket and the payload bytes sent."""
    ws = RawWebSocket.open(server.host, server.port, path=WS_PATH)
    key = os.urandom(4)
    pad = (-len(prefix)) % 4
    prefix = prefix[:1] + b" " * pad + prefix[1:]  # whitespace: the filler starts 4-aligned
    chunk = MiB
    masked_fill = apply_mask(b"x" * chunk, key)
    filler_end = total - len(suffix)
    sock = ws.conn.sock
    sock.sendall(struct.pack("!BBQ", 0x80 | TEXT, 0x80 | 127, total) + key)

    def piece(offset: int) -> bytes:
        if offset < len(prefix):
            return apply_mask(prefix, key)[offset:]
        if offset < filler_end:
            start = (offset - len(prefix)) % chunk
            return masked_fill[start:min(chunk, start + filler_end - offset)]
        rotation = filler_end % 4
        return apply_mask(suffix, key[rotation:] + key[:rotation])[offset - filler_end:]

    sent = 0
    deadline = time.monotonic() + timeout
    sock.setblocking(False)
    try:
        while sent < total and time.monotonic() < deadline:
            readable, writable, _ = select.select([sock], [sock], [], max(0.0, deadline - time.monotonic()))
            if readable:
                break  # the server is answering (its close frame) or gone
            if writable:
                try:
                    sent += sock.send(piece(sent))
                except (BlockingIOError, InterruptedError):
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
    finally:
        sock.setblocking(True)
        sock.settimeout(5)
    return ws, sent


def test_100_mb_message_closes_with_1009(hub, untouched):
    total = 100 * MiB
    prefix = b'{"op":"set","name":"bad/huge","data":{"v":"'
    ws, sent = stream_huge_text_frame(hub, total, prefix, b'"}}')
    try:
        ws.expect_close(1009)
    finally:
        ws.close()
    assert sent < total, "the hub read all 100 MB before refusing a frame whose header announced it"
    with_client_check_not_written(hub, "bad/huge")


def test_frame_over_max_message_size_flag_closes_with_1009(tally_factory, sync_client):
    server = tally_factory("--max-message-size", "64K")
    client = sync_client(server)
    client.ok("set", name="limit/small", data={"s": "x" * (60 * KiB)})
    ws, _ = stream_huge_text_frame(server, 65 * KiB, b'{"op":"set","name":"limit/big","data":{"v":"', b'"}}')
    try:
        ws.expect_close(1009)
    finally:
        ws.close()
    client.fail("get", "not_found", name="limit/big")


def test_100_mb_rest_body_is_413(hub, untouched):
    """Refused from the Content-Length; if the hub waits for the body
    instead, it is streamed (1 MiB at a time) until the hub answers."""
    conn = Buffered(connect(hub.host, hub.port))
    sock = conn.sock
    try:
        sock.sendall(f"PUT {record_path('bad/huge-rest')} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {100 * MiB}\r\n\r\n".encode())
        body_chunk = b"x" * MiB
        sent = 0
        deadline = time.monotonic() + 30
        answered, _, _ = select.select([sock], [], [], 2)
        while not answered and sent < 100 * MiB and time.monotonic() < deadline:
            try:
                sock.sendall(body_chunk if sent else b'{"v":"' + body_chunk[6:])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += MiB
            answered, _, _ = select.select([sock], [], [], 0)
        response = read_http_response(conn)
    finally:
        sock.close()
    assert response.status == 413, (response.status, response.body[:300])
    assert json.loads(response.body)["error"]["code"] == "too_large"
    assert rest(hub, "GET", record_path("bad/huge-rest")).status == 404


def test_errors_do_not_disturb_subscriptions(hub, sync_client):
    """A connection that made mistakes still gets its pushes."""
    client, writer = sync_client(hub), sync_client(hub)
    client.ok("subscribe", prefix="bad/sub/")
    exchange(client, "{nope", NO_ID)
    client.send_raw(b"binary")
    client.recv_reply(NO_ID)
    client.fail("set", "bad_path", name="bad/sub/1", path="a..b", value=1)
    reply = writer.ok("set", name="bad/sub/1", data={})
    assert [p["seq"] for p in client.drain()] == [reply["seq"]]
    writer.ok("delete", name="bad/sub/1")


def test_hub_survives_garbage_on_many_connections(hub, untouched):
    """A burst of bad frames on several raw connections: the hub keeps
    serving (nothing here is written)."""
    sockets = []
    for i in range(8):
        ws = RawWebSocket.open(hub.host, hub.port, path=WS_PATH)
        for text in [b"{", b"[]", b'{"op":1}', b'{"op":"set","name":"","data":{}}', b'{"op":"get","name":"a..b","path":"[["}']:
            ws.send(TEXT, text)
        sockets.append(ws)
    for ws in sockets:
        for _ in range(5):
            opcode, payload = ws.recv_message()
            assert opcode == TEXT
            assert json.loads(payload)["ok"] is False
        ws.close()
    try:
        socket.create_connection((hub.host, hub.port), timeout=2).close()
    except OSError as error:
        pytest.fail(f"the hub stopped accepting: {error}")

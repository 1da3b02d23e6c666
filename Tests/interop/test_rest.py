"""The REST face of the hub (PROTOCOL.md, last section): the same records,
lists, change log and events as the WebSocket protocol, with HTTP statuses,
ETags and Idempotency-Key. Every refused write is checked to have written
nothing (the record and the hub's head are unchanged)."""

from __future__ import annotations

import re
import time
import urllib.parse

import pytest

from synclib import (all_changes, etag, get_record, list_path, put_record, record_path, rest)

ENVELOPE = {"name", "version", "seq", "created", "updated", "data"}


def head(server) -> int:
    response = rest(server, "GET", "/v1/changes?since=0&limit=1")
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()["seq"]


def assert_envelope(response, name: str, version: int, data) -> dict:
    body = response.json()
    assert ENVELOPE <= set(body), f"envelope members missing: {body}"
    assert (body["name"], body["version"], body["data"]) == (name, version, data), body
    assert response.header("etag") == etag(version), response.headers
    assert (response.header("content-type") or "").startswith("application/json")
    return body


def assert_error(response, status: int, code: str) -> None:
    assert response.status == status, (response.status, response.body[:300])
    assert response.error_code() == code, response.body[:300]


# --------------------------------------------------------------------------
# Records


@pytest.mark.parametrize("name", ["jobs/42", "a/b/c/d", "plain", "scans/7f3c-ü"])
def test_put_get_envelope_and_etag(tally, name):
    created = put_record(tally, name, {"stage": "received", "qty": 2})
    assert created.status == 201, (created.status, created.body)
    first = assert_envelope(created, name, 1, {"stage": "received", "qty": 2})
    assert isinstance(first["seq"], int) and first["seq"] >= 1
    assert isinstance(first["created"], int) and first["created"] > 1_600_000_000_000

    replaced = put_record(tally, name, {"stage": "ready"})
    assert replaced.status == 200, (replaced.status, replaced.body)
    second = assert_envelope(replaced, name, 2, {"stage": "ready"})
    assert second["seq"] > first["seq"]
    assert second["created"] == first["created"] and second["updated"] >= first["updated"]

    got = get_record(tally, name)
    assert got.status == 200
    assert got.json() == second
    assert got.header("etag") == '"2"'


def test_names_with_reserved_characters_are_percent_encoded(tally):
    name = "odd name/x?y#z%"
    assert put_record(tally, name, {"ok": 1}).status == 201
    path = "/v1/records/odd%20name/x%3Fy%23z%25"
    assert record_path(name) == path
    got = rest(tally, "GET", path)
    assert got.status == 200 and got.json()["name"] == name
    listing = rest(tally, "GET", "/v1/records?prefix=" + urllib.parse.quote("odd name/", safe=""))
    assert [r["name"] for r in listing.json()["records"]] == [name]


def test_if_match(tally):
    name = "jobs/etag"
    put_record(tally, name, {"v": 1})
    put_record(tally, name, {"v": 2})
    before = head(tally)
    refused = put_record(tally, name, {"v": "stale"}, headers={"If-Match": '"1"'})
    assert_error(refused, 412, "conflict")
    assert get_record(tally, name).json()["data"] == {"v": 2}, "a refused If-Match wrote"
    assert head(tally) == before
    patched = rest(tally, "PATCH", record_path(name), {"w": 1}, headers={"If-Match": '"7"'})
    assert_error(patched, 412, "conflict")
    accepted = put_record(tally, name, {"v": 3}, headers={"If-Match": '"2"'})
    assert accepted.status == 200
    assert_envelope(accepted, name, 3, {"v": 3})


@pytest.mark.parametrize("body", [b'{"stage": ', b"{'a': 1}", b"", b'{"a":1}x', b"\xff\xfe"])
def test_malformed_json_is_400_and_writes_nothing(tally, body):
    name = "jobs/malformed"
    put_record(tally, name, {"keep": True})
    before = head(tally)
    for method in ("PUT", "PATCH"):
        response = rest(tally, method, record_path(name), body)
        assert_error(response, 400, "bad_json")
    response = rest(tally, "PUT", record_path("jobs/malformed-new"), body)
    assert_error(response, 400, "bad_json")
    assert get_record(tally, name).json()["data"] == {"keep": True}
    assert get_record(tally, "jobs/malformed-new").status == 404
    assert head(tally) == before


@pytest.mark.parametrize("body", [[1, 2], "text", 42, None])
def test_put_of_a_non_object_is_400(tally, body):
    before = head(tally)
    response = rest(tally, "PUT", record_path("jobs/not-object"), b"null" if body is None else body)
    assert response.status == 400, (response.status, response.body)
    assert response.error_code() in ("bad_field", "bad_json", "bad_message")
    assert get_record(tally, "jobs/not-object").status == 404
    assert head(tally) == before


def test_unknown_record_is_404(tally):
    before = head(tally)
    assert_error(get_record(tally, "jobs/nope"), 404, "not_found")
    assert_error(rest(tally, "PATCH", record_path("jobs/nope"), {"a": 1}), 404, "not_found")
    assert_error(rest(tally, "DELETE", record_path("jobs/nope")), 404, "not_found")
    assert get_record(tally, "jobs/nope").status == 404, "PATCH of an unknown record created it"
    assert head(tally) == before


def test_patch_is_rfc_7396(tally):
    name = "jobs/patch"
    put_record(tally, name, {"a": 1, "b": {"c": 2, "d": 3}, "arr": [1, 2], "keep": True})
    response = rest(tally, "PATCH", record_path(name),
                    {"a": None, "b": {"c": None, "e": 4}, "arr": [3], "new": {"x": None, "y": [None]}},
                    headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 200, (response.status, response.body)
    assert_envelope(response, name, 2, {"b": {"d": 3, "e": 4}, "arr": [3], "keep": True,
                                        "new": {"y": [None]}})
    assert get_record(tally, name).json()["data"] == response.json()["data"]


def test_delete_record(tally):
    name = "jobs/del"
    put_record(tally, name, {"a": 1})
    put_record(tally, name, {"a": 2})
    response = rest(tally, "DELETE", record_path(name))
    assert response.status == 200, (response.status, response.body)
    body = response.json()
    assert (body["name"], body["version"], body["deleted"]) == (name, 3, True)
    assert isinstance(body["seq"], int)
    assert get_record(tally, name).status == 404
    again = put_record(tally, name, {"a": 3})
    assert again.status == 201
    assert again.json()["version"] == 1, "a record created again after deletion starts at 1"


def test_list_records_by_prefix_pages_in_byte_order(tally):
    names = [f"page/{i}" for i in range(25)] + ["page/é", "page/Z", "pages/x", "pag"]
    for name in names:
        assert put_record(tally, name, {"n": name}).status == 201
    expected = sorted((n for n in names if n.startswith("page/")), key=lambda n: n.encode())
    got, after = [], None
    for _ in range(10):
        query = "prefix=page%2F&limit=10" + (f"&after={urllib.parse.quote(after, safe='')}" if after else "")
        response = rest(tally, "GET", f"/v1/records?{query}")
        assert response.status == 200, (response.status, response.body)
        page = response.json()
        assert isinstance(page["seq"], int)
        assert len(page["records"]) <= 10
        got += page["records"]
        if not page["more"]:
            break
        after = page["records"][-1]["name"]
    assert [r["name"] for r in got] == expected
    assert all(r["data"] == {"n": r["name"]} for r in got)


# --------------------------------------------------------------------------
# Lists


def test_list_endpoints(tally):
    name = "boards/main"
    url = list_path(name) + "/entries"
    assert rest(tally, "GET", list_path(name)).status == 404
    first = rest(tally, "POST", url, "jobs/1")
    assert first.status == 200, (first.status, first.body)
    assert first.json()["entries"] == ["jobs/1"] and first.json()["version"] == 1
    assert set(first.json()) >= {"name", "version", "seq", "entries"}
    assert first.json()["name"] == name
    rest(tally, "POST", url, "jobs/2")
    inserted = rest(tally, "POST", url + "?at=0", "jobs/0")
    assert inserted.json()["entries"] == ["jobs/0", "jobs/1", "jobs/2"]
    rest(tally, "POST", url, "jobs/1")
    got = rest(tally, "GET", list_path(name))
    assert got.status == 200
    assert got.json()["entries"] == ["jobs/0", "jobs/1", "jobs/2", "jobs/1"]
    assert got.json()["version"] == 4

    removed = rest(tally, "DELETE", url + "/jobs/1")
    assert removed.status == 200, (removed.status, removed.body)
    assert removed.json()["entries"] == ["jobs/0", "jobs/2"], "every occurrence is removed"
    assert removed.json()["version"] == 5

    before = head(tally)
    assert_error(rest(tally, "DELETE", url + "/jobs/9"), 404, "not_found")
    assert_error(rest(tally, "POST", url, b'{"not": "a string"}'), 400, "bad_field")
    assert_error(rest(tally, "POST", url, b'"unterminated'), 400, "bad_json")
    assert head(tally) == before
    assert rest(tally, "GET", list_path(name)).json()["entries"] == ["jobs/0", "jobs/2"]
    assert get_record(tally, name).status == 404, "records and lists are separate namespaces"


# --------------------------------------------------------------------------
# Change log


def test_changes_since(tally, sync_client):
    watcher = sync_client(tally)
    watcher.ok("subscribe", prefix="log/")
    start = head(tally)
    replies = [put_record(tally, f"log/{i % 3}", {"i": i}).json() for i in range(12)]
    assert [r["seq"] for r in replies] == list(range(start + 1, start + 13))

    now, floor, changes = all_changes(tally, since=start)
    assert now == start + 12 and floor == 0
    assert [c["seq"] for c in changes] == list(range(start + 1, start + 13))
    pushed = [p.message for p in watcher.take_pushes(12)]
    assert changes == pushed, "the change log holds the pushes"

    _, _, paged = all_changes(tally, since=start, limit=5)
    assert paged == changes
    response = rest(tally, "GET", f"/v1/changes?since={start + 10}&limit=1")
    page = response.json()
    assert [c["seq"] for c in page["changes"]] == [start + 11] and page["more"] is True
    response = rest(tally, "GET", f"/v1/changes?since={start + 12}")
    assert response.json()["changes"] == [] and response.json()["more"] is False

    _, _, everything = all_changes(tally, since=0)
    assert [c["seq"] for c in everything] == list(range(1, start + 13))


def test_changes_older_than_the_log_are_410(tally_factory):
    server = tally_factory("--retain-changes", "3")
    for i in range(20):
        put_record(server, f"old/{i % 2}", {"i": i})
    response = None
    for _ in range(50):
        response = rest(server, "GET", "/v1/changes?since=0")
        if response.status == 410:
            break
        time.sleep(0.1)
    assert_error(response, 410, "resnapshot")
    recent = rest(server, "GET", "/v1/changes?since=17")
    assert recent.status == 200
    assert [c["seq"] for c in recent.json()["changes"]] == [18, 19, 20]
    assert recent.json()["floor"] <= 17


# --------------------------------------------------------------------------
# Events, metrics, REST <-> WebSocket


def test_event_reaches_a_websocket_subscriber(tally, sync_client):
    watcher = sync_client(tally)
    watcher.ok("subscribe", topic="scanner/1")
    before = head(tally)
    response = rest(tally, "POST", "/v1/events/scanner/1", {"code": "ABC", "n": [1, 2]})
    assert response.status == 200, (response.status, response.body)
    assert response.json() == {"delivered": 1}
    assert watcher.next_push().message == {"op": "event", "topic": "scanner/1", "data": {"code": "ABC", "n": [1, 2]}}
    response = rest(tally, "POST", "/v1/events/nobody", "just a string")
    assert response.json() == {"delivered": 0}
    assert head(tally) == before, "events are not stored"


def test_metrics_names(tally, sync_client):
    client = sync_client(tally)
    client.ok("subscribe", prefix="m/")
    client.ok("set", name="m/1", data={})
    response = rest(tally, "GET", "/metrics")
    assert response.status == 200
    text = response.body.decode()
    names = {m.group(1) for m in re.finditer(r"^(tally_[a-zA-Z0-9_:]+)", text, re.MULTILINE)}
    for part in ("connection", "subscription", "message", "commit", "change"):
        assert any(part in name for name in names), f"no tally_ metric about {part}s: {sorted(names)}"
    subscriptions = [line for line in text.splitlines()
                     if line.startswith("tally_") and "subscription" in line.split(" ")[0]]
    assert any(float(line.rsplit(" ", 1)[1]) >= 1 for line in subscriptions), subscriptions


def test_rest_and_websocket_see_each_other(tally, sync_client):
    client = sync_client(tally)
    client.ok("subscribe", prefix="both/")
    client.ok("subscribe", list="both")
    put = put_record(tally, "both/1", {"from": "rest"}).json()
    patch = rest(tally, "PATCH", record_path("both/1"), {"more": 1}).json()
    entry = rest(tally, "POST", list_path("both") + "/entries", "both/1").json()
    delete = rest(tally, "DELETE", record_path("both/1")).json()
    pushes = client.drain()
    assert [(p["seq"], p["version"]) for p in pushes] == [
        (put["seq"], 1), (patch["seq"], 2), (entry["seq"], 1), (delete["seq"], 3)]
    assert pushes[1]["data"] == {"from": "rest", "more": 1}
    assert pushes[3]["kind"] == "delete"

    ws = client.ok("set", name="both/2", data={"from": "ws"})
    got = get_record(tally, "both/2")
    assert (got.json()["data"], got.json()["version"], got.json()["seq"]) == ({"from": "ws"}, 1, ws["seq"])


def test_idempotency_key(tally, sync_client):
    watcher = sync_client(tally)
    watcher.ok("subscribe", prefix="idem/")
    headers = {"Idempotency-Key": "rest-put-1"}
    first = put_record(tally, "idem/1", {"n": 1}, headers=headers)
    assert first.status == 201
    before = head(tally)
    retry = put_record(tally, "idem/1", {"n": 1}, headers=headers)
    assert retry.status == first.status and retry.json() == first.json(), "a retry returns the first answer"
    assert head(tally) == before

    url = list_path("idem") + "/entries"
    added = rest(tally, "POST", url, "idem/1", headers={"Idempotency-Key": "rest-entry-1"})
    again = rest(tally, "POST", url, "idem/1", headers={"Idempotency-Key": "rest-entry-1"})
    assert again.json() == added.json()
    assert rest(tally, "GET", list_path("idem")).json()["entries"] == ["idem/1"], "applied once"

    refused = put_record(tally, "idem/2", {"n": 2}, headers={"If-Match": '"3"', "Idempotency-Key": "rest-put-2"})
    assert refused.status == 412
    accepted = put_record(tally, "idem/2", {"n": 2}, headers={"Idempotency-Key": "rest-put-2"})
    assert accepted.status == 201, "a refused write's key is not remembered"
    assert [p["seq"] for p in watcher.drain()] == [first.json()["seq"], accepted.json()["seq"]]


def test_record_over_the_size_limit_is_413(tally_factory):
    server = tally_factory("--max-record-size", "4096")
    assert put_record(server, "big/ok", {"s": "x" * 4000}).status == 201
    before = head(server)
    response = put_record(server, "big/ok", {"s": "x" * 5000})
    assert_error(response, 413, "too_large")
    assert response.json()["error"]["limit"] == 4096
    assert_error(put_record(server, "big/new", {"s": "y" * 5000}), 413, "too_large")
    assert_error(rest(server, "PATCH", record_path("big/ok"), {"t": "z" * 500}), 413, "too_large")
    assert get_record(server, "big/ok").json()["version"] == 1
    assert get_record(server, "big/new").status == 404
    assert head(server) == before


def test_only_blob_routes_take_large_bodies(tally):
    """A 3 MiB photo uploads through the hub; a 3 MiB JSON body anywhere else
    is refused from its Content-Length (413) and writes nothing."""
    import hashlib
    import os
    photo = b"\x89PNG\r\n\x1a\n" + os.urandom(3 << 20)
    sha = hashlib.sha256(photo).hexdigest()
    put = rest(tally, "PUT", f"/v1/blobs/{sha}", photo, headers={"Content-Type": "image/png"})
    assert put.status == 201, put.body[:200]
    assert put.json() == {"sha256": sha, "size": len(photo), "type": "image/png"}
    got = rest(tally, "GET", f"/v1/blobs/{sha}")
    assert got.status == 200 and hashlib.sha256(got.body).hexdigest() == sha
    assert got.headers["content-type"] == "image/png"
    big = b'{"x":"' + b"a" * (3 << 20) + b'"}'
    assert_error(rest(tally, "PUT", record_path("jobs/big"), big), 413, "too_large")
    assert rest(tally, "GET", record_path("jobs/big")).status == 404

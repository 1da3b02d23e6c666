"""Workflows (Protocol/PROTOCOL.md, "Workflows" and "advance"), black box:

- creating an order stamps stage, history and owner, appends it to the
  `orders` list and counts it in `stats/orders`, in one change set; bad order
  fields are `bad_field`;
- plain writes cannot change the stage, history or owner (`use_advance`);
  a whole-record set that leaves them out keeps them;
- `advance`: from/to, the default target, `conflict`, `illegal_transition`
  with `allowed`, `not_found`, `bad_field`, data patches, reasons, idempotent
  retries, `advance` inside `write`;
- every stage pair of both default workflows, per role (admin, staff,
  dashboard, client) on a hub with users: allowed transitions succeed for
  admin and staff, the others are `illegal_transition`, dashboard and client
  are `forbidden` throughout; a refusal changes nothing;
- delivering an order moves stock in the same change set, or is refused with
  `insufficient_stock` and changes nothing; a concurrent reader never sees
  one without the other;
- `stats/orders` equals a recount after 1,000 concurrent random advances;
- REST `POST /v1/records/{name}/advance`;
- `tally order new|advance|cancel|ls`.

Hubs bind 127.0.0.1 (conftest); every wait is bounded.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid

import pytest

from authlib import (INTAKE_STAGES, INTAKE_TERMINAL, INTAKE_TRANSITIONS, ORDER_STAGES,
                     ORDER_TERMINAL, ORDER_TRANSITIONS, AuthClient, Tokens, path_to, rest_as,
                     start_hub)
from conftest import TALLY_BIN
from synclib import SyncClient, all_changes, dumps, expect_error, record_path, rest, run_threads, without_id

ACTOR = "wf-tests"


def uid() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def client(tally, sync_client):
    """An open-mode connection named ACTOR."""
    return sync_client(tally, hello={"client": ACTOR})


def new_item(client, stock: int = 100, **fields) -> str:
    name = f"items/{uid()}"
    client.ok("set", name=name, data={"sku": name[6:], "stock": stock, **fields})
    return name


def new_order(client, item: str, qty: int = 1, kind: str | None = None, name: str | None = None) -> str:
    name = name or f"orders/{uid()}"
    data = {"item": item, "qty": qty}
    if kind is not None:
        data["kind"] = kind
    client.ok("set", name=name, data=data)
    return name


def drive(client, name: str, stages: list[str], **fields) -> dict:
    """Advances ``name`` through ``stages``; returns the last reply."""
    reply = None
    for stage in stages:
        reply = client.ok("advance", name=name, to=stage, **fields)
    return reply


def record(client, name: str) -> dict:
    """The record's envelope (the get reply without its id, so two reads compare)."""
    return without_id(client.ok("get", name=name))


def maybe_record(client, name: str) -> dict | None:
    reply = client.request("get", name=name)
    if reply.get("ok"):
        return reply
    expect_error(reply, "not_found", f"get {name}")
    return None


def stats(client, name: str = "stats/orders") -> dict:
    return record(client, name)


def check_history(data: dict, stages: list[str], actor: str | None = None) -> None:
    """history starts at the first stage from null, each from is the
    previous to, and the last to is the stage."""
    history = data["history"]
    assert isinstance(history, list) and history, data
    assert history[0]["from"] is None and history[0]["to"] == stages[0], history[0]
    for before, entry in zip(history, history[1:]):
        assert entry["from"] == before["to"], f"history breaks between {before} and {entry}"
        assert entry["time"] >= before["time"], f"history goes back in time: {before} {entry}"
    assert history[-1]["to"] == data["stage"], data
    for entry in history:
        assert isinstance(entry["time"], int) and entry["time"] > 1_600_000_000_000, entry
        assert entry["to"] in stages, entry
        if actor is not None:
            assert entry["actor"] == actor, entry


def empty_counts(stages) -> dict:
    return {stage: 0 for stage in stages}


# --------------------------------------------------------------------------
# Creating workflow records


def test_creating_an_order_stamps_it_lists_it_and_counts_it_in_one_change_set(tally, client, sync_client):
    item = new_item(client, stock=5)
    watcher = sync_client(tally)
    start = watcher.ok("subscribe", prefix="")["seq"]
    watcher.ok("subscribe", list="orders")
    before = time.time() * 1000

    reply = client.ok("set", name="orders/one", data={"item": item, "qty": 2})
    assert (reply["name"], reply["version"]) == ("orders/one", 1), reply
    got = record(client, "orders/one")
    data = got["data"]
    assert data["item"] == item and data["qty"] == 2, data
    assert data.get("kind", "issue") == "issue", f"kind defaults to issue: {data}"
    assert data["stage"] == "received", data
    assert data["owner"] == ACTOR, f"owner is the hello's client on an open hub: {data}"
    assert len(data["history"]) == 1, data
    entry = data["history"][0]
    assert entry["from"] is None and entry["to"] == "received" and entry["actor"] == ACTOR, entry
    assert before - 5000 <= entry["time"] <= time.time() * 1000 + 5000, entry
    check_history(data, ORDER_STAGES, ACTOR)

    orders = client.ok("get", list="orders")
    assert orders["entries"] == ["orders/one"], orders
    summary = stats(client)["data"]
    assert summary["counts"] == {**empty_counts(ORDER_STAGES), "received": 1}, summary
    assert summary["total"] == 1, summary
    assert summary["oldestOpen"]["name"] == "orders/one", summary
    assert isinstance(summary["updated"], int), summary

    # One change set: the record, the list entry and the stats record, with
    # consecutive seqs and nothing else.
    pushes = watcher.drain()
    assert len(pushes) == 3, [p.message for p in pushes]
    assert [p["seq"] for p in pushes] == list(range(start + 1, start + 4)), [p.message for p in pushes]
    assert {p.get("name") or ("list:" + p["list"]) for p in pushes} == \
        {"orders/one", "list:orders", "stats/orders"}, [p.message for p in pushes]
    assert reply["seq"] in [p["seq"] for p in pushes if p.get("name") == "orders/one"]
    created = next(p for p in pushes if p.get("name") == "orders/one")
    assert created["kind"] == "set" and created["data"] == data, created.message

    # With version 0, and with the stage given as the first one.
    client.ok("set", name="orders/two", version=0, data={"item": item, "qty": 1, "kind": "receive"})
    client.ok("set", name="orders/three", data={"item": item, "qty": 1, "stage": "received"})
    assert record(client, "orders/two")["data"]["kind"] == "receive"
    assert client.ok("get", list="orders")["entries"] == ["orders/one", "orders/two", "orders/three"]
    assert stats(client)["data"]["counts"]["received"] == 3
    assert stats(client)["data"]["total"] == 3


def test_a_connection_without_hello_acts_as_anonymous(tally, sync_client, client):
    item = new_item(client)
    plain = sync_client(tally, hello=False)
    plain.ok("set", name="orders/anon", data={"item": item, "qty": 1})
    data = record(client, "orders/anon")["data"]
    assert data["owner"] == "anonymous", data
    assert data["history"][0]["actor"] == "anonymous", data
    plain.ok("advance", name="orders/anon", to="in-progress")
    assert record(client, "orders/anon")["data"]["history"][-1]["actor"] == "anonymous"


def test_hello_reply_on_an_open_hub_says_admin(tally, sync_client):
    named = sync_client(tally, hello={"client": "kiosk-7"})
    assert named.hello_reply["user"] == "kiosk-7", named.hello_reply
    assert named.hello_reply["role"] == "admin", named.hello_reply
    anonymous = sync_client(tally, hello=False)
    reply = anonymous.ok("hello", protocol=1)
    assert (reply["user"], reply["role"]) == ("anonymous", "admin"), reply


def test_creating_with_another_stage_is_refused(tally, client):
    item = new_item(client)
    head = client.head()
    reply = client.request("set", name="orders/skip", data={"item": item, "qty": 1, "stage": "ready"})
    assert reply["ok"] is False, f"an order created in stage ready: {reply}"
    assert reply["error"]["code"] in ("use_advance", "bad_field"), reply
    assert maybe_record(client, "orders/skip") is None
    assert client.head() == head, "a refused create changed something"


BAD_ORDERS = [
    ({"qty": 1}, "item"),
    ({"item": 5, "qty": 1}, "item"),
    ({"item": "stock/a", "qty": 1}, "item"),
    ({"item": "items/a"}, "qty"),
    ({"item": "items/a", "qty": 0}, "qty"),
    ({"item": "items/a", "qty": -3}, "qty"),
    ({"item": "items/a", "qty": 1.5}, "qty"),
    ({"item": "items/a", "qty": "2"}, "qty"),
    ({"item": "items/a", "qty": 1, "kind": "lend"}, "kind"),
    ({"item": "items/a", "qty": 1, "kind": 1}, "kind"),
]


@pytest.mark.parametrize("data,field", BAD_ORDERS, ids=[f"{f}-{i}" for i, (_, f) in enumerate(BAD_ORDERS)])
def test_bad_order_fields_are_bad_field(module_tally, data, field):
    with SyncClient(module_tally, hello={"client": ACTOR}) as client:
        client.ok("set", name="items/a", data={"stock": 1})
        head = client.head()
        name = f"orders/bad-{uid()}"
        error = client.fail("set", "bad_field", name=name, data=data)
        assert error["field"] == field, error
        assert maybe_record(client, name) is None
        assert client.head() == head, f"a refused order changed something: {data}"
        # also inside write: the index is named and nothing is applied
        error = client.fail("write", "bad_field", ops=[{"op": "set", "name": "items/a", "path": "note", "value": 1},
                                                        {"op": "set", "name": name, "data": data}])
        assert error["field"] == f"ops[1].{field}" and error["index"] == 1, error
        assert client.head() == head


# --------------------------------------------------------------------------
# Plain writes and the stage


def test_plain_writes_cannot_change_stage_history_or_owner(tally, client):
    item = new_item(client)
    name = new_order(client, item, qty=3)
    client.ok("advance", name=name, to="in-progress")
    current = record(client, name)
    data, version = current["data"], current["version"]
    head = client.head()

    refused = [
        ("set", dict(path="stage", value="ready")),
        ("set", dict(path="stage", value="in-progress")),  # a path write under stage, even to the same value
        ("set", dict(path="history[2]", value={"from": "in-progress", "to": "ready"})),
        ("set", dict(path="history[0].actor", value="mallory")),
        ("set", dict(path="owner", value="mallory")),
        ("delete", dict(path="stage")),
        ("delete", dict(path="history")),
        ("delete", dict(path="history[1]")),
        ("delete", dict(path="owner")),
        ("increment", dict(path="history[0].time", by=1)),
        ("merge", dict(data={"stage": "ready"})),
        ("merge", dict(data={"owner": None})),
        ("merge", dict(data={"history": []})),
        ("set", dict(data={**data, "stage": "ready"})),
        ("set", dict(data={**data, "owner": "mallory"})),
        ("set", dict(data={**data, "history": data["history"][:1]})),
        ("set", dict(data={"item": item, "qty": 3, "stage": "cancelled"})),
    ]
    for op, fields in refused:
        error = client.fail(op, "use_advance", name=name, **fields)
        if error.get("field") == "stage":
            assert "advance" in error["message"], f"the message says to use advance: {error}"
        after = record(client, name)
        assert (after["version"], after["data"]) == (version, data), f"{op} {fields} changed the record"
    error = client.fail("write", "use_advance", ops=[{"op": "set", "name": item, "path": "stock", "value": 1},
                                                      {"op": "set", "name": name, "path": "stage", "value": "ready"}])
    assert error["index"] == 1, error
    assert client.head() == head, "a refused write changed something"

    # A whole-record set that leaves them out keeps them; one that repeats them is fine.
    client.ok("set", name=name, data={"item": item, "qty": 4, "note": "rush"})
    kept = record(client, name)["data"]
    assert kept["qty"] == 4 and kept["note"] == "rush", kept
    assert (kept["stage"], kept["history"], kept["owner"]) == (data["stage"], data["history"], data["owner"]), kept
    client.ok("set", name=name, data={**kept, "note": "rushed"})
    client.ok("merge", name=name, data={"note": None, "qty": 5})
    client.ok("set", name=name, path="qty", value=6)
    final = record(client, name)["data"]
    assert final["qty"] == 6 and "note" not in final, final
    assert (final["stage"], final["history"], final["owner"]) == (data["stage"], data["history"], data["owner"])
    summary = stats(client)["data"]
    assert summary["counts"]["in-progress"] == 1 and summary["total"] == 1, summary


def test_plain_writes_may_not_break_an_order(tally, client):
    item = new_item(client)
    name = new_order(client, item)
    version = record(client, name)["version"]
    for fields in [dict(path="qty", value=0), dict(path="kind", value="lend"), dict(data={"item": item})]:
        error = client.fail("set", "bad_field", name=name, **fields)
        assert error["field"] in ("qty", "kind"), error
    assert record(client, name)["version"] == version


# --------------------------------------------------------------------------
# advance


def test_advance_from_to_reply_history_and_push(tally, client, sync_client):
    item = new_item(client, stock=10)
    name = new_order(client, item, qty=2)
    watcher = sync_client(tally)
    watcher.ok("subscribe", name=name)
    stats_watcher = sync_client(tally)
    stats_watcher.ok("subscribe", name="stats/orders")
    created = record(client, name)

    reply = client.ok("advance", name=name, **{"from": "received", "to": "in-progress"}, reason="picked")
    assert reply["name"] == name and reply["from"] == "received" and reply["to"] == "in-progress", reply
    assert reply["version"] == created["version"] + 1, reply
    after = record(client, name)
    assert after["seq"] == reply["seq"] and after["version"] == reply["version"], (after, reply)
    data = after["data"]
    assert data["stage"] == "in-progress", data
    entry = data["history"][-1]
    assert (entry["from"], entry["to"], entry["actor"], entry["reason"]) == \
        ("received", "in-progress", ACTOR, "picked"), entry
    check_history(data, ORDER_STAGES, ACTOR)

    push = watcher.next_push()
    assert push["seq"] == reply["seq"] and push["version"] == reply["version"], push.message
    if push["kind"] == "set":
        assert push["data"] == data, push.message
    stats_push = stats_watcher.next_push()
    assert abs(stats_push["seq"] - reply["seq"]) <= 1, "stats change in the same change set"
    summary = stats(client)["data"]
    assert summary["counts"] == {**empty_counts(ORDER_STAGES), "in-progress": 1}, summary

    # Without `to`: the first transition allowed from the current stage.
    reply = client.ok("advance", name=name)
    assert (reply["from"], reply["to"]) == ("in-progress", "ready"), reply
    # Without `from`; with a merge patch in the same change.
    reply = client.ok("advance", name=name, to="delivered", data={"deliveredTo": "dock 4"})
    data = record(client, name)["data"]
    assert data["stage"] == "delivered" and data["deliveredTo"] == "dock 4", data
    assert [e["to"] for e in data["history"]] == ["received", "in-progress", "ready", "delivered"]
    assert "reason" not in data["history"][2], data["history"]
    check_history(data, ORDER_STAGES, ACTOR)
    assert record(client, item)["data"]["stock"] == 8


def test_advance_refusals_change_nothing(tally, client):
    item = new_item(client)
    name = new_order(client, item)
    client.ok("advance", name=name, to="in-progress")
    before = record(client, name)
    stats_before = stats(client)
    head = client.head()

    error = client.fail("advance", "conflict", name=name, **{"from": "received", "to": "ready"})
    assert (error["name"], error["stage"], error["version"]) == (name, "in-progress", before["version"]), error

    error = client.fail("advance", "illegal_transition", name=name, to="delivered")
    assert (error["name"], error["from"], error["to"]) == (name, "in-progress", "delivered"), error
    assert error["allowed"] == ["ready", "cancelled"], error
    for stage in ("ready", "cancelled"):
        assert stage in error["message"], f"the message names the allowed stages: {error}"

    for to in ("in-progress", "received", "no-such-stage"):
        error = client.fail("advance", "illegal_transition", name=name, to=to)
        assert error["allowed"] == ["ready", "cancelled"], error

    error = client.fail("advance", "not_found", name="orders/missing", to="in-progress")
    error = client.fail("advance", "bad_field", name="notes/1", to="in-progress")
    assert error["field"] == "name", error
    client.ok("set", name="notes/1", data={"stage": "received"})
    error = client.fail("advance", "bad_field", name="notes/1")
    assert error["field"] == "name", error
    head += 1
    for fields in [dict(to=""), dict(to=5), dict(reason=""), dict(reason=7), dict(data=[1]),
                   dict(data="x"), dict(**{"from": 3})]:
        reply = client.request("advance", name=name, **fields)
        expect_error(reply, "bad_field", f"advance {fields}")
    error = client.fail("advance", "bad_field", to="ready")
    assert error["field"] == "name", error
    for patch in ({"stage": "cancelled"}, {"history": None}, {"owner": "mallory"}):
        error = client.fail("advance", "bad_field", name=name, to="ready", data=patch)
        assert error["field"] == "data", error

    assert client.head() == head, "a refused advance changed something"
    after = record(client, name)
    assert (after["version"], after["data"]) == (before["version"], before["data"])
    assert stats(client) == stats_before

    # Terminal stages allow nothing.
    client.ok("advance", name=name, to="cancelled")
    error = client.fail("advance", "illegal_transition", name=name)
    assert error["allowed"] == [] and error["from"] == "cancelled", error
    error = client.fail("advance", "illegal_transition", name=name, to="received")
    assert error["allowed"] == [], error


def test_advance_is_idempotent_with_idem(tally, client, sync_client):
    item = new_item(client)
    name = new_order(client, item)
    first = client.ok("advance", name=name, to="in-progress", idem="adv-1")
    other = sync_client(tally)
    again = other.ok("advance", name=name, to="in-progress", idem="adv-1")
    assert {k: v for k, v in again.items() if k != "id"} == {k: v for k, v in first.items() if k != "id"}
    data = record(client, name)["data"]
    assert len(data["history"]) == 2 and data["stage"] == "in-progress", data


def test_advance_inside_write(tally, client, sync_client):
    item = new_item(client, stock=10)
    a, b = new_order(client, item, qty=1), new_order(client, item, qty=2)
    client.ok("advance", name=b, to="in-progress")
    client.ok("advance", name=b, to="ready")
    watcher = sync_client(tally)
    start = watcher.ok("subscribe", prefix="")["seq"]
    # The delivered order leaves the list in the same change set.
    watcher.ok("subscribe", list="orders")

    reply = client.ok("write", ops=[
        {"op": "advance", "name": a, "to": "in-progress", "reason": "batch"},
        {"op": "set", "name": item, "path": "note", "value": "batch 1"},
        {"op": "advance", "name": b, "from": "ready"},
    ])
    results = reply["results"]
    assert len(results) == 3, reply
    assert (results[0]["name"], results[0]["from"], results[0]["to"]) == (a, "received", "in-progress"), results
    assert (results[2]["name"], results[2]["from"], results[2]["to"]) == (b, "ready", "delivered"), results
    assert record(client, a)["data"]["stage"] == "in-progress"
    assert record(client, a)["data"]["history"][-1]["reason"] == "batch"
    assert record(client, b)["data"]["stage"] == "delivered"
    assert record(client, item)["data"]["stock"] == 8
    pushes = watcher.drain()
    seqs = [p["seq"] for p in pushes]
    assert seqs == list(range(start + 1, start + 1 + len(pushes))) and seqs[-1] == reply["seq"], \
        [p.message for p in pushes]
    assert [p.get("name") or "list:" + p["list"] for p in pushes][-2:] == ["list:orders", "stats/orders"], \
        [p.message for p in pushes]
    assert client.ok("get", list="orders")["entries"] == [a]
    assert stats(client)["data"]["counts"] == {**empty_counts(ORDER_STAGES), "in-progress": 1, "delivered": 1}

    # One refused advance refuses the whole write.
    head = client.head()
    error = client.fail("write", "illegal_transition", ops=[
        {"op": "set", "name": item, "path": "note", "value": "batch 2"},
        {"op": "advance", "name": a, "to": "delivered"},
    ])
    assert error["index"] == 1 and error["allowed"] == ["ready", "cancelled"], error
    assert client.head() == head
    assert record(client, item)["data"]["note"] == "batch 1"
    assert record(client, a)["data"]["stage"] == "in-progress"


def test_intake_workflow(tally, client):
    name = "intake/job-1"
    client.ok("set", name=name, data={"code": "4006381333931"})
    data = record(client, name)["data"]
    assert data["stage"] == "queued" and data["owner"] == ACTOR, data
    assert client.ok("get", list="intake")["entries"] == [name]
    summary = stats(client, "stats/intake")["data"]
    assert summary["counts"] == {**empty_counts(INTAKE_STAGES), "queued": 1} and summary["total"] == 1, summary

    for to in ("created", "media-uploaded", "analyzed", "cover-set"):
        client.ok("advance", name=name, to=to)
    version = record(client, name)["version"]
    error = client.fail("advance", "bad_field", name=name, to="failed")
    assert error["field"] == "reason", error
    assert record(client, name)["version"] == version
    client.ok("advance", name=name, to="failed", reason="camera broke")
    data = record(client, name)["data"]
    assert data["history"][-1]["reason"] == "camera broke", data
    check_history(data, INTAKE_STAGES, ACTOR)
    summary = stats(client, "stats/intake")["data"]
    assert summary["counts"] == {**empty_counts(INTAKE_STAGES), "failed": 1}, summary
    assert summary["oldestOpen"] is None, summary

    other = "intake/job-2"
    client.ok("set", name=other, data={"photos": ["a" * 64] * 12})
    version = record(client, other)["version"]
    reply = client.request("set", name=other, path="photos[12]", value="b" * 64)
    assert reply["ok"] is False, f"a 13th photo was accepted: {reply}"
    reply = client.request("set", name="intake/job-3", data={"photos": ["c" * 64] * 13})
    assert reply["ok"] is False, f"an intake job with 13 photos was created: {reply}"
    assert record(client, other)["version"] == version
    assert maybe_record(client, "intake/job-3") is None


def test_stats_follow_deletes(tally, client):
    item = new_item(client)
    names = [new_order(client, item) for _ in range(3)]
    client.ok("advance", name=names[0], to="cancelled")
    client.ok("delete", name=names[1])
    summary = stats(client)["data"]
    assert summary["total"] == 2, summary
    assert summary["counts"] == {**empty_counts(ORDER_STAGES), "received": 1, "cancelled": 1}, summary
    assert summary["oldestOpen"]["name"] == names[2], summary


def test_stats_records_are_kept_by_the_hub(tally, client):
    item = new_item(client)
    new_order(client, item)
    before = stats(client)
    head = client.head()
    for op, fields in [("set", dict(name="stats/orders", data={"counts": {}})),
                       ("set", dict(name="stats/orders", path="total", value=99)),
                       ("increment", dict(name="stats/orders", path="total")),
                       ("merge", dict(name="stats/orders", data={"total": 0})),
                       ("delete", dict(name="stats/orders")),
                       ("set", dict(name="stats/mine", data={"x": 1}))]:
        error = client.fail(op, "forbidden", **fields)
        assert error["name"] == fields["name"] and error["role"] == "admin", error
    assert client.head() == head
    assert stats(client) == before


# --------------------------------------------------------------------------
# Every stage pair, per role, on a hub with users


@pytest.fixture(scope="module")
def auth_hub(tmp_path_factory, request):
    from conftest import TallyFactory
    tokens = Tokens()
    factory = TallyFactory(tmp_path_factory.mktemp("wf-auth"), request)
    server = start_hub(factory, tokens.config(), tokens.env())
    yield server, tokens
    factory.finish()


WORKFLOWS = {
    "orders/": (ORDER_STAGES, ORDER_TRANSITIONS, ORDER_TERMINAL),
    "intake/": (INTAKE_STAGES, INTAKE_TRANSITIONS, INTAKE_TERMINAL),
}


def _advance_fields(prefix: str, to: str) -> dict:
    # intake: a move to failed needs a reason; a reason never hurts elsewhere
    return {"to": to, "reason": "pairs test"}


@pytest.mark.parametrize("role", ["admin", "staff", "dashboard", "client"])
@pytest.mark.parametrize("prefix", list(WORKFLOWS))
def test_every_stage_pair_per_role(auth_hub, role, prefix):
    server, tokens = auth_hub
    stages, transitions, terminal = WORKFLOWS[prefix]
    user = {"admin": "root", "staff": "ana", "dashboard": "wall", "client": "cleo"}[role]
    with AuthClient(server, token=tokens["root"]) as admin, AuthClient(server, token=tokens[user]) as caller:
        assert (caller.hello_reply["user"], caller.hello_reply["role"]) == (user, role), caller.hello_reply
        item = f"items/{uid()}"
        admin.ok("set", name=item, data={"stock": 1_000_000})

        def fresh(at: str) -> str:
            name = f"{prefix}{role}-{uid()}"
            data = {"item": item, "qty": 1} if prefix == "orders/" else {"code": name}
            admin.ok("set", name=name, data=data)
            for stage in path_to(transitions, stages[0], at):
                admin.ok("advance", name=name, to=stage, reason="setup")
            return name

        checked = 0
        for at in stages:
            spare = fresh(at)
            for to in stages:
                allowed = to in transitions[at]
                name = fresh(at) if allowed and role in ("admin", "staff") else spare
                before = admin.ok("get", name=name)
                reply = caller.request("advance", name=name, **_advance_fields(prefix, to))
                what = f"{role} advances {name} {at} -> {to}"
                if role in ("dashboard", "client"):
                    error = expect_error(reply, "forbidden", what)
                    assert error["role"] == role and error["name"] == name, error
                    assert error["operation"] == "advance", error
                elif allowed:
                    assert reply.get("ok") is True, f"{what}: {dumps(reply)}"
                    assert (reply["from"], reply["to"]) == (at, to), reply
                    after = admin.ok("get", name=name)
                    assert after["data"]["stage"] == to and after["version"] == before["version"] + 1, after
                    last = after["data"]["history"][-1]
                    assert (last["from"], last["to"], last["actor"]) == (at, to, user), last
                    checked += 1
                    continue
                else:
                    error = expect_error(reply, "illegal_transition", what)
                    assert (error["from"], error["to"], error["name"]) == (at, to, name), error
                    assert error["allowed"] == transitions[at], f"{what}: {error}"
                after = admin.ok("get", name=name)
                assert (after["version"], after["data"]) == (before["version"], before["data"]), \
                    f"{what} was refused but changed the record"
                checked += 1
        assert checked == len(stages) ** 2
        # the stats record agrees with the records
        listing = admin.ok("get", prefix=prefix, limit=1000)
        assert not listing["more"]
        counts = {stage: 0 for stage in stages}
        for envelope in listing["records"]:
            counts[envelope["data"]["stage"]] += 1
        summary = admin.ok("get", name="stats/" + prefix.rstrip("/"))["data"]
        assert summary["counts"] == counts and summary["total"] == len(listing["records"]), summary


# --------------------------------------------------------------------------
# Delivery and stock


def test_delivery_with_too_little_stock_is_refused_and_changes_nothing(tally, client, sync_client):
    item = new_item(client, stock=3)
    name = new_order(client, item, qty=5)
    drive(client, name, ["in-progress", "ready"])
    order_before, item_before, stats_before = record(client, name), record(client, item), stats(client)
    head = client.head()

    error = client.fail("advance", "insufficient_stock", name=name, to="delivered")
    assert (error["item"], error["stock"], error["needed"]) == (item, 3, 5), error
    error = client.fail("write", "insufficient_stock", ops=[{"op": "advance", "name": name, "to": "delivered"}])
    assert error["index"] == 0 and error["needed"] == 5, error
    assert client.head() == head
    assert record(client, name) == order_before
    assert record(client, item) == item_before
    assert stats(client) == stats_before

    # Enough stock: the order and the item change in one change set.
    client.ok("set", name=item, path="stock", value=12)
    watcher = sync_client(tally)
    watcher.ok("subscribe", name=name)
    watcher.ok("subscribe", name=item)
    head = watcher.head()
    reply = client.ok("advance", name=name, to="delivered")
    assert record(client, item)["data"]["stock"] == 7
    pushes = watcher.drain()
    assert sorted(p["name"] for p in pushes) == sorted([name, item]), [p.message for p in pushes]
    _, _, changes = all_changes(tally, since=head)
    assert [c["seq"] for c in changes] == list(range(head + 1, head + 1 + len(changes)))
    # The order, its item's stock, the order leaving the open-orders list, the stats.
    assert [c.get("name") or "list:" + c["list"] for c in changes] == [name, item, "list:orders", "stats/orders"], changes
    assert reply["seq"] in [c["seq"] for c in changes]
    item_push = next(p for p in pushes if p["name"] == item)
    if item_push["kind"] == "setPath":
        assert (item_push["path"], item_push["value"]) == ("stock", 7), item_push.message
    else:
        assert item_push["data"]["stock"] == 7, item_push.message

    # receive adds
    incoming = new_order(client, item, qty=4, kind="receive")
    drive(client, incoming, ["in-progress", "ready", "delivered"])
    assert record(client, item)["data"]["stock"] == 11
    # Only delivery moves stock; cancelling does not.
    cancelled = new_order(client, item, qty=2)
    drive(client, cancelled, ["in-progress", "ready", "cancelled"])
    assert record(client, item)["data"]["stock"] == 11


def test_delivery_of_an_order_whose_item_is_gone_is_not_found(tally, client):
    item = new_item(client, stock=3)
    name = new_order(client, item, qty=1)
    drive(client, name, ["in-progress", "ready"])
    client.ok("delete", name=item)
    before, stats_before = record(client, name), stats(client)
    head = client.head()
    client.fail("advance", "not_found", name=name, to="delivered")
    assert client.head() == head
    assert record(client, name) == before and stats(client) == stats_before
    assert maybe_record(client, item) is None


def test_readers_never_see_a_delivery_without_its_stock_change(tally, client, sync_client):
    """A snapshot (get by the empty prefix: one reply, one seq) always has
    stock = start - 5 x delivered orders, and stats counts that match it."""
    start_stock, qty, n = 1000, 5, 12
    item = new_item(client, stock=start_stock)
    names = [new_order(client, item, qty=qty) for _ in range(n)]
    for name in names:
        drive(client, name, ["in-progress", "ready"])
    done = threading.Event()
    snapshots = []

    def reader():
        with SyncClient(tally) as conn:
            while not done.is_set() and len(snapshots) < 2000:
                reply = conn.ok("get", prefix="", limit=1000)
                assert not reply["more"]
                by_name = {r["name"]: r["data"] for r in reply["records"]}
                delivered = sum(1 for name in names if by_name[name]["stage"] == "delivered")
                stock = by_name[item]["stock"]
                assert stock == start_stock - qty * delivered, \
                    f"snapshot at seq {reply['seq']}: {delivered} delivered but stock {stock}"
                counts = {stage: 0 for stage in ORDER_STAGES}
                for name in names:
                    counts[by_name[name]["stage"]] += 1
                assert by_name["stats/orders"]["counts"] == counts, \
                    f"snapshot at seq {reply['seq']}: stats {by_name['stats/orders']['counts']} vs {counts}"
                snapshots.append(delivered)

    def writer():
        try:
            for name in names:
                client.ok("advance", name=name, to="delivered")
        finally:
            done.set()

    run_threads([reader, writer], timeout=60)
    assert snapshots, "the reader saw nothing"
    assert record(client, item)["data"]["stock"] == start_stock - qty * n


# --------------------------------------------------------------------------
# 1,000 concurrent random advances


def test_stats_equal_a_recount_after_1000_concurrent_random_advances(tally, client):
    rng = random.Random(4)
    item = new_item(client, stock=1_000_000)
    orders = {}
    for index in range(50):
        kind = rng.choice(["issue", "receive"])
        qty = rng.randint(1, 5)
        orders[new_order(client, item, qty=qty, kind=kind, name=f"orders/r{index:02d}")] = (kind, qty)
    names = sorted(orders)
    successes, outcomes = [], []
    lock = threading.Lock()

    def worker(seed: int):
        def run():
            local = random.Random(seed)
            with SyncClient(tally, hello={"client": f"worker-{seed}"}) as conn:
                for _ in range(125):
                    fields = {"name": local.choice(names)}
                    if local.random() < 0.8:
                        fields["to"] = local.choice(ORDER_STAGES)
                    if local.random() < 0.3:
                        fields["from"] = local.choice(ORDER_STAGES)
                    reply = conn.request("advance", **fields)
                    with lock:
                        if reply.get("ok"):
                            successes.append(reply)
                            outcomes.append("ok")
                        else:
                            code = reply["error"]["code"]
                            assert code in ("illegal_transition", "conflict"), f"{fields}: {dumps(reply)}"
                            outcomes.append(code)
        return run

    run_threads([worker(seed) for seed in range(8)], timeout=180)
    assert len(outcomes) == 1000
    assert successes, "no advance succeeded"

    listing = client.ok("get", prefix="orders/", limit=1000)
    assert not listing["more"] and len(listing["records"]) == 50
    envelopes = {r["name"]: r for r in listing["records"]}
    summary = stats(client)["data"]
    counts = {stage: 0 for stage in ORDER_STAGES}
    exits = {stage: 0 for stage in ORDER_STAGES}
    spent = {stage: 0 for stage in ORDER_STAGES}
    moves = 0
    for name, envelope in envelopes.items():
        data = envelope["data"]
        counts[data["stage"]] += 1
        check_history(data, ORDER_STAGES)
        history = data["history"]
        for before, entry in zip(history, history[1:]):
            assert entry["to"] in ORDER_TRANSITIONS[before["to"]], f"{name}: illegal step {before} -> {entry}"
            assert entry["actor"].startswith("worker-"), entry
            exits[entry["from"]] += 1
            spent[entry["from"]] += entry["time"] - before["time"]
        moves += len(history) - 1
    assert moves == len(successes), f"{len(successes)} advances succeeded, histories hold {moves}"
    assert summary["counts"] == counts, f"stats {summary['counts']} vs recount {counts}"
    assert summary["total"] == 50 == sum(summary["counts"].values()), summary
    for stage in ORDER_STAGES:
        timing = summary["stageTime"].get(stage, {"totalMs": 0, "exits": 0, "averageMs": 0})
        assert timing["exits"] == exits[stage], f"{stage}: {timing} vs {exits[stage]} exits in the histories"
        assert abs(timing["totalMs"] - spent[stage]) <= exits[stage], \
            f"{stage}: {timing} vs {spent[stage]} ms in the histories"
        if exits[stage]:
            assert abs(timing["averageMs"] - timing["totalMs"] / timing["exits"]) <= 1, timing
    open_orders = [n for n in names if envelopes[n]["data"]["stage"] not in ORDER_TERMINAL]
    if open_orders:
        oldest = summary["oldestOpen"]
        assert oldest["name"] in open_orders, summary
        created = {n: envelopes[n]["data"]["history"][0]["time"] for n in open_orders}
        assert oldest["created"] == min(created.values()) or \
            oldest["created"] == min(envelopes[n]["created"] for n in open_orders), (oldest, created)
    else:
        assert summary["oldestOpen"] is None, summary
    stock = 1_000_000
    for name, (kind, qty) in orders.items():
        if envelopes[name]["data"]["stage"] == "delivered":
            stock += qty if kind == "receive" else -qty
    assert record(client, item)["data"]["stock"] == stock
    # The list holds the open orders, in the order they were made.
    assert client.ok("get", list="orders")["entries"] == \
        [n for n in (f"orders/r{i:02d}" for i in range(50)) if envelopes[n]["data"]["stage"] not in ORDER_TERMINAL]


# --------------------------------------------------------------------------
# REST advance


def advance_path(name: str) -> str:
    return record_path(name) + "/advance"


def test_rest_advance(auth_hub):
    server, tokens = auth_hub
    staff, viewer = tokens["ana"], tokens["wall"]
    item, name = f"items/{uid()}", f"orders/rest-{uid()}"
    assert rest_as(server, staff, "PUT", record_path(item), {"stock": 1}).status in (200, 201)
    assert rest_as(server, staff, "PUT", record_path(name), {"item": item, "qty": 2}).status == 201

    response = rest_as(server, staff, "POST", advance_path(name), {"from": "received", "to": "in-progress",
                                                                   "reason": "rest"})
    assert response.status == 200, (response.status, response.body)
    body = response.json()
    assert (body["name"], body["from"], body["to"], body["version"]) == (name, "received", "in-progress", 2), body
    assert body["data"]["stage"] == "in-progress" and body["data"]["history"][-1]["reason"] == "rest", body
    assert isinstance(body["seq"], int)

    def unchanged(version=2, stage="in-progress"):
        envelope = rest_as(server, staff, "GET", record_path(name)).json()
        assert (envelope["version"], envelope["data"]["stage"]) == (version, stage), envelope

    response = rest_as(server, staff, "POST", advance_path(name), {"to": "delivered"})
    assert (response.status, response.error_code()) == (409, "illegal_transition"), response.body
    assert response.json()["error"]["allowed"] == ["ready", "cancelled"], response.body
    response = rest_as(server, staff, "POST", advance_path(name), {"from": "received"})
    assert (response.status, response.error_code()) == (409, "conflict"), response.body
    assert response.json()["error"]["stage"] == "in-progress", response.body
    response = rest_as(server, viewer, "POST", advance_path(name), {"to": "ready"})
    assert (response.status, response.error_code()) == (403, "forbidden"), response.body
    response = rest_as(server, None, "POST", advance_path(name), {"to": "ready"})
    assert (response.status, response.error_code()) == (401, "unauthorized"), response.body
    response = rest_as(server, "wrong", "POST", advance_path(name), {"to": "ready"})
    assert (response.status, response.error_code()) == (401, "unauthorized"), response.body
    response = rest_as(server, staff, "POST", advance_path("orders/nope"), {"to": "ready"})
    assert (response.status, response.error_code()) == (404, "not_found"), response.body
    response = rest_as(server, staff, "POST", advance_path(item), {"to": "ready"})
    assert (response.status, response.error_code()) == (400, "bad_field"), response.body
    response = rest_as(server, staff, "POST", advance_path(name), b"{not json",
                       {"Content-Type": "application/json"})
    assert (response.status, response.error_code()) == (400, "bad_json"), response.body
    response = rest_as(server, staff, "POST", advance_path(name), {"to": 5})
    assert (response.status, response.error_code()) == (400, "bad_field"), response.body
    unchanged()

    # {} moves to the first allowed stage; Idempotency-Key replays it.
    key = {"Idempotency-Key": f"rest-adv-{uid()}"}
    first = rest_as(server, staff, "POST", advance_path(name), {}, key)
    assert first.status == 200 and (first.json()["from"], first.json()["to"]) == ("in-progress", "ready"), first.body
    again = rest_as(server, staff, "POST", advance_path(name), {}, key)
    assert again.status == 200 and again.json()["version"] == first.json()["version"], again.body
    unchanged(3, "ready")

    # insufficient stock: 409, nothing changes
    response = rest_as(server, staff, "POST", advance_path(name), {"to": "delivered"})
    assert (response.status, response.error_code()) == (409, "insufficient_stock"), response.body
    error = response.json()["error"]
    assert (error["item"], error["stock"], error["needed"]) == (item, 1, 2), error
    unchanged(3, "ready")
    assert rest_as(server, staff, "GET", record_path(item)).json()["data"]["stock"] == 1


def test_rest_advance_on_an_open_hub(tally, client):
    item = new_item(client, stock=1)
    name = new_order(client, item)
    response = rest(tally, "POST", advance_path(name), {"to": "cancelled"})
    assert response.status == 200, (response.status, response.body)
    assert response.json()["data"]["history"][-1]["to"] == "cancelled"
    response = rest(tally, "POST", advance_path(name), {})
    assert (response.status, response.error_code()) == (409, "illegal_transition"), response.body
    assert response.json()["error"]["allowed"] == []


# --------------------------------------------------------------------------
# CLI: tally order


def tally_cli(server, *args: str, token: str | None = None, timeout: float = 15.0):
    import os
    import subprocess
    argv = [str(TALLY_BIN), *args[:2], "--server", f"ws://{server.host}:{server.port}", *args[2:]]
    if token is not None:
        argv += ["--token", token]
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_URL", "TALLY_TOKEN")}
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(argv)}` did not finish within {timeout}s")
    return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")


def cli_ok(server, *args, **kwargs) -> str:
    rc, out, err = tally_cli(server, *args, **kwargs)
    assert rc == 0, f"tally {' '.join(args)}: exit {rc}\nstdout: {out}\nstderr: {err}"
    return out


def test_cli_order_commands(tally, client):
    item = new_item(client, stock=10)
    out = cli_ok(tally, "order", "new", item, "--qty", "3")
    name = out.strip().splitlines()[-1].strip()
    assert name.startswith("orders/"), out
    data = record(client, name)["data"]
    assert (data["item"], data["qty"], data.get("kind", "issue"), data["stage"]) == (item, 3, "issue", "received")

    out = cli_ok(tally, "order", "new", item, "--qty", "2", "--kind", "receive")
    incoming = out.strip().splitlines()[-1].strip()
    assert record(client, incoming)["data"]["kind"] == "receive"

    cli_ok(tally, "order", "advance", name)
    assert record(client, name)["data"]["stage"] == "in-progress"
    cli_ok(tally, "order", "advance", name, "--to", "ready")
    assert record(client, name)["data"]["stage"] == "ready"
    cli_ok(tally, "order", "advance", name, "--to", "delivered")
    assert record(client, item)["data"]["stock"] == 7
    cli_ok(tally, "order", "cancel", incoming)
    assert record(client, incoming)["data"]["stage"] == "cancelled"

    version = record(client, name)["version"]
    rc, out, err = tally_cli(tally, "order", "advance", name, "--to", "received")
    assert rc != 0, (out, err)
    assert "illegal_transition" in out + err or "allowed" in out + err or "cannot" in out + err, (out, err)
    assert record(client, name)["version"] == version
    rc, out, err = tally_cli(tally, "order", "cancel", name)
    assert rc != 0, (out, err)
    rc, out, err = tally_cli(tally, "order", "new", item, "--qty", "0")
    assert rc != 0, (out, err)

    third = cli_ok(tally, "order", "new", item, "--qty", "1").strip().splitlines()[-1].strip()
    def rows_of(out):
        rows = {}
        for line in out.strip().splitlines():
            words = line.split()
            if words and words[0].startswith("orders/"):
                rows[words[0]] = words
        return rows

    # Open orders by default; --all every order ever made.
    assert set(rows_of(cli_ok(tally, "order", "ls"))) == {third}
    out = cli_ok(tally, "order", "ls", "--all")
    rows = rows_of(out)
    assert set(rows) == {name, incoming, third}, out
    assert "delivered" in rows[name] and "cancelled" in rows[incoming] and "received" in rows[third], out
    out = cli_ok(tally, "order", "ls", "--stage", "delivered", "--stage", "cancelled")
    assert set(rows_of(out)) == {name, incoming}, out
    out = cli_ok(tally, "order", "ls", "--stage", "received")
    listed = [line.split()[0] for line in out.strip().splitlines() if line.split() and line.split()[0].startswith("orders/")]
    assert listed == [third], out
    out = cli_ok(tally, "order", "ls", "--json")
    assert len(out.strip().splitlines()) == 1, out
    out = cli_ok(tally, "order", "ls", "--all", "--json")
    objects = [json.loads(line) for line in out.strip().splitlines()]
    assert len(objects) == 3, out

    def stage_of(obj):
        return obj.get("stage") or obj.get("data", {}).get("stage")

    assert {obj["name"]: stage_of(obj) for obj in objects} == \
        {name: "delivered", incoming: "cancelled", third: "received"}, out


# --------------------------------------------------------------------------
# checkStock: an issue order over the item's stock refused when it is made


def test_check_stock_refuses_an_issue_order_over_stock_on_every_path(tally, client):
    item = new_item(client, stock=3)
    # WebSocket set: refused with insufficient_stock, nothing created.
    error = expect_error(client.request("set", name="orders/cs-ws", data={"item": item, "qty": 5}, checkStock=True),
                         "insufficient_stock")
    assert (error["item"], error["stock"], error["needed"]) == (item, 3, 5), error
    expect_error(client.request("get", name="orders/cs-ws"), "not_found")
    # Inside an atomic write: the index names the op.
    error = expect_error(client.request("write", ops=[
        {"op": "set", "name": "orders/cs-w", "data": {"item": item, "qty": 4}, "checkStock": True}]), "insufficient_stock")
    assert error["index"] == 0 and error["needed"] == 4, error
    # REST: ?checkStock=true is the same; 409 with the same members.
    response = rest(tally, "PUT", "/v1/records/orders/cs-rest?checkStock=true", {"item": item, "qty": 4})
    assert (response.status, response.error_code()) == (409, "insufficient_stock"), response.body
    assert response.json()["error"]["stock"] == 3 and response.json()["error"]["needed"] == 4
    assert rest(tally, "GET", "/v1/records/orders/cs-rest").status == 404
    response = rest(tally, "PUT", "/v1/records/orders/cs-rest?checkStock=maybe", {"item": item, "qty": 1})
    assert (response.status, response.error_code()) == (400, "bad_field"), response.body
    assert response.json()["error"]["field"] == "checkStock"
    response = rest(tally, "PUT", "/v1/records/notes/cs?checkStock=true", {"qty": 1})
    assert (response.status, response.error_code()) == (400, "bad_field"), response.body
    response = rest(tally, "PUT", "/v1/records/orders/cs-rest?checkStock=true", {"item": item, "qty": 3})
    assert response.status == 201, response.body
    # Without it nothing is checked (delivery does).
    assert rest(tally, "PUT", "/v1/records/orders/cs-plain", {"item": item, "qty": 9}).status == 201
    client.ok("set", name="orders/cs-in", data={"item": item, "qty": 9, "kind": "receive"}, checkStock=True)
    # Wrong type, and a name outside an order workflow: bad_field checkStock.
    for request in ({"name": "orders/cs-bad", "data": {"item": item, "qty": 1}, "checkStock": 1},
                    {"name": "notes/cs", "data": {"qty": 1}, "checkStock": True},
                    {"name": "orders/cs-bad", "path": "qty", "value": 1, "checkStock": True}):
        assert expect_error(client.request("set", **request), "bad_field")["field"] == "checkStock", request
    # CLI: --check-stock.
    rc, out, err = tally_cli(tally, "order", "new", item, "--qty", "4", "--check-stock")
    assert rc == 1 and "insufficient_stock" in out + err, (rc, out, err)
    out = cli_ok(tally, "order", "new", item, "--qty", "3", "--check-stock")
    assert record(client, out.strip().splitlines()[-1].strip())["data"]["qty"] == 3
    assert record(client, item)["data"]["stock"] == 3


# --------------------------------------------------------------------------
# An order's item must exist when the order is made


def test_an_order_for_a_missing_item_is_refused_on_every_write_path(tally, client):
    typo = f"items/drlil-{uid()}"

    def refused_cleanly(error, order):
        assert error["item"] == typo, error
        assert typo in error["message"] and "create the item" in error["message"], error
        expect_error(client.request("get", name=order), "not_found", f"{order} after the refusal")

    before = client.ok("get", name="stats/orders") if client.request("get", name="stats/orders").get("ok") else None
    # WebSocket set.
    refused_cleanly(expect_error(client.request("set", name="orders/ws-typo", data={"item": typo, "qty": 2}),
                                 "not_found"), "orders/ws-typo")
    # Inside an atomic write: nothing of it lands; an item made earlier in
    # the same write counts.
    error = expect_error(client.request("write", ops=[
        {"op": "set", "name": "notes/with-typo", "data": {"x": 1}},
        {"op": "set", "name": "orders/w-typo", "data": {"item": typo, "qty": 2}}]), "not_found")
    assert error["index"] == 1, error
    refused_cleanly(error, "orders/w-typo")
    expect_error(client.request("get", name="notes/with-typo"), "not_found")
    made = f"items/made-{uid()}"
    client.ok("write", ops=[{"op": "set", "name": made, "data": {"stock": 1}},
                            {"op": "set", "name": "orders/w-made", "data": {"item": made, "qty": 1}}])
    # REST PUT: 404 with the same error.
    response = rest(tally, "PUT", "/v1/records/orders/rest-typo", {"item": typo, "qty": 2})
    assert (response.status, response.error_code()) == (404, "not_found"), response.body
    refused_cleanly(response.json()["error"], "orders/rest-typo")
    # CLI: exit 1 with the hub's message.
    rc, out, err = tally_cli(tally, "order", "new", typo, "--qty", "2")
    assert rc == 1 and "not_found" in out + err and typo in out + err, (rc, out, err)
    # Nothing was counted or listed.
    after = client.ok("get", name="stats/orders")
    assert after["data"]["total"] == (before["data"]["total"] if before else 0) + 1, after
    assert client.ok("get", list="orders")["entries"] == ["orders/w-made"]


def test_a_plain_write_may_not_point_an_order_at_a_missing_item(tally, client):
    item = new_item(client, stock=5)
    order = new_order(client, item, qty=2)
    version = record(client, order)["version"]
    typo = f"items/gone-{uid()}"
    data = {k: v for k, v in record(client, order)["data"].items()}
    attempts = [
        ("set", {"name": order, "data": {**data, "item": typo}}),
        ("merge", {"name": order, "data": {"item": typo}}),
        ("set", {"name": order, "path": "item", "value": typo}),
        ("advance", {"name": order, "data": {"item": typo}}),
    ]
    for op, fields in attempts:
        error = expect_error(client.request(op, **fields), "not_found", f"{op} {fields}")
        assert error["item"] == typo, error
    response = rest(tally, "PATCH", record_path(order), {"item": typo})
    assert (response.status, response.error_code()) == (404, "not_found"), response.body
    assert record(client, order)["version"] == version
    # An item deleted after the order was made: the order stays editable,
    # and only its delivery fails with not_found.
    client.ok("merge", name=order, data={"note": "still fine"})
    drive(client, order, ["in-progress", "ready"])
    client.ok("delete", name=item)
    client.ok("merge", name=order, data={"qty": 1})
    assert expect_error(client.request("advance", name=order, to="delivered"), "not_found")

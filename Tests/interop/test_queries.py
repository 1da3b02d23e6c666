"""Live queries (PROTOCOL.md, "Live queries") against a running hub.

A query names a prefix and values at record paths; the hub answers with the
records that match and then pushes, in seq order, each record that enters,
changes inside or leaves the result, in `{"op":"query",…}` messages. These
tests drive it with plain WebSocket clients (synclib, authlib): the result
stays equal to what a fresh `get` of the query answers, under concurrent
writers, across a restart, and for a `client` role that may only see its own
orders.
"""

from __future__ import annotations

import threading
import uuid

import pytest

from authlib import AuthClient, Tokens, start_hub
from synclib import SyncClient, expect_error

OPEN = ["received", "in-progress", "ready"]
OPEN_QUERY = {"prefix": "orders/", "where": {"stage": OPEN}}


def uid() -> str:
    return uuid.uuid4().hex[:10]


def new_item(client) -> str:
    name = f"items/{uid()}"
    client.ok("set", name=name, data={"sku": name[6:], "stock": 1_000_000})
    return name


def new_order(client, item: str, name: str | None = None) -> str:
    name = name or f"orders/{uid()}"
    client.ok("set", name=name, data={"item": item, "qty": 1})
    return name


def deliver(client, name: str) -> None:
    for stage in ["in-progress", "ready", "delivered"]:
        client.ok("advance", name=name, to=stage)


def query_pushes(client, barrier: str | None = None) -> list[dict]:
    """The query messages buffered so far, after a barrier: a get the
    client may make (`barrier`, a prefix it may read; synclib's by default)."""
    if barrier is None:
        pushes = client.drain()
    else:
        client.ok("get", prefix=barrier, limit=1)
        pushes = list(client.pushes)
        client.pushes.clear()
    return [p.message for p in pushes if p.message.get("op") == "query"]


def apply(result: dict[str, dict], push: dict) -> None:
    for record in push.get("entered", []) + push.get("changed", []):
        result[record["name"]] = record
    for name in push.get("left", []):
        result.pop(name, None)


def all_pages(client, query: dict, limit: int = 1000) -> dict[str, dict]:
    records, after = {}, None
    while True:
        fields = {"query": query, "limit": limit}
        if after is not None:
            fields["after"] = after
        reply = client.ok("get", **fields)
        for record in reply["records"]:
            assert record["name"] not in records, f"{record['name']} on two pages"
            records[record["name"]] = record
        if not reply["more"]:
            return records
        after = reply["records"][-1]["name"]


@pytest.fixture
def client(tally, sync_client):
    return sync_client(tally, hello={"client": "query-tests"})


def test_snapshot_holds_the_matching_records_only(tally, client, sync_client):
    item = new_item(client)
    open_orders = [new_order(client, item) for _ in range(3)]
    done = [new_order(client, item) for _ in range(4)]
    for name in done:
        deliver(client, name)
    watcher = sync_client(tally)
    reply = watcher.ok("subscribe", query=OPEN_QUERY)
    assert isinstance(reply["query"], int), reply
    assert sorted(r["name"] for r in reply["records"]) == sorted(open_orders), reply
    assert reply["more"] is False
    assert all(r["data"]["stage"] == "received" for r in reply["records"])
    # Nothing of the finished orders reaches the watcher while nothing changes.
    assert query_pushes(watcher) == []


def test_enter_change_and_leave_are_pushed_in_seq_order(tally, client, sync_client):
    item = new_item(client)
    watcher = sync_client(tally)
    qid = watcher.ok("subscribe", query=OPEN_QUERY)["query"]
    name = new_order(client, item)
    client.ok("merge", name=name, data={"note": "fragile"})
    deliver(client, name)
    pushes = query_pushes(watcher)
    assert [p["query"] for p in pushes] == [qid] * len(pushes)
    kinds = [next(k for k in ("entered", "changed", "left") if k in p) for p in pushes]
    assert kinds == ["entered", "changed", "changed", "changed", "left"], pushes
    seqs = [p["seq"] for p in pushes]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
    assert pushes[0]["entered"][0]["data"]["stage"] == "received"
    assert pushes[1]["changed"][0]["data"]["note"] == "fragile"
    assert pushes[3]["changed"][0]["data"]["stage"] == "ready"
    assert pushes[4]["left"] == [name]
    # The leave is explicit, and a finished order is never pushed again.
    client.ok("merge", name=name, data={"note": "after"})
    assert query_pushes(watcher) == []


def test_a_record_outside_the_prefix_or_values_is_not_pushed(tally, client, sync_client):
    item = new_item(client)
    watcher = sync_client(tally)
    watcher.ok("subscribe", query={"prefix": "orders/", "where": {"stage": ["ready"]}})
    name = new_order(client, item)
    client.ok("set", name=f"other/{uid()}", data={"stage": "ready"})
    assert query_pushes(watcher) == []
    client.ok("advance", name=name, to="in-progress")
    assert query_pushes(watcher) == []
    client.ok("advance", name=name, to="ready")
    pushes = query_pushes(watcher)
    assert [p["entered"][0]["name"] for p in pushes] == [name], pushes


def test_limited_query_keeps_the_newest_and_refills_when_one_leaves(tally, client, sync_client):
    item = new_item(client)
    delivered = []
    for _ in range(5):
        name = new_order(client, item)
        deliver(client, name)
        delivered.append(name)
    query = {"prefix": "orders/", "where": {"stage": ["delivered"]}, "order": "-updated", "limit": 3}
    watcher = sync_client(tally)
    reply = watcher.ok("subscribe", query=query)
    assert [r["name"] for r in reply["records"]] == delivered[::-1][:3], reply
    # A newer delivery enters first and pushes the oldest member out.
    newest = new_order(client, item)
    assert query_pushes(watcher) == []
    deliver(client, newest)
    pushes = query_pushes(watcher)
    assert len(pushes) == 1, pushes
    assert [r["name"] for r in pushes[0]["entered"]] == [newest]
    assert pushes[0]["left"] == [delivered[2]]
    # A member deleted: it leaves and the next newest enters in its place.
    client.ok("delete", name=newest)
    pushes = query_pushes(watcher)
    assert len(pushes) == 1, pushes
    assert pushes[0]["left"] == [newest]
    assert [r["name"] for r in pushes[0]["entered"]] == [delivered[2]]
    # What the watcher holds is what a get answers now, in the same order.
    now = client.ok("get", query=query)
    assert [r["name"] for r in now["records"]] == [delivered[4], delivered[3], delivered[2]]


def test_get_pages_an_unlimited_query_by_name(tally, client):
    item = new_item(client)
    names = sorted(new_order(client, item, name=f"orders/page-{i:03}") for i in range(25))
    reply = client.ok("get", query={"prefix": "orders/page-", "where": {"stage": OPEN}}, limit=10)
    assert [r["name"] for r in reply["records"]] == names[:10] and reply["more"] is True
    got = all_pages(client, {"prefix": "orders/page-", "where": {"stage": OPEN}}, limit=10)
    assert sorted(got) == names


@pytest.mark.parametrize("query, field", [
    ({"prefix": "orders/"}, "query.where"),
    ({"prefix": "orders/", "where": {}}, "query.where"),
    ({"prefix": "orders/", "where": {"stage": []}}, "query.where.stage"),
    ({"prefix": "orders/", "where": {"stage": "ready"}}, "query.where.stage"),
    ({"prefix": "orders/", "where": {"stage": [{"a": 1}]}}, "query.where.stage"),
    ({"prefix": "orders/", "where": {"stage": ["ready"]}, "order": "-updated"}, "query.order"),
    ({"prefix": "orders/", "where": {"stage": ["ready"]}, "limit": 3, "order": "name"}, "query.order"),
    ({"prefix": "orders/", "where": {"stage": ["ready"]}, "limit": 0}, "limit"),
    ({"prefix": "orders/", "where": {"stage": ["ready"]}, "own": "yes"}, "query.own"),
    ({"prefix": "orders/", "where": {"stage": ["ready"]}, "sort": 1}, "query.sort"),
    ({"where": {"stage": ["ready"]}}, "query.prefix"),
    ({"prefix": "orders/", "where": {"colour": ["red"]}}, "query.where"),
])
def test_a_bad_query_is_refused_and_subscribes_nothing(tally, client, query, field):
    error = client.fail("subscribe", "bad_field", query=query)
    assert error["field"] == field, error
    item = new_item(client)
    new_order(client, item)
    assert query_pushes(client) == []


def test_unsubscribe_stops_the_pushes(tally, client, sync_client):
    item = new_item(client)
    watcher = sync_client(tally)
    watcher.ok("subscribe", query=OPEN_QUERY)
    watcher.ok("unsubscribe", query={"where": {"stage": OPEN[::-1]}, "prefix": "orders/"})
    new_order(client, item)
    assert query_pushes(watcher) == []
    watcher.fail("unsubscribe", "not_subscribed", query=OPEN_QUERY)


def test_two_clients_with_one_query_share_its_id(tally, client, sync_client):
    first = sync_client(tally).ok("subscribe", query=OPEN_QUERY)["query"]
    second = sync_client(tally).ok("subscribe", query={"where": {"stage": OPEN[::-1]}, "prefix": "orders/"})["query"]
    assert first == second


def test_resume_after_a_restart_answers_exactly_what_changed(tally_factory, sync_client):
    hub = tally_factory()
    writer = sync_client(hub, hello={"client": "w"})
    item = new_item(writer)
    kept = new_order(writer, item)
    gone = new_order(writer, item)
    watcher = sync_client(hub)
    seq = watcher.ok("subscribe", query=OPEN_QUERY)["seq"]
    limited = {"prefix": "orders/", "where": {"stage": OPEN}, "limit": 2}
    watcher.ok("subscribe", query=limited)
    writer.close()
    watcher.close()
    hub = tally_factory.restart(hub)
    writer = sync_client(hub, hello={"client": "w"})
    deliver(writer, gone)
    fresh = new_order(writer, item)
    writer.ok("set", name=f"notes/{uid()}", data={"stage": "received"})  # outside the prefix
    watcher = SyncClient(hub, hello={"since": seq})
    try:
        reply = watcher.ok("subscribe", query=OPEN_QUERY)
        # What changed while away, not the whole result: `kept` did not change.
        assert reply["delta"] is True and "resnapshot" not in reply, reply
        assert [r["name"] for r in reply["records"]] == [fresh], reply
        assert reply["left"] == [gone], reply
        # A limited query answers its whole result, which replaces the old one.
        top = watcher.ok("subscribe", query=limited)
        assert "resnapshot" not in top and "delta" not in top, top
        assert [r["name"] for r in top["records"]] == [fresh, kept], top
        deliver(writer, kept)
        pushes = query_pushes(watcher)
        assert [p.get("left") for p in pushes if p["query"] == reply["query"]][-1] == [kept], pushes
    finally:
        watcher.close()


def test_a_resume_the_log_cannot_answer_is_a_fresh_result(tally, client, sync_client):
    item = new_item(client)
    name = new_order(client, item)
    head = client.head()
    reply = client.ok("subscribe", query=OPEN_QUERY, since=head + 1000)
    assert reply["resnapshot"] is True and "delta" not in reply, reply
    assert [r["name"] for r in reply["records"]] == [name]


def test_concurrent_writers_lose_and_duplicate_no_push(tally, client, sync_client):
    """20 writers create and advance orders while a watcher follows the open
    orders: its pushes arrive in seq order, none twice, and applying them to
    the snapshot gives exactly what a fresh get answers."""
    item = new_item(client)
    watcher = sync_client(tally)
    limited = {"prefix": "orders/", "where": {"stage": ["ready", "delivered"]}, "order": "-updated", "limit": 5}
    reply = watcher.ok("subscribe", query=OPEN_QUERY)
    result = {r["name"]: r for r in reply["records"]}
    top = watcher.ok("subscribe", query=limited)
    top_result = {r["name"]: r for r in top["records"]}
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            with SyncClient(tally, hello={"client": f"writer-{index}"}) as mine:
                for n in range(6):
                    name = new_order(mine, item, name=f"orders/w{index:02}-{n}")
                    stages = ["in-progress", "ready", "delivered"][: (index + n) % 4]
                    for stage in stages:
                        mine.ok("advance", name=name, to=stage)
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors[0]
    pushes = query_pushes(watcher)
    by_query: dict[int, list[dict]] = {}
    for push in pushes:
        by_query.setdefault(push["query"], []).append(push)
    assert set(by_query) <= {reply["query"], top["query"]}
    for qid, messages in by_query.items():
        seqs = [m["seq"] for m in messages]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), f"query {qid}: {seqs}"
    for push in by_query.get(reply["query"], []):
        apply(result, push)
    for push in by_query.get(top["query"], []):
        apply(top_result, push)
    expected = all_pages(client, OPEN_QUERY)
    assert sorted(result) == sorted(expected)
    assert all(result[n]["version"] == expected[n]["version"] for n in expected)
    now_top = client.ok("get", query=limited)["records"]
    assert sorted(top_result) == sorted(r["name"] for r in now_top)
    assert all(top_result[r["name"]]["version"] == r["version"] for r in now_top)


# ---------------------------------------------------------------------------
# Access: a requester's "my orders"


@pytest.fixture
def hub(tally_factory):
    tokens = Tokens()
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    server.tokens = tokens
    return server


def test_a_client_sees_only_its_own_orders_and_is_refused_everyone_elses(hub):
    tokens = hub.tokens
    with AuthClient(hub, token=tokens["root"]) as root, \
            AuthClient(hub, token=tokens["cleo"]) as cleo, \
            AuthClient(hub, token=tokens["carl"]) as carl:
        item = new_item(root)
        mine = new_order(cleo, item)
        theirs = new_order(carl, item)
        error = cleo.fail("subscribe", "forbidden", query=OPEN_QUERY)
        assert "own" in error["message"], error
        cleo.fail("get", "forbidden", query=OPEN_QUERY)
        cleo.fail("subscribe", "forbidden", query={"prefix": "orders/", "where": {"owner": ["carl"]}})
        reply = cleo.ok("subscribe", query={**OPEN_QUERY, "own": True})
        assert [r["name"] for r in reply["records"]] == [mine], reply
        same = cleo.ok("get", query={"prefix": "orders/", "where": {"stage": OPEN, "owner": ["cleo"]}})
        assert [r["name"] for r in same["records"]] == [mine], same
        other = new_order(carl, item)
        root.ok("advance", name=theirs, to="in-progress")
        second = new_order(cleo, item)
        root.ok("advance", name=mine, to="in-progress")
        pushes = query_pushes(cleo, barrier="items/")
        names = [r["name"] for p in pushes for r in p.get("entered", []) + p.get("changed", [])]
        assert names == [second, mine], pushes
        assert other not in names and theirs not in names
        # carl's "my orders" is another query, with carl's orders only.
        carls = carl.ok("subscribe", query={**OPEN_QUERY, "own": True})
        assert carls["query"] != reply["query"]
        assert sorted(r["name"] for r in carls["records"]) == sorted([theirs, other])


def test_a_configured_index_answers_queries_on_its_path_and_is_built_once(tally_factory, sync_client):
    """`indexes` in the config: a query on another path works once the hub
    has the index; the index is built from the records already there when
    the hub first starts with it."""
    from authlib import write_config
    plain = tally_factory()
    writer = sync_client(plain, hello={"client": "w"})
    for n, place in enumerate(["A-1", "B-2", "A-1"]):
        writer.ok("set", name=f"items/i{n}", data={"location": place})
    writer.fail("get", "bad_field", query={"prefix": "items/", "where": {"location": ["A-1"]}})
    writer.close()
    assert plain.stop() == 0
    config = write_config(tally_factory.tmp_path, {"indexes": [{"prefix": "items/", "path": "location"}]})
    hub = tally_factory("--config", str(config), "--data", str(plain.data_dir))
    assert "event=index.built prefix=items/ path=location records=3" in hub.stderr()
    client = sync_client(hub)
    reply = client.ok("subscribe", query={"prefix": "items/", "where": {"location": ["A-1"]}})
    assert [r["name"] for r in reply["records"]] == ["items/i0", "items/i2"]
    client.ok("set", name="items/i1", path="location", value="A-1")
    pushes = query_pushes(client)
    assert [r["name"] for p in pushes for r in p.get("entered", [])] == ["items/i1"], pushes
    hub = tally_factory.restart(hub)
    assert "index.built" not in hub.stderr(), "built once, not at every start"

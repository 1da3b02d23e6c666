"""The hub's sync guarantees over `/v1/ws` (Protocol/PROTOCOL.md): what each
kind of subscription receives, sequence numbers under concurrent writers,
versions and conflicts, idempotent retries, atomic multi-record writes,
resume after a disconnect, and a restart that keeps everything.

Every "nothing else was pushed" check uses SyncClient.barrier(): its reply
arrives after every push due to a write acknowledged before it was sent
(guarantee 4), so no test sleeps to wait for an absence.
"""

from __future__ import annotations

import copy
import threading
import time

import pytest

from synclib import NO_ID, apply_push, check_push_shape, expect_error, run_threads, without_id


def seqs(pushes) -> list[int]:
    return [p["seq"] for p in pushes]


def by_seq(pushes) -> dict[int, dict]:
    return {p["seq"]: p.message for p in pushes}


def first_difference(got: list, want: list) -> str:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return f"at index {i} got {got[max(0, i - 2):i + 3]}, expected {want[max(0, i - 2):i + 3]}"
    return f"lengths {len(got)} and {len(want)}"


# --------------------------------------------------------------------------
# hello


def test_hello_negotiates_version_1(tally, sync_client):
    client = sync_client(tally, hello=False)
    reply = client.ok("hello", protocol=[1, 7], client="interop-tests/hello")
    assert reply["protocol"] == 1
    assert isinstance(reply["server"], str) and reply["server"]
    assert isinstance(reply["seq"], int) and reply["seq"] >= 0
    assert reply["floor"] == 0
    assert "resumable" not in reply, "resumable is only there when hello carried since"
    assert "op" not in reply
    error = client.fail("hello", "bad_message", protocol=1)  # a second hello
    assert error
    other = sync_client(tally, hello=False)
    error = other.fail("hello", "unsupported_protocol", protocol=[99])
    assert error["supported"] == [1]


def test_without_hello_the_connection_speaks_version_1(tally, sync_client):
    client = sync_client(tally, hello=False)
    client.ok("set", name="plain/1", data={"a": 1})
    assert client.ok("get", name="plain/1")["data"] == {"a": 1}


def test_reply_echoes_ids_of_both_kinds(tally, sync_client):
    client = sync_client(tally)
    for request_id in ["abc", "x" * 128, 0, 12345678901, -3]:
        reply = client.request("get", id=request_id, name="ids/none")
        expect_error(reply, "not_found")
    client.send({"op": "set", "name": "ids/none-given", "data": {}})
    reply = client.recv_reply(NO_ID)
    assert reply["ok"] is True and "id" not in reply, reply


# --------------------------------------------------------------------------
# Record, path, prefix and list subscriptions


def test_record_subscription_and_versions(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    name = "jobs/rec-1"
    reply = watcher.ok("subscribe", name=name)
    assert reply["record"] is None, "the record does not exist yet"
    start = reply["seq"]

    replies = [
        writer.ok("set", name=name, data={"stage": "received", "items": [{"qty": 1}]}),
        writer.ok("set", name=name, path="items[1]", value={"qty": 2}),  # append
        writer.ok("increment", name=name, path="items[0].qty", by=4),
        writer.ok("delete", name=name, path="items[0]"),
        writer.ok("merge", name=name, data={"stage": "ready", "note": "x"}),
        writer.ok("delete", name=name),
        writer.ok("set", name=name, path="stage", value="received"),  # created again
    ]
    assert [r["version"] for r in replies] == [1, 2, 3, 4, 5, 6, 1], (
        "versions: 1 when created, +1 per write, the delete carries the next one, "
        "a record created again starts at 1")
    assert [r["seq"] for r in replies] == list(range(start + 1, start + 8))
    assert all(r["name"] == name for r in replies)
    assert replies[2]["value"] == 5, "increment replies with the new number"

    pushes = watcher.drain()
    assert seqs(pushes) == [r["seq"] for r in replies]
    for push in pushes:
        check_push_shape(push.message)
    kinds = [(p["kind"], p.get("path")) for p in pushes]
    assert kinds == [("set", None), ("setPath", "items[1]"), ("setPath", "items[0].qty"),
                     ("deletePath", "items[0]"), ("set", None), ("delete", None),
                     ("setPath", "stage")]
    assert pushes[1]["value"] == {"qty": 2}
    assert pushes[2]["value"] == 5
    assert pushes[4]["data"] == {"stage": "ready", "note": "x", "items": [{"qty": 2}]}
    assert [p["version"] for p in pushes] == [1, 2, 3, 4, 5, 6, 1]

    record = writer.ok("get", name=name)
    assert record["data"] == {"stage": "received"}
    assert (record["version"], record["seq"]) == (1, replies[-1]["seq"])
    assert isinstance(record["created"], int) and isinstance(record["updated"], int)


def test_path_subscription_receives_only_changes_under_its_path(tally, sync_client):
    writer = sync_client(tally)
    item_watcher, stage_watcher = sync_client(tally), sync_client(tally)
    name = "jobs/path-1"
    data = {"stage": "received", "note": "n0",
            "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}
    writer.ok("set", name=name, data=data)

    reply = item_watcher.ok("subscribe", name=name, path="items[1]")
    record = reply["record"]
    assert (record["name"], record["version"], record["path"]) == (name, 1, "items[1]")
    assert record["value"] == {"sku": "b", "qty": 2}
    assert "data" not in record, "a path snapshot carries the value there, not the data"
    reply = stage_watcher.ok("subscribe", name=name, path="stage")
    assert reply["record"]["value"] == "received"

    # (the write, pushed to the items[1] watcher?, pushed to the stage watcher?)
    expected: list[tuple[dict, bool, bool]] = []

    def write(op: str, to_items: bool, to_stage: bool, **fields):
        reply = writer.ok(op, name=name, **fields)
        expected.append((reply, to_items, to_stage))

    write("set", False, False, path="note", value="n1")                 # elsewhere
    write("set", True, False, path="items[1].qty", value=5)             # under items[1]
    write("set", False, False, path="items[0].qty", value=7)            # a sibling
    write("set", False, False, path="stages", value=1)                  # "stage" is a byte prefix only
    write("increment", True, False, path="items[1].qty", by=2)          # under
    write("set", True, False, path="items",                             # an ancestor
          value=[{"sku": "a", "qty": 7}, {"sku": "c", "qty": 1}])
    write("set", False, True, path="stage", value="in-progress")        # stage itself
    data = {"stage": "in-progress", "note": "n2", "stages": 1,
            "items": [{"sku": "a", "qty": 9}, {"sku": "c", "qty": 1}]}
    write("set", False, False, data=data)                               # whole set, items[1]/stage same
    data = copy.deepcopy(data)
    data["items"][1]["qty"] = 3
    write("set", True, False, data=data)                                # whole set changing items[1]
    write("merge", False, False, data={"note": "n3"})                   # merge elsewhere
    write("merge", False, True, data={"stage": "ready"})                # merge changing stage
    write("merge", True, False, data={"items": [{"sku": "z"}, {"sku": "c", "qty": 4}]})
    write("delete", False, False, path="note")                          # deletePath elsewhere
    write("delete", True, False, path="items[1].qty")                   # deletePath under
    write("delete", True, True)                                         # the record is deleted

    raw_by_seq: dict[int, set[str]] = {}
    for watcher, column in ((item_watcher, 1), (stage_watcher, 2)):
        got = watcher.drain()
        want = [row[0]["seq"] for row in expected if row[column]]
        label = "items[1]" if column == 1 else "stage"
        assert seqs(got) == want, (
            f"the {label} watcher got seqs {seqs(got)}, expected {want}; writes: "
            f"{[(r['seq'], r.get('version')) for r, *_ in expected]}")
        for push in got:
            check_push_shape(push.message)
            assert push["name"] == name
            raw_by_seq.setdefault(push["seq"], set()).add(push.raw)
    assert all(len(raws) == 1 for raws in raw_by_seq.values()), (
        "a push is the same bytes for every subscriber")


def test_prefix_subscription(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    for name in ["shop/b/c", "shop/a", "shop", "shopping/x", "sho/p", "café/1"]:
        writer.ok("set", name=name, data={"n": name})

    reply = watcher.ok("subscribe", prefix="shop/")
    assert [r["name"] for r in reply["records"]] == ["shop/a", "shop/b/c"], "matching records, in name order"
    assert reply["more"] is False
    for envelope in reply["records"]:
        assert envelope["data"] == {"n": envelope["name"]} and envelope["version"] == 1
        assert envelope["seq"] <= reply["seq"]
    utf8_watcher = sync_client(tally)
    reply = utf8_watcher.ok("subscribe", prefix="café/")
    assert [r["name"] for r in reply["records"]] == ["café/1"]

    matching, other = [], []
    matching.append(writer.ok("set", name="shop/a", data={"n": 2}))
    matching.append(writer.ok("set", name="shop/new/1", path="x", value=1))
    other.append(writer.ok("set", name="shop", data={"n": 3}))
    other.append(writer.ok("set", name="shopping/x", data={"n": 4}))
    other.append(writer.ok("set", name="Shop/a", data={"n": 5}))
    other.append(writer.ok("set", name="x/shop/a", data={"n": 6}))
    other.append(writer.ok("set", name="cafe/1", data={"n": 7}))
    other.append(writer.ok("addEntry", list="shop/list", entry="shop/a"))  # a list, not a record
    matching.append(writer.ok("merge", name="shop/b/c", data={"m": True}))
    matching.append(writer.ok("increment", name="shop/counter", path="n"))
    matching.append(writer.ok("delete", name="shop/a"))
    utf8 = writer.ok("set", name="café/2", data={})

    got = watcher.drain()
    assert seqs(got) == [r["seq"] for r in matching], (
        f"got {[(p['seq'], p.get('name'), p.get('list')) for p in got]}; "
        f"non-matching writes had seqs {[r['seq'] for r in other]}")
    assert [p["name"] for p in got] == ["shop/a", "shop/new/1", "shop/b/c", "shop/counter", "shop/a"]
    assert seqs(utf8_watcher.drain()) == [utf8["seq"]]


def test_empty_prefix_matches_every_record(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    writer.ok("set", name="before/1", data={})
    reply = watcher.ok("subscribe", prefix="")
    assert "before/1" in [r["name"] for r in reply["records"]]
    a = writer.ok("set", name="a", data={})
    writer.ok("setEntries", list="a", entries=["a"])  # lists are not records
    b = writer.ok("set", name="z/y/x", path="k", value=[])
    assert seqs(watcher.drain()) == [a["seq"], b["seq"]]


def test_list_subscription(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    reply = watcher.ok("subscribe", list="orders")
    assert reply["list"] is None
    writer.ok("set", name="orders", data={"a record": "of the same name"})  # another namespace
    writer.ok("addEntry", list="orders2", entry="x")

    replies = [
        writer.ok("addEntry", list="orders", entry="jobs/1"),
        writer.ok("addEntry", list="orders", entry="jobs/2", at=0),
        writer.ok("addEntry", list="orders", entry="jobs/1"),
        writer.ok("removeEntry", list="orders", entry="jobs/1"),
        writer.ok("setEntries", list="orders", entries=["jobs/3", "jobs/4", "jobs/3"]),
        writer.ok("removeEntry", list="orders", entry="jobs/3", at=2),
        writer.ok("addEntry", list="orders", entry="jobs/5", at=1),
    ]
    assert [r["version"] for r in replies] == list(range(1, 8))
    assert all(r["list"] == "orders" for r in replies)
    current = writer.ok("get", list="orders")
    assert current["entries"] == ["jobs/3", "jobs/5", "jobs/4"]
    assert (current["version"], current["seq"]) == (7, replies[-1]["seq"])
    deleted = writer.ok("delete", list="orders")
    assert deleted["version"] == 8

    got = watcher.drain()
    assert seqs(got) == [r["seq"] for r in replies + [deleted]]
    for push in got:
        check_push_shape(push.message)
        assert push["list"] == "orders" and "name" not in push.message
    shapes = [{k: v for k, v in p.message.items() if k not in ("op", "seq", "time", "list")} for p in got]
    assert shapes == [
        {"version": 1, "kind": "addEntry", "entry": "jobs/1", "index": 0},
        {"version": 2, "kind": "addEntry", "entry": "jobs/2", "index": 0},
        {"version": 3, "kind": "addEntry", "entry": "jobs/1", "index": 2},
        {"version": 4, "kind": "removeEntry", "entry": "jobs/1", "indexes": [1, 2]},
        {"version": 5, "kind": "setEntries", "entries": ["jobs/3", "jobs/4", "jobs/3"]},
        {"version": 6, "kind": "removeEntry", "entry": "jobs/3", "indexes": [2]},
        {"version": 7, "kind": "addEntry", "entry": "jobs/5", "index": 1},
        {"version": 8, "kind": "delete"},
    ]
    writer.fail("get", "not_found", list="orders")
    assert writer.ok("get", name="orders")["data"] == {"a record": "of the same name"}


def test_change_matching_several_subscriptions_is_sent_once(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    name = "multi/1"
    targets = [dict(name=name), dict(name=name, path="a"), dict(prefix="multi/"), dict(prefix="")]
    for target in targets:
        watcher.ok("subscribe", **target)
    again = watcher.ok("subscribe", name=name)  # answers like the first time, adds nothing
    assert again["record"] is None
    first = writer.ok("set", name=name, path="a", value=1)
    assert seqs(watcher.drain()) == [first["seq"]]

    watcher.ok("unsubscribe", name=name)
    watcher.ok("unsubscribe", name=name, path="a")
    second = writer.ok("set", name=name, path="a", value=2)
    assert seqs(watcher.drain()) == [second["seq"]], "still subscribed by prefix"
    watcher.ok("unsubscribe", prefix="multi/")
    watcher.ok("unsubscribe", prefix="")
    writer.ok("set", name=name, path="a", value=3)
    assert watcher.drain() == []
    watcher.fail("unsubscribe", "not_subscribed", prefix="multi/")
    watcher.fail("unsubscribe", "not_subscribed", list="never")


def test_write_reply_comes_before_its_own_push(tally, sync_client):
    client = sync_client(tally)
    client.ok("subscribe", prefix="own/")
    for i in range(20):
        reply = client.ok("set", name=f"own/{i % 3}", path="i", value=i)
        assert not client.pushes, f"the push of write {i} arrived before its reply"
        push = client.next_push()
        assert (push["seq"], push["name"], push["version"]) == (reply["seq"], reply["name"], reply["version"])


def test_push_of_an_acknowledged_write_precedes_a_later_reply(tally, sync_client):
    writer, watcher = sync_client(tally), sync_client(tally)
    watcher.ok("subscribe", prefix="order/")
    for i in range(50):
        reply = writer.ok("set", name="order/x", path="i", value=i)
        watcher.barrier()
        assert seqs(watcher.pushes) == [reply["seq"]], f"write {i}: {list(watcher.pushes)}"
        watcher.pushes.clear()


def test_events(tally, sync_client):
    publisher, watcher, bystander = sync_client(tally), sync_client(tally), sync_client(tally)
    head = publisher.head()
    assert without_id(watcher.ok("subscribe", topic="scanner")) == {"ok": True}
    publisher.ok("subscribe", topic="scanner")
    bystander.ok("subscribe", topic="scanner/other")
    reply = publisher.ok("publish", topic="scanner", data={"code": "4006381333931"})
    assert reply["delivered"] == 2, "the watcher and the publisher itself"
    event = {"op": "event", "topic": "scanner", "data": {"code": "4006381333931"}}
    assert watcher.next_push().message == event
    assert publisher.next_push().message == event
    assert bystander.drain() == []
    watcher.ok("unsubscribe", topic="scanner")
    assert publisher.ok("publish", topic="scanner", data=[1, "two", None])["delivered"] == 1
    assert publisher.next_push().message["data"] == [1, "two", None]
    assert watcher.drain() == []
    assert publisher.head() == head, "events have no seq and are not stored"


# --------------------------------------------------------------------------
# Concurrency: seqs increasing, gap-free, once; each subscriber sees exactly
# the acknowledged writes


def test_concurrent_writers_and_subscribers(tally, sync_client):
    writers_count, writes_each, subscriber_count = 20, 50, 3
    names = [f"load/r{i}" for i in range(8)]
    counter = "load/counter"
    setup = sync_client(tally)
    for name in names:
        setup.ok("set", name=name, data={"init": True})

    subscribers = [sync_client(tally) for _ in range(subscriber_count)]
    snapshots = [s.ok("subscribe", prefix="load/") for s in subscribers]
    head = setup.head()
    for reply in snapshots:
        assert reply["seq"] == head
        assert sorted(r["name"] for r in reply["records"]) == names

    def plan(w: int, k: int) -> tuple[str, dict, int]:
        """(op, fields, number of changes) of write k of writer w."""
        target = names[(w * 7 + k) % len(names)]
        match k % 5:
            case 0:
                return "set", dict(name=target, data={"by": w, "k": k}), 1
            case 1:
                return "set", dict(name=target, path=f"w{w}.k", value=k), 1
            case 2:
                return "increment", dict(name=counter, path="count"), 1
            case 3:
                return "merge", dict(name=target, data={f"m{w}": k, "gone": None}), 1
            case _:
                return "write", dict(ops=[
                    {"op": "set", "name": target, "path": "x", "value": [w, k]},
                    {"op": "increment", "name": counter, "path": "count", "by": 1}]), 2

    total = sum(plan(w, k)[2] for w in range(writers_count) for k in range(writes_each))
    increments = sum(1 for w in range(writers_count) for k in range(writes_each) if k % 5 in (2, 4))
    writers = [sync_client(tally, compression="deflate" if w % 2 else None) for w in range(writers_count)]
    acked: list[list[tuple[int, str, int]]] = [[] for _ in writers]
    start = threading.Barrier(writers_count)

    def writer(w: int):
        client = writers[w]
        start.wait(timeout=10)
        for k in range(writes_each):
            op, fields, changes = plan(w, k)
            reply = client.ok(op, **fields)
            if op == "write":
                results = reply["results"]
                assert len(results) == changes
                got = [(r["seq"], r["name"], r["version"]) for r in results]
                assert [s for s, _, _ in got] == list(range(got[0][0], got[0][0] + changes)), (
                    f"an atomic write's changes get consecutive seqs: {reply}")
                assert reply["seq"] == got[-1][0]
                acked[w] += got
            else:
                acked[w].append((reply["seq"], reply["name"], reply["version"]))

    received: list[list] = [[] for _ in subscribers]

    def subscriber(i: int):
        client = subscribers[i]
        deadline = time.monotonic() + 60
        while len(received[i]) < total:
            received[i].append(client.next_push(timeout=max(0.1, deadline - time.monotonic())))

    run_threads([lambda w=w: writer(w) for w in range(writers_count)]
                + [lambda i=i: subscriber(i) for i in range(subscriber_count)], timeout=90)

    all_acked = sorted(change for changes in acked for change in changes)
    assert len(all_acked) == total
    assert [s for s, _, _ in all_acked] == list(range(head + 1, head + total + 1)), (
        "acknowledged seqs must be exactly the next ones, no gaps or duplicates")
    for i, pushes in enumerate(received):
        got = seqs(pushes)
        assert got == list(range(head + 1, head + total + 1)), (
            f"subscriber {i}: seqs not strictly increasing and gap-free: "
            f"{first_difference(got, list(range(head + 1, head + total + 1)))}")
        assert sorted((p["seq"], p["name"], p["version"]) for p in pushes) == all_acked, (
            f"subscriber {i} did not see exactly the acknowledged writes")
        assert [p.raw for p in pushes] == [p.raw for p in received[0]], (
            "every subscriber gets the same bytes for a push")
        assert subscribers[i].drain() == [], f"subscriber {i} got more than the acknowledged writes"

    # Versions per record go up by one, in push order.
    records = {r["name"]: {"version": r["version"], "data": r["data"]} for r in snapshots[0]["records"]}
    for push in received[0]:
        check_push_shape(push.message)
        previous = records.get(push["name"], {"version": 0})["version"]
        assert push["version"] == previous + 1, f"version jump at {push.message}"
        apply_push(records, push.message)
    # Replaying the pushes gives what the hub has; increments commuted.
    for name in names + [counter]:
        envelope = setup.ok("get", name=name)
        assert (envelope["version"], envelope["data"]) == (records[name]["version"], records[name]["data"]), name
    assert records[counter]["data"] == {"count": increments}


def test_snapshot_then_changes_while_writes_go_on(tally, sync_client):
    writer = sync_client(tally)
    names = [f"snap/{c}" for c in "abcd"]
    stop = threading.Event()
    acked = threading.Semaphore(0)  # one release per acknowledged write
    count = [0]

    def write():
        i = 0
        while not stop.is_set() and i < 2000:
            writer.ok("set", name=names[i % 4], data={"i": i})
            acked.release()
            i += 1
        count[0] = i

    def wait_for_writes(n: int) -> None:
        for _ in range(n):
            assert acked.acquire(timeout=10), "the writer stopped making progress"

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    watchers = []
    try:
        for _ in range(6):
            wait_for_writes(5)  # each snapshot lands between acknowledged writes
            client = sync_client(tally)
            watchers.append((client, client.ok("subscribe", prefix="snap/")))
        wait_for_writes(5)
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    final = {name: writer.ok("get", name=name) for name in names}

    assert count[0] >= 20, f"only {count[0]} writes happened around the subscribes"
    assert any(r["records"] and max(e["version"] for e in r["records"]) > 1 for _, r in watchers), (
        "no snapshot was taken in the middle of the writes")
    mid_stream = 0
    for client, reply in watchers:
        state = {r["name"]: {"version": r["version"], "data": r["data"]} for r in reply["records"]}
        for envelope in reply["records"]:
            assert envelope["seq"] <= reply["seq"], f"snapshot newer than its seq: {envelope} vs {reply['seq']}"
        pushes = client.drain()
        assert all(p["seq"] > reply["seq"] for p in pushes), "a change before the snapshot was pushed"
        assert seqs(pushes) == sorted(set(seqs(pushes)))
        for push in pushes:
            assert push["version"] == state.get(push["name"], {"version": 0})["version"] + 1, (
                f"snapshot + pushes skip or repeat a version: {push.message}")
            apply_push(state, push.message)
        for name in names:
            assert (state[name]["version"], state[name]["data"]) == (final[name]["version"], final[name]["data"])
        mid_stream += bool(pushes and reply["records"])
    assert mid_stream, "no subscriber got both a snapshot and later pushes"


# --------------------------------------------------------------------------
# Versions, idempotency, atomic writes


def test_version_conflict(tally, sync_client):
    client, watcher = sync_client(tally), sync_client(tally)
    name = "cas/1"
    watcher.ok("subscribe", name=name)
    assert client.ok("set", name=name, data={"v": "a"}, version=0)["version"] == 1, "version 0: create only"
    assert client.ok("set", name=name, data={"v": "b"}, version=1)["version"] == 2
    head = client.head()
    for op, fields in [("set", dict(data={"v": "stale"})), ("set", dict(path="v", value="stale")),
                       ("merge", dict(data={"x": 1})), ("increment", dict(path="n")),
                       ("delete", dict(path="v")), ("delete", {})]:
        error = client.fail(op, "conflict", name=name, version=1, **fields)
        assert (error["version"], error["data"]) == (2, {"v": "b"}), error
    error = client.fail("set", "conflict", name=name, data={}, version=0)
    assert (error["version"], error["data"]) == (2, {"v": "b"})
    error = client.fail("set", "conflict", name="cas/none", data={}, version=3)
    assert "data" not in error, "absent when the record does not exist"
    assert client.head() == head, "refused writes consume no seq"
    assert client.ok("get", name=name)["version"] == 2
    client.fail("get", "not_found", name="cas/none")

    client.ok("setEntries", list="cas", entries=["a"], version=0)
    error = client.fail("addEntry", "conflict", list="cas", entry="b", version=5)
    assert (error["version"], error["entries"]) == (1, ["a"])
    assert client.ok("addEntry", list="cas", entry="b", version=1)["version"] == 2

    pushes = watcher.drain()
    assert [p["version"] for p in pushes] == [1, 2]


def test_idempotent_retry_applies_once(tally, sync_client):
    client, watcher = sync_client(tally), sync_client(tally)
    watcher.ok("subscribe", prefix="idem/")
    first = client.ok("increment", name="idem/count", path="n", by=5, idem="inc-1")
    head = client.head()
    retry = client.ok("increment", name="idem/count", path="n", by=5, idem="inc-1", id="retry-1")
    assert retry["id"] == "retry-1"
    assert without_id(retry) == without_id(first), "a retry returns the first reply"
    assert client.head() == head, "a retry applies nothing"

    client.close()
    again = sync_client(tally)  # retry after a reconnect
    retry = again.ok("increment", name="idem/count", path="n", by=5, idem="inc-1")
    assert without_id(retry) == without_id(first)
    assert again.ok("get", name="idem/count")["data"] == {"n": 5}
    assert again.head() == head

    # An atomic write with a key.
    ops = [{"op": "set", "name": "idem/a", "data": {"a": 1}}, {"op": "addEntry", "list": "idem", "entry": "idem/a"}]
    first_write = again.ok("write", ops=ops, idem="write-1")
    assert without_id(again.ok("write", ops=ops, idem="write-1")) == without_id(first_write)
    assert again.ok("get", list="idem")["entries"] == ["idem/a"]

    # A refused write is not remembered: its retry is evaluated again.
    again.fail("set", "conflict", name="idem/b", data={"b": 1}, version=4, idem="set-b")
    created = again.ok("set", name="idem/b", data={"b": 1}, idem="set-b")
    assert created["version"] == 1

    pushes = watcher.drain()
    assert seqs(pushes) == [first["seq"], first_write["results"][0]["seq"], created["seq"]], (
        "each key's write was pushed once")


FAILING_OPS = {
    "conflict": ({"op": "set", "name": "atom/b", "data": {"b": 0}, "version": 99}, "conflict"),
    "merge-missing": ({"op": "merge", "name": "atom/missing", "data": {"x": 1}}, "not_found"),
    "not-a-number": ({"op": "increment", "name": "atom/b", "path": "text"}, "not_a_number"),
    "remove-absent-entry": ({"op": "removeEntry", "list": "atom", "entry": "nope"}, "not_found"),
    "delete-absent-path": ({"op": "delete", "name": "atom/a", "path": "nope"}, "not_found"),
    "path-through-scalar": ({"op": "set", "name": "atom/a", "path": "n.deeper", "value": 1}, "bad_path"),
}


@pytest.mark.parametrize("case", FAILING_OPS.keys())
def test_atomic_write_is_all_or_nothing(tally, sync_client, case):
    failing, code = FAILING_OPS[case]
    client, watcher = sync_client(tally), sync_client(tally)
    client.ok("set", name="atom/a", data={"n": 1})
    client.ok("set", name="atom/b", data={"text": "t"})
    client.ok("setEntries", list="atom", entries=["atom/a"])
    watcher.ok("subscribe", prefix="atom/")
    watcher.ok("subscribe", list="atom")
    before = {n: client.ok("get", name=n) for n in ("atom/a", "atom/b")}
    before_list = client.ok("get", list="atom")
    head = client.head()

    ops = [{"op": "set", "name": "atom/a", "path": "n", "value": 2},
           {"op": "addEntry", "list": "atom", "entry": "atom/c"},
           {"op": "set", "name": "atom/c", "data": {"new": True}},
           failing,
           {"op": "set", "name": "atom/d", "data": {}}]
    error = client.fail("write", code, ops=ops)
    assert error["index"] == 3, f"the error names the failing op: {error}"

    for name, envelope in before.items():
        now = client.ok("get", name=name)
        assert without_id(now) == without_id(envelope), f"{name} changed by a failed write"
    assert without_id(client.ok("get", list="atom")) == without_id(before_list)
    client.fail("get", "not_found", name="atom/c")
    client.fail("get", "not_found", name="atom/d")
    assert watcher.drain() == [], "a failed atomic write pushed changes"

    reply = client.ok("write", ops=[ops[0], ops[1], ops[2]])
    assert [r["seq"] for r in reply["results"]] == [head + 1, head + 2, head + 3], (
        "the failed write consumed seqs")
    assert reply["seq"] == head + 3
    assert [r.get("name") or r.get("list") for r in reply["results"]] == ["atom/a", "atom", "atom/c"]
    assert [r["version"] for r in reply["results"]] == [2, 2, 1]
    assert seqs(watcher.drain()) == [head + 1, head + 2, head + 3]


# --------------------------------------------------------------------------
# Resume


def test_resume_gets_exactly_the_missed_changes_then_live_pushes(tally, sync_client):
    writer, witness = sync_client(tally), sync_client(tally)
    witness.ok("subscribe", prefix="res/")
    watcher = sync_client(tally)
    watcher.ok("subscribe", prefix="res/")
    for i in range(3):
        writer.ok("set", name=f"res/{i}", data={"i": i})
    seen = watcher.take_pushes(3)
    last = seen[-1]["seq"]
    watcher.close()

    missed = []
    missed.append(writer.ok("set", name="res/a", data={"a": 1}))
    writer.ok("set", name="other/x", data={})
    missed.append(writer.ok("set", name="res/b", path="p", value=[1]))
    writer.ok("addEntry", list="res/list", entry="res/a")
    missed.append(writer.ok("delete", name="res/0"))
    missed.append(writer.ok("increment", name="res/c", path="n"))
    witnessed = {p["seq"]: p.raw for p in witness.drain()}

    again = sync_client(tally)
    reply, text = again.request("subscribe", prefix="res/", since=last, raw=True)
    assert reply.get("ok") is True, reply
    assert "records" not in reply and not reply.get("resnapshot"), "a resumable since gets changes, not a snapshot"
    assert [c["seq"] for c in reply["changes"]] == [r["seq"] for r in missed]
    assert reply["seq"] >= missed[-1]["seq"]
    for change in reply["changes"]:
        assert witnessed[change["seq"]] in text, "resumed changes are byte for byte the pushes"

    live = writer.ok("set", name="res/d", data={})
    pushes = again.drain()
    assert seqs(pushes) == [live["seq"]], "live pushes continue after the resumed changes, without repeats"


def test_resume_with_since_in_hello(tally, sync_client):
    writer = sync_client(tally)
    writer.ok("set", name="hres/1", data={})
    since = writer.head()
    missed = [writer.ok("set", name="hres/2", data={}), writer.ok("set", name="hres/1", path="x", value=1)]
    client = sync_client(tally, hello={"since": since})
    assert client.hello_reply["resumable"] is True
    reply = client.ok("subscribe", prefix="hres/")
    assert [c["seq"] for c in reply["changes"]] == [r["seq"] for r in missed], "hello's since is the default"
    other = client.ok("subscribe", name="hres/1", since=0)  # explicit since wins
    assert [c["seq"] for c in other["changes"]][-1] == missed[-1]["seq"]
    assert len(other["changes"]) == 2


def test_resume_older_than_the_log_resnapshots(tally_factory, sync_client):
    server = tally_factory("--retain-changes", "5")
    writer = sync_client(server)
    for i in range(30):
        writer.ok("set", name=f"old/{i % 4}", data={"i": i})
    head = writer.head()
    deadline = time.monotonic() + 5
    while True:
        hello = sync_client(server).hello_reply
        if hello["floor"] > 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    floor = hello["floor"]
    assert 0 < floor <= head - 5, f"--retain-changes 5 after {head} changes: floor {floor}"

    client = sync_client(server, hello={"since": 0})
    assert client.hello_reply["resumable"] is False
    reply = client.ok("subscribe", prefix="old/", since=0)
    assert reply["resnapshot"] is True
    assert sorted(r["name"] for r in reply["records"]) == [f"old/{i}" for i in range(4)]
    assert "changes" not in reply
    reply = client.ok("subscribe", prefix="old/", since=head - 5)
    assert [c["seq"] for c in reply["changes"]] == list(range(head - 4, head + 1))


# --------------------------------------------------------------------------
# Restart


def test_restart_keeps_everything(tally_factory, sync_client):
    server = tally_factory()
    client = sync_client(server)
    client.ok("set", name="keep/order", data={"stage": "received", "items": [{"sku": "é✓", "qty": 2.5}],
                                              "big": 12345678901234, "neg": -0.001, "nested": {"z": 1, "a": [None, True]}})
    client.ok("set", name="keep/order", path="stage", value="ready")
    client.ok("increment", name="keep/count", path="n", by=3)
    client.ok("set", name="keep/gone", data={"x": 1})
    client.ok("delete", name="keep/gone")
    client.ok("setEntries", list="keep", entries=["keep/order", "keep/count"])
    client.ok("addEntry", list="keep", entry="keep/gone", at=1)
    first = client.ok("increment", name="keep/count", path="n", idem="restart-key")
    before_records = client.ok("get", prefix="keep/")
    before_list = client.ok("get", list="keep")
    before_changes = client.ok("subscribe", prefix="", since=0)["changes"]
    head = client.head()
    client.close()

    server = tally_factory.restart(server)
    client = sync_client(server)
    assert client.hello_reply["seq"] == head
    after_records = client.ok("get", prefix="keep/")
    assert without_id(after_records) == without_id(before_records)
    assert without_id(client.ok("get", list="keep")) == without_id(before_list)
    assert client.ok("subscribe", prefix="", since=0)["changes"] == before_changes
    retry = client.ok("increment", name="keep/count", path="n", idem="restart-key")
    assert without_id(retry) == without_id(first), "idempotency keys survive a restart"
    assert client.head() == head
    next_write = client.ok("set", name="keep/gone", data={})
    assert (next_write["seq"], next_write["version"]) == (head + 1, 1)
    assert client.ok("get", name="keep/count")["data"] == {"n": 4}

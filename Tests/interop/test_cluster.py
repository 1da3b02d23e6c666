"""Several hubs on one PostgreSQL database (docs/scale-out.md), black-box:
real `tally serve` processes on 127.0.0.1 sharing a database of a private
PostgreSQL server (the `pg_server` and `hub_cluster` fixtures), checked
against what one hub would do — one gap-free order of seqs that every
subscriber on every hub sees with the same bytes, versions, conflicts, stock
and idempotency keys as on one hub — and through the faults a cluster meets:
a hub killed under load, PostgreSQL stopped for 10 s, its sessions
terminated. Last, scripts/cluster.sh.

Clients that must survive losing their hub (clusterlib.FailoverWriter and
FailoverSubscriber) move to the next hub and resume with `since`; writes
carry idempotency keys and are sent until acknowledged, so at the end every
write was acknowledged and must be in the log exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
import uuid

import pytest

from clusterlib import (Connection, FailoverSubscriber, FailoverWriter, acked_changes, changes_after,
                        follow_all, head_of, health, subscribe_all, wait_for_head)
from conftest import REPO, TALLY_BIN
from synclib import LongRunning, apply_push, cli_env, metric, record_path, rest, run_threads, wait_until
from timinglib import assert_timing_matches


def uid() -> str:
    return uuid.uuid4().hex[:8]


# --------------------------------------------------------------------------
# One global order


def test_three_hubs_give_every_subscriber_one_gap_free_order(hub_cluster):
    """20 writers spread over three hubs, 10 prefix subscribers on each hub:
    every subscriber sees every change once, in one order, with the same
    bytes; versions and sums are what one hub would leave."""
    hubs = hub_cluster(3).hubs
    shared = [f"load/r{i}" for i in range(6)]
    counter = "load/counter"
    setup = FailoverWriter(hubs, 0, "setup", failover=False)
    for name in shared:
        setup.write({"op": "set", "name": name, "data": {"init": True}})
    start = setup.acks[-1].reply["seq"]
    wait_for_head(hubs, start)

    subscribers = [FailoverSubscriber(hubs, h, f"sub-{h}-{i}", {"prefix": "load/"}, failover=False)
                   for h in range(3) for i in range(10)]
    subscribe_all(subscribers)
    for subscriber in subscribers:
        assert subscriber.seq == start, f"{subscriber.name}: snapshot at {subscriber.seq}, not {start}"

    writers = [FailoverWriter(hubs, w % 3, f"writer-{w}", failover=False) for w in range(20)]
    versioned: list[tuple[int, int, dict]] = []  # (version sent, version acked, reply)
    lock = threading.Lock()
    gate = threading.Barrier(len(writers))

    def write(w: int) -> None:
        writer = writers[w]
        own = f"load/own/w{w}"
        own_version = 0
        guess = 1
        gate.wait(timeout=10)
        for k in range(24):
            target = shared[(w + k) % len(shared)]
            match k % 6:
                case 0:
                    writer.write({"op": "set", "name": target, "data": {"by": w, "k": k}})
                case 1:
                    writer.write({"op": "set", "name": target, "path": f"w{w}.k", "value": k})
                case 2:
                    writer.write({"op": "increment", "name": counter, "path": "n"})
                case 3:
                    # Only this writer writes its own record: never a conflict.
                    reply = writer.write({"op": "set", "name": own, "data": {"k": k}, "version": own_version})
                    assert reply["version"] == own_version + 1, reply
                    own_version = reply["version"]
                case 4:
                    # A versioned write to a shared record, again on conflict.
                    for _ in range(100):
                        reply = writer.write({"op": "set", "name": shared[0], "path": f"v{w}", "value": k,
                                              "version": guess}, expect=("conflict",))
                        if reply.get("ok"):
                            with lock:
                                versioned.append((guess, reply["version"], reply))
                            guess = reply["version"]
                            break
                        assert reply["error"]["version"] != guess, reply
                        guess = reply["error"]["version"]
                    else:
                        raise AssertionError(f"writer {w}: 100 conflicts in a row on {shared[0]}")
                case _:
                    writer.write({"op": "write", "ops": [
                        {"op": "set", "name": target, "path": "x", "value": [w, k]},
                        {"op": "increment", "name": counter, "path": "n"}]})

    run_threads([lambda w=w: write(w) for w in range(len(writers))], timeout=90)
    acked = acked_changes(writers)
    head = start + len(acked)
    assert [seq for seq, _, _ in acked] == list(range(start + 1, head + 1)), (
        "acknowledged seqs are exactly the next ones, cluster-wide: no gap, no duplicate")
    for sent, got, reply in versioned:
        assert got == sent + 1, f"a versioned write based on {sent} acknowledged as {got}: {reply}"

    follow_all(subscribers, lambda: head, budget=60)
    reference = subscribers[0]
    for subscriber in subscribers:
        assert sorted(subscriber.changes) == list(range(start + 1, head + 1)), subscriber.name
        assert subscriber.raw == reference.raw, f"{subscriber.name}: not the bytes {reference.name} got"
        assert sorted((c["seq"], c["name"], c["version"]) for c in subscriber.changes.values()) == acked, (
            f"{subscriber.name} did not see exactly the acknowledged writes")

    # Replaying the pushes on the snapshot gives what every hub holds: one
    # version per accepted write, every increment counted once.
    records = {r["name"]: {"version": r["version"], "data": r["data"]} for r in reference.snapshot["records"]}
    for seq in range(start + 1, head + 1):
        change = reference.changes[seq]
        assert change["version"] == records.get(change["name"], {"version": 0})["version"] + 1, change
        apply_push(records, change)
    writes_to = {}
    for _, name, _ in acked:
        writes_to[name] = writes_to.get(name, 0) + 1
    increments = sum(1 for w in writers for a in w.acks if a.message["op"] in ("increment", "write"))
    assert records[counter]["data"] == {"n": increments}
    for name in shared:
        assert records[name]["version"] == 1 + writes_to[name], name
    for hub in hubs:
        for name, record in records.items():
            got = rest(hub, "GET", record_path(name)).json()
            assert (got["version"], got["data"]) == (record["version"], record["data"]), (hub.url(), name)
    logs = [changes_after(hub, start) for hub in hubs]
    assert logs[0] == logs[1] == logs[2] == [reference.changes[s] for s in range(start + 1, head + 1)]
    for hub in hubs:
        assert metric(hub, "tally_store_caught_up_changes_total") > 0, f"{hub.url()} applied no other hub's change"
        status, body = health(hub)
        assert status == 200 and body["status"] == "ok" and body["storeReachable"] is True, body
        assert body["store"] == "postgres" and body["storeHead"] >= head, body


# --------------------------------------------------------------------------
# Versions, stock and idempotency keys across hubs


def test_a_versioned_race_between_two_hubs_has_one_winner_per_version(hub_cluster):
    hubs = hub_cluster(2).hubs
    name = f"race/{uid()}"
    racers = [Connection(hubs[i % 2], f"racer-{i}", 10) for i in range(4)]
    try:
        assert racers[0].request({"op": "set", "name": name, "data": {"round": 0}, "version": 0})["version"] == 1
        for version in range(1, 16):
            # Every hub knows the record at `version` before the race starts.
            wait_until(lambda: all(rest(h, "GET", record_path(name)).json()["version"] == version for h in hubs),
                       10, f"every hub at version {version}")
            gate = threading.Barrier(len(racers))
            replies: list[dict | None] = [None] * len(racers)

            def race(i: int) -> None:
                gate.wait(timeout=10)
                replies[i] = racers[i].request({"op": "set", "name": name, "version": version,
                                                "data": {"round": version, "by": i}})

            run_threads([lambda i=i: race(i) for i in range(len(racers))], timeout=30)
            winners = [i for i, reply in enumerate(replies) if reply["ok"]]
            assert len(winners) == 1, f"version {version}: {replies}"
            for i, reply in enumerate(replies):
                if i in winners:
                    assert reply["version"] == version + 1, reply
                    continue
                error = reply["error"]
                assert error["code"] == "conflict", reply
                assert error["version"] == version + 1, f"the loser is told the winner's version: {reply}"
                assert error["data"] == {"round": version, "by": winners[0]}, reply
        for hub in hubs:
            assert rest(hub, "GET", record_path(name)).json()["version"] == 16
    finally:
        for racer in racers:
            racer.close()


def test_a_write_after_one_acknowledged_by_another_hub_is_judged_on_it(hub_cluster):
    """A client told of a write by one hub sends the next, based on it, to
    another hub, which holds the record as it was before: the write is
    judged on the acknowledged one, as on one hub, not refused on the
    older state (`conflict`)."""
    hubs = hub_cluster(3).hubs
    clients = [Connection(hub, "follower", 10) for hub in hubs]
    try:
        clients[0].request({"op": "set", "name": "items/rw", "data": {"sku": "rw", "stock": 100}})
        for i in range(20):
            order = f"orders/rw-{i}"
            created = clients[i % 3].request({"op": "set", "name": order, "data": {"item": "items/rw", "qty": 1}})
            assert created["ok"], created
            wait_for_head(hubs, created["seq"])
            for client in clients:  # every hub holds the order at "received"
                assert client.request({"op": "get", "name": order})["version"] == 1
            moved = clients[(i + 1) % 3].request({"op": "advance", "name": order, "to": "in-progress"})
            assert moved["ok"], moved
            again = clients[(i + 2) % 3].request({"op": "advance", "name": order, "from": "in-progress",
                                                  "to": "ready"})
            assert again["ok"], f"round {i}: {again}"
            noted = clients[i % 3].request({"op": "set", "name": order, "path": "note", "value": i,
                                            "version": again["version"]})
            assert noted["ok"] and noted["version"] == again["version"] + 1, f"round {i}: {noted}"
    finally:
        for client in clients:
            client.close()


def test_a_snapshot_taken_while_another_hub_writes_says_the_seq_it_holds(hub_cluster):
    """Subscribing on one hub while another writes: the snapshot is the
    state as of the reply's `seq` — no record in it is newer — and the
    pushes that follow start at the next seq (PROTOCOL.md, "Snapshot then
    changes"), however the hub caught up while it read the snapshot."""
    writing, subscribing = hub_cluster(2).hubs
    stop = threading.Event()
    writers = [FailoverWriter([writing], 0, f"snap-writer-{i}", failover=False) for i in range(3)]

    def write(writer: FailoverWriter) -> None:
        k = 0
        while not stop.is_set():
            writer.write({"op": "set", "name": f"snap/{writer.name}-{k % 40}", "data": {"k": k}})
            k += 1

    threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in writers]
    for thread in threads:
        thread.start()
    problems = []
    try:
        for attempt in range(60):
            client = Connection(subscribing, f"snapshot-{attempt}", 10)
            try:
                pushes: list[dict] = []
                reply = client.request({"op": "subscribe", "prefix": "snap/"}, on_push=lambda m, _: pushes.append(m))
                newest = max((r["seq"] for r in reply["records"]), default=0)
                while not pushes:
                    pushes.append(json.loads(client.ws.recv(timeout=10)))
                if newest > reply["seq"] or pushes[0]["seq"] != reply["seq"] + 1:
                    problems.append(f"snapshot at seq {reply['seq']} holds a record of seq {newest}, "
                                    f"first push {pushes[0]['seq']}")
            finally:
                client.close()
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for writer in writers:
            writer.close()
    assert not problems, f"{len(problems)} of 60 subscribes: {problems[:5]}"


def test_stock_is_delivered_at_most_once_through_every_hub(hub_cluster):
    hubs = hub_cluster(3).hubs
    stock, orders_count = 4, 10
    item = f"items/cl-{uid()}"
    staff = [FailoverWriter(hubs, h, f"staff-{h}", failover=False) for h in range(3)]
    staff[0].write({"op": "set", "name": item, "data": {"sku": item[6:], "stock": stock}})
    orders = [f"orders/cl-{uid()}-{i}" for i in range(orders_count)]
    # Each order made on one hub and moved along on the next two.
    for i, order in enumerate(orders):
        staff[i % 3].write({"op": "set", "name": order, "data": {"item": item, "qty": 1, "kind": "issue"}})
        staff[(i + 1) % 3].write({"op": "advance", "name": order, "to": "in-progress"})
        staff[(i + 2) % 3].write({"op": "advance", "name": order, "from": "in-progress", "to": "ready"})
    head = max(ack.reply["seq"] for writer in staff for ack in writer.acks)
    wait_for_head(hubs, head)

    watchers = [Connection(hub, f"stock-watch-{h}", 10) for h, hub in enumerate(hubs)]
    seen: list[list[dict]] = [[] for _ in hubs]
    for h, watcher in enumerate(watchers):
        reply = watcher.request({"op": "subscribe", "name": item})
        assert reply["record"]["data"]["stock"] == stock, reply
    deliverers = [Connection(hubs[i % 3], f"deliverer-{i}", 15) for i in range(orders_count)]
    replies: list[dict | None] = [None] * orders_count
    gate = threading.Barrier(orders_count)

    def deliver(i: int) -> None:
        gate.wait(timeout=10)
        replies[i] = deliverers[i].request({"op": "advance", "name": orders[i], "from": "ready", "to": "delivered"})

    try:
        run_threads([lambda i=i: deliver(i) for i in range(orders_count)], timeout=60)
        delivered = [orders[i] for i, reply in enumerate(replies) if reply["ok"]]
        refused = [reply["error"] for reply in replies if not reply["ok"]]
        assert len(delivered) == stock, replies
        for error in refused:
            assert error["code"] == "insufficient_stock", replies
            assert (error["item"], error["stock"], error["needed"]) == (item, 0, 1), error
        # Every hub pushes the stock going down one by one, never below 0.
        for h, watcher in enumerate(watchers):
            while len(seen[h]) < stock:
                message = watcher.ws.recv(timeout=10)
                seen[h].append(json.loads(message))
            assert [p["value"] for p in seen[h]] == list(range(stock - 1, -1, -1)), seen[h]
            assert [p["path"] for p in seen[h]] == ["stock"] * stock, seen[h]
        final_head = max(reply.get("seq", 0) for reply in replies if reply["ok"])
        wait_for_head(hubs, final_head)
        for hub in hubs:
            got = rest(hub, "GET", record_path(item)).json()
            assert (got["data"]["stock"], got["version"]) == (0, 1 + stock), got
            stats = rest(hub, "GET", record_path("stats/orders")).json()["data"]
            assert stats["counts"]["delivered"] == stock and stats["counts"]["ready"] == orders_count - stock, (
                hub.url(), stats)
            assert stats["total"] == orders_count, stats
            open_orders = rest(hub, "GET", "/v1/lists/orders").json()["entries"]
            assert sorted(open_orders) == sorted(set(orders) - set(delivered)), (hub.url(), open_orders)
    finally:
        for connection in watchers + deliverers:
            connection.close()


def test_an_idempotency_key_is_answered_once_whichever_hub_is_asked(hub_cluster):
    hubs = hub_cluster(3).hubs
    a, b, c = (Connection(hub, "idem-client", 10) for hub in hubs)
    try:
        key = f"k-{uid()}"
        first = a.request({"op": "set", "name": "idem/one", "data": {"n": 1}, "idem": key})
        assert first["ok"], first
        again = b.request({"op": "set", "name": "idem/one", "data": {"n": 2}, "idem": key})
        assert {k: v for k, v in again.items() if k != "id"} == {k: v for k, v in first.items() if k != "id"}, (
            "the retry on another hub is answered with the first reply")
        assert rest(hubs[1], "GET", record_path("idem/one")).json()["data"] == {"n": 1}
        assert head_of(hubs[2]) == first["seq"], "the retry wrote nothing"

        # Over REST: the key given on one hub, retried on another.
        headers = {"Idempotency-Key": f"r-{uid()}"}
        put = rest(hubs[0], "PUT", record_path("idem/rest"), {"v": 1}, headers)
        assert put.status == 201, put.body
        retry = rest(hubs[2], "PUT", record_path("idem/rest"), {"v": 2}, headers)
        assert (retry.status, retry.json()["seq"], retry.json()["version"]) == (201, put.json()["seq"], 1), retry.body

        # The same key sent to two hubs at the same time: one change, one answer.
        for round_ in range(10):
            key = f"race-{round_}-{uid()}"
            replies: list[dict | None] = [None, None]
            gate = threading.Barrier(2)

            def send(i: int, connection) -> None:
                gate.wait(timeout=10)
                replies[i] = connection.request({"op": "increment", "name": "idem/counter", "path": "n", "idem": key})

            run_threads([lambda: send(0, a), lambda: send(1, c)], timeout=30)
            assert replies[0]["ok"] and replies[1]["ok"], replies
            assert (replies[0]["seq"], replies[0]["value"]) == (replies[1]["seq"], replies[1]["value"]), replies
            assert replies[0]["value"] == round_ + 1, replies
        head = head_of(hubs[0])
        wait_for_head(hubs, head)
        for hub in hubs:
            assert rest(hub, "GET", record_path("idem/counter")).json()["data"] == {"n": 10}
        assert len(changes_after(hubs[1], 0)) == head == 2 + 10
    finally:
        for connection in (a, b, c):
            connection.close()


def test_workflow_stats_agree_with_a_recount_on_every_hub(hub_cluster):
    """Random advances of the same orders through three hubs: each hub's
    stats record (kept in memory, moved back and forth as writes are run
    again) matches the orders as they are."""
    hubs = hub_cluster(3).hubs
    rng = random.Random(16)
    item = f"items/cl-{uid()}"
    setup = FailoverWriter(hubs, 0, "stats-setup", failover=False)
    setup.write({"op": "set", "name": item, "data": {"sku": item[6:], "stock": 1000}})
    orders = [f"orders/st-{i}" for i in range(24)]
    for i, order in enumerate(orders):
        setup.write({"op": "set", "name": order, "data": {"item": item, "qty": 1 + i % 3, "kind": "issue"}})
    staff = [FailoverWriter(hubs, i % 3, f"stats-staff-{i}", failover=False) for i in range(9)]
    plans = [[(rng.choice(orders), rng.choice(["in-progress", "ready", "delivered", "cancelled", None]))
              for _ in range(30)] for _ in staff]

    def work(i: int) -> None:
        for order, to in plans[i]:
            message = {"op": "advance", "name": order} | ({"to": to} if to else {})
            staff[i].write(message, expect=("illegal_transition", "conflict"))

    run_threads([lambda i=i: work(i) for i in range(len(staff))], timeout=90)
    assert sum(len(w.acks) for w in staff) > 20, "some advances went through"
    head = max(ack.reply["seq"] for writer in staff + [setup] for ack in writer.acks)
    wait_for_head(hubs, head)
    for hub in hubs:
        records = rest(hub, "GET", "/v1/records?prefix=orders/&limit=1000").json()["records"]
        counts = {stage: 0 for stage in ("received", "in-progress", "ready", "delivered", "cancelled")}
        for record in records:
            counts[record["data"]["stage"]] += 1
        stats = rest(hub, "GET", record_path("stats/orders")).json()["data"]
        assert (stats["counts"], stats["total"]) == (counts, len(orders)), (hub.url(), stats, counts)
        assert_timing_matches(stats, records, list(counts), {"delivered", "cancelled"}, hub.url())
        delivered = sum(r["data"]["qty"] for r in records if r["data"]["stage"] == "delivered")
        assert rest(hub, "GET", record_path(item)).json()["data"]["stock"] == 1000 - delivered
        open_orders = rest(hub, "GET", "/v1/lists/orders").json()["entries"]
        assert sorted(open_orders) == sorted(r["name"] for r in records
                                             if r["data"]["stage"] not in ("delivered", "cancelled")), hub.url()


def test_list_entries_added_on_three_hubs_reach_every_list_subscriber(hub_cluster):
    hubs = hub_cluster(3).hubs
    name = f"queue/{uid()}"
    subscribers = [FailoverSubscriber(hubs, h, f"list-sub-{h}-{i}", {"list": name}, failover=False)
                   for h in range(3) for i in range(2)]
    subscribe_all(subscribers)
    writers = [FailoverWriter(hubs, w % 3, f"list-writer-{w}", failover=False) for w in range(6)]
    removed: list[str] = []

    def write(w: int) -> None:
        for k in range(15):
            entry = f"e{w}-{k}"
            message = {"op": "addEntry", "list": name, "entry": entry} | ({"at": 0} if k % 5 == 0 else {})
            writers[w].write(message)
            if k % 4 == 3:
                writers[w].write({"op": "removeEntry", "list": name, "entry": f"e{w}-{k - 1}"})
                removed.append(f"e{w}-{k - 1}")

    run_threads([lambda w=w: write(w) for w in range(len(writers))], timeout=60)
    head = max(ack.reply["seq"] for writer in writers for ack in writer.acks)
    assert head == sum(len(w.acks) for w in writers), "one change per list write"
    follow_all(subscribers, lambda: head, budget=30)
    added = {f"e{w}-{k}" for w in range(6) for k in range(15)}
    final = rest(hubs[0], "GET", f"/v1/lists/{name}").json()
    assert sorted(final["entries"]) == sorted(added - set(removed)) and final["version"] == head
    for hub in hubs[1:]:
        assert rest(hub, "GET", f"/v1/lists/{name}").json() == final
    for subscriber in subscribers:
        assert subscriber.raw == subscribers[0].raw, f"{subscriber.name}: not the bytes {subscribers[0].name} got"
        entries: list[str] = []
        for seq in range(1, head + 1):
            change = subscriber.changes[seq]
            if change["kind"] == "addEntry":
                entries.insert(change["index"], change["entry"])
            else:
                assert change["kind"] == "removeEntry", change
                for index in reversed(change["indexes"]):
                    assert entries.pop(index) == change["entry"], change
        assert entries == final["entries"], f"{subscriber.name}: the pushes do not make the list"


# --------------------------------------------------------------------------
# Faults: a hub killed, PostgreSQL away, sessions terminated


def test_a_hub_killed_under_load_loses_nothing_and_its_clients_resume_elsewhere(hub_cluster, load_factory,
                                                                                   tmp_path):
    hubs = hub_cluster(3).hubs
    victim = hubs[1]
    # The CLI too: `tally watch` on the victim first, the others after it.
    order = [hubs[1], hubs[0], hubs[2]]
    watcher = LongRunning(["watch", "kill/", "--json", "--server", ",".join(h.ws_url("") for h in order)],
                          cli_env(tmp_path))
    try:
        wait_until(lambda: metric(victim, "tally_subscriptions") == 1, 15, "the watcher's subscription")
        load = load_factory(hubs, "kill/", writers_on=[0, 1, 2, 0, 1, 2], subscribers_on=[0, 1, 2, 0, 1, 2])
        load.start()
        load.wait_for_acks(150)
        victim.kill()
        load.wait_for_acks(300)
        load.finish([hubs[0], hubs[2]])
        log = load.check(hubs[0])
        assert changes_after(hubs[2], 0) == log
        moved = [w for w in load.writers if w.reconnects]
        assert len(moved) >= 2, f"the writers of the killed hub moved to another: {load.stats()}"
        assert all(w.acks[-1].hub != 1 for w in load.writers)
        resumed = [s for s in load.subscribers if s.resumes]
        assert len(resumed) >= 2 and all(hub != 1 for s in resumed for hub, _ in s.resumes), load.stats()
        # The watcher printed every change once, in order, across the move.
        printed = [watcher.json_line(15) for _ in log]
        assert printed == log, "tally watch printed the log, no change twice or missing"
        assert f"127.0.0.1:{hubs[0].port}" in watcher.stderr_matching("reconnected to", timeout=5)
    finally:
        watcher.stop()


def test_postgres_away_for_10_s_answers_unavailable_and_loses_nothing(hub_cluster, load_factory):
    cluster = hub_cluster(3)
    hubs = cluster.hubs
    pids = [hub.pid for hub in hubs]
    load = load_factory(hubs, "outage/", writers_on=[0, 1, 2, 0, 1, 2], subscribers_on=[0, 1, 2, 0, 1, 2],
                        rest_on=[0, 1, 2])
    load.start()
    load.wait_for_acks(60)
    cluster.pg.stop_server()
    stopped_at = time.monotonic()
    for hub in hubs:
        wait_until(lambda: health(hub)[0] == 503, 10, f"{hub.url()}/healthz to answer 503")
        response = rest(hub, "GET", "/healthz")
        body = response.json()
        assert body["status"] == "unavailable" and body["storeReachable"] is False, body
        assert response.header("Retry-After"), response.headers
        assert metric(hub, "tally_store_reachable") == 0
    wait_until(lambda: all(w.retried.get("unavailable") for w in load.writers) or load.errors, 10,
               "every writer to be told `unavailable`")
    wait_until(lambda: all(refusals for refusals in load.rest_refusals) or load.errors, 10,
               "every REST writer to get 503")
    load.raise_errors()
    acks_during = load.acks()
    # A client that subscribes now, and two that lose their connection and
    # must resume, wait for PostgreSQL like the writers.
    late = load.add_subscriber(1)
    dropped = load.subscribers[:2]
    for subscriber in dropped:
        subscriber.drop()
    # The one deliberate wait: the outage lasts 10 s.
    time.sleep(max(0.0, 10 - (time.monotonic() - stopped_at)))
    assert load.acks() == acks_during, "nothing is acknowledged while PostgreSQL is away"
    assert [hub.pid for hub in hubs] == pids and all(hub.alive() for hub in hubs), "the hubs stay up"
    cluster.pg.start_server()
    for hub in hubs:
        wait_until(lambda: health(hub)[0] == 200, 15, f"{hub.url()}/healthz to answer 200 again")
    load.wait_for_acks(60)
    load.finish(hubs)
    log = load.check(hubs[0])
    for hub in hubs[1:]:
        assert changes_after(hub, 0) == log
    for writer in load.writers:
        assert set(writer.retried) == {"unavailable"}, f"{writer.name} was refused with {writer.retried}"
    assert late.snapshot is not None and all(s.resumes for s in dropped), load.stats()
    for subscriber in [late, *dropped]:
        assert set(subscriber.retried) == {"unavailable"}, f"{subscriber.name}: {subscriber.retried}"
    for refusals in load.rest_refusals:
        for status, retry_after, code in refusals:
            assert (status, code) == (503, "unavailable") and retry_after, refusals
    assert all(hub.alive() for hub in hubs) and [hub.pid for hub in hubs] == pids


def test_a_hub_whose_sessions_are_terminated_catches_up_and_goes_on(hub_cluster, load_factory):
    cluster = hub_cluster(3)
    hubs = cluster.hubs
    # Hub 2 only follows: it must catch up on the others' writes.
    load = load_factory(hubs, "term/", writers_on=[0, 1, 0, 1], subscribers_on=[0, 1, 2, 2])
    load.start()
    load.wait_for_acks(40)
    for _ in range(3):
        assert cluster.pg.terminate_sessions() >= 3, "each hub has sessions named tally-store-…"
        load.wait_for_acks(40)
    load.finish(hubs)
    log = load.check(hubs[2])
    assert changes_after(hubs[0], 0) == log
    for hub in hubs:
        status, body = health(hub)
        assert status == 200 and body["storeLag"] == 0, body
    assert not any(s.resumes for s in load.subscribers), "a lost PostgreSQL session is no client's business"
    wait_until(lambda: cluster.pg.sessions() >= 3, 10, "the hubs to open their sessions again")


def test_a_frozen_hub_holds_the_others_up_no_longer_than_the_idle_transaction_timeout(
        pg_server, hub_cluster, load_factory):
    """A hub that stops running inside a group commit (a long pause, a
    partition) holds the head row's lock, and every other hub's commits wait
    for it. The hub's writer session sets idle_in_transaction_session_timeout
    (5 s), so PostgreSQL ends that session after so long and the others go
    on; the frozen hub, running again, reconnects, catches up and loses
    nothing."""
    timeout = 5  # PostgresStore.writerIdleInTransactionMillis
    hubs = hub_cluster(2).hubs
    frozen = hubs[0]
    # Only the frozen hub writes, so a writer session inside a transaction is its.
    load = load_factory(hubs, "frozen/", writers_on=[0, 0, 0], subscribers_on=[0, 1, 1])
    load.start()
    load.wait_for_acks(50)
    other = Connection(hubs[1], "other", timeout + 10)

    def other_waits_for_the_lock() -> bool:
        rows = pg_server.sql("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tally-store-writer' "
                             "AND wait_event_type = 'Lock'")
        return int(rows[0][0]) > 0

    def answer(reply: dict) -> None:
        assert reply.get("ok"), reply
        load.extra.append(("frozen/other", reply["seq"]))

    try:
        # Freeze the hub, then write on the other: caught when that write
        # waits for the row lock the frozen hub holds, else try again.
        for attempt in range(100):
            frozen.send_signal(signal.SIGSTOP)
            sent_at = time.monotonic()
            other.ws.send(json.dumps({"op": "increment", "name": "frozen/other", "path": "n", "id": attempt}))
            caught = False
            while not caught:
                try:
                    reply = json.loads(other.ws.recv(timeout=0.05))
                    break
                except TimeoutError:
                    caught = other_waits_for_the_lock()
                    assert caught or time.monotonic() < sent_at + timeout, "the write waits for something else"
            if caught:
                break
            answer(reply)
            frozen.send_signal(signal.SIGCONT)
            load.wait_for_acks(1)  # the hub moves on before the next try
        else:
            pytest.fail("never caught the hub inside a group commit")
        answer(json.loads(other.ws.recv(timeout=timeout + 5)))
        waited = time.monotonic() - sent_at
        assert timeout - 1 < waited < timeout + 5, f"the other hub's write waited {waited:.1f}s"
    finally:
        if frozen.alive():
            os.kill(frozen.pid, signal.SIGCONT)
        other.close()
    load.wait_for_acks(50)
    load.finish(hubs)
    log = load.check(hubs[1])
    assert changes_after(hubs[0], 0) == log


# --------------------------------------------------------------------------
# scripts/cluster.sh


def free_port_run(count: int) -> int:
    """A base port P with P…P+count-1 free on 127.0.0.1 now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no run of free ports")


def cluster_sh(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "TALLY_BIN": str(TALLY_BIN)}
    return subprocess.run(["bash", str(REPO / "scripts" / "cluster.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def test_cluster_sh_starts_three_hubs_with_the_demo_and_stops_them(tmp_path):
    directory = tmp_path / "cluster"
    base = free_port_run(3)
    started = cluster_sh("start", str(directory), "--base-port", str(base))
    pid_files = sorted(directory.glob("hub-*/pid"))
    pids = [int(p.read_text()) for p in pid_files]
    pg_dir = (directory / "postgres.dir").read_text().strip() if (directory / "postgres.dir").exists() else None
    try:
        assert started.returncode == 0, started.stderr
        urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
        assert started.stdout.split() == urls, started.stdout
        assert len(pids) == 3 and all(os.path.exists(f"/proc/{pid}") for pid in pids), pids

        class Hub:  # what synclib.rest needs of a server
            tls = False

            def __init__(self, port):
                self.host, self.port = "127.0.0.1", port

        cluster = [Hub(base + i) for i in range(3)]
        for hub in cluster:
            assert health(hub)[0] == 200
            peers = rest(hub, "GET", "/v1/hubs").json()["hubs"]
            assert peers == [f"ws://127.0.0.1:{other.port}/v1/ws" for other in cluster if other is not hub], peers

        def items(hub) -> list[str]:
            return sorted(r["name"] for r in rest(hub, "GET", "/v1/records?prefix=items/").json()["records"])

        demo = wait_until(lambda: len(items(cluster[0])) >= 8 and items(cluster[0]), 30, "the demo's items")
        for hub in cluster[1:]:
            wait_until(lambda: items(hub) == demo, 10, f"the demo's items on port {hub.port}")
        # Their photos too: they live in the database, not in the first hub's --data.
        cover = rest(cluster[0], "GET", record_path(demo[0])).json()["data"]["cover"]
        photo = rest(cluster[0], "GET", f"/v1/blobs/{cover}")
        assert photo.status == 200 and photo.body, photo.status
        for hub in cluster[1:]:
            assert rest(hub, "GET", f"/v1/blobs/{cover}").body == photo.body, f"the cover on port {hub.port}"

        # Usage errors: exit 2 and a message; nothing started or stopped.
        for args in [(), ("start",), ("stop",), ("restart", str(directory)),
                     ("start", str(tmp_path / "x"), "--base-port", "70000"),
                     ("start", str(tmp_path / "x"), "--base-port"), ("start", str(tmp_path / "x"), "--bogus")]:
            refused = cluster_sh(*args, timeout=30)
            assert refused.returncode == 2 and "usage:" in refused.stderr, (args, refused)
        again = cluster_sh("start", str(directory), "--base-port", str(base))
        assert again.returncode == 1 and "not empty" in again.stderr, again
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)

        stopped = cluster_sh("stop", str(directory))
        assert stopped.returncode == 0, stopped.stderr
        assert not directory.exists()
        assert not any(os.path.exists(f"/proc/{pid}") for pid in pids), "stop leaves no hub running"
        assert pg_dir and not os.path.exists(pg_dir), "stop removes the PostgreSQL server"
        not_ours = cluster_sh("stop", str(tmp_path))
        assert not_ours.returncode == 1 and "not made by" in not_ours.stderr, not_ours
    finally:
        if directory.exists():
            cluster_sh("stop", str(directory))
        for pid in pids:  # only the hubs this test started, by PID
            if os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGKILL)

"""`tally serve --demo` (README, `tally serve`), black box:

- the hub seeds sample items (`items/drill-01` …) whose cover photos are
  served at `/v1/blobs/<sha>` as image/png with that SHA-256, orders spread
  over the stages and intake jobs, all with the workflow's stage, history
  and owner, listed and counted;
- within 15 s a WebSocket subscriber to `stats/orders` and to the prefix
  `orders/` sees the simulator's changes pushed;
- `stats/orders` and `stats/intake` equal a recount of the records (their
  waits per stage and finished per hour too);
- restarted on the same `--data`, the hub does not seed again (no seed item
  is written again, the items are the same) and the simulator carries on.

Every hub runs with `--demo-interval 0.2` (fast moves), binds 127.0.0.1
(conftest), keeps its data in a temporary directory and is stopped by its
PID; every wait is bounded.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
import urllib.parse
from collections import Counter

import pytest

from authlib import INTAKE_STAGES, INTAKE_TERMINAL, ORDER_STAGES, ORDER_TERMINAL
from synclib import all_changes, get_record, list_path, rest
from timinglib import assert_timing_matches

DEMO_ITEMS = ["drill-01", "saw-02", "ladder-03", "meter-04", "gloves-05", "helmet-06", "tape-07", "reel-08"]
DEMO_ORDERS = [f"orders/demo-{n}" for n in range(1, 9)]
DEMO_STAFF = {"ana", "ben", "sam", "lea"}
SEED_TIMEOUT = 30.0  # the seed draws and stores a dozen PNGs (slow in a debug build)
PUSH_TIMEOUT = 15.0
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def demo_hub(tally_factory, tmp_path):
    return tally_factory("--demo", "--demo-interval", "0.2", "--data", str(tmp_path / "demo-data"))


def records(server, prefix: str) -> tuple[int, list[dict]]:
    """(head seq, every record under ``prefix``), by REST pages of 1000.
    One page is one consistent read; callers that need consistency across
    pages check for it."""
    out: list[dict] = []
    after = None
    head = None
    for _ in range(100):
        query = {"prefix": prefix, "limit": "1000", **({"after": after} if after else {})}
        response = rest(server, "GET", "/v1/records?" + urllib.parse.urlencode(query))
        assert response.status == 200, (response.status, response.body[:300])
        page = response.json()
        head = page["seq"] if head is None else head
        out += page["records"]
        if not page["more"]:
            return head, out
        after = page["records"][-1]["name"]
    raise AssertionError(f"more than 100 pages under {prefix}")


def record(server, name: str) -> dict | None:
    response = get_record(server, name)
    if response.status == 404:
        return None
    assert response.status == 200, (name, response.status, response.body[:300])
    return response.json()


def head(server) -> int:
    response = rest(server, "GET", "/v1/changes?since=0&limit=1")
    assert response.status == 200, response.status
    return response.json()["seq"]


def wait_for_seed(server) -> None:
    """Until the seed is in: every sample item, the eight sample orders and
    at least three intake jobs (the simulator only starts once they are)."""
    deadline = time.monotonic() + SEED_TIMEOUT
    while True:
        _, items = records(server, "items/")
        _, orders = records(server, "orders/")
        _, jobs = records(server, "intake/")
        item_names = {r["name"] for r in items}
        order_names = {r["name"] for r in orders}
        if {f"items/{i}" for i in DEMO_ITEMS} <= item_names and set(DEMO_ORDERS) <= order_names \
                and len(jobs) >= 3:
            return
        assert server.alive(), f"the hub died while seeding; stderr:\n{server.stderr()[-3000:]}"
        assert time.monotonic() < deadline, (
            f"the demo did not seed within {SEED_TIMEOUT}s: {len(items)} items, {sorted(order_names)}, "
            f"{len(jobs)} intake jobs")
        time.sleep(0.2)


def fetch_blob(server, sha: str) -> bytes:
    response = rest(server, "GET", f"/v1/blobs/{sha}")
    assert response.status == 200, (sha, response.status, response.body[:300])
    assert response.header("content-type") == "image/png", response.headers
    assert response.header("etag") == f'"{sha}"', response.headers
    body = response.body
    assert hashlib.sha256(body).hexdigest() == sha, f"blob {sha}: the bytes hash differently"
    assert body.startswith(PNG_SIGNATURE), body[:16]
    length, kind, width, height = struct.unpack(">I4sII", body[8:24])
    assert kind == b"IHDR" and width > 0 and height > 0, body[8:24]
    return body


def check_workflow_record(envelope: dict, stages: list[str]) -> None:
    data = envelope["data"]
    name = envelope["name"]
    assert data.get("stage") in stages, (name, data)
    history = data.get("history")
    assert isinstance(history, list) and history, (name, data)
    assert history[0]["from"] is None and history[0]["to"] == stages[0], (name, history)
    for before, after in zip(history, history[1:]):
        assert after["from"] == before["to"], (name, history)
    assert history[-1]["to"] == data["stage"], (name, history)
    assert data.get("owner") in DEMO_STAFF, (name, data.get("owner"))
    assert all(entry["actor"] in DEMO_STAFF for entry in history), (name, history)


# --------------------------------------------------------------------------


def test_the_demo_seeds_items_with_photos_orders_and_intake_jobs(tally_factory, tmp_path):
    server = demo_hub(tally_factory, tmp_path)
    wait_for_seed(server)

    for item_id in DEMO_ITEMS:
        data = record(server, f"items/{item_id}")["data"]
        assert data["sku"] == item_id.upper(), data
        assert isinstance(data["name"], str) and data["name"], data
        assert isinstance(data["location"], str) and data["location"], data
        assert isinstance(data["stock"], int) and data["stock"] >= 0, data
        assert isinstance(data["serials"], list) and data["serials"], data
        assert data["photos"] and data["cover"] in data["photos"], data
        fetch_blob(server, data["cover"])
    # An unknown blob is 404.
    assert rest(server, "GET", "/v1/blobs/" + "0" * 64).status == 404

    _, orders = records(server, "orders/")
    by_name = {r["name"]: r for r in orders}
    for name in DEMO_ORDERS:
        order = by_name[name]
        check_workflow_record(order, ORDER_STAGES)
        data = order["data"]
        assert data["item"] in {f"items/{i}" for i in DEMO_ITEMS}, data
        assert isinstance(data["qty"], int) and data["qty"] >= 1, data
        assert data["kind"] in ("issue", "receive"), data
    # Spread over the board, not all in one stage.
    assert len({by_name[name]["data"]["stage"] for name in DEMO_ORDERS}) >= 2

    _, jobs = records(server, "intake/")
    assert len(jobs) >= 3
    photos = []
    for job in jobs:
        check_workflow_record(job, INTAKE_STAGES)
        assert job["data"]["item"].startswith("items/"), job
        photos += job["data"].get("photos", [])
    assert photos, "no intake job has photos yet (the seed moves one to media-uploaded)"
    fetch_blob(server, photos[0])

    # The workflows' lists hold the open ones, and stats records exist. The
    # simulator moves records meanwhile, but never back to an open stage:
    # what is open after the list was read was open, and listed, before.
    listed = rest(server, "GET", list_path("orders")).json()["entries"]
    listed_jobs = rest(server, "GET", list_path("intake")).json()["entries"]
    _, orders_after = records(server, "orders/")
    _, jobs_after = records(server, "intake/")
    open_orders = {r["name"] for r in orders_after if r["data"]["stage"] not in ORDER_TERMINAL}
    assert {name for name in DEMO_ORDERS if name in open_orders} <= set(listed), listed
    assert all(name.startswith("orders/") for name in listed), listed
    open_jobs = {r["name"] for r in jobs_after if r["data"]["stage"] not in INTAKE_TERMINAL}
    assert open_jobs & {job["name"] for job in jobs} <= set(listed_jobs), listed_jobs
    assert record(server, "stats/orders") is not None
    assert record(server, "stats/intake") is not None


def test_a_subscriber_sees_the_simulator_move_orders(tally_factory, tmp_path, sync_client):
    server = demo_hub(tally_factory, tmp_path)
    wait_for_seed(server)
    client = sync_client(server, hello={"client": "demo-watcher"})
    reply = client.ok("subscribe", name="stats/orders")
    assert reply["record"] is not None and "counts" in reply["record"]["data"], reply
    client.ok("subscribe", prefix="orders/")

    seen_stats = seen_order = None
    deadline = time.monotonic() + PUSH_TIMEOUT
    while seen_stats is None or seen_order is None:
        remaining = deadline - time.monotonic()
        assert remaining > 0, (f"within {PUSH_TIMEOUT}s: stats/orders push {seen_stats is not None}, "
                               f"orders/ push {seen_order is not None}")
        try:
            push = client.next_push(remaining)
        except TimeoutError:
            continue
        if push["op"] != "change":
            continue
        name = push.get("name", "")
        if name == "stats/orders":
            seen_stats = push
        elif name.startswith("orders/"):
            seen_order = push
    assert seen_stats["kind"] == "set" and "counts" in seen_stats["data"], seen_stats.message


def recount_matches(server, prefix: str, stats_name: str, stages: list[str], terminal: set[str],
                    timeout: float = PUSH_TIMEOUT) -> dict:
    """Reads the stats record, every record under the prefix, and the stats
    record again, until the stats did not change in between (no workflow
    change then: each one rewrites the stats in its commit); then compares
    the stats with a recount. Returns the stats."""
    deadline = time.monotonic() + timeout
    while True:
        before = record(server, stats_name)
        _, flows = records(server, prefix)
        after = record(server, stats_name)
        if before and after and before["version"] == after["version"]:
            break
        assert time.monotonic() < deadline, f"{stats_name} kept changing for {timeout}s"
    stats = after["data"]
    counts = Counter(r["data"]["stage"] for r in flows)
    assert stats["counts"] == {stage: counts.get(stage, 0) for stage in stages}, (stats["counts"], counts)
    assert stats["total"] == len(flows) == sum(stats["counts"].values()), stats
    assert set(stats["stageTime"]) == set(stages), stats["stageTime"]
    open_records = [r for r in flows if r["data"]["stage"] not in terminal]
    if open_records:
        oldest = min(r["created"] for r in open_records)
        assert stats["oldestOpen"]["created"] == oldest, (stats["oldestOpen"], oldest)
        assert stats["oldestOpen"]["name"] in {r["name"] for r in open_records if r["created"] == oldest}
    else:
        assert stats["oldestOpen"] is None, stats
    # The waits per stage and the finished per hour (issue 17).
    assert_timing_matches(stats, flows, stages, terminal, stats_name)
    return stats


def test_the_stats_equal_a_recount(tally_factory, tmp_path):
    server = demo_hub(tally_factory, tmp_path)
    wait_for_seed(server)
    first = recount_matches(server, "orders/", "stats/orders", ORDER_STAGES, ORDER_TERMINAL)
    recount_matches(server, "intake/", "stats/intake", INTAKE_STAGES, INTAKE_TERMINAL)
    # Again once the simulator has moved things along.
    deadline = time.monotonic() + PUSH_TIMEOUT
    while record(server, "stats/orders")["data"]["updated"] == first["updated"]:
        assert time.monotonic() < deadline, f"stats/orders did not change within {PUSH_TIMEOUT}s"
        time.sleep(0.2)
    recount_matches(server, "orders/", "stats/orders", ORDER_STAGES, ORDER_TERMINAL)


def test_the_hub_analyses_the_simulated_intake_jobs(tally_factory, tmp_path):
    """The simulator leaves a job at media-uploaded to the hub's own photo
    analysis: each job that reaches analyzed got there by the hub (actor
    `hub`), with the analysis of every photo it was uploaded with, and the
    serial on its first photo's label proposed."""
    server = demo_hub(tally_factory, tmp_path)
    wait_for_seed(server)
    deadline = time.monotonic() + 90
    while True:
        _, jobs = records(server, "intake/")
        analysed = [j for j in jobs if any(h["to"] == "analyzed" for h in j["data"]["history"])]
        if len(analysed) >= 2:
            break
        assert time.monotonic() < deadline, f"fewer than 2 intake jobs reached analyzed: {len(analysed)}"
        time.sleep(0.5)
    for job in analysed:
        data = job["data"]
        [entry] = [h for h in data["history"] if h["to"] == "analyzed"]
        assert entry["actor"] == "hub" and entry["from"] == "media-uploaded", (job["name"], data["history"])
        analysis = data["analysis"]
        assert analysis["status"] == "done", (job["name"], analysis)
        assert [p["sha256"] for p in analysis["photos"]] == data["photos"], (job["name"], data)
        # The first photo shows a serial label (a Data Matrix): read and proposed.
        [code] = analysis["codes"]
        assert code["symbology"] == "DataMatrix" and code["photo"] == data["photos"][0], (job["name"], analysis)
        assert re.fullmatch(r"SN-\d+", code["code"]) and analysis["proposals"]["serials"] == [code["code"]], analysis


def test_a_restart_does_not_seed_again_and_the_simulator_continues(tally_factory, tmp_path, sync_client):
    server = demo_hub(tally_factory, tmp_path)
    wait_for_seed(server)
    _, items = records(server, "items/")
    seed_names = {f"items/{i}" for i in DEMO_ITEMS}
    seed_items = {r["name"]: r for r in items if r["name"] in seed_names}
    assert len(seed_items) == len(DEMO_ITEMS)
    # Intake makes items too (items/new-…); the rest are the sample items.
    assert {r["name"] for r in items if not r["name"].startswith("items/new-")} == seed_names
    item_names = {r["name"] for r in items}
    before_stop = head(server)  # the simulator writes on; none of it sets a sample item

    restarted = tally_factory.restart(server)
    _, items_after = records(restarted, "items/")
    names_after = {r["name"] for r in items_after}
    assert item_names <= names_after
    assert {name for name in names_after if not name.startswith("items/new-")} == seed_names, names_after

    # The simulator carries on: pushes arrive on stats/orders.
    client = sync_client(restarted, hello={"client": "demo-watcher"})
    client.ok("subscribe", name="stats/orders")
    pushes = 0
    deadline = time.monotonic() + PUSH_TIMEOUT
    while pushes < 2:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{pushes} stats/orders pushes within {PUSH_TIMEOUT}s of the restart"
        try:
            push = client.next_push(remaining)
        except TimeoutError:
            continue
        if push.get("name") == "stats/orders":
            pushes += 1

    # A second seed would have set every sample item again (the simulator
    # only ever changes their stock, by path).
    _, _, changes = all_changes(restarted, since=before_stop)
    assert changes, "no change at all since the restart"
    seed_writes = [(c["seq"], c.get("name"), c["kind"]) for c in changes
                   if c.get("name") in seed_names and c["kind"] != "setPath"]
    assert not seed_writes, f"the restarted demo wrote its sample items again: {seed_writes}"
    for name, before in seed_items.items():
        now = record(restarted, name)
        assert now["created"] == before["created"], (name, before["created"], now["created"])
        assert {k: v for k, v in now["data"].items() if k != "stock"} == \
            {k: v for k, v in before["data"].items() if k != "stock"}, name
    _, items_final = records(restarted, "items/")
    assert {r["name"] for r in items_final if not r["name"].startswith("items/new-")} == seed_names
    assert restarted.alive()


@pytest.mark.parametrize("args, message", [
    (["--demo-interval", "0.2"], "--demo-interval goes with --demo"),
    (["--demo", "--demo-interval", "soon"], "--demo-interval"),
])
def test_demo_interval_usage_errors(tmp_path, args, message):
    import subprocess

    from conftest import TALLY_BIN
    done = subprocess.run([str(TALLY_BIN), "serve", "--host", "127.0.0.1", "--port", "0",
                           "--data", str(tmp_path / "d"), *args],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=10, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert message in done.stderr.decode(), done.stderr

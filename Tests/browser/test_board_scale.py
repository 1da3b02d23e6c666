"""The board with a stock room's history (issue "History at scale"): a hub
holding many delivered orders, many items and 50 open orders, filled
through the API.

- the 50 open cards and the items view's first page (20 items) are drawn
  within 1 s of the page's load;
- the page's JS heap stays under 30 MB;
- what the hub sends the page while it loads does not grow with history:
  the same board over 10x the delivered orders costs about the same bytes
  (`tally_bytes_out_total` around the load).

Sizes: TALLY_BOARD_HISTORY (default 10,000 delivered orders) and
TALLY_BOARD_ITEMS (default 1,000 items); the small hub holds a tenth of
each. BENCHMARKS.md records the run with 1,000,000 orders and 100,000 items
on a release build: `TALLY_BIN=.build/release/tally
TALLY_BOARD_HISTORY=1000000 TALLY_BOARD_ITEMS=100000 …`.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
import urllib.request

from websockets.sync.client import connect

from conftest import wait_until

HISTORY = int(os.environ.get("TALLY_BOARD_HISTORY", "10000"))
ITEMS = int(os.environ.get("TALLY_BOARD_ITEMS", "1000"))
OPEN = 50
ITEM_ROWS = 20  # the items view's page
BATCH = 1000  # orders per write group (the protocol's most ops per write)
WINDOW = 8  # write groups in flight


def fill(server, delivered: int, open_orders: int, items: int = 0) -> None:
    """`items` items, `delivered` orders taken through every stage and
    `open_orders` left received, through atomic write groups pipelined on
    one connection (a workflow record may change once per write: one group
    per stage)."""
    # No keepalive pings: a hub busy with 1,000-order groups on a loaded
    # machine may answer one late, and the replies are waited for anyway.
    with connect(server.ws_url("/v1/ws"), max_size=None, ping_interval=None) as ws:
        pending = 0
        sent = 0

        def send(ops):
            nonlocal pending, sent
            sent += 1
            ws.send(json.dumps({"id": sent, "op": "write", "ops": ops}))
            pending += 1
            while pending >= WINDOW:
                receive()

        def receive():
            nonlocal pending
            reply = json.loads(ws.recv(timeout=120))
            assert reply.get("ok") is True, str(reply)[:500]
            pending -= 1

        send([{"op": "set", "name": "items/bolt", "data": {"name": "Bolt", "sku": "B-1", "stock": 10}}])
        for start in range(0, items, BATCH):
            send([{"op": "set", "name": f"items/p{n:07}", "data": {
                "name": f"Part {n} steel {('bracket', 'hinge', 'washer', 'spring')[n % 4]}", "sku": f"P-{n}",
                "serials": [f"SN-{n}"], "location": f"Aisle {n % 40} bin {n % 97}", "stock": n % 50}}
                for n in range(start, min(items, start + BATCH))])
        for start in range(0, delivered, BATCH):
            names = [f"orders/h{n:07}" for n in range(start, min(delivered, start + BATCH))]
            send([{"op": "set", "name": n, "data": {"item": "items/bolt", "qty": 1, "kind": "receive"}} for n in names])
            for stage in ("in-progress", "ready", "delivered"):
                send([{"op": "advance", "name": n, "to": stage} for n in names])
        send([{"op": "set", "name": f"orders/open-{n:03}", "data": {"item": "items/bolt", "qty": 1}}
              for n in range(open_orders)])
        while pending:
            receive()


def bytes_out(server) -> int:
    with urllib.request.urlopen(server.url("/metrics"), timeout=10) as response:
        text = response.read().decode()
    return int(float(re.search(r"^tally_bytes_out_total (\S+)$", text, re.M).group(1)))


def load_board(driver, server) -> dict:
    """Opens the board; returns when the open cards are drawn: how long
    after the page's load that was, the JS heap, and the bytes the hub sent
    meanwhile (after the item subscriptions settle)."""
    before = bytes_out(server)
    driver.get(server.url("/?linger=60"))
    drawn = {}

    def cards_drawn() -> bool:
        drawn.update(driver.execute_script("""
            const open = document.querySelectorAll('#order-board .card[data-terminal="false"]').length;
            const rows = document.querySelectorAll('#item-list .item-row').length;
            const nav = performance.getEntriesByType("navigation")[0];
            return {open, rows, now: performance.now(), loaded: nav ? nav.loadEventEnd : 0};"""))
        return drawn["open"] >= OPEN and drawn["rows"] >= ITEM_ROWS and drawn["loaded"] > 0

    wait_until(f"{OPEN} open cards and {ITEM_ROWS} items", cards_drawn, timeout=30, interval=0.005)
    assert driver.find_element("id", "items").is_displayed(), "the items view is on the page"
    wait_until("every card's item", lambda: driver.execute_script(
        "return [...document.querySelectorAll('#order-board .card .item')].every(e => e.textContent === 'Bolt')"))
    # Done loading once the hub sends nothing between two reads of /metrics
    # but the /metrics answer itself (the same size, give or take a digit).
    sent = [bytes_out(server), bytes_out(server)]

    def quiet() -> bool:
        sent.append(bytes_out(server))
        return abs((sent[-1] - sent[-2]) - (sent[-2] - sent[-3])) <= 16

    wait_until("the hub to stop sending", quiet, interval=0.2)
    heap = driver.execute_cdp_cmd("Runtime.getHeapUsage", {})["usedSize"]
    return {"render_ms": drawn["now"] - drawn["loaded"], "heap": heap, "bytes": bytes_out(server) - before}


def test_the_board_costs_the_same_whatever_the_history(hubs, browser, tmp_path):
    small = hubs("--data", str(tmp_path / "small"))
    fill(small, HISTORY // 10, OPEN, ITEMS // 10)
    large = hubs("--data", str(tmp_path / "large"))
    started = time.monotonic()
    fill(large, HISTORY, OPEN, ITEMS)
    fill_seconds = time.monotonic() - started

    light = load_board(browser(), small)
    heavy = load_board(browser(), large)
    print(f"\nboard with {HISTORY} delivered orders and {ITEMS} items (filled in {fill_seconds:.1f} s): "
          f"open cards and items drawn {heavy['render_ms']:.0f} ms after load, heap {heavy['heap'] / 1e6:.1f} MB, "
          f"{heavy['bytes']} bytes at load; with {HISTORY // 10}: {light['render_ms']:.0f} ms, "
          f"{light['heap'] / 1e6:.1f} MB, {light['bytes']} bytes")
    # Searching the items costs the same whatever their number: a serial,
    # words of names, an id's beginning (median of 5, over HTTP).
    some = ITEMS * 2 // 3
    for query in (f"SN-{some}", "steel hing", f"p{some:07}"[:-1]):
        took = []
        for _ in range(5):
            began = time.monotonic()
            with urllib.request.urlopen(large.url(f"/v1/items?q={urllib.parse.quote(query)}&limit=20"), timeout=10) as response:
                assert json.loads(response.read())["items"], query
            took.append((time.monotonic() - began) * 1000)
        took.sort()
        print(f"search {query!r} over {ITEMS} items: {took[2]:.1f} ms")
        assert took[2] < 250, (query, took)
    assert heavy["render_ms"] < 1000, heavy
    assert heavy["heap"] < 30e6, heavy
    # The recent-finished query and the stats make a small fixed part; ten
    # times the history must not show in the bytes.
    assert heavy["bytes"] < light["bytes"] * 1.2 + 4096, (light, heavy)

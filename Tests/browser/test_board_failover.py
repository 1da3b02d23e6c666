"""The board on a real cluster (issue 16): three hubs on one PostgreSQL
database, the page served by hub A, whose `--peers` (GET /v1/hubs) name B
and C, which name A (so they take its page's connections).

- orders made and moved through B and C appear on the board live, pushed
  by A;
- A is frozen (SIGSTOP: its connection to the page stays open and
  silent), orders are moved and made through B and C, then A is killed
  with SIGKILL: the JS client in Chromium moves to a peer, resumes there
  by seq (no snapshot), and the changes it missed come in the resume;
- changes made through another hub afterwards appear live;
- nothing is missed or seen twice: every WebSocket frame the page received
  is recorded (a wrapper of `WebSocket` installed before the page's
  scripts), and the changes of `stats/orders`, which every order change
  moves, reached the page version after version, none twice, up to the
  hub's; every card ends at the hub's version and stage.

Photos and /v1/workflows come from the hub that served the page, a known
limit: not checked after the failover. Every wait is bounded; hubs bind
127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import json
import signal

from selenium.webdriver.common.by import By

from conftest import cli, http_json, save_full_page, wait_until
from test_board import card, card_stage, connection_state, new_order, open_board

# Installed before any script of the page: every frame a WebSocket of the
# page receives, in order, with the URL it came from.
RECORD_FRAMES = """
window.tallyFrames = [];
const NativeWebSocket = window.WebSocket;
window.WebSocket = class extends NativeWebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    this.addEventListener("message", (event) => window.tallyFrames.push([String(url), event.data]));
  }
};
"""


def ws(hub) -> str:
    return f"ws://127.0.0.1:{hub.port}/v1/ws"


def hub_record(hub, name: str) -> dict:
    status, body = http_json(hub, "GET", f"/v1/records/{name}")
    assert status == 200, (status, body)
    return body


def frames(driver) -> list[tuple[str, dict]]:
    return [(url, json.loads(text)) for url, text in driver.execute_script("return window.tallyFrames")]


def stats_versions(received: list[tuple[str, dict]]) -> list[int]:
    """The versions of `stats/orders` the page was given, in order: its
    snapshot, then every change, pushed or replayed in a resume's reply."""
    versions = []
    for _, message in received:
        if (message.get("record") or {}).get("name") == "stats/orders":
            versions.append(message["record"]["version"])
        changes = message.get("changes") if message.get("ok") is True else [message]
        for change in changes or []:
            if change.get("op") == "change" and change.get("name") == "stats/orders":
                versions.append(change["version"])
    return versions


def test_board_moves_to_a_peer_when_its_hub_is_killed_and_misses_nothing(hubs, pg_database, browser, tmp_path):
    a = hubs("--store", pg_database, "--data", str(tmp_path / "a"))
    b = hubs("--store", pg_database, "--data", str(tmp_path / "b"), "--peers", ws(a))
    c = hubs("--store", pg_database, "--data", str(tmp_path / "c"), "--peers", ws(a))
    hubs.stop(a)
    a = hubs.start_again(a, "--peers", f"{ws(b)},{ws(c)}")
    cli(b, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 50}))
    orders = [new_order(b, "items/widget-1") for _ in range(3)]

    driver = browser()
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_FRAMES})
    open_board(driver, a, "?linger=600")
    assert driver.execute_script("return window.tallyBoard.hub.urls") == [ws(a), ws(b), ws(c)]
    assert driver.find_element(By.ID, "connection").get_attribute("data-hub") == ws(a)
    for order in orders:
        wait_until(f"{order} on the board", lambda: card_stage(driver, order) == "received")

    # Live: a change made through C is pushed to the page by A.
    cli(c, "order", "advance", orders[0])
    wait_until(f"{orders[0]} in progress, live", lambda: card_stage(driver, orders[0]) == "in-progress")

    # A stops answering (its connection to the page stays open), the cluster
    # goes on without it, then A dies.
    a.send_signal(signal.SIGSTOP)
    cli(b, "order", "advance", orders[1])
    cli(c, "order", "advance", orders[0])
    missed = new_order(c, "items/widget-1", 2)
    a.kill()

    wait_until("the board live on a peer", lambda: connection_state(driver) == "live"
               and driver.find_element(By.ID, "connection").get_attribute("data-hub") in (ws(b), ws(c)),
               timeout=20)
    moved_to = driver.execute_script("return window.tallyBoard.hub.url")
    assert moved_to in (ws(b), ws(c)), moved_to
    resnapshots = driver.execute_script(
        "return [...window.tallyBoard.hub.subscriptions].map(s => s.lastSnapshot && s.lastSnapshot.resnapshot)")
    assert not any(resnapshots), f"resumed from the last seen seq, no snapshot: {resnapshots}"
    wait_until(f"{missed}, made while the board's hub was frozen", lambda: card_stage(driver, missed) == "received")
    wait_until(f"{orders[1]} moved while away", lambda: card_stage(driver, orders[1]) == "in-progress")
    wait_until(f"{orders[0]} moved while away", lambda: card_stage(driver, orders[0]) == "ready")

    # Live on the peer: changes made through the other hub appear.
    other = c if moved_to == ws(b) else b
    cli(other, "order", "advance", orders[2])
    late = new_order(other, "items/widget-1", 3)
    wait_until(f"{late} made after the move", lambda: card(driver, late))
    wait_until(f"{orders[2]} moved after the move", lambda: card_stage(driver, orders[2]) == "in-progress")
    save_full_page(driver, "board-after-kill-9.png")

    # Every card at the hub's version and stage.
    for order in [*orders, missed, late]:
        record = hub_record(other, order)
        element = card(driver, order)
        assert (element.get_attribute("data-version"), element.get_attribute("data-stage")) == (
            str(record["version"]), record["data"]["stage"]), order

    # Nothing missed, nothing twice: stats/orders version after version, up
    # to the hub's; what A missed came in the resume on the peer.
    final = hub_record(other, "stats/orders")["version"]
    wait_until("stats/orders at the hub's version on the page",
               lambda: stats_versions(frames(driver))[-1] == final)
    received = frames(driver)
    versions = stats_versions(received)
    assert versions == list(range(versions[0], final + 1)), f"stats/orders versions seen: {versions}"
    on_peer = [m for url, m in received if url == moved_to]
    replayed = [change for m in on_peer if m.get("ok") is True for change in m.get("changes") or []]
    assert any(change.get("name") == "stats/orders" for change in replayed), (
        "the changes of stats/orders made while A was frozen came in the resume's reply")
    delta = [r["name"] for m in on_peer if m.get("ok") is True and m.get("delta") is True for r in m.get("records", [])]
    assert missed in delta, f"the order made while A was frozen came in the orders query's resume: {delta}"
    print(f"moved to {moved_to}; stats/orders versions {versions}; replayed in the resume: "
          f"{[(ch['seq'], ch['name']) for ch in replayed]}; query delta: {delta}")
    # And on each connection, the pushes in seq order, none twice.
    for url in (ws(a), moved_to):
        pushes = [(m["seq"], m["op"], m.get("name") or m.get("query")) for u, m in received
                  if u == url and m.get("op") in ("change", "query")]
        assert [p[0] for p in pushes] == sorted(p[0] for p in pushes) and len(set(pushes)) == len(pushes), (url, pushes)

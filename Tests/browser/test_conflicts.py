"""The board's Conflicts panel (Clients/web/conflicts.js) in headless Chromium.

An offline mirror publishes each conflict it records as `conflicts/<id>`
(docs/mirror.md, "Conflicts"); here the tests write those records over REST
as a mirror would, and check that

- an open conflict appears as a row (`data-conflict="<id>"`) with the record,
  the field, the local, hub and base values and the mirror; resolved ones
  do not;
- "Keep local" sets the record's field to the local value and closes the
  conflict (`resolved: true`, `take: "local"`) in one write; "Keep hub"
  (from the keyboard) closes it and leaves the record alone; either way the
  row leaves and the keyboard moves to the next row;
- field `*` sets the whole record, or deletes it when the local value is
  null; a workflow record keeps the hub's stage;
- a conflict resolved elsewhere (REST) leaves the board;
- a dashboard-role token sees conflicts but is refused: the row says
  `forbidden` clearly and nothing changes on the hub;
- the panel fits a phone's width (screenshots saved as artifacts).

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import json
import time

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import cli, http_json, save_full_page, wait_until

MIRROR = "mirror:stockroom-2:7a1c"


def open_board(driver, server) -> None:
    driver.get(server.url("/?linger=60"))
    wait_until("the board to go live", lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live")


def put(server, name: str, data: dict, token: str | None = None) -> dict:
    status, body = http_json(server, "PUT", f"/v1/records/{name}", data, token=token)
    assert status in (200, 201), (status, body)
    return body


def get(server, name: str, token: str | None = None):
    status, body = http_json(server, "GET", f"/v1/records/{name}", token=token)
    return body if status == 200 else None


def publish_conflict(server, conflict_id: str, name: str, field: str, local, hub, base=None,
                     created: int | None = None, token: str | None = None, resolved: bool = False) -> dict:
    """Writes `conflicts/<id>` as the mirror that recorded it would."""
    return put(server, f"conflicts/{conflict_id}", {
        "name": name, "field": field, "local": local, "hub": hub, "base": base, "policy": "both",
        "created": created if created is not None else int(time.time() * 1000) - 90_000,
        "resolved": resolved, "mirror": MIRROR}, token=token)


def row(driver, conflict_id: str):
    found = driver.find_elements(By.CSS_SELECTOR, f'#conflicts [data-conflict="{conflict_id}"]')
    return found[0] if found else None


def button(driver, conflict_id: str, take: str):
    return row(driver, conflict_id).find_element(By.CSS_SELECTOR, f'button[data-take="{take}"]')


def closed_as(server, conflict_id: str, take: str, token: str | None = None) -> bool:
    data = (get(server, f"conflicts/{conflict_id}", token) or {}).get("data", {})
    return data.get("resolved") is True and data.get("take") == take


def test_keep_local_sets_the_field_and_closes_the_conflict(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    put(server, "notes/shelf-4", {"qty": 7, "note": "hub"})
    publish_conflict(server, "old", "notes/shelf-4", "note", "a", "b", resolved=True)
    driver = browser()
    open_board(driver, server)
    assert not driver.find_element(By.ID, "conflicts").is_displayed(), "no open conflicts: no panel"

    publish_conflict(server, "x1", "notes/shelf-4", "qty", 5, 7, base=3)
    wait_until("the conflict's row", lambda: row(driver, "x1"))
    element = row(driver, "x1")
    assert driver.find_element(By.ID, "conflicts").is_displayed()
    assert element.find_element(By.CSS_SELECTOR, "h3").text.split() == ["notes/shelf-4", "qty"]
    sides = {side.find_element(By.TAG_NAME, "dt").text.lower(): side.find_element(By.TAG_NAME, "dd").text
             for side in element.find_elements(By.CSS_SELECTOR, ".sides > div")}
    assert sides == {"local": "5", "hub": "7", "base": "3"}, sides
    meta = element.find_element(By.CSS_SELECTOR, ".meta").text
    assert MIRROR in meta and "1 min" in meta and "ago" in meta, meta
    assert row(driver, "old") is None, "a resolved conflict is not listed"
    assert driver.find_element(By.ID, "conflict-count").text == "1"
    local, hub = button(driver, "x1", "local"), button(driver, "x1", "hub")
    assert (local.tag_name, local.text, hub.tag_name, hub.text) == ("button", "Keep local", "button", "Keep hub")
    before = get(server, "notes/shelf-4")

    local.click()
    wait_until("the hub's record to take the local value", lambda: get(server, "notes/shelf-4")["data"]["qty"] == 5)
    assert closed_as(server, "x1", "local")
    after = get(server, "notes/shelf-4")
    assert after["data"] == {"qty": 5, "note": "hub"} and after["version"] == before["version"] + 1
    wait_until("the row to leave", lambda: row(driver, "x1") is None)
    assert driver.find_element(By.ID, "conflicts-empty").is_displayed(), "the panel says there are none left"
    assert driver.find_element(By.ID, "conflicts-empty").text == "No open conflicts."
    assert driver.switch_to.active_element.get_attribute("id") == "conflicts-title", "the keyboard stays in the panel"


def test_keep_hub_by_keyboard_leaves_the_record_alone(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    put(server, "notes/shelf-4", {"qty": 7})
    publish_conflict(server, "x2", "notes/shelf-4", "qty", 5, 7, created=1_000)
    publish_conflict(server, "x3", "notes/shelf-4", "label", "Shelf four", "Shelf 4", created=2_000)
    before = get(server, "notes/shelf-4")
    driver = browser()
    open_board(driver, server)
    wait_until("both rows", lambda: row(driver, "x2") and row(driver, "x3"))
    order = [element.get_attribute("data-conflict") for element in driver.find_elements(By.CSS_SELECTOR, "#conflicts [data-conflict]")]
    assert order == ["x2", "x3"], "oldest first"

    button(driver, "x2", "hub").send_keys(Keys.ENTER)  # focuses the button, then presses it
    wait_until("the conflict to close with take hub", lambda: closed_as(server, "x2", "hub"))
    wait_until("the row to leave", lambda: row(driver, "x2") is None)
    assert get(server, "notes/shelf-4") == before, "keeping the hub's value writes nothing to the record"
    focused = driver.switch_to.active_element
    assert focused.get_attribute("data-take") == "hub" and focused.find_element(By.XPATH, "..").find_element(
        By.XPATH, "..").get_attribute("data-conflict") == "x3", "the keyboard moves to the next conflict"

    focused.send_keys(Keys.SPACE)
    wait_until("the second conflict to close", lambda: closed_as(server, "x3", "hub"))
    wait_until("its row to leave", lambda: row(driver, "x3") is None)
    assert get(server, "notes/shelf-4") == before


def test_whole_record_conflicts(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    put(server, "notes/a", {"qty": 1, "hub": True})
    put(server, "notes/b", {"qty": 2})
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    order = cli(server, "order", "new", "items/widget-1", "--qty", "2").strip().splitlines()[-1]
    status, body = http_json(server, "POST", f"/v1/records/{order}/advance", {"to": "in-progress"})
    assert status == 200, body
    hub_order = get(server, order)["data"]
    # The mirror's copy still says received, with another quantity.
    local_order = {**hub_order, "stage": "received", "qty": 3, "history": hub_order["history"][:1]}
    publish_conflict(server, "w1", "notes/a", "*", {"qty": 9, "from": "mirror"}, {"qty": 1, "hub": True}, {"qty": 1})
    publish_conflict(server, "w2", "notes/b", "*", None, {"qty": 2}, {"qty": 2})
    publish_conflict(server, "w3", order, "*", local_order, hub_order)
    driver = browser()
    open_board(driver, server)
    wait_until("the three rows", lambda: all(row(driver, c) for c in ("w1", "w2", "w3")))
    assert row(driver, "w1").find_element(By.CSS_SELECTOR, ".field").text == "whole record"
    local_side = row(driver, "w2").find_element(By.CSS_SELECTOR, ".sides .local dd").text
    assert local_side == "no record", local_side
    assert "delete notes/b" in button(driver, "w2", "local").get_attribute("aria-label")

    button(driver, "w1", "local").click()
    wait_until("notes/a replaced by the local copy", lambda: get(server, "notes/a")["data"] == {"qty": 9, "from": "mirror"})
    assert closed_as(server, "w1", "local")
    button(driver, "w2", "local").click()
    wait_until("notes/b deleted", lambda: get(server, "notes/b") is None)
    assert closed_as(server, "w2", "local")
    button(driver, "w3", "local").click()
    wait_until("the order to take the local quantity", lambda: get(server, order)["data"]["qty"] == 3)
    assert closed_as(server, "w3", "local")
    data = get(server, order)["data"]
    assert data["stage"] == "in-progress" and data["history"] == hub_order["history"], "a stage moves only by advance"
    wait_until("every row to leave", lambda: not driver.find_elements(By.CSS_SELECTOR, "#conflicts [data-conflict]"))


def test_a_conflict_settled_elsewhere_leaves_the_board(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    put(server, "notes/shelf-4", {"qty": 7})
    publish_conflict(server, "e1", "notes/shelf-4", "qty", 5, 7)
    publish_conflict(server, "e2", "notes/shelf-4", "qty", 6, 7)
    driver = browser()
    open_board(driver, server)
    second = browser()
    open_board(second, server)
    wait_until("the rows", lambda: row(driver, "e1") and row(driver, "e2") and row(second, "e1"))

    # The CLI on the mirror (or anyone with REST) settles it.
    status, body = http_json(server, "PATCH", "/v1/records/conflicts/e1", {"resolved": True, "take": "hub"})
    assert status == 200, body
    wait_until("the row settled elsewhere to leave", lambda: row(driver, "e1") is None)
    assert row(driver, "e2"), "the other one stays"
    # Settled from another board: this one follows.
    button(second, "e2", "hub").click()
    wait_until("the row settled on the other board to leave", lambda: row(driver, "e2") is None)
    assert closed_as(server, "e2", "hub")
    # Opened again (a mirror that recorded it anew): it comes back.
    publish_conflict(server, "e1", "notes/shelf-4", "qty", 5, 7)
    wait_until("a reopened conflict to come back", lambda: row(driver, "e1"))
    http_json(server, "DELETE", "/v1/records/conflicts/e1")
    wait_until("a deleted conflict to leave", lambda: row(driver, "e1") is None)


TOKENS = {"boss": "admin-token-for-the-conflicts-test", "wall": "dashboard-token-for-the-conflicts-test"}


def test_a_dashboard_token_is_refused_and_told_so(hubs, browser, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"users": [
        {"name": "boss", "role": "admin", "tokenSha256": hashlib.sha256(TOKENS["boss"].encode()).hexdigest()},
        {"name": "wall", "role": "dashboard", "tokenSha256": hashlib.sha256(TOKENS["wall"].encode()).hexdigest()},
    ]}))
    server = hubs("--config", str(config), "--data", str(tmp_path / "data"))
    boss = TOKENS["boss"]
    put(server, "notes/shelf-4", {"qty": 7}, token=boss)
    publish_conflict(server, "d1", "notes/shelf-4", "qty", 5, 7, token=boss)
    record_before = get(server, "notes/shelf-4", boss)
    conflict_before = get(server, "conflicts/d1", boss)

    driver = browser()
    driver.get(server.url("/"))
    wait_until("the login dialog", lambda: driver.find_element(By.ID, "login").is_displayed())
    field = driver.find_element(By.ID, "token")
    field.send_keys(TOKENS["wall"])
    field.send_keys(Keys.ENTER)
    wait_until("live with the dashboard token", lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live")
    wait_until("the conflict's row", lambda: row(driver, "d1"))

    button(driver, "d1", "local").click()
    error = wait_until("the refusal in the row", lambda: (lambda e: e if e.is_displayed() else None)(
        row(driver, "d1").find_element(By.CSS_SELECTOR, ".error")))
    assert "Not allowed" in error.text and "dashboard" in error.text and "staff or admin" in error.text, error.text
    assert error.get_attribute("role") == "alert"
    assert get(server, "notes/shelf-4", boss) == record_before, "the record did not change"
    assert get(server, "conflicts/d1", boss) == conflict_before, "the conflict is still open"
    assert row(driver, "d1") and button(driver, "d1", "local").is_enabled(), "the row stays, its buttons usable again"
    assert driver.switch_to.active_element.get_attribute("data-take") == "local", "the keyboard is back on the button"
    save_full_page(driver, "conflicts-forbidden.png")


def test_the_panel_fits_a_phone(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    long_text = "a long note that a mirror wrote while the stock room had no Wi-Fi, " * 3
    put(server, "notes/shelf-4", {"qty": 7, "note": "short"})
    publish_conflict(server, "p1", "notes/shelf-4", "note", long_text, "short", base="short")
    publish_conflict(server, "p2", "notes/shelf-4", "*", {"qty": 5, "note": long_text, "tags": ["a", "b"]},
                     {"qty": 7, "note": "short"}, {"qty": 6})
    driver = browser(390, 844)
    open_board(driver, server)
    wait_until("the rows", lambda: row(driver, "p1") and row(driver, "p2"))
    overflow = driver.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px on a phone"
    for conflict_id in ("p1", "p2"):
        for take in ("local", "hub"):
            rect = button(driver, conflict_id, take).rect
            assert rect["x"] >= 0 and rect["x"] + rect["width"] <= 390, (conflict_id, take, rect)
    save_full_page(driver, "conflicts-phone.png")
    wide = browser(1600, 1000)
    open_board(wide, server)
    wait_until("the rows on a wall screen", lambda: row(wide, "p1") and row(wide, "p2"))
    save_full_page(wide, "conflicts-wall.png")

"""The board's items and stock view (Clients/web/counter.js) in headless
Chromium:

- it shows a page of items (20) with location and stock, pages forward and
  back, and searches by a name word and by a SKU;
- an item at or below its threshold is marked low (`lowStock` on the item,
  else the config's `lowStock`), and the mark follows a stock change live;
- an item's open orders are listed under it (from the board's live query)
  and leave it when delivered;
- on a phone-sized window the form and the view stay inside the page;
- the page never subscribes to the items/ prefix: one record subscription
  per item shown.

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import json

from selenium.webdriver.common.by import By
from websockets.sync.client import connect

from conftest import http_json, save_full_page, wait_until


def rows(driver) -> list[str]:
    return [row.get_attribute("data-item") for row in driver.find_elements(By.CSS_SELECTOR, "#item-list .item-row")]


def row(driver, name: str):
    found = driver.find_elements(By.CSS_SELECTOR, f'#item-list .item-row[data-item="{name}"]')
    return found[0] if found else None


def search(driver, text: str) -> None:
    field = driver.find_element(By.ID, "items-search")
    field.clear()
    if text:
        field.send_keys(text)
    else:  # clear() sends no input event
        driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", field)


def test_items_page_search_low_stock_and_open_orders(hubs, browser, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"lowStock": 2}))
    server = hubs("--config", str(config), "--data", str(tmp_path / "data"))
    ops = [{"op": "set", "name": f"items/part-{n:03}", "data": {"name": f"Part {n}", "sku": f"P-{n}", "stock": 10,
                                                                "location": f"Bin {n}"}} for n in range(45)]
    ops.append({"op": "set", "name": "items/drill-01", "data": {"name": "Cordless drill", "sku": "D-18", "stock": 2,
                                                                "location": "Shelf B2"}})
    ops.append({"op": "set", "name": "items/glue", "data": {"name": "Wood glue", "stock": 8, "lowStock": 10}})
    with connect(server.ws_url("/v1/ws")) as ws:
        ws.send(json.dumps({"id": 1, "op": "write", "ops": ops}))
        reply = json.loads(ws.recv(timeout=30))
        assert reply.get("ok") is True, reply
    driver = browser(1400, 1000)
    driver.get(server.url("/?linger=60"))
    wait_until("the first page of items", lambda: len(rows(driver)) == 20)
    assert rows(driver)[0] == "items/drill-01" and rows(driver)[2] == "items/part-000", rows(driver)
    # Low: at or below the config's 2, or the item's own threshold.
    assert row(driver, "items/drill-01").get_attribute("data-low") == "true"
    assert row(driver, "items/glue").get_attribute("data-low") == "true", "its own lowStock (10) over 8"
    assert row(driver, "items/part-000").get_attribute("data-low") == "false"
    assert "Low stock" in row(driver, "items/drill-01").text
    text = row(driver, "items/drill-01").text
    assert "Shelf B2" in text and "stock 2" in text and "D-18" in text, text

    # Pages: 47 items are 20 + 20 + 7.
    driver.find_element(By.ID, "items-next").click()
    wait_until("page 2", lambda: rows(driver)[:1] == ["items/part-018"])
    driver.find_element(By.ID, "items-next").click()
    wait_until("page 3", lambda: len(rows(driver)) == 7 and rows(driver)[-1] == "items/part-044")
    assert not driver.find_element(By.ID, "items-next").is_enabled()
    driver.find_element(By.ID, "items-prev").click()
    wait_until("back on page 2", lambda: rows(driver)[:1] == ["items/part-018"])
    # Only the items shown are followed: record subscriptions, never the prefix.
    subscribed = driver.execute_script("""
        return [...window.tallyBoard.hub.subscriptions].map(s => s.target.name ?? s.target.prefix ?? null)
            .filter(n => n && n.startsWith('items/'))""")
    assert len(subscribed) <= 20 + 1 and "items/" not in subscribed, subscribed

    # Search by a name word, then by a SKU.
    search(driver, "cordl")
    wait_until("the search by name", lambda: rows(driver) == ["items/drill-01"])
    search(driver, "p-7")
    wait_until("the search by SKU", lambda: rows(driver)[:1] == ["items/part-007"])
    search(driver, "drill")
    wait_until("the drill again", lambda: rows(driver) == ["items/drill-01"])

    # Open orders that will move it, live; stock live too.
    status, body = http_json(server, "PUT", "/v1/records/orders/o1", {"item": "items/drill-01", "qty": 1})
    assert status in (200, 201), body
    status, body = http_json(server, "PUT", "/v1/records/orders/o2", {"item": "items/drill-01", "qty": 5, "kind": "receive"})
    assert status in (200, 201), body
    wait_until("two open orders under the drill", lambda: row(driver, "items/drill-01").find_element(
        By.CSS_SELECTOR, ".open-orders").get_attribute("data-count") == "2")
    listed = [li.get_attribute("data-order") for li in row(driver, "items/drill-01").find_elements(By.CSS_SELECTOR, ".open-orders li")]
    assert listed == ["orders/o1", "orders/o2"], listed
    http_json(server, "PATCH", "/v1/records/items/drill-01", {"stock": 7})
    wait_until("the stock to follow, no longer low", lambda: row(driver, "items/drill-01").get_attribute("data-low") == "false"
               and "stock 7" in row(driver, "items/drill-01").text)
    for stage in ("in-progress", "ready", "delivered"):
        status, body = http_json(server, "POST", "/v1/records/orders/o2/advance", {"to": stage})
        assert status == 200, body
    wait_until("the delivered order to leave the list", lambda: [li.get_attribute("data-order") for li in row(
        driver, "items/drill-01").find_elements(By.CSS_SELECTOR, ".open-orders li")] == ["orders/o1"])
    wait_until("the receipt in the stock", lambda: "stock 12" in row(driver, "items/drill-01").text)
    search(driver, "")
    wait_until("the first page again", lambda: len(rows(driver)) == 20)
    save_full_page(driver, "board-items.png")
    # On a phone nothing of the counter runs off the side.
    driver.set_window_size(390, 844)
    wait_until("a phone-wide page without sideways scrolling", lambda: driver.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"))
    for part in ("new-order", "items"):
        box = driver.execute_script("const r = document.getElementById(arguments[0]).getBoundingClientRect();"
                                    "return [r.left, r.right, window.innerWidth]", part)
        assert box[0] >= 0 and box[1] <= box[2], (part, box)
    save_full_page(driver, "board-items-phone.png", 390)

"""The board's new-order form (Clients/web/counter.js) in headless Chromium:

- a staff member finds an item by a serial (the same resolution as
  /v1/resolve), sees its location and stock, orders 2; the order is on the
  hub as `orders/<16 hex>` (item, qty, kind issue, first stage) and its card
  appears on a second browser through the live query;
- an issue order for more than the stock is refused, with the hub's own
  message shown in the form, and nothing is created;
- an order for an item that does not exist is refused with its message;
- the form is offered to staff and admin, not to a dashboard or client.

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import json
import re

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import cli, http_json, wait_until

TOKENS = {"staff": "staff-token-for-the-counter-test", "wall": "dashboard-token-for-the-counter-test",
          "customer": "client-token-for-the-counter-test"}


def users_hub(hubs, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"users": [
        {"name": "ana", "role": "staff", "tokenSha256": hashlib.sha256(TOKENS["staff"].encode()).hexdigest()},
        {"name": "wall", "role": "dashboard", "tokenSha256": hashlib.sha256(TOKENS["wall"].encode()).hexdigest()},
        {"name": "cy", "role": "client", "tokenSha256": hashlib.sha256(TOKENS["customer"].encode()).hexdigest()},
    ]}))
    return hubs("--config", str(config), "--data", str(tmp_path / "data"))


def open_as(driver, server, token: str | None, who: str | None = None) -> None:
    driver.get(server.url("/?linger=60"))
    if token:
        driver.execute_script("localStorage.setItem('tally.token', arguments[0])", token)
        driver.refresh()
    wait_until("the board to go live", lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live"
               and (who is None or who in driver.find_element(By.ID, "who").text))


def pick(driver, text: str, item: str) -> None:
    field = driver.find_element(By.ID, "order-item-search")
    field.clear()
    field.send_keys(text)
    wait_until(f"{item} among the matches", lambda: driver.find_elements(
        By.CSS_SELECTOR, f'#order-item-results button.pick[data-item="{item}"]'))
    driver.find_element(By.CSS_SELECTOR, f'#order-item-results button.pick[data-item="{item}"]').click()
    wait_until(f"{item} picked", lambda: driver.find_element(By.ID, "order-item").get_attribute("data-item") == item)


def order(driver, qty: int, kind: str = "issue") -> None:
    field = driver.find_element(By.ID, "order-qty")
    field.clear()
    field.send_keys(str(qty))
    driver.find_element(By.CSS_SELECTOR, f'#order-kind option[value="{kind}"]').click()
    driver.find_element(By.ID, "order-submit").click()


def answer(driver) -> tuple[str, str]:
    """("done", text) or ("error", text), whichever the form shows first."""
    def shown():
        for which in ("order-done", "order-error"):
            element = driver.find_element(By.ID, which)
            if element.is_displayed() and element.text:
                return which.removeprefix("order-"), element.text
        return None
    return wait_until("the form's answer", shown)


def orders_on_hub(server, token: str) -> list[dict]:
    status, body = http_json(server, "GET", "/v1/records?prefix=orders/", token=token)
    assert status == 200, body
    return body["records"]


def test_a_staff_member_orders_an_item_found_by_serial(hubs, browser, tmp_path):
    server = users_hub(hubs, tmp_path)
    staff = TOKENS["staff"]
    cli(server, "set", "items/drill-01", json.dumps({"name": "Cordless drill", "sku": "D-18", "serials": ["SN-4711"],
                                                     "location": "Shelf B2", "stock": 5}), token=staff)
    first = browser()
    open_as(first, server, staff, "ana · staff")
    assert first.find_element(By.ID, "new-order").is_displayed(), "staff get the form"
    second = browser()
    open_as(second, server, staff, "ana · staff")

    pick(first, "sn-4711", "items/drill-01")
    picked = first.find_element(By.ID, "order-item").text
    assert "Cordless drill" in picked and "Shelf B2" in picked and "stock 5" in picked, picked
    order(first, 2)
    kind, text = answer(first)
    assert kind == "done", text
    name = first.find_element(By.ID, "order-done").get_attribute("data-order")
    assert re.fullmatch(r"orders/[0-9a-f]{16}", name), name

    status, record = http_json(server, "GET", f"/v1/records/{name}", token=staff)
    assert status == 200, record
    assert {k: record["data"][k] for k in ("item", "qty", "kind", "stage")} == \
        {"item": "items/drill-01", "qty": 2, "kind": "issue", "stage": "received"}
    assert record["version"] == 1
    # The card arrives through the live query, on both browsers.
    for driver in (second, first):
        wait_until(f"{name}'s card", lambda: driver.find_elements(By.CSS_SELECTOR, f'#order-board [data-record="{name}"]'))
        card = driver.find_element(By.CSS_SELECTOR, f'#order-board [data-record="{name}"]')
        assert "2" in card.find_element(By.CSS_SELECTOR, ".qty").text

    # A receive order needs no stock; Enter in the search picks the first match.
    field = first.find_element(By.ID, "order-item-search")
    field.clear()
    field.send_keys("D-18", Keys.ENTER)
    wait_until("the item picked by Enter", lambda: first.find_element(By.ID, "order-item").get_attribute("data-item")
               == "items/drill-01")
    order(first, 50, "receive")
    kind, text = answer(first)
    assert kind == "done", text
    assert len(orders_on_hub(server, staff)) == 2


def test_an_order_over_stock_is_refused_with_the_hubs_message(hubs, browser, tmp_path):
    server = users_hub(hubs, tmp_path)
    staff = TOKENS["staff"]
    cli(server, "set", "items/saw", json.dumps({"name": "Band saw", "serials": ["SAW-1"], "stock": 3}), token=staff)
    driver = browser()
    open_as(driver, server, staff, "ana · staff")
    pick(driver, "SAW-1", "items/saw")
    order(driver, 4)
    kind, text = answer(driver)
    assert kind == "error", text
    error = driver.find_element(By.ID, "order-error")
    assert error.get_attribute("data-code") == "insufficient_stock", text
    assert "3" in text and "4" in text, f"the hub's message names the stock and the need: {text}"
    assert orders_on_hub(server, staff) == [], "nothing was created"


def test_an_unknown_item_is_refused_with_its_message(hubs, browser, tmp_path):
    server = users_hub(hubs, tmp_path)
    staff = TOKENS["staff"]
    driver = browser()
    open_as(driver, server, staff, "ana · staff")
    field = driver.find_element(By.ID, "order-item-search")
    field.send_keys("drlil-01")
    wait_until("no match", lambda: "No item matches" in driver.find_element(By.ID, "order-item-results").text)
    order(driver, 1)
    kind, text = answer(driver)
    assert kind == "error", text
    assert driver.find_element(By.ID, "order-error").get_attribute("data-code") == "not_found", text
    assert "items/drlil-01" in text, text
    assert orders_on_hub(server, staff) == []


def test_the_form_is_for_staff_and_admin_only(hubs, browser, tmp_path):
    server = users_hub(hubs, tmp_path)
    driver = browser()
    for token, who in ((TOKENS["wall"], "wall · dashboard"), (TOKENS["customer"], "cy · client")):
        open_as(driver, server, token, who)
        assert not driver.find_element(By.ID, "new-order").is_displayed(), who
    open_hub = hubs("--data", str(tmp_path / "open"))
    open_as(driver, open_hub, None)
    wait_until("the form for an admin (open mode)", lambda: driver.find_element(By.ID, "new-order").is_displayed())

"""The requester's page, "My orders" (Clients/web/mine.html, served at
/mine — also /mine.html and /app/mine.html — and linked from the board's
header), on a hub with users, in a phone-sized window:

- a `client` signs in with a token (kept in localStorage, as on the board),
  requests an item by one of its serials (resolved with /v1/resolve) and
  sees the new order; orders of another client are not on the page;
- the order moves live, step by step, as a staff member advances it with
  the CLI and over REST, and ends under "Finished lately";
- looked up by name, another client's order is refused by the hub
  (`forbidden`), shown in the page; REST with the same token says 403;
- an unknown code and a role that may not create orders get their error
  in the form (the hub's own answer);
- nothing scrolls sideways on the phone; a screenshot is saved
  (docs/my-orders.png is this picture).

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import json

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import cli, http_json, save_full_page, wait_until

TOKENS = {"ana": "staff-token-for-my-orders", "cy": "client-token-for-cy", "dee": "client-token-for-dee",
          "wall": "dashboard-token-for-my-orders"}
ROLES = {"ana": "staff", "cy": "client", "dee": "client", "wall": "dashboard"}


def users_hub(hubs, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"users": [
        {"name": name, "role": ROLES[name], "tokenSha256": hashlib.sha256(token.encode()).hexdigest()}
        for name, token in TOKENS.items()]}))
    return hubs("--config", str(config), "--data", str(tmp_path / "data"))


def phone(browser):
    driver = browser(800, 900)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    return driver


def sign_in(driver, who: str) -> None:
    if not driver.find_element(By.ID, "login").is_displayed():
        driver.find_element(By.ID, "login-button").click()
    field = driver.find_element(By.ID, "token")
    field.clear()
    field.send_keys(TOKENS[who])
    field.send_keys(Keys.ENTER)
    wait_until(f"the page live as {who}", lambda: driver.find_element(By.ID, "connection").get_attribute(
        "data-state") == "live" and driver.find_element(By.ID, "who").text == f"{who} · {ROLES[who]}")


def mine(driver, name: str, board: str = "mine-board"):
    found = driver.find_elements(By.CSS_SELECTOR, f'#{board} [data-record="{name}"]')
    return found[0] if found else None


def current_step(element) -> str:
    return element.find_element(By.CSS_SELECTOR, '.steps li[data-state="current"]').get_attribute("data-step")


def request(driver, item: str, qty: int) -> None:
    field = driver.find_element(By.ID, "request-item")
    field.clear()
    field.send_keys(item)
    count = driver.find_element(By.ID, "request-qty")
    count.clear()
    count.send_keys(str(qty))
    driver.find_element(By.ID, "request-submit").click()


def form_error(driver) -> str:
    element = driver.find_element(By.ID, "request-error")
    return element.text if element.is_displayed() else ""


def test_a_requester_follows_only_their_own_orders(hubs, browser, tmp_path):
    server = users_hub(hubs, tmp_path)
    staff = TOKENS["ana"]
    cli(server, "set", "items/drill-01", json.dumps({"name": "Cordless drill", "stock": 10, "location": "Shelf A3",
                                                     "serials": ["SN-1000", "SN-1001"]}), token=staff)
    # Another requester's order, made over REST with her token.
    status, body = http_json(server, "PUT", "/v1/records/orders/dee-1", {"item": "items/drill-01", "qty": 1},
                             token=TOKENS["dee"])
    assert status == 201, body

    driver = phone(browser)
    driver.get(server.url("/"))
    link = wait_until("the board's link to My orders", lambda: driver.find_element(By.ID, "mine-link"))
    assert link.get_attribute("href").endswith("/mine")
    driver.get(link.get_attribute("href"))
    wait_until("the login dialog", lambda: driver.find_element(By.ID, "login").is_displayed())
    sign_in(driver, "cy")
    assert driver.execute_script("return localStorage.getItem('tally.token')") == TOKENS["cy"]
    wait_until("the empty list", lambda: driver.find_element(By.ID, "mine-empty").is_displayed())

    # An unknown code: the form says so, nothing is made.
    request(driver, "NO-SUCH-CODE", 1)
    wait_until("the unknown code's error", lambda: "NO-SUCH-CODE" in form_error(driver))

    # By a serial: resolved to items/drill-01; the new order appears, received.
    request(driver, "SN-1001", 2)
    done = wait_until("the request's answer", lambda: driver.find_element(By.ID, "request-done").is_displayed()
                      and driver.find_element(By.ID, "request-done"))
    order = done.get_attribute("data-record")
    assert order.startswith("orders/"), order
    assert form_error(driver) == "" and "2 × Cordless drill" in done.text, done.text
    wait_until(f"{order} on the page", lambda: mine(driver, order))
    element = mine(driver, order)
    assert element.get_attribute("data-stage") == "received" and current_step(element) == "received"
    assert "Cordless drill" in element.text and "× 2" in element.find_element(By.CSS_SELECTOR, ".qty").text
    status, body = http_json(server, "GET", f"/v1/records/{order}", token=staff)
    assert status == 200 and body["data"]["owner"] == "cy" and body["data"]["item"] == "items/drill-01", body

    assert mine(driver, "orders/dee-1") is None and not driver.find_elements(
        By.CSS_SELECTOR, '[data-record="orders/dee-1"]'), "another requester's order is not shown"

    # Staff advance it: with the CLI, then over REST; the page follows live,
    # on the same card.
    cli(server, "order", "advance", order, token=staff)
    wait_until("in progress on the page", lambda: mine(driver, order).get_attribute("data-stage") == "in-progress")
    assert mine(driver, order) == element and current_step(element) == "in-progress"
    assert element.find_element(By.CSS_SELECTOR, ".since").text.startswith("for ")
    cli(server, "order", "advance", "orders/dee-1", token=staff)  # not hers: nothing shows
    status, body = http_json(server, "POST", f"/v1/records/{order}/advance", {"to": "ready"}, token=staff)
    assert status == 200, body
    wait_until("ready on the page", lambda: mine(driver, order).get_attribute("data-stage") == "ready")
    assert current_step(mine(driver, order)) == "ready"
    save_full_page(driver, "my-orders-phone.png")
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page scrolls sideways on a phone: {width}"

    status, body = http_json(server, "POST", f"/v1/records/{order}/advance", {"to": "delivered"}, token=staff)
    assert status == 200, body
    wait_until("delivered under Finished lately", lambda: mine(driver, order, "finished-board")
               and mine(driver, order) is None)
    assert mine(driver, order, "finished-board").get_attribute("data-stage") == "delivered"
    assert driver.find_element(By.ID, "mine-empty").is_displayed()
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-record="orders/dee-1"]')

    # Another's order by name: the hub refuses it, the page says so.
    field = driver.find_element(By.ID, "lookup-name")
    field.send_keys("orders/dee-1")
    driver.find_element(By.ID, "lookup-submit").click()
    error = driver.find_element(By.ID, "lookup-error")
    wait_until("the refusal", lambda: error.is_displayed() and error.get_attribute("data-code") == "forbidden")
    assert "forbidden" in error.text and "orders/dee-1" in error.text
    assert not driver.find_elements(By.CSS_SELECTOR, '#lookup-result [data-record]')
    status, body = http_json(server, "GET", "/v1/records/orders/dee-1", token=TOKENS["cy"])
    assert status == 403 and body["error"]["code"] == "forbidden", body
    # Her own, by name: shown.
    field.clear()
    field.send_keys(order)
    driver.find_element(By.ID, "lookup-submit").click()
    wait_until("her own order looked up", lambda: driver.find_elements(
        By.CSS_SELECTOR, f'#lookup-result [data-record="{order}"][data-stage="delivered"]'))
    assert not error.is_displayed()

    # A role that may not create orders gets the hub's own refusal.
    sign_in(driver, "wall")
    request(driver, "items/drill-01", 1)
    wait_until("the hub's refusal in the form", lambda: "(forbidden)" in form_error(driver))


def test_the_page_follows_the_order_named_in_its_address(hubs, browser, tmp_path):
    """`mine.html?order=NAME` (a link a requester was given) looks it up."""
    server = users_hub(hubs, tmp_path)
    cli(server, "set", "items/drill-01", json.dumps({"name": "Cordless drill", "stock": 10}), token=TOKENS["ana"])
    status, body = http_json(server, "PUT", "/v1/records/orders/cy-7", {"item": "items/drill-01", "qty": 1},
                             token=TOKENS["cy"])
    assert status == 201, body
    driver = browser()
    driver.get(server.url("/app/mine.html"))
    driver.execute_script(f"localStorage.setItem('tally.token', {json.dumps(TOKENS['cy'])})")
    driver.get(server.url("/mine?order=orders/cy-7"))
    looked = wait_until("the order looked up", lambda: driver.find_elements(
        By.CSS_SELECTOR, '#lookup-result [data-record="orders/cy-7"]'))
    assert looked[0].get_attribute("data-stage") == "received"
    cli(server, "order", "advance", "orders/cy-7", token=TOKENS["ana"])
    wait_until("it moves there too", lambda: driver.find_element(
        By.CSS_SELECTOR, '#lookup-result [data-record="orders/cy-7"]').get_attribute("data-stage") == "in-progress")

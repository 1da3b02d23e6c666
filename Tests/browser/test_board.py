"""The dashboard (Clients/web, served by the hub at /) in headless Chromium:

- an order created with the CLI appears on the board, with its
  `data-record`, a progress bar at step 1, item and quantity;
- clicking its advance button moves the record on the hub, and a second
  browser's board follows; Enter on a focused button does the same
  (keyboard);
- a change reaches the board within 100 ms of the write being sent
  (median of several, measured in the page against the same clock);
- the hub is stopped and started again (same --data, same port): the board
  says reconnecting, then live again, and shows what changed meanwhile;
- the board learns its hub's peers (`GET /v1/hubs`), and when its hub
  stops it moves to a peer, resumes there and follows it live;
- on a hub with users the board asks for a token, keeps it, and shows
  buttons only to roles that may act; photos load with the token;
- screenshots of the board are saved as test artifacts, and the demo board
  (`tally serve --demo`) is captured too.

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from conftest import cli, http_json, save_full_page, save_screenshot, wait_until

LATENCY_BUDGET_MS = 100


def open_board(driver, server, query: str = "?linger=5"):
    driver.get(server.url("/" + query))
    wait_until("the board to go live", lambda: connection_state(driver) == "live")


def connection_state(driver) -> str:
    return driver.find_element(By.ID, "connection").get_attribute("data-state")


def card(driver, name: str):
    found = driver.find_elements(By.CSS_SELECTOR, f'[data-record="{name}"]')
    return found[0] if found else None


def card_stage(driver, name: str) -> str | None:
    element = card(driver, name)
    return element.get_attribute("data-stage") if element else None


def progress_value(element) -> int:
    bar = element.find_element(By.CSS_SELECTOR, "progress, [role=progressbar]")
    value = bar.get_attribute("value") if bar.tag_name == "progress" else bar.get_attribute("aria-valuenow")
    return int(float(value))


def new_order(server, item: str, qty: int = 1) -> str:
    output = cli(server, "order", "new", item, "--qty", str(qty))
    name = output.strip().splitlines()[-1]
    assert name.startswith("orders/"), output
    return name


def hub_stage(server, name: str) -> str:
    status, body = http_json(server, "GET", f"/v1/records/{name}")
    assert status == 200, (status, body)
    return body["data"]["stage"]


def test_board_follows_the_hub_live(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    first = browser()
    open_board(first, server)
    assert first.find_element(By.ID, "orders-empty").is_displayed()

    # An order made with the CLI appears, at the first step of its progress bar.
    order = new_order(server, "items/widget-1", 2)
    wait_until(f"{order} on the board", lambda: card(first, order))
    element = card(first, order)
    assert element.get_attribute("data-stage") == "received"
    assert progress_value(element) == 0
    assert "Test widget" in element.text and "2" in element.find_element(By.CSS_SELECTOR, ".qty").text
    assert element.find_element(By.CSS_SELECTOR, "button.advance").is_displayed(), "an admin (open hub) may advance"

    # A second browser shows the same board.
    second = browser()
    open_board(second, server)
    wait_until(f"{order} in the second browser", lambda: card_stage(second, order) == "received")

    # Advance by click: the hub's record moves, and both boards follow.
    card(first, order).find_element(By.CSS_SELECTOR, "button.advance").click()
    wait_until("the hub's record to move", lambda: hub_stage(server, order) == "in-progress")
    wait_until("the second browser to follow", lambda: card_stage(second, order) == "in-progress")
    wait_until("the first browser to follow", lambda: card_stage(first, order) == "in-progress")
    assert progress_value(card(second, order)) == 1
    status, body = http_json(server, "GET", f"/v1/records/{order}")
    assert [entry["to"] for entry in body["data"]["history"]] == ["received", "in-progress"]

    # Keyboard: focus the advance button and press Enter.
    button = card(second, order).find_element(By.CSS_SELECTOR, "button.advance")
    assert button.text == "Mark ready"
    button.send_keys(Keys.ENTER)
    wait_until("Enter to advance the order", lambda: hub_stage(server, order) == "ready")
    wait_until("the first browser to show ready", lambda: card_stage(first, order) == "ready")
    focused = second.switch_to.active_element
    assert focused.get_attribute("class").startswith("advance"), "focus stays on the card's advance button"

    # Stats follow: counts per stage from stats/orders.
    wait_until("the stats to count the order as ready", lambda: first.find_element(
        By.CSS_SELECTOR, '#order-stats [data-stage="ready"] .count').text == "1")

    path = save_full_page(first, "board-live.png")
    assert path.stat().st_size > 10_000


def test_changes_reach_the_board_within_100_ms(hubs, browser, tmp_path):
    """Measured in the page: a MutationObserver notes when the card's stage
    changes (Date.now()), compared with the time just before Python sends
    the REST advance. Same machine, same clock."""
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 100}))
    driver = browser()
    open_board(driver, server, "?linger=60")
    latencies = []
    for _ in range(6):
        order = new_order(server, "items/widget-1")
        wait_until(f"{order} on the board", lambda: card(driver, order))
        driver.execute_script("""
            const name = arguments[0];
            window.seenAt = null;
            const board = document.getElementById('order-board');
            const observer = new MutationObserver(() => {
              const card = board.querySelector(`[data-record="${name}"]`);
              if (card && card.dataset.stage === 'in-progress' && window.seenAt === null) {
                window.seenAt = Date.now(); observer.disconnect();
              }
            });
            observer.observe(board, {subtree: true, childList: true, attributes: true});
        """, order)
        sent = time.time() * 1000
        status, body = http_json(server, "POST", f"/v1/records/{order}/advance", {"to": "in-progress"})
        assert status == 200, body
        seen = wait_until("the advance on the board", lambda: driver.execute_script("return window.seenAt"))
        latencies.append(seen - sent)
    median = statistics.median(latencies)
    print(f"board latency ms: {[round(x, 1) for x in latencies]}, median {median:.1f}")
    assert median < LATENCY_BUDGET_MS, f"median {median:.1f} ms over {LATENCY_BUDGET_MS} ms: {latencies}"


def test_board_reconnects_and_resyncs_after_a_hub_restart(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    before = new_order(server, "items/widget-1")
    driver = browser()
    open_board(driver, server, "?linger=600")
    wait_until(f"{before} on the board", lambda: card(driver, before))

    hubs.stop(server)
    wait_until("the board to say reconnecting", lambda: connection_state(driver) == "reconnecting")
    assert driver.find_element(By.CSS_SELECTOR, "#connection .label").text.startswith("Reconnecting")
    save_screenshot(driver, "board-reconnecting.png")
    assert card(driver, before), "the board keeps what it had while the hub is away"

    restarted = hubs.start_again(server)
    assert restarted.port == server.port
    # Changes made right after the restart: the board gets them by resuming
    # (since = its last seen seq) or live, whichever comes first.
    cli(restarted, "order", "advance", before)
    after = new_order(restarted, "items/widget-1", 3)
    wait_until("the board to be live again", lambda: connection_state(driver) == "live", timeout=30)
    wait_until(f"{after} after the restart", lambda: card(driver, after), timeout=15)
    wait_until(f"{before} advanced while away", lambda: card_stage(driver, before) == "in-progress", timeout=15)
    resumed = driver.execute_script(
        "return [...window.tallyBoard.hub.subscriptions].map(s => s.lastSnapshot && s.lastSnapshot.resnapshot)")
    assert not any(resumed), f"resumed from the last seen seq, no resnapshot: {resumed}"
    save_full_page(driver, "board-after-restart.png")


def test_board_moves_to_a_peer_when_its_hub_stops(hubs, browser, tmp_path):
    """Two independent hubs stand for a cluster (the moving is what is
    checked; a real cluster shares its seqs through PostgreSQL). Each names
    the other as its peer, so the board loaded from the first may connect to
    the second (its CSP) and the second takes the first's page (its origin)."""
    second = hubs("--data", str(tmp_path / "second"))
    first = hubs("--data", str(tmp_path / "first"), "--peers", f"ws://127.0.0.1:{second.port}")
    hubs.stop(second)
    second = hubs.start_again(second, "--peers", f"ws://127.0.0.1:{first.port}")
    first_url, second_url = (f"ws://127.0.0.1:{hub.port}/v1/ws" for hub in (first, second))
    # The second hub further along than the first: a resume with the
    # first's seq is answered with changes, not a snapshot.
    for n in range(4):
        cli(second, "set", f"notes/n{n}", json.dumps({"n": n}))
    cli(first, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    before = new_order(first, "items/widget-1")

    driver = browser()
    open_board(driver, first, "?linger=600")
    wait_until(f"{before} on the board", lambda: card(driver, before))
    assert driver.execute_script("return window.tallyBoard.hub.urls") == [first_url, second_url]
    assert driver.find_element(By.ID, "connection").get_attribute("data-hub") == first_url

    hubs.stop(first)
    wait_until("the board live on the second hub",
               lambda: connection_state(driver) == "live"
               and driver.find_element(By.ID, "connection").get_attribute("data-hub") == second_url, timeout=20)
    assert driver.execute_script("return window.tallyBoard.hub.url") == second_url
    resumed = driver.execute_script(
        "return [...window.tallyBoard.hub.subscriptions].map(s => s.lastSnapshot && s.lastSnapshot.resnapshot)")
    assert not any(resumed), f"resumed from the last seen seq, no resnapshot: {resumed}"
    # And live there: an order made on the second hub appears.
    cli(second, "set", "items/widget-2", json.dumps({"name": "Second widget", "stock": 4}))
    after = new_order(second, "items/widget-2", 2)
    wait_until(f"{after} from the second hub", lambda: card(driver, after), timeout=15)
    save_full_page(driver, "board-after-failover.png")


TOKENS = {"staff": "staff-token-for-the-board-test", "wall": "dashboard-token-for-the-board-test",
          "customer": "client-token-for-the-board-test"}


def test_token_login_roles_and_photos(hubs, browser, tmp_path):
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"users": [
        {"name": "ana", "role": "staff", "tokenSha256": hashlib.sha256(TOKENS["staff"].encode()).hexdigest()},
        {"name": "wall", "role": "dashboard", "tokenSha256": hashlib.sha256(TOKENS["wall"].encode()).hexdigest()},
        {"name": "cy", "role": "client", "tokenSha256": hashlib.sha256(TOKENS["customer"].encode()).hexdigest()},
    ]}))
    server = hubs("--config", str(config), "--demo", "--demo-interval", "60", "--data", str(tmp_path / "data"))
    driver = browser()
    driver.get(server.url("/"))
    wait_until("the login dialog", lambda: driver.find_element(By.ID, "login").is_displayed())
    assert connection_state(driver) == "offline"

    def sign_in(token: str, who: str | None = None) -> None:
        if not driver.find_element(By.ID, "login").is_displayed():
            driver.find_element(By.ID, "login-button").click()
        field = driver.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)
        field.send_keys(Keys.ENTER)  # submits the dialog's form: "Sign in"
        # Already live with the previous token until the new one's hello is
        # answered: wait for the new user, not only for "live".
        wait_until(f"the board to go live as {who or 'the token'}", lambda: connection_state(driver) == "live"
                   and (who is None or who in driver.find_element(By.ID, "who").text))

    sign_in(TOKENS["wall"], "wall · dashboard")
    wait_until("the demo orders", lambda: card(driver, "orders/demo-1"), timeout=30)
    buttons = driver.find_elements(By.CSS_SELECTOR, "#order-board button.advance")
    assert buttons and not any(b.is_displayed() for b in buttons), "a dashboard role gets no buttons"
    assert driver.execute_script("return localStorage.getItem('tally.token')") == TOKENS["wall"]

    driver.refresh()  # the token is remembered
    wait_until("live again after a reload", lambda: connection_state(driver) == "live")
    sign_in(TOKENS["staff"], "ana · staff")
    wait_until("buttons for staff", lambda: any(
        b.is_displayed() for b in driver.find_elements(By.CSS_SELECTOR, "#order-board button.advance")))
    # Photos come from /v1/blobs with the token (fetched, shown as blob: URLs).
    wait_until("a photo to load", lambda: driver.execute_script(
        "return [...document.querySelectorAll('.thumbs img')].some(i => i.complete && i.naturalWidth > 0"
        " && i.src.startsWith('blob:'))"), timeout=30)

    # A client role may not watch every order: the board says so.
    sign_in(TOKENS["customer"])
    notice = driver.find_element(By.ID, "notice")
    wait_until("the forbidden notice", lambda: notice.is_displayed() and "client" in notice.text)


def test_demo_board_screenshot(hubs, browser, tmp_path):
    """The demo board on a wall-sized window, saved as an artifact
    (docs/board.png is this picture)."""
    server = hubs("--demo", "--demo-interval", "0.3", "--data", str(tmp_path / "data"))
    driver = browser(1600, 1000)
    open_board(driver, server)
    wait_until("the demo orders", lambda: card(driver, "orders/demo-8"), timeout=30)
    wait_until("intake jobs", lambda: driver.find_elements(By.CSS_SELECTOR, '[data-record^="intake/"]'), timeout=30)
    wait_until("the photos", lambda: driver.execute_script(
        "const imgs = [...document.querySelectorAll('.thumbs img')];"
        "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)"), timeout=30)
    versions = "return Object.fromEntries([...document.querySelectorAll('[data-record]')]" \
               ".map(e => [e.dataset.record, e.dataset.version]))"
    before = driver.execute_script(versions)
    assert before.get("orders/demo-8")
    wait_until("the simulator to move something on the board",
               lambda: driver.execute_script(versions) != before, timeout=30)
    path = save_screenshot(driver, "demo-board.png")
    assert path.stat().st_size > 20_000
    if not driver.find_elements(By.CSS_SELECTOR, "progress"):
        pytest.fail("no progress bars on the demo board")


def test_board_follows_the_hubs_own_workflow(hubs, browser, tmp_path):
    """A config that gives orders other stages: the board reads them from
    GET /v1/workflows (progress bar, next-stage button, stats)."""
    config = tmp_path / "tally.json"
    config.write_text(json.dumps({"workflows": {"orders/": {
        "stages": ["received", "picked", "delivered", "cancelled"],
        "transitions": {"received": ["picked", "cancelled"], "picked": ["delivered", "cancelled"]},
        "terminal": ["delivered", "cancelled"], "roles": {"*": ["admin", "staff"]}}}}))
    server = hubs("--config", str(config), "--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    order = new_order(server, "items/widget-1")
    driver = browser()
    open_board(driver, server)
    wait_until("the picked stage in the stats", lambda: driver.find_elements(
        By.CSS_SELECTOR, '#order-stats [data-stage="picked"]'))
    wait_until(f"{order} on the board", lambda: card(driver, order))
    bar = card(driver, order).find_element(By.CSS_SELECTOR, "progress")
    assert bar.get_attribute("max") == "2", "received → picked → delivered"
    button = card(driver, order).find_element(By.CSS_SELECTOR, "button.advance")
    assert button.text == "To picked" and button.get_attribute("data-to") == "picked"
    button.click()
    wait_until("the hub's record to be picked", lambda: hub_stage(server, order) == "picked")
    wait_until("the card to follow", lambda: card_stage(driver, order) == "picked")
    assert progress_value(card(driver, order)) == 1
    assert card(driver, order).find_element(By.CSS_SELECTOR, "button.advance").text == "Deliver"

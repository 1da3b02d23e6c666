"""Rough edges of the board found in use (issue 17, "Found in use"):

- a push that changes an order's item (its stock, a field the card does not
  show) updates the card in place: the same element stays attached, the
  focused button keeps the focus, nothing in the card changes when nothing
  it shows changed, and a click at that moment works; a finished order
  (which moves from the open query to the finished one) keeps its card;
- at 1,280 and 1,400 px and on a phone-sized window a card's buttons stay
  on one line, inside the card, and the parts of a card do not overlap;
- progress is drawn as steps (received → in progress → ready → delivered),
  the current one marked and named, also for a received order; a
  cancelled order marks the step it left from;
- intake cards are titled with the item's name or the job's code, never the
  job's id;
- an open hub is shown as "open hub · admin", not the board's client name.

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By

from conftest import cli, http_json, save_screenshot, wait_until
from test_board import card, card_stage, hub_stage, new_order, open_board, progress_value


def is_attached(driver, element) -> bool:
    return driver.execute_script("return arguments[0].isConnected", element)


def test_a_change_to_the_item_keeps_the_card_and_its_focus(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    order = new_order(server, "items/widget-1", 2)
    driver = browser()
    open_board(driver, server)
    wait_until(f"{order} on the board", lambda: card(driver, order))
    element = card(driver, order)
    button = element.find_element(By.CSS_SELECTOR, "button.advance")
    driver.execute_script("arguments[0].focus()", button)
    assert driver.switch_to.active_element == button
    driver.execute_script("""
        window.cardMutations = [];
        new MutationObserver((records) => window.cardMutations.push(...records.map((r) => r.type)))
          .observe(arguments[0], {subtree: true, childList: true, attributes: true, characterData: true});
    """, element)

    # A field the card does not show: the push arrives, the card is untouched.
    cli(server, "set", "items/widget-1", "note", json.dumps("top shelf"))
    wait_until("the board to have the item's note", lambda: driver.execute_script(
        "return [...window.tallyBoard.hub.subscriptions].some((s) => s.value && s.value.name === 'items/widget-1'"
        " && s.value.data && s.value.data.note === 'top shelf')"))
    assert is_attached(driver, element) and card(driver, order) == element, "the same card element"
    mutations = driver.execute_script("return window.cardMutations.filter((type) => type !== 'characterData')")
    assert mutations == [], f"nothing on the card changed, yet the page did: {mutations}"

    # The stock (shown): only that text changes; element, button and focus stay.
    cli(server, "set", "items/widget-1", "stock", "11")
    wait_until("the new stock on the card", lambda: "stock 11" in element.text)
    assert is_attached(driver, element) and card(driver, order) == element, "the same card element"
    assert is_attached(driver, button) and element.find_element(By.CSS_SELECTOR, "button.advance") == button
    assert driver.switch_to.active_element == button, "the focus stays on the button"

    # A click right then lands.
    button.click()
    wait_until("the hub's record to move", lambda: hub_stage(server, order) == "in-progress")
    wait_until("the card to follow", lambda: card_stage(driver, order) == "in-progress")
    assert card(driver, order) == element, "an advance updates the same card too"
    assert element.find_element(By.CSS_SELECTOR, "button.advance").text == "Mark ready"
    assert progress_value(element) == 1

    # Finishing moves the record from the open query to the finished one
    # (two messages): still the same card.
    for stage in ("ready", "delivered"):
        status, body = http_json(server, "POST", f"/v1/records/{order}/advance", {"to": stage})
        assert status == 200, body
        wait_until(f"the card at {stage}", lambda: card_stage(driver, order) == stage)
        assert card(driver, order) == element, f"the same card at {stage}"
    assert element.get_attribute("data-terminal") == "true"
    assert not element.find_elements(By.CSS_SELECTOR, "button"), "a delivered order has no buttons"


def test_an_armed_cancel_survives_an_item_change(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    order = new_order(server, "items/widget-1")
    driver = browser()
    open_board(driver, server)
    wait_until(f"{order} on the board", lambda: card(driver, order))
    cancel = card(driver, order).find_element(By.CSS_SELECTOR, "button.cancel")
    cancel.click()
    assert cancel.text == "Confirm cancel"
    cli(server, "set", "items/widget-1", "stock", "9")
    wait_until("the new stock on the card", lambda: "stock 9" in card(driver, order).text)
    assert cancel.text == "Confirm cancel", "still armed"
    cancel.click()
    wait_until("the order cancelled", lambda: hub_stage(server, order) == "cancelled")


def rect(driver, element) -> dict:
    return driver.execute_script("const r = arguments[0].getBoundingClientRect();"
                                 "return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};", element)


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] - 0.5 and b["left"] < a["right"] - 0.5 \
        and a["top"] < b["bottom"] - 0.5 and b["top"] < a["bottom"] - 0.5


def check_cards(driver, where: str) -> int:
    """Every card with buttons: the buttons on one line, inside the card,
    their words not cut; the card's parts apart. Also with Cancel armed
    (its longest words). Returns how many cards were checked."""
    checked = 0
    for element in driver.find_elements(By.CSS_SELECTOR, "#order-board .card"):
        buttons = [b for b in element.find_elements(By.CSS_SELECTOR, ".buttons button") if b.is_displayed()]
        if not buttons:
            continue
        for armed in (False, True):
            if armed:
                driver.execute_script("for (const b of arguments[0].querySelectorAll('button.cancel'))"
                                      " b.textContent = 'Confirm cancel'", element)
            box = rect(driver, element)
            rects = [rect(driver, b) for b in buttons]
            label = f"{where}: {element.get_attribute('data-record')} ({element.get_attribute('data-stage')}"
            label += ", cancel armed)" if armed else ")"
            assert len({round(r["top"]) for r in rects}) == 1, f"{label}: the buttons wrap: {rects}"
            for r in rects:
                assert box["left"] <= r["left"] and r["right"] <= box["right"] + 0.5, f"{label}: a button leaves the card"
            for b in buttons:
                assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", b), \
                    f"{label}: {b.text!r} does not fit its button"
            parts = [p for p in element.find_elements(By.CSS_SELECTOR, ":scope > *") if p.is_displayed()]
            part_rects = [(p.get_attribute("class") or p.tag_name, rect(driver, p)) for p in parts]
            for i, (name_a, a) in enumerate(part_rects):
                assert a["right"] <= box["right"] + 0.5, f"{label}: {name_a} sticks out of the card"
                for name_b, b in part_rects[i + 1:]:
                    assert not overlap(a, b), f"{label}: {name_a} overlaps {name_b}"
        driver.execute_script("for (const b of arguments[0].querySelectorAll('button.cancel'))"
                              " b.textContent = 'Cancel'", element)
        checked += 1
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"{where}: the page scrolls sideways: {width}"
    return checked


@pytest.mark.parametrize("size", [(1280, 900), (1400, 900), "phone"])
def test_card_buttons_stay_on_one_line(hubs, browser, tmp_path, size):
    """The demo's cards (photos, every open stage) at a laptop's and a wall
    screen's width and on a phone (390 × 844 CSS px, emulated: headless
    windows do not shrink that far)."""
    server = hubs("--demo", "--demo-interval", "600", "--data", str(tmp_path / "data"))
    if size == "phone":
        driver = browser(800, 900)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
        where = "phone"
    else:
        driver = browser(*size)
        where = f"{size[0]} px"
    open_board(driver, server, "?linger=600")
    wait_until("the demo orders", lambda: card(driver, "orders/demo-8"), timeout=30)
    wait_until("the photos", lambda: driver.execute_script(
        "const imgs = [...document.querySelectorAll('#order-board .thumbs img')];"
        "return imgs.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 0)"), timeout=30)
    stages = {e.get_attribute("data-stage") for e in driver.find_elements(By.CSS_SELECTOR, "#order-board .card")}
    assert {"received", "in-progress", "ready"} <= stages, stages
    assert check_cards(driver, where) >= 3
    save_screenshot(driver, f"board-layout-{where.replace(' ', '')}.png")


def steps(element) -> list[tuple[str, str, str]]:
    return [(li.get_attribute("data-step"), li.get_attribute("data-state"), li.text)
            for li in element.find_elements(By.CSS_SELECTOR, ".steps li")]


def test_progress_is_shown_as_steps(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    received = new_order(server, "items/widget-1")
    cancelled = new_order(server, "items/widget-1")
    cli(server, "order", "advance", cancelled)
    driver = browser()
    open_board(driver, server, "?linger=600")
    wait_until(f"{received} on the board", lambda: card(driver, received))
    element = card(driver, received)
    assert steps(element) == [("received", "current", "Received"), ("in-progress", "todo", "In progress"),
                              ("ready", "todo", "Ready"), ("delivered", "todo", "Delivered")]
    assert progress_value(element) == 0, "the <progress> stays for scripts and screen readers"
    # The current step is drawn filled, readable: not an empty line.
    current = element.find_element(By.CSS_SELECTOR, '.steps li[data-state="current"]')
    style = driver.execute_script(
        "const s = getComputedStyle(arguments[0], '::before'); return [s.backgroundColor, s.height];", current)
    assert style[0] not in ("rgba(0, 0, 0, 0)", "transparent"), style
    assert float(style[1].rstrip("px")) >= 6, style
    assert current.is_displayed() and current.size["height"] >= 12

    status, body = http_json(server, "POST", f"/v1/records/{cancelled}/advance", {"to": "cancelled"})
    assert status == 200, body
    wait_until(f"{cancelled} cancelled on the board", lambda: card_stage(driver, cancelled) == "cancelled")
    assert [s[:2] for s in steps(card(driver, cancelled))] == [
        ("received", "done"), ("in-progress", "stopped"), ("ready", "todo"), ("delivered", "todo")]


def test_intake_cards_are_titled_with_the_item_or_code(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "intake/job-7f3c", json.dumps({"item": "items/new-7f3c", "code": "SN-4711", "location": "Dock 2"}))
    cli(server, "set", "intake/job-9a1b", json.dumps({"item": "items/new-9a1b", "location": "Dock 2"}))
    driver = browser()
    open_board(driver, server)
    wait_until("the intake cards", lambda: card(driver, "intake/job-7f3c") and card(driver, "intake/job-9a1b"))
    title = lambda name: card(driver, name).find_element(By.CSS_SELECTOR, "h3 .item").text  # noqa: E731
    wait_until("the code as the title", lambda: title("intake/job-7f3c") == "SN-4711")
    assert title("intake/job-9a1b") == "New item"
    assert "job-7f3c" not in title("intake/job-7f3c")
    cli(server, "set", "items/new-7f3c", json.dumps({"name": "Torque wrench", "stock": 0}))
    wait_until("the item's name as the title", lambda: title("intake/job-7f3c") == "Torque wrench")


def test_an_open_hub_is_named_in_words(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    driver = browser()
    open_board(driver, server)
    wait_until("who the board is", lambda: driver.find_element(By.ID, "who").text == "open hub · admin")

"""Stage timing on the board (Clients/web/timing.js), drawn from the stats
records only (issue 17, point 4):

- an order waiting in `received` makes that stage's wait bar grow second
  by second while nothing is written (the stats record's version stays);
- advancing it moves its wait to `in-progress` (count and bar), starting
  again from zero there;
- the finished-per-hour chart counts a delivery in the current hour;
- the charts say their figures in `aria-label` / `<title>`, and fit a
  phone-sized window.

Every wait is bounded; hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import json
import time

from selenium.webdriver.common.by import By

from conftest import cli, http_json, save_screenshot, wait_until


def open_board(driver, server) -> None:
    driver.get(server.url("/?linger=5"))
    wait_until("the board to go live",
               lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "live")


def stage(driver, stage_name: str):
    return driver.find_element(By.CSS_SELECTOR, f'#order-stats [data-stage="{stage_name}"]')


def figures(driver, stage_name: str) -> dict:
    element = stage(driver, stage_name)
    chart = element.find_element(By.CSS_SELECTOR, "svg.wait")
    return {
        "count": int(element.find_element(By.CSS_SELECTOR, ".count").text),
        "average": int(element.get_attribute("data-average-ms") or 0),
        "width": float(chart.find_element(By.CSS_SELECTOR, ".average").get_attribute("width")),
        "label": chart.get_attribute("aria-label"),
    }


def stats_version(server) -> int:
    status, body = http_json(server, "GET", "/v1/records/stats/orders")
    assert status == 200, (status, body)
    return body["version"]


def delivered_total(driver) -> int:
    found = driver.find_elements(By.CSS_SELECTOR, '.per-hour[data-workflow="order-stats"] .finished[data-stage="delivered"] .total')
    return int(found[0].text) if found else -1


def test_a_waiting_order_grows_its_stage_bar_and_a_delivery_counts_in_its_hour(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/widget-1", json.dumps({"name": "Test widget", "stock": 10}))
    driver = browser()
    open_board(driver, server)
    order = cli(server, "order", "new", "items/widget-1", "--qty", "1").strip().splitlines()[-1]
    assert order.startswith("orders/"), order

    wait_until("the order counted in received", lambda: figures(driver, "received")["count"] == 1)
    version = stats_version(server)
    first = figures(driver, "received")
    # No write: the bar grows as the order waits.
    wait_until("the received wait to grow by 2 s",
               lambda: figures(driver, "received")["average"] >= first["average"] + 2000, timeout=6)
    later = figures(driver, "received")
    assert later["width"] > first["width"], (first, later)
    assert "1 orders waiting" in later["label"] and "on average" in later["label"], later["label"]
    assert stats_version(server) == version, "the bar grew with no write to stats/orders"
    assert figures(driver, "in-progress")["count"] == 0 and figures(driver, "in-progress")["width"] == 0

    # Advanced: its wait moves on and starts again from zero.
    cli(server, "order", "advance", order)
    wait_until("the order counted in in-progress", lambda: figures(driver, "in-progress")["count"] == 1)
    moved = figures(driver, "in-progress")
    assert moved["average"] < later["average"], (moved, later)
    received = figures(driver, "received")
    assert (received["count"], received["width"], received["average"]) == (0, 0, 0), received
    assert "none waiting" in received["label"]
    wait_until("the in-progress wait to grow",
               lambda: figures(driver, "in-progress")["average"] >= moved["average"] + 1000, timeout=5)

    # Delivered: the finished-per-hour chart counts it in the last bar.
    assert delivered_total(driver) == 0
    cli(server, "order", "advance", order)
    cli(server, "order", "advance", order)
    wait_until("the delivery in the per-hour chart", lambda: delivered_total(driver) == 1)
    chart = driver.find_element(By.CSS_SELECTOR, '.per-hour[data-workflow="order-stats"] svg.hours')
    bars = chart.find_elements(By.CSS_SELECTOR, 'g[data-hour="0"] rect.bar[data-stage="delivered"]')
    assert len(bars) == 1 and float(bars[0].get_attribute("height")) > 0
    assert "Delivered 1" in chart.get_attribute("aria-label"), chart.get_attribute("aria-label")
    assert figures(driver, "in-progress")["count"] == 0
    save_screenshot(driver, "board-timing.png")

    # A phone-sized window: the timing stays inside the page.
    phone = browser(width=390, height=844)
    open_board(phone, server)
    wait_until("the delivery on the phone", lambda: delivered_total(phone) == 1)
    overflow = phone.execute_script(
        "return [...document.querySelectorAll('#orders .stats, #orders .per-hour')]"
        ".map((node) => node.getBoundingClientRect().right - document.documentElement.clientWidth)")
    assert overflow and max(overflow) <= 0.5, overflow
    save_screenshot(phone, "board-timing-phone.png")

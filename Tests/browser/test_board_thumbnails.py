"""Thumbnails and the photo analysis on the board (issue 18):

- the board's cards ask for photos at the width they draw them
  (`/v1/blobs/<sha>?w=N`, the smallest width at least the CSS width ×
  devicePixelRatio), never the photo as uploaded; what loads is that small;
- an intake card whose record has an analysis shows the codes found (their
  symbology, and the item they resolve to or "new"), the proposals (serials,
  codes, name) and whether they were accepted; the analyzed step carries the
  analysis' status; an acceptance updates the same card in place.

The analysis is written through the hub's REST API here, as the hub's
analyzer would write it. Photos are made with Pillow. Every wait is bounded;
hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import urllib.request

from PIL import Image, ImageDraw
from selenium.webdriver.common.by import By

from conftest import cli, http_json, save_screenshot, wait_until
from test_board import card, new_order, open_board


def photo(seed: int, size=(1600, 1200)) -> bytes:
    """A camera-like JPEG: a gradient with noise and a few shapes."""
    rng = random.Random(seed)
    image = Image.effect_noise(size, 40).convert("RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        draw.rectangle([x, y, x + rng.randrange(50, 400), y + rng.randrange(50, 300)],
                       fill=(rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=92)
    return out.getvalue()


def upload(server, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    request = urllib.request.Request(server.url(f"/v1/blobs/{sha}"), data=data, method="PUT",
                                     headers={"Content-Type": "image/jpeg"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status in (200, 201)
    return sha


def analyzed_job(server, name: str, photos: list[str], analysis: dict) -> None:
    """An intake job moved to `analyzed` with `analysis`, as the hub's analyzer does."""
    status, body = http_json(server, "PUT", f"/v1/records/{name}", {"item": "items/new-7f3c", "location": "Dock 2"})
    assert status in (200, 201), body
    for stage, data in [("created", {}), ("media-uploaded", {"photos": photos}), ("analyzed", {"analysis": analysis})]:
        status, body = http_json(server, "POST", f"/v1/records/{name}/advance", {"to": stage, "data": data})
        assert status == 200, (stage, body)


def image_sources(driver, record: str) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll(`[data-record='${arguments[0]}'] img`)].map((img) => img.getAttribute('src'))",
        record)


def loaded_widths(driver, record: str) -> list[int]:
    return driver.execute_script(
        "return [...document.querySelectorAll(`[data-record='${arguments[0]}'] img`)]"
        ".map((img) => img.complete ? img.naturalWidth : 0)", record)


def test_cards_ask_for_the_width_they_draw(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cover, first, second = (upload(server, photo(seed)) for seed in (1, 2, 3))
    cli(server, "set", "items/wrench", json.dumps({"name": "Torque wrench", "stock": 10, "cover": cover}))
    order = new_order(server, "items/wrench", 1)
    analyzed_job(server, "intake/job-7f3c", [first, second], {"status": "done", "millis": 12, "codes": []})

    for ratio, width in [(1, 128), (2, 256)]:
        driver = browser()
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 1280, "height": 900, "deviceScaleFactor": ratio, "mobile": False})
        open_board(driver, server)
        wait_until("the cards' photos", lambda: len(image_sources(driver, "intake/job-7f3c")) == 2
                   and image_sources(driver, order))
        for record, shas in [(order, [cover]), ("intake/job-7f3c", [first, second])]:
            assert image_sources(driver, record) == [f"/v1/blobs/{sha}?w={width}" for sha in shas], (ratio, record)
            wait_until(f"{record}'s photos at {width} px", lambda: loaded_widths(driver, record) == [width] * len(shas))
        if ratio == 1:
            save_screenshot(driver, "board-thumbnails.png")


def test_an_intake_card_shows_the_analysis(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    cli(server, "set", "items/wrench", json.dumps({"name": "Torque wrench", "stock": 3, "codes": ["4006381333931"]}))
    shot = upload(server, photo(4))
    analysis = {
        "status": "done", "millis": 812,
        "photos": [{"sha256": shot, "codes": 2, "millis": 300}],
        "codes": [
            {"code": "SN-4711", "symbology": "DataMatrix", "photo": shot, "found": False, "name": "items/sn-4711"},
            {"code": "4006381333931", "symbology": "EAN-13", "photo": shot, "found": True, "name": "items/wrench"},
        ],
        "proposals": {"serials": ["SN-4711"], "codes": ["X-99"], "name": "Torque wrench 1/2"},
    }
    analyzed_job(server, "intake/job-7f3c", [shot], analysis)
    driver = browser()
    open_board(driver, server)
    name = "intake/job-7f3c"
    wait_until("the job's analysis", lambda: card(driver, name)
               and card(driver, name).find_elements(By.CSS_SELECTOR, ".analysis"))
    element = card(driver, name)
    section = element.find_element(By.CSS_SELECTOR, ".analysis")
    assert section.get_attribute("data-status") == "done"
    assert "2 codes found" in section.find_element(By.CSS_SELECTOR, ".summary").text
    rows = [[part.text for part in row.find_elements(By.CSS_SELECTOR, ".symbology, .value, .resolved")]
            for row in section.find_elements(By.CSS_SELECTOR, ".codes li")]
    assert rows[0] == ["DataMatrix", "SN-4711", "new (sn-4711)"], rows
    wait_until("the found code resolved to its item's name", lambda: [
        part.text for part in card(driver, name).find_elements(By.CSS_SELECTOR, ".codes li")[1]
        .find_elements(By.CSS_SELECTOR, ".symbology, .value, .resolved")] == ["EAN-13", "4006381333931", "→ Torque wrench"])
    proposals = {term.text: detail.text for term, detail in zip(
        section.find_elements(By.CSS_SELECTOR, ".proposals dt"), section.find_elements(By.CSS_SELECTOR, ".proposals dd"))}
    assert proposals == {"Serials": "SN-4711", "Codes": "X-99", "Name": "Torque wrench 1/2"}, proposals
    assert "not accepted yet" in section.find_element(By.CSS_SELECTOR, ".acceptance").text
    step = element.find_element(By.CSS_SELECTOR, 'li[data-step="analyzed"]')
    assert step.get_attribute("data-state") == "current" and step.get_attribute("data-analysis") == "done"

    # The owner accepts: the same card shows it, updated in place.
    status, body = http_json(server, "PATCH", f"/v1/records/{name}",
                             {"analysis": {"accepted": {"by": "alice", "time": 1_700_000_000_000}}})
    assert status == 200, body
    wait_until("the acceptance on the card", lambda: card(driver, name).find_element(
        By.CSS_SELECTOR, ".analysis").get_attribute("data-accepted") == "true")
    assert card(driver, name) == element, "the same card element"
    assert element.find_element(By.CSS_SELECTOR, ".acceptance").text == "Accepted by alice"
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    save_screenshot(driver, "board-intake-analysis.png")


def test_a_failed_analysis_says_why(hubs, browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    shot = upload(server, photo(5, size=(400, 300)))
    analyzed_job(server, "intake/job-0001", [shot],
                 {"status": "timeout", "reason": "analysis took longer than 30 s", "millis": 30000, "codes": []})
    driver = browser()
    open_board(driver, server)
    wait_until("the job's analysis", lambda: card(driver, "intake/job-0001")
               and card(driver, "intake/job-0001").find_elements(By.CSS_SELECTOR, ".analysis"))
    section = card(driver, "intake/job-0001").find_element(By.CSS_SELECTOR, ".analysis")
    assert section.get_attribute("data-status") == "timeout"
    assert "Analysis timeout: analysis took longer than 30 s" in section.text
    assert not section.find_elements(By.CSS_SELECTOR, ".proposals, .acceptance")
    step = card(driver, "intake/job-0001").find_element(By.CSS_SELECTOR, 'li[data-step="analyzed"]')
    assert step.get_attribute("data-analysis") == "timeout"

"""Intake analysis on the hub (issue 18), black box: the hub reads the codes
and label text in an intake job's photos and moves the job from
media-uploaded to analyzed by itself.

- A ~12 MP JPEG made here (Pillow, qrcode, python-barcode, pylibdmtx; never
  downloaded): a QR code, a Code 128 and a Data Matrix on a label over a
  noisy background, rotated 7 degrees and scaled. Each code is found with
  its symbology and resolved as /v1/resolve would (an existing item, or the
  name a new one would get); the serial is proposed, nothing is written to
  the item.
- A printed label "SN-48213" in DejaVu Sans, with `analysis.ocr` on in the
  config file: the text is read and the serial proposed.
- A photo with no code analyses to nothing within a couple of seconds.
- SIGKILL (by PID) while a slow job is being analysed, restart on the same
  data directory: the job reaches analyzed exactly once (its history).

The hub is driven as the CLI's intake runner drives it (PUT /v1/blobs, the
writes of Sources/TallyIntake/IntakeRequests.swift over WebSocket). Hubs
bind 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import time
from pathlib import Path

import barcode
import pytest
import qrcode
from barcode.writer import ImageWriter
from PIL import Image, ImageChops, ImageDraw, ImageFont
from pylibdmtx.pylibdmtx import encode as dmtx_encode

from synclib import SyncClient, get_record, rest, wait_until

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"
WAIT = 60.0  # seconds a job may take to reach analyzed (debug build, shared cores)


# --------------------------------------------------------------------------
# Photos, made here


def background(width: int, height: int, seed: int) -> Image.Image:
    """A mottled grey surface with fine grain, as a shelf or a box looks
    in a photo: blotches (coarse noise scaled up) plus noise at full
    resolution, so the JPEG is as busy as a real photo's."""
    random.seed(seed)
    coarse = Image.effect_noise((width // 48, height // 48), 50).resize((width, height), Image.BICUBIC)
    grain = Image.effect_noise((width, height), 20)
    base = ImageChops.add(coarse.point(lambda v: v * 0.35 + 60), grain.point(lambda v: v * 0.25), scale=1.0)
    return base.convert("RGB")


def qr_image(text: str, box: int) -> Image.Image:
    code = qrcode.QRCode(border=4, box_size=box, error_correction=qrcode.constants.ERROR_CORRECT_M)
    code.add_data(text)
    code.make(fit=True)
    return code.make_image(fill_color="black", back_color="white").convert("RGB")


def code128_image(text: str) -> Image.Image:
    writer = ImageWriter()
    out = io.BytesIO()
    barcode.get("code128", text, writer=writer).write(
        out, options={"module_width": 0.5, "module_height": 25.0, "dpi": 300, "quiet_zone": 8.0,
                      "write_text": False})
    return Image.open(io.BytesIO(out.getvalue())).convert("RGB")


def datamatrix_image(text: str, scale: int) -> Image.Image:
    encoded = dmtx_encode(text.encode())
    image = Image.frombytes("RGB", (encoded.width, encoded.height), encoded.pixels)
    return image.resize((encoded.width * scale, encoded.height * scale), Image.NEAREST)


def jpeg(image: Image.Image, quality: int = 88) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=quality)
    return out.getvalue()


def finish(canvas: Image.Image, size=(4000, 3000), angle: float = 7.0) -> bytes:
    """Rotated by a small angle and scaled to about 12 MP."""
    rotated = canvas.rotate(angle, resample=Image.BICUBIC, expand=False, fillcolor=(120, 120, 120))
    return jpeg(rotated.resize(size, Image.BICUBIC))


def codes_photo() -> bytes:
    # Drawn at 3400 x 2550, then scaled up to 4000 x 3000.
    canvas = background(3400, 2550, seed=1)
    label = Image.new("RGB", (2300, 1300), "white")
    label.paste(qr_image("https://tally.example/items/new-thing", 14), (80, 80))
    label.paste(datamatrix_image("SN-4711", 5), (1400, 100))
    c128 = code128_image("PART-7731")
    label.paste(c128, (80, 1300 - c128.height - 40))
    canvas.paste(label, (500, 600))
    return finish(canvas)


def label_photo() -> bytes:
    canvas = background(3400, 2550, seed=2)
    label = Image.new("RGB", (2200, 900), "white")
    draw = ImageDraw.Draw(label)
    font = ImageFont.truetype(FONT, 150)
    draw.text((100, 120), "Model X200", fill="black", font=font)
    draw.text((100, 480), "SN-48213", fill="black", font=font)
    canvas.paste(label, (600, 800))
    return finish(canvas, angle=3.0)


def blank_photo(seed: int = 3) -> bytes:
    return finish(background(3400, 2550, seed=seed))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------
# Driving the hub as the CLI's intake runner does


def put_photo(server, data: bytes) -> str:
    digest = sha(data)
    response = rest(server, "PUT", f"/v1/blobs/{digest}", data, {"Content-Type": "image/jpeg"}, timeout=30)
    assert response.status in (200, 201), (response.status, response.body[:300])
    return digest


def upload(server, job: str, item: str, photos: list[str]) -> None:
    """create, created (with a new item), upload: IntakeRequests' writes."""
    record = f"intake/{job}"
    with SyncClient(server) as client:
        client.ok("set", name=record, data={"item": item, "expectedPhotos": len(photos)}, version=0,
                  idem=f"intake/{job}/create")
        client.ok("write", idem=f"intake/{job}/created", ops=[
            {"op": "set", "name": item, "version": 0,
             "data": {"name": f"intake {job}", "codes": [], "serials": [], "stock": 0, "photos": []}},
            {"op": "advance", "name": record, "from": "queued", "to": "created"}])
        client.ok("write", idem=f"intake/{job}/upload", ops=[
            {"op": "merge", "name": item, "data": {"photos": photos}},
            {"op": "advance", "name": record, "from": "created", "to": "media-uploaded",
             "data": {"photos": photos}}])


def record(server, name: str) -> dict:
    response = get_record(server, name)
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()


def wait_analyzed(server, name: str, timeout: float = WAIT) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        data = record(server, name)["data"]
        if data.get("stage") == "analyzed":
            return data
        assert time.monotonic() < deadline, f"{name} not analyzed within {timeout} s: {json.dumps(data)[:600]}"
        time.sleep(0.05)


def by_code(analysis: dict) -> dict:
    return {entry["code"]: entry for entry in analysis["codes"]}


def config(tmp_path: Path, name: str, analysis: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"analysis": analysis}))
    return str(path)


# --------------------------------------------------------------------------
# Tests


def test_codes_in_a_12mp_photo_are_found_and_resolved(tally):
    with SyncClient(tally) as client:
        client.ok("set", name="items/drill-01", data={"name": "Drill", "codes": ["PART-7731"], "serials": []})
    photo = codes_photo()
    assert Image.open(io.BytesIO(photo)).size == (4000, 3000)
    digest = put_photo(tally, photo)
    upload(tally, "codes", "items/new-codes", [digest])
    data = wait_analyzed(tally, "intake/codes")
    analysis = data["analysis"]
    assert analysis["status"] == "done", analysis
    assert "reason" not in analysis
    codes = by_code(analysis)
    assert set(codes) == {"https://tally.example/items/new-thing", "PART-7731", "SN-4711"}, analysis["codes"]
    qr, c128, dm = codes["https://tally.example/items/new-thing"], codes["PART-7731"], codes["SN-4711"]
    assert (qr["symbology"], c128["symbology"], dm["symbology"]) == ("QR-Code", "CODE-128", "DataMatrix")
    assert all(entry["photo"] == digest for entry in codes.values())
    # As /v1/resolve answers: the Code 128 is the drill's; the others are new.
    assert (c128["found"], c128["name"]) == (True, "items/drill-01")
    assert (qr["found"], qr["name"]) == (False, "items/new-thing")
    assert (dm["found"], dm["name"]) == (False, "items/SN-4711")
    resolved = rest(tally, "GET", "/v1/resolve/PART-7731").json()
    assert resolved["name"] == c128["name"]
    assert analysis["photos"] == [{"sha256": digest, "codes": 3, "millis": analysis["photos"][0]["millis"]}]
    assert analysis["proposals"] == {"serials": ["SN-4711"], "codes": ["https://tally.example/items/new-thing"]}
    assert [h["to"] for h in data["history"]] == ["queued", "created", "media-uploaded", "analyzed"]
    # Nothing goes to the item before the owner accepts.
    item = record(tally, "items/new-codes")["data"]
    assert item["serials"] == [] and item["codes"] == []
    # The stage counts in stats/intake.
    stats = record(tally, "stats/intake")["data"]
    assert stats["counts"]["analyzed"] == 1


def test_ocr_reads_the_serial_on_a_label(tally_factory, tmp_path):
    server = tally_factory("--config", config(tmp_path, "ocr.json", {"ocr": True, "namePatterns": ["^Model "]}))
    digest = put_photo(server, label_photo())
    upload(server, "label", "items/new-label", [digest])
    analysis = wait_analyzed(server, "intake/label")["analysis"]
    assert analysis["status"] == "done", analysis
    assert any("SN-48213" in line for line in analysis["text"]), analysis["text"]
    assert analysis["proposals"]["serials"] == ["SN-48213"], analysis
    assert analysis["proposals"]["name"].startswith("Model X200"), analysis


def test_a_photo_with_no_code_analyses_to_nothing_quickly(tally):
    digest = put_photo(tally, blank_photo())
    started = time.monotonic()
    upload(tally, "blank", "items/new-blank", [digest])
    analysis = wait_analyzed(tally, "intake/blank", timeout=10)["analysis"]
    took = time.monotonic() - started
    assert analysis["status"] == "done" and analysis["codes"] == [], analysis
    assert analysis["proposals"] == {"serials": [], "codes": []}
    print("blank photo analysis", analysis["millis"], "ms; advance to analyzed", round(took, 2), "s")
    # About 2 s in a debug build on a busy 2-core machine, most of it the
    # Data Matrix search (libdmtx) over the reduced photo.
    assert analysis["millis"] < 3000 and took < 5.0, (analysis["millis"], took)


def analysis_metrics(server) -> tuple[int, int]:
    """(jobs queued or being analysed, analyses ended) from /metrics."""
    text = rest(server, "GET", "/metrics").body.decode()
    pending = re.search(r"^tally_intake_analysis_pending (\d+)$", text, re.M)
    ended = re.findall(r"^tally_intake_analyses_total\{[^}]*\} (\d+)$", text, re.M)
    assert pending and ended, text[:600]
    return int(pending.group(1)), sum(int(n) for n in ended)


def test_a_job_killed_during_analysis_reaches_analyzed_once(tally_factory):
    server = tally_factory()
    photos = [put_photo(server, blank_photo(seed=10 + n)) for n in range(6)]
    upload(server, "slow", "items/new-slow", photos)
    # Queued at the upload's commit; six blank photos take seconds (each
    # runs libdmtx's search to its cap), so the kill lands mid-analysis.
    wait_until(lambda: analysis_metrics(server) == (1, 0), WAIT,
               lambda: f"the job to be queued: {analysis_metrics(server)}", interval=0.02)
    assert record(server, "intake/slow")["data"]["stage"] == "media-uploaded", "analysed before the kill"
    restarted = tally_factory.restart(server, kill=True)
    data = wait_analyzed(restarted, "intake/slow")
    assert data["analysis"]["status"] == "done", data["analysis"]
    assert len(data["analysis"]["photos"]) == 6
    assert [h["to"] for h in data["history"]].count("analyzed") == 1
    # A second restart finds it analyzed and leaves it so. The hub queues
    # what waits in media-uploaded by a query on the core before it
    # listens; a write answered after the restart comes after that query.
    again = tally_factory.restart(restarted)
    with SyncClient(again) as client:
        client.ok("set", name="notes/after-restart", data={"n": 1}, version=0)
    assert analysis_metrics(again) == (0, 0), "the analysed job was queued again"
    data = record(again, "intake/slow")["data"]
    assert [h["to"] for h in data["history"]].count("analyzed") == 1
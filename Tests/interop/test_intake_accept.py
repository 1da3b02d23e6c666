"""The analyzed stage of intake jobs and `tally intake accept`, black box
against a real hub (issue 18, the CLI's side). The hub analyses the photos
itself: they are made here (Pillow, qrcode, python-barcode; never
downloaded), with a QR code "SN-4711", an EAN-13 "4006381333931" and a
printed name the hub reads with `analysis.ocr` on.

- `tally intake new` waits for the analysis (showing "analysing N
  photo(s)…" and the codes and proposals), covers from analyzed, and
  `status` shows the analysis; `accept` writes serials, codes and name on
  the item once and marks the analysis accepted; a second accept, a job
  without analysis and an unknown job are refused (exit 1, nothing written).
- When the wait runs out the job goes on from media-uploaded, and the
  hub's late advance is refused by its from-check.
- Only the job's owner may accept (the CLI checks the hub's `hello` user
  against the record's `owner`: the hub's default roles let any staff
  member write intake records).
- A CLI killed while waiting resumes from analyzed, each stage once; a job
  from an outbox written before the stage existed (schema 1) resumes.
"""

from __future__ import annotations

import io
import re
import signal
import sqlite3
import time

import barcode
import pytest
from barcode.writer import ImageWriter
from PIL import Image, ImageDraw, ImageFont

from authlib import Tokens, start_hub
from synclib import get_record, rest
from test_intake import CLI, outbox_jobs, png, server_flag, sha, write_photos
from test_intake_analysis import FONT, blank_photo, config, jpeg, qr_image

PROPOSALS = {"serials": ["SN-4711"], "codes": ["4006381333931"], "name": "Cordless drill"}
CODES = ["QR-Code SN-4711 → items/SN-4711 (new)", "EAN-13 4006381333931 → items/4006381333931 (new)"]
PROPOSED = "proposals: serials SN-4711; codes 4006381333931"
NAMED = PROPOSED + "; name \"Cordless drill\""
OCR = {"ocr": True, "namePatterns": ["^Cordless "]}


def ean13_image(digits: str) -> Image.Image:
    out = io.BytesIO()
    barcode.get("ean13", digits, writer=ImageWriter()).write(
        out, options={"module_width": 0.4, "module_height": 18.0, "dpi": 300, "quiet_zone": 8.0,
                      "write_text": False})
    return Image.open(io.BytesIO(out.getvalue())).convert("RGB")


def coded_photo() -> bytes:
    """A 1600 x 1200 label: the QR code, the EAN-13 and the item's name."""
    label = Image.new("RGB", (1600, 1200), "white")
    label.paste(qr_image("SN-4711", 10), (60, 60))
    label.paste(ean13_image("400638133393"), (700, 80))
    ImageDraw.Draw(label).text((80, 900), "Cordless drill", fill="black",
                                font=ImageFont.truetype(FONT, 110))
    return jpeg(label, quality=92)


def expect_summary(err: str, named: bool = True) -> None:
    """The runner's "analysed: …" line, whatever order the codes came in."""
    [line] = [l.removeprefix("tally: ") for l in err.splitlines() if l.startswith("tally: analysed: ")]
    assert line.startswith("analysed: 2 codes (") and all(code in line for code in CODES), line
    assert line.endswith(NAMED if named else PROPOSED), line


def wait_stage(server, name: str, stage: str, headers: dict | None = None, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        data = rest(server, "GET", f"/v1/records/{name}", headers=headers).json()["data"]
        if data.get("stage") == stage:
            return data
        assert time.monotonic() < deadline, f"{name} did not reach {stage}: {data}"
        time.sleep(0.05)


@pytest.fixture
def cli(tmp_path) -> CLI:
    return CLI(tmp_path)


@pytest.fixture
def ocr_hub(tally_factory, tmp_path):
    return tally_factory("--config", config(tmp_path, "ocr.json", OCR))


def history(server, name: str, headers: dict | None = None) -> list[str]:
    response = rest(server, "GET", f"/v1/records/{name}", headers=headers)
    return [h["to"] for h in response.json()["data"]["history"]]


ALL = ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"]


def test_new_waits_for_the_analysis_and_accept_takes_the_proposals(ocr_hub, cli, tmp_path):
    tally = ocr_hub
    photos = [coded_photo(), png(2)]
    result = cli("intake", "new", *server_flag(tally), "--code", "SKU-77", "--analysis-wait", "60",
                 *[a for p in write_photos(tmp_path, photos) for a in ("--photo", p)])
    assert result.rc == 0, result
    job_id = result.lines[0].removeprefix("job ")
    assert "analysing 2 photos…" in result.err, result.err
    expect_summary(result.err)
    assert history(tally, f"intake/{job_id}") == ALL

    status = cli("intake", "status", job_id)
    assert status.rc == 0, status
    assert any(line.split()[:2] == ["analyzed", "confirmed"] for line in status.lines), status
    assert any(re.fullmatch(r"  analysis: done, \d+ ms, 2 photos", line) for line in status.lines), status
    assert f"    code QR-Code SN-4711 → items/SN-4711 (new) in photo {sha(photos[0])[:12]}" in status.lines, status
    assert f"    {NAMED}" in status.lines, status
    assert f"    not accepted: 'tally intake accept {job_id}' writes them on the item" in status.lines, status
    [job] = outbox_jobs(cli)
    assert job["analysis"]["proposals"] == PROPOSALS and "accepted" not in job["analysis"]
    assert {s["stage"]: s["result"] for s in job["stages"]}["cover-set"]["from"] == "analyzed"
    # Nothing reaches the item before the owner accepts.
    item = get_record(tally, "items/SKU-77").json()
    assert item["data"]["serials"] == [] and item["data"]["codes"] == ["SKU-77"], item

    accepted = cli("intake", "accept", job_id[:6], *server_flag(tally))
    assert accepted.rc == 0, accepted
    assert accepted.lines[-1] == "items/SKU-77", accepted
    assert f"accepted: {NAMED.removeprefix('proposals: ')} → items/SKU-77" in accepted.err, accepted
    item = get_record(tally, "items/SKU-77").json()
    assert item["data"]["serials"] == ["SN-4711"] and item["data"]["codes"] == ["SKU-77", "4006381333931"]
    assert item["data"]["name"] == "Cordless drill"
    record = get_record(tally, f"intake/{job_id}").json()["data"]
    assert record["analysis"]["accepted"]["by"] == "anonymous"
    assert abs(record["analysis"]["accepted"]["time"] - time.time() * 1000) < 60_000
    assert any(line.startswith("    accepted by anonymous at ") for line in cli("intake", "status", job_id).lines)

    again = cli("intake", "accept", f"intake/{job_id}", *server_flag(tally), "--json")
    assert again.rc == 1 and "already accepted by anonymous" in again.err, again
    assert get_record(tally, "items/SKU-77").json()["version"] == item["version"]


def test_accept_refuses_a_job_without_analysis(tally, cli, tmp_path):
    # Two 12 MP photos take the hub seconds; the wait (TALLY_ANALYSIS_WAIT,
    # 0.2 s here) runs out first.
    paths = write_photos(tmp_path, [blank_photo(seed=20), blank_photo(seed=21)])
    result = cli("intake", "new", *server_flag(tally), *[a for p in paths for a in ("--photo", p)])
    assert result.rc == 0, result
    assert "the hub did not analyse the photos within 0.2 s; going on without it" in result.err, result.err
    job_id = result.lines[0].removeprefix("job ")
    without = ["queued", "created", "media-uploaded", "cover-set", "done"]
    assert history(tally, f"intake/{job_id}") == without
    refused = cli("intake", "accept", job_id, *server_flag(tally))
    assert refused.rc == 1 and "has no analysis yet (it is at done)" in refused.err, refused
    # The hub's own advance, once its analysis ends, is refused by the
    # from-check: the job stays as the CLI left it.
    deadline = time.monotonic() + 60
    while "\ntally_intake_analysis_pending 0\n" not in (metrics := rest(tally, "GET", "/metrics").body.decode()):
        assert time.monotonic() < deadline, "the hub's analysis did not end"
        time.sleep(0.1)
    assert 'tally_intake_analyses_total{status="done"} 1' in metrics
    assert history(tally, f"intake/{job_id}") == without
    unknown = cli("intake", "accept", "intake/nosuchjob", *server_flag(tally))
    assert unknown.rc == 1 and "no intake record intake/nosuchjob" in unknown.err, unknown
    usage = cli("intake", "accept", *server_flag(tally))
    assert usage.rc == 2 and "takes one JOB" in usage.err, usage


def test_only_the_owner_accepts(tally_factory, cli, tmp_path):
    tokens = Tokens()
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    admin = {"Authorization": f"Bearer {tokens['root']}"}
    made = cli("intake", "new", *server_flag(server), "--token", tokens["ana"], "--code", "OWN-1",
               "--analysis-wait", "60", "--photo", write_photos(tmp_path, [coded_photo()])[0])
    assert made.rc == 0, made
    expect_summary(made.err, named=False)  # OCR is off by default
    job_id = made.lines[0].removeprefix("job ")
    assert history(server, f"intake/{job_id}", admin) == ALL
    # The hub's default roles let any staff member write intake records: the
    # owner rule is the CLI's, from the hub's hello (`user`) and `owner`.
    other = cli("intake", "accept", job_id, *server_flag(server), "--token", tokens["sam"])
    assert other.rc == 1 and f"intake/{job_id} belongs to ana, not sam" in other.err, other
    item = rest(server, "GET", "/v1/records/items/OWN-1", headers=admin).json()
    assert item["data"]["serials"] == []
    mine = cli("intake", "accept", job_id, *server_flag(server), "--token", tokens["ana"], "--json")
    assert mine.rc == 0, mine
    assert mine.json()["accepted"]["by"] == "ana" and mine.json()["serials"] == ["SN-4711"], mine
    item = rest(server, "GET", "/v1/records/items/OWN-1", headers=admin).json()
    assert item["data"]["serials"] == ["SN-4711"]


def test_killed_while_waiting_resumes_from_analyzed(ocr_hub, cli, tmp_path):
    tally = ocr_hub
    crashed = cli("intake", "new", *server_flag(tally), "--code", "KILL-1", "--photo",
                  write_photos(tmp_path, [coded_photo()])[0], env=cli.env(TALLY_INTAKE_CRASH_AT="analyzed:waiting"))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    assert {s["stage"]: s["status"] for s in job["stages"]}["analyzed"] == "pending"
    # The hub analyses while no CLI is running.
    wait_stage(tally, job["record"], "analyzed")
    resumed = cli("intake", "resume", *server_flag(tally), "--analysis-wait", "60")
    assert resumed.rc == 0, resumed
    expect_summary(resumed.err)
    assert history(tally, job["record"]) == ALL
    [job] = outbox_jobs(cli)
    assert job["state"] == "done" and job["analysis"]["proposals"] == PROPOSALS


def test_a_job_from_an_outbox_before_the_stage_resumes(tally, cli, tmp_path):
    """An outbox written by the tally before this stage (schema 1, no
    analyzed row) with a job stopped after its upload: opened, it gets the
    stage, and the job resumes to done."""
    crashed = cli("intake", "new", *server_flag(tally), "--photo", write_photos(tmp_path, [png(6)])[0],
                  env=cli.env(TALLY_INTAKE_CRASH_AT="upload:confirmed"))
    assert crashed.rc == -signal.SIGKILL, crashed
    with sqlite3.connect(cli.outbox) as db:  # back to what the older tally wrote
        db.execute("DELETE FROM stages WHERE stage = 'analyzed'")
        db.execute("UPDATE stages SET position = position - 1 WHERE stage IN ('cover-set', 'done')")
        db.execute("PRAGMA user_version = 1")
    resumed = cli("intake", "resume", *server_flag(tally))
    assert resumed.rc == 0, resumed
    [job] = outbox_jobs(cli)
    assert [(s["stage"], s["status"]) for s in job["stages"]] == [
        (s, "confirmed") for s in ("create", "created", "upload", "analyzed", "cover-set", "done")]
    with sqlite3.connect(cli.outbox) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2

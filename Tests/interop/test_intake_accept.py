"""The analyzed stage of intake jobs and `tally intake accept`, black box
against a real hub (issue 18, the CLI's side).

The hub's analyser is built on another branch; until it is merged these
tests SIMULATE it: `SimulatedAnalyser` does over REST exactly what the hub
does once it analyses by itself — when an intake record reaches
`media-uploaded` it advances it `media-uploaded -> analyzed` (from-checked,
idempotency key `intake/<id>/analyzed`) with an `analysis` object of the
shared contract. With the hub's own analyser the simulated advance is what
the hub does; the simulator's advance is then refused by the from-check or
answered from the key, and these tests hold either way.

- `tally intake new` waits for the analysis (showing "analysing N
  photo(s)…" and the codes and proposals), covers from analyzed, and
  `status` shows the analysis; `accept` writes serials, codes and name on
  the item once and marks the analysis accepted; a second accept, a job
  without analysis and an unknown job are refused (exit 1, nothing written).
- Only the job's owner may accept (the CLI checks the hub's `hello` user
  against the record's `owner`: the hub's default roles let any staff
  member write intake records).
- A CLI killed while waiting resumes from analyzed, each stage once; a job
  from an outbox written before the stage existed (schema 1) resumes.
"""

from __future__ import annotations

import signal
import sqlite3
import threading
import time

import pytest

from authlib import Tokens, start_hub
from synclib import get_record, rest
from test_intake import CLI, outbox_jobs, png, server_flag, sha, write_photos

ANALYSIS_CODES = [
    {"code": "SN-4711", "symbology": "QR-Code", "found": False, "name": "items/SN-4711"},
    {"code": "4006381333931", "symbology": "EAN-13", "found": False, "name": "items/4006381333931"},
]
PROPOSALS = {"serials": ["SN-4711"], "codes": ["4006381333931"], "name": "Cordless drill"}
SUMMARY = ("analysed: 2 codes (QR-Code SN-4711 → items/SN-4711 (new), EAN-13 4006381333931 → "
           "items/4006381333931 (new)), proposals: serials SN-4711; codes 4006381333931; name \"Cordless drill\"")


def analysis_of(photos: list[str], proposals: dict = PROPOSALS) -> dict:
    return {"status": "done", "millis": 12,
            "photos": [{"sha256": p, "codes": 2 if i == 0 else 0, "millis": 6} for i, p in enumerate(photos)],
            "codes": [dict(code, photo=photos[0]) for code in ANALYSIS_CODES], "proposals": proposals}


def advance_to_analyzed(server, record: dict, headers: dict | None = None, proposals: dict = PROPOSALS):
    """What the hub's analyser writes for a record at media-uploaded."""
    job = record["name"].removeprefix("intake/")
    body = {"from": "media-uploaded", "to": "analyzed",
            "data": {"analysis": analysis_of(record["data"]["photos"], proposals)}}
    return rest(server, "POST", f"/v1/records/{record['name']}/advance", body,
                headers={**(headers or {}), "Idempotency-Key": f"intake/{job}/analyzed"})


class SimulatedAnalyser:
    """Polls the hub's intake records (every 50 ms) and advances each one at
    media-uploaded to analyzed, as the hub's analyser does (see above)."""

    def __init__(self, server, headers: dict | None = None, delay: float = 0.3):
        self.server, self.headers, self.delay = server, headers or {}, delay
        self.stop = threading.Event()
        self.advanced: list[str] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(0.05):
            listing = rest(self.server, "GET", "/v1/records?prefix=intake/&limit=1000", headers=self.headers)
            for record in listing.json().get("records", []) if listing.status == 200 else []:
                if record["data"].get("stage") == "media-uploaded" and record["name"] not in self.advanced:
                    time.sleep(self.delay)  # the CLI is waiting meanwhile
                    if advance_to_analyzed(self.server, record, self.headers).status == 200:
                        self.advanced.append(record["name"])

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def cli(tmp_path) -> CLI:
    return CLI(tmp_path)


def history(server, name: str, headers: dict | None = None) -> list[str]:
    response = rest(server, "GET", f"/v1/records/{name}", headers=headers)
    return [h["to"] for h in response.json()["data"]["history"]]


ALL = ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done"]


def test_new_waits_for_the_analysis_and_accept_takes_the_proposals(tally, cli, tmp_path):
    photos = [png(1), png(2)]
    with SimulatedAnalyser(tally) as analyser:
        result = cli("intake", "new", *server_flag(tally), "--code", "SKU-77", "--analysis-wait", "30",
                     *[a for p in write_photos(tmp_path, photos) for a in ("--photo", p)])
    assert result.rc == 0, result
    job_id = result.lines[0].removeprefix("job ")
    assert analyser.advanced == [f"intake/{job_id}"]
    assert "analysing 2 photos…" in result.err and SUMMARY in result.err, result.err
    assert history(tally, f"intake/{job_id}") == ALL

    status = cli("intake", "status", job_id)
    assert status.rc == 0, status
    assert any(line.split()[:2] == ["analyzed", "confirmed"] for line in status.lines), status
    assert "  analysis: done, 12 ms, 2 photos" in status.lines, status
    assert f"    code QR-Code SN-4711 → items/SN-4711 (new) in photo {sha(photos[0])[:12]}" in status.lines, status
    assert "    proposals: serials SN-4711; codes 4006381333931; name \"Cordless drill\"" in status.lines, status
    assert f"    not accepted: 'tally intake accept {job_id}' writes them on the item" in status.lines, status
    [job] = outbox_jobs(cli)
    assert job["analysis"]["proposals"] == PROPOSALS and "accepted" not in job["analysis"]
    assert {s["stage"]: s["result"] for s in job["stages"]}["cover-set"]["from"] == "analyzed"

    accepted = cli("intake", "accept", job_id[:6], *server_flag(tally))
    assert accepted.rc == 0, accepted
    assert accepted.lines[-1] == "items/SKU-77", accepted
    assert ("accepted: serials SN-4711; codes 4006381333931; name \"Cordless drill\" → items/SKU-77"
            in accepted.err), accepted
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
    # No analyser: the wait (TALLY_ANALYSIS_WAIT, 0.2 s here) runs out.
    result = cli("intake", "new", *server_flag(tally), "--photo", write_photos(tmp_path, [png(3)])[0])
    assert result.rc == 0, result
    assert "the hub did not analyse the photos within 0.2 s; going on without it" in result.err, result.err
    job_id = result.lines[0].removeprefix("job ")
    assert history(tally, f"intake/{job_id}") == ["queued", "created", "media-uploaded", "cover-set", "done"]
    # The hub's late advance is refused by the from-check.
    late = advance_to_analyzed(tally, get_record(tally, f"intake/{job_id}").json())
    assert late.status == 409, late
    refused = cli("intake", "accept", job_id, *server_flag(tally))
    assert refused.rc == 1 and "has no analysis yet (it is at done)" in refused.err, refused
    unknown = cli("intake", "accept", "intake/nosuchjob", *server_flag(tally))
    assert unknown.rc == 1 and "no intake record intake/nosuchjob" in unknown.err, unknown
    usage = cli("intake", "accept", *server_flag(tally))
    assert usage.rc == 2 and "takes one JOB" in usage.err, usage


def test_only_the_owner_accepts(tally_factory, cli, tmp_path):
    tokens = Tokens()
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    admin = {"Authorization": f"Bearer {tokens['root']}"}
    with SimulatedAnalyser(server, admin):
        made = cli("intake", "new", *server_flag(server), "--token", tokens["ana"], "--code", "OWN-1",
                   "--analysis-wait", "30", "--photo", write_photos(tmp_path, [png(4)])[0])
    assert made.rc == 0, made
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


def test_killed_while_waiting_resumes_from_analyzed(tally, cli, tmp_path):
    crashed = cli("intake", "new", *server_flag(tally), "--code", "KILL-1", "--photo",
                  write_photos(tmp_path, [png(5)])[0], env=cli.env(TALLY_INTAKE_CRASH_AT="analyzed:waiting"))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    assert {s["stage"]: s["status"] for s in job["stages"]}["analyzed"] == "pending"
    # The hub analyses while no CLI is running.
    record = get_record(tally, job["record"]).json()
    assert record["data"]["stage"] == "media-uploaded"
    assert advance_to_analyzed(tally, record).status == 200
    resumed = cli("intake", "resume", *server_flag(tally), "--analysis-wait", "30")
    assert resumed.rc == 0 and SUMMARY in resumed.err, resumed
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

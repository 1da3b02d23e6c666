"""Intake jobs and code resolution from the CLI, black box:
`tally intake new|resume|status` and `tally resolve` against a real hub.

- A job runs its stages (resolve, create, created, upload, analyzed,
  cover-set, done; these hubs may not analyse, so the CLI's analysis wait
  is short here: TALLY_ANALYSIS_WAIT, see test_intake_accept.py);
  the hub then holds exactly one intake record at `done` with the stage
  history in order, one item with each photo once in `photos`, the cover,
  the received stock, and every photo as a blob whose bytes match its
  SHA-256.
- SIGKILL at every crash point (`TALLY_INTAKE_CRASH_AT`), then
  `tally intake resume`: the same end state, nothing twice (the acceptance
  test of the intake issue). Also SIGKILL from outside at a random moment
  while large photos upload.
- Bad flags exit 2 with a message and create nothing (no outbox, no write
  on the hub); a token over plain ws:// to a host that is not loopback is
  refused before any connection.
- `tally resolve` finds items by SKU, serial, code, UUID (any case) and
  link; an unknown code exits 1 naming the item it would become.

Every hub binds 127.0.0.1 (conftest) with its own --data; each test has its
own outbox under tmp_path and HOME; every wait is bounded.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import signal
import sqlite3
import struct
import socket
import subprocess
import threading
import uuid
import zlib
from pathlib import Path

import pytest

from authlib import Tokens, start_hub
from conftest import TALLY_BIN
from synclib import CLIResult, cli_env, get_record, put_record, rest, run_tally

RUN_TIMEOUT = 60.0
STAGES = ["resolve", "create", "created", "upload", "analyzed", "cover-set", "done"]
# The record's history, less `analyzed`: a hub that analyses the photos
# puts it between media-uploaded and cover-set, one that does not leaves it
# out (the CLI then covers from media-uploaded once its wait runs out).
HISTORY = ["queued", "created", "media-uploaded", "cover-set", "done"]
# How long the CLI waits here for an analysis (seconds).
ANALYSIS_WAIT = "0.2"
# Every point TALLY_INTAKE_CRASH_AT knows, in the order a job with a code
# and two photos reaches them.
CRASH_POINTS = (["copied"]
                + [f"{stage}:{when}" for stage in STAGES[:3] for when in ("sent", "confirmed")]
                + ["upload:1", "upload:2", "upload:sent", "upload:confirmed"]
                + ["analyzed:waiting", "analyzed:confirmed"]
                + [f"{stage}:{when}" for stage in STAGES[5:] for when in ("sent", "confirmed")])


# --------------------------------------------------------------------------
# Photos


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png(seed: int, side: int = 16) -> bytes:
    """A valid PNG whose pixels depend on ``seed`` (distinct bytes per seed)."""
    rng = random.Random(seed)
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(side * 3)) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def jpeg(seed: int, size: int = 2048) -> bytes:
    """JPEG signature (SOI, APP0 JFIF), ``size`` bytes of noise, EOI."""
    rng = random.Random(seed)
    app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    return b"\xff\xd8" + app0 + rng.randbytes(size) + b"\xff\xd9"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_photos(directory: Path, photos: list[bytes], prefix: str = "photo") -> list[Path]:
    paths = []
    for index, data in enumerate(photos):
        suffix = "png" if data.startswith(PNG_SIGNATURE) else "jpg"
        path = directory / f"{prefix}-{index}.{suffix}"
        path.write_bytes(data)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------
# Running the CLI


class CLI:
    """Runs `tally` with a clean environment: HOME under tmp_path, no
    inherited TALLY_* variables, and (unless told) --outbox in tmp_path."""

    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        self.home.mkdir(exist_ok=True)
        self.outbox = tmp_path / "outbox" / "outbox.sqlite"

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(self.home, **{"TALLY_ANALYSIS_WAIT": ANALYSIS_WAIT, **extra})

    def __call__(self, *args, env: dict | None = None, outbox: bool = True, timeout: float = RUN_TIMEOUT) -> CLIResult:
        argv = [str(a) for a in args]
        if outbox and argv[0] == "intake":
            argv += ["--outbox", str(self.outbox)]
        return run_tally(argv, env or self.env(), timeout)


@pytest.fixture
def cli(tmp_path) -> CLI:
    return CLI(tmp_path)


def server_flag(server) -> list[str]:
    return ["--server", f"ws://{server.host}:{server.port}"]


def new_job(cli: CLI, server, photos: list[Path], *extra, env=None) -> CLIResult:
    args = ["intake", "new", *server_flag(server)]
    for path in photos:
        args += ["--photo", path]
    return cli(*args, *extra, env=env)


def outbox_jobs(cli: CLI) -> list[dict]:
    result = cli("intake", "status", "--json")
    assert result.rc == 0, result
    return result.json()["jobs"]


# --------------------------------------------------------------------------
# What the hub holds


def records(server, prefix: str) -> list[dict]:
    found, after = [], None
    while True:
        path = f"/v1/records?prefix={prefix}&limit=1000" + (f"&after={after}" if after else "")
        response = rest(server, "GET", path)
        assert response.status == 200, (response.status, response.body[:300])
        body = response.json()
        found += body["records"]
        if not body.get("more"):
            return found
        after = found[-1]["name"]


def head_seq(server) -> int:
    return rest(server, "GET", "/v1/changes?since=0&limit=1").json()["seq"]


def check_job_on_hub(server, job_id: str, item: str, photos: list[bytes], *, code: str | None,
                     receive: int | None, stock_before: int = 0, photos_before: list[str] = (),
                     location: str | None = None):
    """The end state of a finished job: one record at done, one item with
    each photo once, the stock received once, every blob stored intact."""
    record_name = f"intake/{job_id}"
    mine = [r for r in records(server, "intake/") if r["name"] == record_name or r["data"].get("item") == item]
    assert [r["name"] for r in mine] == [record_name], f"intake records for {item}: {mine}"
    record = mine[0]["data"]
    assert record["stage"] == "done", record
    history = [h["to"] for h in record["history"]]
    assert [stage for stage in history if stage != "analyzed"] == HISTORY and history.count("analyzed") <= 1, history
    assert record["item"] == item
    if code is not None:
        assert record["code"] == code
    if location is not None:
        assert record["location"] == location
    shas = [sha(p) for p in photos]
    assert record["photos"] == shas, record
    assert record["cover"] == shas[0]
    assert record["expectedPhotos"] == len(photos)

    if code is not None:
        with_code = [r["name"] for r in records(server, "items/") if code in r["data"].get("codes", [])
                     or r["data"].get("sku") == code or code in r["data"].get("serials", [])]
        assert with_code == [item], f"items for code {code}: {with_code}"
    response = get_record(server, item)
    assert response.status == 200, response
    data = response.json()["data"]
    expected_photos = list(photos_before) + [s for s in shas if s not in photos_before]
    assert data["photos"] == expected_photos, data
    assert len(set(data["photos"])) == len(data["photos"])
    assert data.get("cover") is not None
    assert data["stock"] == stock_before + (receive or 0), data

    # The intake list holds open jobs: a done one has left it.
    entries = rest(server, "GET", "/v1/lists/intake").json()["entries"]
    assert record_name not in entries, entries

    for photo in photos:
        blob = rest(server, "GET", f"/v1/blobs/{sha(photo)}")
        assert blob.status == 200, (blob.status, blob.body[:200])
        assert sha(blob.body) == sha(photo) and blob.body == photo
        assert blob.header("Content-Type") == ("image/png" if photo.startswith(PNG_SIGNATURE) else "image/jpeg")


# --------------------------------------------------------------------------
# A whole job


def test_intake_new_runs_every_stage(tally, cli, tmp_path):
    photos = [png(1), jpeg(2), png(3, side=64)]
    paths = write_photos(tmp_path, photos)
    code = f"SKU-{uuid.uuid4().hex[:8]}"
    result = new_job(cli, tally, paths, "--code", code, "--location", "shelf 3", "--gps", "48.8584,2.2945",
                     "--receive", "5")
    assert result.rc == 0, result
    job_id = result.lines[0].removeprefix("job ")
    assert len(job_id) == 16 and int(job_id, 16) >= 0, result
    assert result.lines[-1] == f"intake/{job_id}", result
    for index in range(1, 4):  # one line per photo on a stderr that is not a terminal
        assert f"photo {index}/3" in result.err, result
    check_job_on_hub(tally, job_id, f"items/{code}", photos, code=code, receive=5, location="shelf 3")
    record = get_record(tally, f"intake/{job_id}").json()["data"]
    assert record["gps"] == {"lat": 48.8584, "lon": 2.2945} and record["receive"] == 5
    item = get_record(tally, f"items/{code}").json()["data"]
    assert item["codes"] == [code] and item["location"] == "shelf 3" and item["cover"] == sha(photos[0])

    # The outbox: every stage confirmed, ids recorded, photo files removed.
    [job] = outbox_jobs(cli)
    assert job["job"] == job_id and job["state"] == "done"
    assert [(s["stage"], s["status"]) for s in job["stages"]] == [(s, "confirmed") for s in STAGES]
    assert all(p["uploaded"] for p in job["photos"])
    assert {s["stage"]: s["result"] for s in job["stages"]}["create"]["seq"] > 0
    assert list((cli.outbox.parent / "outbox-photos").iterdir()) == []

    text = cli("intake", "status", job_id)
    assert text.rc == 0, text
    for stage in STAGES:
        assert any(line.split()[:2] == [stage, "confirmed"] for line in text.lines), text
    # Resuming a finished job does nothing.
    again = cli("intake", "resume", *server_flag(tally))
    assert again.rc == 0 and "no unfinished intake jobs" in again.err, again
    check_job_on_hub(tally, job_id, f"items/{code}", photos, code=code, receive=5)


def test_intake_without_code_creates_an_item_named_after_the_job(tally, cli, tmp_path):
    photos = [jpeg(10)]
    result = new_job(cli, tally, write_photos(tmp_path, photos), "--json")
    assert result.rc == 0, result
    body = result.json()
    job_id = body["job"]
    assert body["record"] == f"intake/{job_id}" and body["item"] == f"items/{job_id}"
    assert body["state"] == "done" and body["newItem"] is True
    assert [p["sha256"] for p in body["photos"]] == [sha(photos[0])]
    assert [s["stage"] for s in body["stages"]] == STAGES[1:]
    check_job_on_hub(tally, job_id, f"items/{job_id}", photos, code=None, receive=None)


def test_intake_for_an_existing_item_keeps_its_photos_cover_and_adds_stock(tally, cli, tmp_path):
    old = sha(b"an older photo")
    assert put_record(tally, "items/drill-7", {"name": "Drill", "sku": "DR-7", "serials": ["SN-77"], "codes": [],
                                               "stock": 3, "photos": [old], "cover": old}).status in (200, 201)
    photos = [png(20), png(21)]
    result = new_job(cli, tally, write_photos(tmp_path, photos), "--code", "sn-77", "--receive", "2")
    assert result.rc == 0, result
    job_id = result.lines[0].removeprefix("job ")
    check_job_on_hub(tally, job_id, "items/drill-7", photos, code=None, receive=2, stock_before=3,
                     photos_before=[old])
    assert get_record(tally, "items/drill-7").json()["data"]["cover"] == old


def test_the_same_photo_twice_is_sent_once(tally, cli, tmp_path):
    [path] = write_photos(tmp_path, [png(30)])
    result = new_job(cli, tally, [path, path])
    assert result.rc == 0, result
    assert "same bytes" in result.err, result
    [job] = outbox_jobs(cli)
    assert [p["sha256"] for p in job["photos"]] == [sha(png(30))]


def test_default_outbox_locations(tally, cli, tmp_path):
    [path] = write_photos(tmp_path, [png(40)])
    args = ["intake", "new", *server_flag(tally), "--photo", path]
    explicit = tmp_path / "env-outbox" / "x.sqlite"
    assert cli(*args, outbox=False, env=cli.env(TALLY_OUTBOX=str(explicit))).rc == 0
    assert explicit.is_file() and (explicit.parent / "x-photos").is_dir()
    xdg = tmp_path / "xdg"
    assert cli(*args, outbox=False, env=cli.env(XDG_DATA_HOME=str(xdg))).rc == 0
    assert (xdg / "tally" / "outbox.sqlite").is_file()
    assert cli(*args, outbox=False).rc == 0
    assert (cli.home / ".local" / "share" / "tally" / "outbox.sqlite").is_file()


def test_intake_and_resolve_over_tls(tally_factory, cli, tmp_path, tls_cert):
    """wss:// and https:// with the hub's certificate verified (trusted
    through SSL_CERT_FILE); the token may travel: the channel is encrypted."""
    server = tally_factory(tls=True)
    env = cli.env(SSL_CERT_FILE=str(tls_cert[0]))
    photos = [png(110), jpeg(111, size=300_000)]
    remote = ["--server", f"wss://127.0.0.1:{server.port}", "--token", "t"]
    result = cli("intake", "new", *remote, "--code", "TLS-1", "--photo", write_photos(tmp_path, photos)[0],
                 "--photo", tmp_path / "photo-1.jpg", env=env)
    assert result.rc == 0, result
    found = cli("resolve", "tls-1", "--server", f"https://localhost:{server.port}", env=env)
    assert found.rc == 0 and found.lines[0] == "items/TLS-1", found
    untrusted = cli("resolve", "tls-1", "--server", f"https://localhost:{server.port}")
    assert untrusted.rc == 1 and "certificate verify failed" in untrusted.err, untrusted


def test_status_creates_nothing(cli):
    result = cli("intake", "status")
    assert result.rc == 0 and "no intake jobs" in result.out, result
    missing = cli("intake", "status", "abcdef")
    assert missing.rc == 1 and "no intake job 'abcdef'" in missing.err, missing
    assert not cli.outbox.parent.exists()


def listed_options(help_text: str) -> list[tuple[str, str | None]]:
    """Each `  --name [VALUE]  description` line of a help text: the option
    and its value placeholder (None for a switch)."""
    options = []
    for line in help_text.splitlines():
        match = re.match(r"  --([a-z-]+)(?: ([A-Z][^ ]*))?(?:  |$)", line)
        if match:
            options.append((match.group(1), match.group(2)))
    return options


def test_every_intake_command_takes_the_options_its_help_lists(cli, tmp_path):
    """`tally intake --help` lists its Options (the outbox, --json, --quiet,
    the hub's --server/--token/--insecure) for every intake command, and each
    takes them: `intake status --server URL` used to exit 2 as an unknown
    option. Neither status nor resume (with no jobs) needs the hub."""
    help_text = cli("intake", "--help", outbox=False).out
    common = listed_options(help_text.split("\nOptions:\n", 1)[1])
    assert {"outbox", "json", "quiet", "server", "token", "insecure"} <= {name for name, _ in common}, help_text
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # bound, not listening: refuses
    sock.bind(("127.0.0.1", 0))
    dead = f"ws://127.0.0.1:{sock.getsockname()[1]}"
    values = {"URL": dead, "URLS": f"{dead},{dead}", "FILE": str(cli.outbox)}
    try:
        for name, value in common:
            flag = [f"--{name}"] + ([values.get(value, "x")] if value else [])
            for sub in ("status", "resume"):
                result = cli("intake", sub, *flag)
                assert result.rc == 0 and "unknown option" not in result.err, (sub, flag, result)
            refused = cli("intake", "new", *flag)
            assert refused.rc == 2 and "at least one --photo" in refused.err, (flag, refused)
    finally:
        sock.close()


# --------------------------------------------------------------------------
# Crashes


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_sigkill_at_each_point_then_resume(module_tally, cli, tmp_path, point):
    """The acceptance test: killed with SIGKILL at `point`, the job resumes
    to exactly one record and one item, each photo stored once."""
    server = module_tally
    photos = [png(zlib.crc32(point.encode()) % 10_000), jpeg(zlib.crc32(point.encode()) % 10_000 + 1)]
    code = f"CR-{uuid.uuid4().hex[:10]}"
    crashed = new_job(cli, server, write_photos(tmp_path, photos), "--code", code, "--receive", "4",
                      env=cli.env(TALLY_INTAKE_CRASH_AT=point))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    assert job["state"] == "running", job
    job_id = job["job"]

    resumed = cli("intake", "resume", *server_flag(server))
    assert resumed.rc == 0, resumed
    assert f"intake/{job_id} done" in resumed.out, resumed
    [job] = outbox_jobs(cli)
    assert job["state"] == "done" and all(s["status"] == "confirmed" for s in job["stages"]), job
    check_job_on_hub(server, job_id, f"items/{code}", photos, code=code, receive=4)


def advance(server, record: str, body: dict) -> None:
    response = rest(server, "POST", f"/v1/records/{record}/advance", body)
    assert response.status == 200, (response.status, response.body[:300])


def test_a_stage_already_applied_without_its_key_is_recognised(module_tally, cli, tmp_path):
    """A stage the hub applied whose idempotency key is gone (keys live 24
    hours; simulated by applying the stage from outside): the retried
    advance is refused, the runner reads the record, sees it already there,
    and goes on without applying anything twice."""
    server = module_tally
    photos = [png(400)]
    crashed = new_job(cli, server, write_photos(tmp_path, photos), "--receive", "3",
                      env=cli.env(TALLY_INTAKE_CRASH_AT="create:confirmed"))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    item = f"items/{job['job']}"
    assert put_record(server, item, {"name": "x", "codes": [], "serials": [], "stock": 0, "photos": []}).status == 201
    advance(server, job["record"], {"from": "queued", "to": "created"})
    # Also the last stage: killed before recording cover-set, then done applied from outside.
    resumed = cli("intake", "resume", *server_flag(server), env=cli.env(TALLY_INTAKE_CRASH_AT="cover-set:confirmed"))
    assert resumed.rc == -signal.SIGKILL, resumed
    assert "is already created" in resumed.err, resumed
    advance(server, job["record"], {"from": "cover-set", "to": "done"})
    rest(server, "PATCH", f"/v1/records/{item}", {"stock": 3})
    finished = cli("intake", "resume", *server_flag(server))
    assert finished.rc == 0 and "is already done" in finished.err, finished
    check_job_on_hub(server, job["job"], item, photos, code=None, receive=3)


def test_a_record_failed_on_the_hub_ends_the_job(module_tally, cli, tmp_path):
    crashed = new_job(cli, module_tally, write_photos(tmp_path, [png(410)]),
                      env=cli.env(TALLY_INTAKE_CRASH_AT="create:confirmed"))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    advance(module_tally, job["record"], {"to": "failed", "reason": "wrong shelf"})
    resumed = cli("intake", "resume", *server_flag(module_tally))
    assert resumed.rc == 1 and "marked failed on the hub: wrong shelf" in resumed.err, resumed
    [job] = outbox_jobs(cli)
    assert job["state"] == "failed" and "wrong shelf" in job["reason"]
    assert get_record(module_tally, f"items/{job['job']}").status == 404  # nothing was created for it


@pytest.mark.parametrize("point", ["copied", "created:sent", "upload:1", "upload:sent", "done:sent"])
def test_sigkill_without_code_then_resume_by_job_id(module_tally, cli, tmp_path, point):
    server = module_tally
    photos = [jpeg(zlib.crc32(point.encode()) % 10_000 + 7)]
    crashed = new_job(cli, server, write_photos(tmp_path, photos), env=cli.env(TALLY_INTAKE_CRASH_AT=point))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    resumed = cli("intake", "resume", job["job"][:6], *server_flag(server))
    assert resumed.rc == 0, resumed
    assert resumed.lines[-1] == f"intake/{job['job']}", resumed
    check_job_on_hub(server, job["job"], f"items/{job['job']}", photos, code=None, receive=None)


class HoldingProxy:
    """A TCP proxy on 127.0.0.1 in front of a hub that can stop an upload
    at a chosen byte: `arm(n)` lets n more bytes of `PUT` requests through,
    then holds that connection (`held` is set) until `release()`. The CLI
    talks to the hub through it, so a test can SIGKILL the CLI at an exact,
    random point of a photo's body."""

    def __init__(self, server):
        self.target = (server.host, server.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.budget: int | None = None
        self.held = threading.Event()
        self.go = threading.Event()
        self.sockets: list[socket.socket] = []
        self.put_bytes = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def arm(self, count: int) -> None:
        with self.lock:
            self.budget = count
            self.held.clear()
            self.go.clear()

    def release(self) -> None:
        """Closes every connection (the killed client's included) and lets
        the proxy run freely."""
        with self.lock:
            self.budget = None
            sockets, self.sockets = self.sockets, []
        self.go.set()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.release()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=RUN_TIMEOUT)
            upstream.settimeout(None)
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, counted: bool) -> None:
        is_put = None
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if counted and is_put is None:
                    is_put = data.startswith(b"PUT ")
                while counted and is_put and data:
                    with self.lock:
                        budget = self.budget
                        if budget is None:
                            self.put_bytes += len(data)
                            break
                        take = min(budget, len(data))
                        self.budget = budget - take
                        self.put_bytes += take
                    sink.sendall(data[:take])
                    data = data[take:]
                    if data:  # out of budget: hold here until released
                        self.held.set()
                        self.go.wait(RUN_TIMEOUT)
                        return
                if data:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def test_sigkill_from_outside_at_random_points_of_large_uploads(tally, cli, tmp_path):
    """Three times: SIGKILL the CLI at a random byte of the photos' upload
    (held there by a proxy), then resume; finally resume to the end. The hub
    keeps no partial photo, and every photo ends up stored once."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    photos = [PNG_SIGNATURE + random.Random(seed + i).randbytes((2 << 20) + i) for i in range(3)]
    paths = write_photos(tmp_path, photos)
    code = f"BIG-{seed}"
    proxy = HoldingProxy(tally)
    kills = []
    try:
        args = ["intake", "new", "--server", proxy.url, "--code", code, "--receive", "1"]
        args += [a for p in paths for a in ("--photo", p)]
        for round_ in range(3):
            pending = [p for p in photos if sha(p) not in stored_photos(cli.outbox)]
            if not pending:
                break
            offset = rng.randrange(1, sum(len(p) for p in pending))
            proxy.arm(offset)
            argv = [str(TALLY_BIN), *map(str, args), "--outbox", str(cli.outbox)]
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=cli.env())
            try:
                held = proxy.held.wait(RUN_TIMEOUT)
                assert held, f"round {round_}: the upload never reached byte {offset} (seed {seed})"
                os.kill(process.pid, signal.SIGKILL)
                assert process.wait(RUN_TIMEOUT) == -signal.SIGKILL
            finally:
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(RUN_TIMEOUT)
            proxy.release()
            kills.append((round_, offset, upload_state(cli.outbox)))
            args = ["intake", "resume", "--server", proxy.url]
        # Partial bodies were not stored: every blob the hub has is whole.
        for photo in photos:
            blob = rest(tally, "GET", f"/v1/blobs/{sha(photo)}")
            assert blob.status in (200, 404), blob.status
            assert blob.status == 404 or blob.body == photo
        final = cli("intake", "resume", "--server", proxy.url)
        assert final.rc == 0, (final, kills, f"seed {seed}")
    finally:
        proxy.close()
    [job] = outbox_jobs(cli)
    assert job["state"] == "done", (job, kills)
    check_job_on_hub(tally, job["job"], f"items/{code}", photos, code=code, receive=1)


def stored_photos(outbox: Path) -> set[str]:
    """The photos the outbox records as stored on the hub."""
    if not outbox.exists():
        return set()
    with sqlite3.connect(f"file:{outbox}?mode=ro", uri=True, timeout=5) as db:
        return {row[0] for row in db.execute("SELECT sha256 FROM photos WHERE uploaded = 1")}


def upload_state(outbox: Path) -> str:
    try:
        with sqlite3.connect(f"file:{outbox}?mode=ro", uri=True, timeout=5) as db:
            stages = db.execute("SELECT stage, status FROM stages ORDER BY position").fetchall()
            stored = db.execute("SELECT COUNT(*) FROM photos WHERE uploaded = 1").fetchone()[0]
        return f"{stages} photos stored: {stored}"
    except sqlite3.Error as error:
        return f"unreadable: {error}"


# --------------------------------------------------------------------------
# Refusals


def test_a_refusal_fails_the_job_and_marks_the_record_failed(tally_factory, cli, tmp_path):
    config = tmp_path / "small-blobs.json"
    config.write_text(json.dumps({"maxBlobSize": 4096}))
    server = tally_factory("--config", str(config))
    photos = [png(50), jpeg(51, size=10_000)]
    result = new_job(cli, server, write_photos(tmp_path, photos))
    assert result.rc == 1, result
    assert "failed" in result.err and "too_large" in result.err, result
    [job] = outbox_jobs(cli)
    assert job["state"] == "failed" and "too_large" in job["reason"]
    assert {s["stage"]: s["status"] for s in job["stages"]}["upload"] == "failed"
    record = get_record(server, job["record"]).json()["data"]
    assert record["stage"] == "failed" and "too_large" in record["history"][-1]["reason"], record
    again = cli("intake", "resume", job["job"], *server_flag(server))
    assert again.rc == 1 and "cannot be resumed" in again.err, again
    assert list((cli.outbox.parent / "outbox-photos").iterdir()) == []  # an ended job keeps no photos


def test_a_bad_token_leaves_the_job_resumable(tally_factory, cli, tmp_path):
    tokens = Tokens()
    server = start_hub(tally_factory, tokens.config(), tokens.env())
    photos = [png(60)]
    bad = new_job(cli, server, write_photos(tmp_path, photos), "--token", "not-a-token")
    assert bad.rc == 1 and "intake resume" in bad.err, bad
    [job] = outbox_jobs(cli)
    assert job["state"] == "running"
    denied = cli("intake", "resume", *server_flag(server), "--token", tokens.for_role("dashboard"))
    assert denied.rc == 1 and "forbidden" in denied.err, denied
    # forbidden cannot be fixed by retrying: that job is failed; a new one with staff's token runs.
    assert outbox_jobs(cli)[0]["state"] == "failed"
    good = new_job(cli, server, write_photos(tmp_path, photos), "--token", tokens.for_role("staff"))
    assert good.rc == 0, good
    job_id = good.lines[0].removeprefix("job ")
    staff = {"Authorization": f"Bearer {tokens.for_role('staff')}"}
    record = rest(server, "GET", f"/v1/records/intake/{job_id}", headers=staff).json()["data"]
    assert record["stage"] == "done" and record["owner"] == "ana", record
    blob = rest(server, "GET", f"/v1/blobs/{sha(photos[0])}", headers=staff)
    assert blob.status == 200 and blob.body == photos[0]


BAD_FLAGS = [
    ([], "at least one --photo"),
    (["--photo", "{missing}"], "cannot read photo"),
    (["--photo", "{dir}"], "not a regular file"),
    (["--photo", "{text}"], "not a JPEG, PNG"),
    (["--photo", "{empty}"], "is empty"),
    (["--photo", "{ok}"] * 13, "at most 12 photos"),
    (["--photo", "{ok}", "--gps", "91,0"], "--gps"),
    (["--photo", "{ok}", "--gps", "48.1"], "--gps"),
    (["--photo", "{ok}", "--gps", "a,b"], "--gps"),
    (["--photo", "{ok}", "--gps", "1,2,3"], "--gps"),
    (["--photo", "{ok}", "--receive", "0"], "--receive"),
    (["--photo", "{ok}", "--receive", "many"], "--receive"),
    (["--photo", "{ok}", "--code", ""], "--code"),
    (["--photo", "{ok}", "--bogus"], "unknown option --bogus"),
    (["--photo", "{ok}", "extra"], "unexpected argument"),
    (["--photo"], "--photo needs a value"),
]


@pytest.mark.parametrize("flags,message", BAD_FLAGS, ids=[m for _, m in BAD_FLAGS])
def test_bad_flags_exit_2_and_create_nothing(module_tally, cli, tmp_path, flags, message):
    (tmp_path / "dir").mkdir()
    (tmp_path / "text.png").write_text("hello")
    (tmp_path / "empty.jpg").write_bytes(b"")
    [ok] = write_photos(tmp_path, [png(70)])
    names = {"missing": tmp_path / "missing.png", "dir": tmp_path / "dir", "text": tmp_path / "text.png",
             "empty": tmp_path / "empty.jpg", "ok": ok}
    head = head_seq(module_tally)
    result = new_job(cli, module_tally, [], *[f.format(**names) for f in flags])
    assert result.rc == 2, result
    assert message in result.err, result
    assert not cli.outbox.exists() and not cli.outbox.parent.exists(), "the outbox was created"
    assert head_seq(module_tally) == head


def test_a_token_is_not_sent_in_plain_text_to_a_remote_host(cli, tmp_path):
    [ok] = write_photos(tmp_path, [png(80)])
    remote = ["--server", "ws://192.0.2.1:9", "--token", "secret"]
    for args in (["intake", "new", "--photo", ok, *remote], ["intake", "resume", *remote],
                 ["resolve", "SKU-1", *remote], ["resolve", "SKU-1", "--server", "http://192.0.2.1:9", "--token", "x"]):
        result = cli(*args, timeout=10)
        assert result.rc != 0 and "--insecure" in result.err, result
        assert result.elapsed < 3, f"it tried to connect: {result!r}"
    assert not cli.outbox.exists() or outbox_jobs(cli) == []


# --------------------------------------------------------------------------
# Resume rules


def test_resume_refuses_a_job_of_another_hub(tally_factory, cli, tmp_path):
    first, second = tally_factory(), tally_factory()
    photos = [png(90)]
    crashed = new_job(cli, first, write_photos(tmp_path, photos), env=cli.env(TALLY_INTAKE_CRASH_AT="copied"))
    assert crashed.rc == -signal.SIGKILL, crashed
    [job] = outbox_jobs(cli)
    other = cli("intake", "resume", job["job"], *server_flag(second))
    assert other.rc == 1 and f"http://{first.host}:{first.port}" in other.err, other
    skipped = cli("intake", "resume", *server_flag(second))
    assert skipped.rc == 0 and "skipped" in skipped.err, skipped
    assert records(second, "intake/") == []
    assert outbox_jobs(cli)[0]["state"] == "running"
    assert cli("intake", "resume", *server_flag(first)).rc == 0
    check_job_on_hub(first, job["job"], f"items/{job['job']}", photos, code=None, receive=None)


def test_two_resumes_at_once_run_each_job_once(module_tally, cli, tmp_path):
    """Jobs left behind by crashes, resumed by two processes at once: each
    job is run by one of them (the other skips it or finds it done)."""
    jobs = []
    for index in range(3):
        photos = [png(200 + index), jpeg(300 + index)]
        crashed = new_job(cli, module_tally, write_photos(tmp_path, photos, prefix=f"j{index}"), "--receive", "1",
                          env=cli.env(TALLY_INTAKE_CRASH_AT="copied"))
        assert crashed.rc == -signal.SIGKILL, crashed
        jobs.append(photos)
    argv = [str(TALLY_BIN), "intake", "resume", *server_flag(module_tally), "--outbox", str(cli.outbox)]
    runs = [subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=cli.env()) for _ in range(2)]
    results = [run.communicate(timeout=RUN_TIMEOUT) for run in runs]
    for run, (out, err) in zip(runs, results):
        assert run.returncode == 0 or b"being run by another tally process" in err, (out, err)
    states = outbox_jobs(cli)
    if any(job["state"] != "done" for job in states):  # a skipped one: finish it
        assert cli("intake", "resume", *server_flag(module_tally)).rc == 0
        states = outbox_jobs(cli)
    assert len(states) == len(jobs)
    for job in states:
        [photos] = [p for p in jobs if sha(p[0]) == job["photos"][0]["sha256"]]
        assert job["state"] == "done"
        check_job_on_hub(module_tally, job["job"], f"items/{job['job']}", photos, code=None, receive=1)


def test_a_hub_that_is_down_leaves_the_job_resumable(tally_factory, cli, tmp_path):
    server = tally_factory()
    photos = [png(100), png(101)]
    crashed = new_job(cli, server, write_photos(tmp_path, photos), env=cli.env(TALLY_INTAKE_CRASH_AT="upload:1"))
    assert crashed.rc == -signal.SIGKILL
    server = tally_factory.restart(server)  # a new port: the old one is down
    down = cli("intake", "resume", "--server", "ws://127.0.0.1:1")
    assert down.rc == 0 and "skipped" in down.err  # bound to the old port, which is another hub URL
    [job] = outbox_jobs(cli)
    old = job["hub"]
    result = cli("intake", "resume", job["job"], "--server", old.replace("http://", "ws://"))
    assert result.rc == 1 and "tally intake resume" in result.err, result
    assert outbox_jobs(cli)[0]["state"] == "running"


# --------------------------------------------------------------------------
# tally resolve


def test_resolve_finds_items_by_every_kind_of_code(tally, cli):
    item_uuid = str(uuid.uuid4())
    put_record(tally, "items/widget-1", {"name": "Widget", "sku": "SKU-9", "serials": ["SN-1", "SN-2"],
                                         "codes": ["4006381333931"], "stock": 1})
    put_record(tally, f"items/{item_uuid}", {"name": "Box", "stock": 0})
    server = server_flag(tally)
    for code, name in [("SKU-9", "items/widget-1"), ("SN-2", "items/widget-1"), ("4006381333931", "items/widget-1"),
                       ("widget-1", "items/widget-1"), ("https://inv.example/items/widget-1", "items/widget-1"),
                       (item_uuid.upper(), f"items/{item_uuid}")]:
        result = cli("resolve", code, *server)
        assert result.rc == 0, result
        assert result.lines[0] == name, result
        assert json.loads("\n".join(result.lines[1:]))["name"] in ("Widget", "Box")
    as_json = cli("resolve", "SKU-9", "--json", *server)
    assert as_json.rc == 0 and as_json.json()["found"] is True and as_json.json()["name"] == "items/widget-1"
    assert as_json.json()["record"]["data"]["sku"] == "SKU-9"


def test_resolve_an_unknown_code_names_the_item_it_would_become(tally, cli):
    result = cli("resolve", "NEW CODE/1", *server_flag(tally))
    assert result.rc == 1, result
    assert "items/NEW-CODE-1" in result.err and result.out == "", result
    as_json = cli("resolve", "NEW CODE/1", "--json", *server_flag(tally))
    assert as_json.rc == 1 and as_json.json()["found"] is False and as_json.json()["name"] == "items/NEW-CODE-1"


def test_resolve_usage_errors(cli):
    for args, message in [(["resolve"], "exactly one CODE"), (["resolve", "a", "b"], "exactly one CODE"),
                          (["resolve", "a", "--nope"], "unknown option")]:
        result = cli(*args)
        assert result.rc == 2 and message in result.err, result
    assert cli("resolve", "--help").rc == 0
    for sub in ("new", "resume", "status"):
        assert cli("intake", sub, "--help", outbox=False).rc == 0

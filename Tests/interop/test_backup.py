"""`tally backup` and `tally restore` (docs/operations.md, "Backups").

A backup taken while writers keep writing holds the store as of one commit
and every photo; the hub's writes go on during it. Restored into a fresh
data directory, after the hub and its disk are gone, every record the backup
had is there byte for byte, the photos are served, and a client that saw
seqs past the backup gets `resnapshot: true` when it resumes, also once new
writes have taken the restored head past what it saw (the restored sequence
jumps 2^32 ahead: PROTOCOL.md, "Versions, sequence numbers, time").
Under 100 writers the copy's log is the hub's from seq 1 to its head with
no gap, and a `tally mirror run` that followed the lost hub past it
resnapshots on the restored one and lands the writes it queued meanwhile.

Bad input -- DEST's parent missing, DEST not empty, no store in --data, SRC
not a backup, a restore while a hub runs or over a store without --force --
gets a message saying what to fix, exit status 2 (the command line) or 1
(the state), and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path

from clusterlib import head_of
from synclib import SyncClient, all_changes, cli_env, get_record, rest, run_tally, wait_until
from conftest import sqlite_only
from test_mirror import OfflineWrites, converge, mirrors, proxies, status_field, wait_online  # noqa: F401 - fixtures

JUMP = 2 ** 32
CLI_TIMEOUT = 60.0
WRITERS = 3
BUSY_WRITERS = 100
PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])


def photo(text: str) -> tuple[str, bytes]:
    data = PNG + text.encode() * 50
    return hashlib.sha256(data).hexdigest(), data


def put_photo(server, sha: str, data: bytes) -> None:
    response = rest(server, "PUT", f"/v1/blobs/{sha}", data, {"Content-Type": "image/png"})
    assert response.status in (200, 201), (response.status, response.body[:300])


def store_rows(path: Path) -> dict[str, tuple]:
    """Every record row of a store file, read-only: name -> (version, seq,
    created, updated, data bytes)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {row[0]: tuple(row[1:]) for row in
                connection.execute("SELECT name, version, seq, created, updated, data FROM records")}
    finally:
        connection.close()


def files_under(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


class Writers:
    """Threads (``count``, each on its own connection) that each keep
    setting their own records under ``prefix`` until stopped, noting the
    time and seq of every acknowledgement."""

    def __init__(self, server, count: int = WRITERS, prefix: str = ""):
        self.server = server
        self.prefix = prefix
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acks: list[tuple[float, int]] = []  # (monotonic time, seq)
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(count)]

    def run(self, index: int) -> None:
        try:
            with SyncClient(self.server) as client:
                k = 0
                while not self.stop.is_set():
                    reply = client.ok("set", name=f"{self.prefix}w{index}/r{k % 40}", data={"w": index, "k": k, "text": "é" * (k % 7)})
                    with self.lock:
                        self.acks.append((time.monotonic(), reply["seq"]))
                    k += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.errors.append(error)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(15)
        assert not self.errors, self.errors

    def count(self) -> int:
        with self.lock:
            return len(self.acks)

    def last_seq(self) -> int:
        with self.lock:
            return max(seq for _, seq in self.acks)

    def gaps_between(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement in [start, end]."""
        with self.lock:
            times = [start] + sorted(t for t, _ in self.acks if start <= t <= end) + [end]
        return max(b - a for a, b in zip(times, times[1:]))


@sqlite_only
def test_backup_while_writing_restores_byte_for_byte_and_every_client_resnapshots(tally_factory, tmp_path):
    env = cli_env(tmp_path)
    hub = tally_factory()
    photos = [photo(f"shelf {i}") for i in range(3)]
    for sha, data in photos:
        put_photo(hub, sha, data)
    assert rest(hub, "PUT", "/v1/records/items/drill", {"photos": [sha for sha, _ in photos]}).status == 201
    backup = tmp_path / "backups" / "b1"
    backup.parent.mkdir()

    with Writers(hub) as writers:
        deadline = time.monotonic() + 20
        while writers.count() < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        result = run_tally(["backup", backup, "--data", hub.data_dir], env, CLI_TIMEOUT).ok()
        ended = time.monotonic()
        during = writers.count()
        # Writes go on during the backup and after it: the lost hub's clients see seqs past it.
        while writers.count() < during + 100 and time.monotonic() < deadline + 10:
            time.sleep(0.01)
        assert writers.gaps_between(started, ended) < 1.0, "writes stopped during the backup"
    lost_head = writers.last_seq()

    manifest = json.loads((backup / "tally-backup.json").read_text())
    assert result.out.startswith(f"backed up {hub.data_dir} to {backup}: seq {manifest['head']}, "), result
    assert manifest["format"] == 1 and manifest["photos"] == 3
    assert 200 <= manifest["head"] < lost_head, (manifest, lost_head)
    backed_up = store_rows(backup / "tally.sqlite3")
    assert len(backed_up) == manifest["records"] and "items/drill" in backed_up
    assert max(row[1] for row in backed_up.values()) <= manifest["head"]
    for sha, data in photos:
        assert (backup / "blobs" / sha[:2] / sha).read_bytes() == data

    # The hub and its disk are gone.
    assert hub.stop() == 0
    data_dir = tmp_path / "new-disk" / "tally-data"
    result = run_tally(["restore", backup, "--data", data_dir], env, CLI_TIMEOUT).ok()
    restored_head = manifest["head"] + JUMP
    assert f"goes on after seq {restored_head} (the backup was at seq {manifest['head']})" in result.out, result
    assert store_rows(data_dir / "tally.sqlite3") == backed_up

    restored = tally_factory("--data", str(data_dir))
    for name, (version, seq, created, updated, data) in backed_up.items():
        envelope = get_record(restored, name).json()
        assert (envelope["version"], envelope["seq"], envelope["created"], envelope["updated"]) == \
            (version, seq, created, updated), name
        assert envelope["data"] == json.loads(data), name
    for sha, data in photos:
        response = rest(restored, "GET", f"/v1/blobs/{sha}")
        assert response.status == 200 and response.body == data and response.header("content-type") == "image/png"

    # A client that saw the lost hub's seqs resumes with a snapshot.
    with SyncClient(restored, hello={"since": lost_head}) as client:
        assert client.hello_reply["seq"] == restored_head and client.hello_reply["resumable"] is False
        reply = client.ok("subscribe", prefix="w0/", since=lost_head)
        assert reply.get("resnapshot") is True and "changes" not in reply, reply
        assert {r["name"] for r in reply["records"]} == {n for n in backed_up if n.startswith("w0/")}
    assert rest(restored, "GET", f"/v1/changes?since={lost_head}").status == 410

    # New writes take the head past what that client saw: it still gets a
    # snapshot, never the new changes as if it had the ones before them.
    with SyncClient(restored) as writer:
        first = writer.ok("set", name="w0/r1", data={"after": "restore"})["seq"]
        assert first == restored_head + 1
        for k in range(5):
            writer.ok("set", name=f"w0/new{k}", data={"k": k})
        head = writer.head()
    assert head > lost_head
    for since in (lost_head, manifest["head"], lost_head - 1):
        with SyncClient(restored, hello={"since": since}) as client:
            assert client.hello_reply["resumable"] is False
            reply = client.ok("subscribe", prefix="w0/")
            assert reply.get("resnapshot") is True and reply["seq"] == head, reply
            names = {r["name"]: r for r in reply["records"]}
            assert names["w0/r1"]["data"] == {"after": "restore"} and "w0/new4" in names
        assert rest(restored, "GET", f"/v1/changes?since={since}").status == 410
    # A client that saw the restored hub resumes from the log as usual.
    with SyncClient(restored, hello={"since": restored_head}) as client:
        assert client.hello_reply["resumable"] is True
        reply = client.ok("subscribe", prefix="w0/")
        assert [c["seq"] for c in reply["changes"]] == list(range(restored_head + 1, head + 1)), reply


def store_changes(path: Path) -> list[tuple[int, str]]:
    """(seq, name) of every change in a store file's log, in seq order."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return list(connection.execute("SELECT seq, name FROM changes ORDER BY seq"))
    finally:
        connection.close()


@sqlite_only
def test_a_backup_under_100_writers_is_a_prefix_of_the_log_and_a_mirror_past_it_resnapshots(
        tally_factory, proxies, mirrors, tmp_path):
    """Issue 16's backup check at the size it names: 100 writers, each on
    its own connection, keep writing through `tally backup`. The copy holds
    the log from seq 1 to its head with no gap, each change the one the hub
    logged under that seq. A `tally mirror run` that followed the hub past
    the backup, with writes of its own queued while the hub was gone,
    resnapshots on the hub restored from the copy: it ends equal to it
    (`tally verify`), the changes after the backup are gone from it, and its
    queued writes land once."""
    env = cli_env(tmp_path)
    hub = tally_factory()
    proxy = proxies(hub)  # the mirror's hub: the lost one, then the restored one
    mirror = mirrors(proxy.url, "load/")
    mirror.start()
    wait_online(mirror)
    backup = tmp_path / "backups" / "b100"
    backup.parent.mkdir()

    with Writers(hub, BUSY_WRITERS, "load/") as writers:
        deadline = time.monotonic() + 60
        while writers.count() < 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        run_tally(["backup", backup, "--data", hub.data_dir], env, CLI_TIMEOUT).ok()
        ended = time.monotonic()
        during = writers.count()
        while writers.count() < during + 1000 and time.monotonic() < deadline + 30:
            time.sleep(0.01)
        assert writers.gaps_between(started, ended) < 1.0, "writes stopped during the backup"
    lost_head = writers.last_seq()
    manifest = json.loads((backup / "tally-backup.json").read_text())
    assert 1000 <= manifest["head"] < lost_head, (manifest, lost_head)
    # The mirror followed the hub past the backup.
    converge(mirror, hub, ["load/"])

    # The copy's log is the hub's, seq 1 to the backup's head, no gap.
    copied = store_changes(backup / "tally.sqlite3")
    assert [seq for seq, _ in copied] == list(range(1, manifest["head"] + 1)), "the copy's log has a gap"
    logged = [(c["seq"], c["name"]) for c in all_changes(hub, 0)[2][:manifest["head"]]]
    assert copied == logged, "the copy's log is not the hub's"
    written = {name for _, name in copied}
    assert len({name.split("/")[1] for name in written}) > BUSY_WRITERS // 2, "most writers wrote before the copy"
    after_backup = {c["name"] for c in all_changes(hub, manifest["head"])[2]}
    lost = after_backup - written  # records the lost hub created after the backup
    assert lost and all(mirror.get(name) for name in sorted(lost)[:5])

    # The hub and its disk are gone; the mirror queues writes meanwhile.
    assert hub.stop() == 0
    wait_online(mirror, False)
    queued = OfflineWrites(mirror, "load/queued/")
    for i in range(20):
        queued.set(f"load/queued/{i}", {"i": i})
    data_dir = tmp_path / "new-disk" / "tally-data"
    run_tally(["restore", backup, "--data", data_dir], env, CLI_TIMEOUT).ok()
    restored = tally_factory("--data", str(data_dir))
    proxy.retarget(restored)

    # converge() reads the log from seq 0, which the restored hub answers
    # with 410: wait for its head instead.
    def converged() -> bool:
        status = mirror.status()
        return (status_field(status, "online") and status_field(status, "outbox") == 0
                and status_field(status, "lastSeq") >= head_of(restored) and mirror.verify(restored).rc == 0)

    wait_until(converged, 60, lambda: f"the mirror to converge with the restored hub\n{mirror.describe()}", 0.25)
    assert head_of(restored) == manifest["head"] + JUMP + queued.count
    assert status_field(mirror.status(), "conflicts") == 0
    for name in sorted(lost)[:50]:
        assert mirror.get(name) is None, f"{name}, written after the backup, is still in the mirror"
    queued.check_exactly_once(restored, manifest["head"] + JUMP, {})
    assert mirror.verify(restored).rc == 0


@sqlite_only
def test_bad_input_gets_a_clear_message_and_changes_nothing(tally_factory, tmp_path):
    env = cli_env(tmp_path)
    hub = tally_factory()
    assert rest(hub, "PUT", "/v1/records/notes/1", {"v": 1}).status == 201
    data_dir = hub.data_dir
    backups = tmp_path / "backups"
    backups.mkdir()

    def refused(args, status: int, *words: str):
        result = run_tally(args, env, CLI_TIMEOUT)
        assert result.rc == status, result
        assert result.out == "" and result.err.startswith("tally: "), result
        for word in words:
            assert word in result.err, (word, result)
        return result

    # backup: DEST's parent missing, DEST not empty, DEST a file, no store, usage.
    refused(["backup", backups / "no" / "b", "--data", data_dir], 2, "parent directory", "does not exist")
    assert not (backups / "no").exists()
    full = backups / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    refused(["backup", full, "--data", data_dir], 2, "already exists and is not empty")
    assert files_under(full) == {"keep.txt": b"mine"}
    refused(["backup", full / "keep.txt", "--data", data_dir], 2, "is not a directory")
    refused(["backup", backups / "b0", "--data", tmp_path / "nowhere"], 2, "no Tally store", "--data")
    assert not (backups / "b0").exists()
    refused(["backup"], 2, "exactly one DEST")
    refused(["backup", backups / "b0", "--bogus"], 2, "unknown option --bogus")
    refused(["backup", backups / "b0", "--data", ":memory:"], 2, "nothing on disk")

    good = backups / "good"
    run_tally(["backup", good, "--data", data_dir], env, CLI_TIMEOUT).ok()
    target = tmp_path / "target"

    # restore: SRC missing, not a backup, interrupted, usage.
    refused(["restore", backups / "none", "--data", target], 2, "is not a directory")
    refused(["restore", data_dir, "--data", target], 2, "is not a Tally backup", "tally-backup.json")
    interrupted = backups / "interrupted"
    interrupted.mkdir()
    (interrupted / "tally.sqlite3").write_bytes((good / "tally.sqlite3").read_bytes())
    refused(["restore", interrupted, "--data", target], 2, "interrupted")
    (interrupted / "tally-backup.json").write_text((good / "tally-backup.json").read_text())
    (interrupted / "tally.sqlite3").write_text("not a database " * 200)
    refused(["restore", interrupted, "--data", target], 2, "not an SQLite database")
    refused(["restore"], 2, "exactly one SRC")
    assert not target.exists()

    # restore into the running hub's directory: refused, naming its pid.
    before = (Path(data_dir) / "tally.sqlite3").stat()
    refused(["restore", good, "--data", data_dir, "--force"], 1, f"a hub (pid {hub.pid}) is using", "stop it first")
    assert (Path(data_dir) / "tally.sqlite3").stat().st_ino == before.st_ino
    assert rest(hub, "PUT", "/v1/records/notes/2", {"v": 2}).status == 201

    # A hub killed mid-work leaves a WAL with acknowledged commits: without
    # --force nothing changes; with it, the old store is kept whole.
    hub.kill()
    assert (Path(data_dir) / "tally.sqlite3-wal").stat().st_size > 0
    refused(["restore", good, "--data", data_dir], 1, "already holds a store", "--force")
    assert not (Path(data_dir) / "tally.sqlite3.replaced").exists()
    result = run_tally(["restore", good, "--data", data_dir, "--force"], env, CLI_TIMEOUT).ok()
    replaced = Path(data_dir) / "tally.sqlite3.replaced"
    assert f"kept as {replaced}" in result.out, result
    assert set(store_rows(replaced)) == {"notes/1", "notes/2"}
    assert not (Path(data_dir) / "tally.sqlite3-wal").exists()
    assert set(store_rows(Path(data_dir) / "tally.sqlite3")) == {"notes/1"}

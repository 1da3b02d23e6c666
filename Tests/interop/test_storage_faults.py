"""Storage faults are answered, not fatal (README, "Storage faults").

A hub whose data directory is a small tmpfs is written to until the disk is
full: every write from then on is answered `storage_failed` (WebSocket) or
HTTP 503 with Retry-After (REST), nothing of them is pushed, the hub stays
up and answers reads. Once space is freed (a filler file placed on the
tmpfs beforehand is removed) new writes succeed without a restart, taking
the next gap-free seq; every acknowledged write is there, then and after a
restart, and no refused one is.

Also: a second hub on the same --data exits 1 naming the first's PID, and a
read-only data directory is refused with a message that says so.

Mounting a tmpfs needs root: the test command runs as root (README), and
without root these tests fail saying so rather than prove nothing.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import HOST, START_TIMEOUT, TALLY_BIN, sqlite_only
from synclib import SyncClient, expect_error, get_record, put_record, rest

DISK_MB = 24
RECORD_BYTES = 100_000  # each write stores the record and its push: ~200 kB
ROOM_LEFT = 3 << 20  # what the filler leaves free once the hub has started
MAX_WRITES = 2_000
PIPELINE = 4


def mount_tmpfs(directory: Path, size_mb: int) -> None:
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root (mount -t tmpfs): run the tests as root, as scripts/test.sh does on CI")
    directory.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs",
                             str(directory)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs on {directory} as root: {result.stderr.strip()}")


def unmount(directory: Path) -> None:
    """Unmounts; lazily if something still holds it (a failed test's leftovers)."""
    if subprocess.run(["umount", str(directory)], capture_output=True, timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path, tally_factory):
    """A DISK_MB tmpfs, unmounted at teardown once the test's hubs, whose
    data lives on it, are stopped (stopping them twice is harmless)."""
    mount_point = tmp_path / "disk"
    mount_tmpfs(mount_point, DISK_MB)
    yield mount_point
    tally_factory.finish()
    unmount(mount_point)


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(path: Path, leave: int) -> int:
    """Writes a filler file until only about `leave` bytes are free; its size."""
    size = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as filler:
        while free_bytes(path.parent) - len(chunk) > leave:
            filler.write(chunk)
            filler.flush()
            size += len(chunk)
        os.fsync(filler.fileno())
    return size


def payload(n: int) -> dict:
    return {"n": n, "pad": chr(ord("a") + n % 26) * RECORD_BYTES}


@sqlite_only
def test_a_full_disk_is_answered_and_the_hub_recovers_by_itself(tally_factory, small_disk):
    data = small_disk / "data"
    server = tally_factory("--data", str(data))
    filler = small_disk / "filler"
    fill(filler, ROOM_LEFT)

    watcher = SyncClient(server)
    watcher.ok("subscribe", prefix="full/")
    writer = SyncClient(server)
    acked: dict[str, tuple[int, int]] = {}  # name -> (seq, n)
    refused: list[str] = []
    n = 0
    # PIPELINE writes in flight at a time, so that a failed commit has
    # writes queued behind it (built on its state) that must fail with it.
    while len(refused) < 3 * PIPELINE:
        assert n < MAX_WRITES, f"{n} writes of {RECORD_BYTES} bytes and the {DISK_MB} MB disk never filled"
        sent = []
        for _ in range(PIPELINE):
            message = {"op": "set", "id": f"w{n}", "name": f"full/{n}", "data": payload(n)}
            writer.send(message)
            sent.append((message["id"], message["name"], n))
            n += 1
        for request_id, name, k in sent:
            reply = writer.recv_reply(request_id)
            if reply.get("ok"):
                acked[name] = (reply["seq"], k)
            else:
                error = expect_error(reply, "storage_failed", f"set {name}")
                assert "nothing of it was kept" in error["message"], error
                refused.append(name)
    print(f"{len(acked)} writes acknowledged, {len(refused)} refused, {n} sent")
    assert acked, "the disk was full before the first write"

    # REST is answered too: 503, storage_failed, Retry-After. (A checkpoint
    # may free room in the WAL now and then, so a write may still succeed
    # here: it is acknowledged like any other.)
    for k in range(50):
        name = f"full/rest-{k}"
        response = put_record(server, name, payload(10_000 + k))
        if response.status == 201:
            acked[name] = (response.json()["seq"], 10_000 + k)
            continue
        assert response.status == 503, (response.status, response.body[:300])
        assert response.error_code() == "storage_failed"
        assert response.header("Retry-After") == "5", response.headers
        refused.append(name)
        break
    else:
        pytest.fail("50 REST writes on a full disk and none was refused")
    last_seq = max(seq for seq, _ in acked.values())
    assert sorted(seq for seq, _ in acked.values()) == list(range(1, last_seq + 1)), \
        "acknowledged seqs have gaps: a refused write took a seq"

    # Still up: reads are answered, and nothing refused was pushed.
    assert server.alive(), f"the hub died on a full disk: {server.stderr()[-2000:]}"
    first = next(iter(acked))
    got = get_record(server, first)
    assert got.status == 200 and got.json()["data"]["n"] == acked[first][1], got.status
    assert rest(server, "GET", "/healthz").status == 200
    pushes = watcher.drain()
    assert [p["seq"] for p in pushes] == sorted(seq for seq, _ in acked.values()), \
        "pushes are exactly the acknowledged writes, in order"
    metrics = rest(server, "GET", "/metrics").body.decode()
    failures = [line for line in metrics.splitlines() if line.startswith("tally_commit_failures_total ")]
    assert failures and int(failures[0].split()[1]) >= 1, failures
    # The checkpointer fails on the full disk too; it is counted, not fatal.
    assert any(line.startswith("tally_checkpoint_failures_total ") for line in metrics.splitlines()), metrics[-500:]
    assert "store.commit_failed" in server.stderr(), "the failure is logged"

    # Room again, no restart: the next write takes the next seq.
    filler.unlink()
    reply = writer.ok("set", name="full/after", data={"n": -1})
    assert reply["seq"] == last_seq + 1, f"seqs stay gap-free: {reply}"
    acked["full/after"] = (reply["seq"], -1)
    rest_reply = put_record(server, "full/after-rest", {"n": -2})
    assert rest_reply.status == 201, (rest_reply.status, rest_reply.body[:300])
    acked["full/after-rest"] = (rest_reply.json()["seq"], -2)
    assert [p["seq"] for p in watcher.drain()] == [last_seq + 1, last_seq + 2]

    def check_everything(server, when: str) -> None:
        for name, (seq, n) in acked.items():
            got = get_record(server, name)
            assert got.status == 200, f"{when}: acknowledged {name} (seq {seq}) is missing"
            body = got.json()
            assert body["seq"] == seq and body["data"]["n"] == n, f"{when}: {name}: {body['seq']}, {body['data']['n']}"
        for name in refused:
            assert get_record(server, name).status == 404, f"{when}: refused {name} was kept"

    check_everything(server, "after recovery")
    writer.close()
    watcher.close()
    server = tally_factory.restart(server)
    check_everything(server, "after a restart")
    client = SyncClient(server)
    assert client.hello_reply["seq"] == last_seq + 2
    client.close()


def test_a_second_hub_on_the_same_data_exits_1_naming_the_first(tally_factory, tmp_path):
    data = tmp_path / "shared-data"
    first = tally_factory("--data", str(data))
    second = subprocess.run([str(TALLY_BIN), "serve", "--host", HOST, "--port", "0", "--data", str(data)],
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_TIMEOUT)
    assert second.returncode == 1, (second.returncode, second.stdout, second.stderr)
    assert second.stderr.strip() == (f"tally: the data directory {data} is in use by another hub "
                                     f"(pid {first.pid}); stop it or use another --data"), second.stderr
    assert "listening" not in second.stdout
    # The first is unharmed.
    with SyncClient(first) as client:
        client.ok("set", name="still/here", data={})
        assert client.ok("get", name="still/here")["version"] == 1


def test_a_read_only_data_directory_is_named_as_such(tally_factory, tmp_path):
    mount_point = tmp_path / "ro"
    mount_tmpfs(mount_point, 8)
    try:
        data = mount_point / "data"
        server = tally_factory("--data", str(data))
        with SyncClient(server) as client:
            client.ok("set", name="kept", data={})
        assert server.stop() == 0
        remount = subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, text=True)
        assert remount.returncode == 0, remount.stderr
        result = subprocess.run([str(TALLY_BIN), "serve", "--host", HOST, "--port", "0", "--data", str(data)],
                                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=START_TIMEOUT)
        assert result.returncode == 1, (result.stdout, result.stderr)
        assert "read-only file system" in result.stderr, result.stderr
        assert "remount it read-write" in result.stderr, result.stderr
        assert "disk full" not in result.stderr, result.stderr
    finally:
        unmount(mount_point)

"""Several hubs on one PostgreSQL database (issue 16, part 1): photos live
in the database, so one uploaded through a hub is served by every hub, and
each hub publishes its clients' sync health, so `GET /v1/admin/clients` on
any hub lists the clients of all of them, each row naming its hub — until
that hub dies (SIGKILL), after which its rows expire within seconds."""
import hashlib
import socket
import struct
import time
import zlib

from conftest import PG_CLUSTER
from synclib import rest

# A row a hub stops publishing counts for 5 s; hubs publish every second.
EXPIRY = 5.0
DEADLINE = 15.0


def png(size: int, seed: int) -> bytes:
    """A valid PNG of at least ``size`` bytes (stored, incompressible rows)."""
    side = max(16, int((size / 3) ** 0.5) + 1)
    state = seed
    rows = []
    for _ in range(side):
        row = bytearray([0])
        for _ in range(side * 3):
            state = (state * 6364136223846793005 + 1442695040888963407) & (2 ** 64 - 1)
            row.append(state >> 56)
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"".join(rows), 0))
            + chunk(b"IEND", b""))


def clients(hub) -> list[dict]:
    response = rest(hub, "GET", "/v1/admin/clients")
    assert response.status == 200, response.body[:300]
    return response.json()["clients"]


def wait_for(what: str, condition, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def test_a_photo_put_through_one_hub_is_served_by_another(tally_factory, pg_database):
    a = tally_factory("--store", pg_database, "--hub-name", "hub-a")
    b = tally_factory("--store", pg_database, "--hub-name", "hub-b")
    photo = png(3 << 20, seed=7)
    sha = hashlib.sha256(photo).hexdigest()
    assert rest(b, "GET", f"/v1/blobs/{sha}").status == 404

    put = rest(a, "PUT", f"/v1/blobs/{sha}", photo, headers={"Content-Type": "image/png"})
    assert put.status == 201, put.body[:300]
    got = rest(b, "GET", f"/v1/blobs/{sha}")
    assert got.status == 200 and got.header("content-type") == "image/png"
    assert got.body == photo, "byte for byte"
    again = rest(b, "PUT", f"/v1/blobs/{sha}", photo, headers={"Content-Type": "image/png"})
    assert again.status == 200, "idempotent across hubs"
    assert rest(b, "PUT", f"/v1/blobs/{sha}", photo[:-1] + b"\0",
                headers={"Content-Type": "image/png"}).error_code() == "checksum_mismatch"
    for hub in (a, b):
        assert not (hub.data_dir / "blobs").exists(), "--data holds only the lock"

    # Still there after a restart of the hub that stored it.
    a = tally_factory.restart(a)
    assert rest(a, "GET", f"/v1/blobs/{sha}").body == photo


def test_a_client_of_one_hub_is_listed_by_another_until_it_is_killed(tally_factory, pg_database, sync_client):
    a = tally_factory("--store", pg_database, "--hub-name", "hub-a")
    b = tally_factory("--store", pg_database)  # named <hostname>:<port>
    sync_client(a, hello={"client": "scanner:a", "outbox": 3})
    sync_client(b, hello={"client": "scanner:b"})
    writer = sync_client(b)
    for index in range(3):
        writer.ok("set", name=f"jobs/{index}", data={"n": index})

    def row_on(hub, client):
        return next((row for row in clients(hub) if row["client"] == client), None)

    started = time.monotonic()
    seen = wait_for("hub B to list A's client", lambda: row_on(b, "scanner:a"))
    listed_after = time.monotonic() - started
    assert seen["hub"] == "hub-a"
    assert seen["outbox"] == 3 and seen["seq"] == 0
    assert seen["lag"] == 3, f"behind the database's head (3 changes, all made on B): {seen}"
    assert set(seen) == {"session", "client", "user", "connectedMs", "seq", "lag", "outbox", "lastAckMs", "hub"}
    assert row_on(b, "scanner:b")["hub"] == f"{socket.gethostname()}:{b.port}"
    other = wait_for("hub A to list B's client", lambda: row_on(a, "scanner:b"))
    assert other["hub"] == f"{socket.gethostname()}:{b.port}"

    a.kill()
    killed = time.monotonic()
    wait_for("A's client to leave B's list", lambda: row_on(b, "scanner:a") is None)
    gone_after = time.monotonic() - killed
    assert gone_after <= EXPIRY + 2.5, f"gone {gone_after:.1f} s after the kill"
    assert row_on(b, "scanner:b") is not None
    print(f"listed on the other hub after {listed_after:.2f} s; gone {gone_after:.2f} s after SIGKILL")


def test_a_sqlite_hub_names_itself_in_every_row(tally_factory, sync_client):
    if PG_CLUSTER:
        return  # covered above; every hub is on PostgreSQL then
    hub = tally_factory("--hub-name", "storeroom-1")
    sync_client(hub, hello={"client": "board"})
    rows = [row for row in clients(hub) if row["client"] == "board"]
    assert [row["hub"] for row in rows] == ["storeroom-1"]

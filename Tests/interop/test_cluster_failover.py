"""Issue 16's acceptance with the real clients: three hubs on one
PostgreSQL database, write load spread over them, and `kill -9` of the hub
that a `tally watch --server a,b,c` and a `tally mirror run --server
a,b,c` are connected to.

- The writers are REST clients (clusterlib.RestFailoverWriter): each write
  creates a record of its own and carries an `Idempotency-Key`; a write
  whose hub goes under it is sent again, with the same key, to the next
  hub. Afterwards every acknowledged write is in the log exactly once,
  under the seq it was acknowledged with, and a write sent again with its
  key (by the writers when the hub went, and once more by the test for
  every write the killed hub had acknowledged) is answered with the first
  reply and lands nowhere again.
- `tally watch` prints every change under the prefix once, in seq order,
  across the move to another hub: its output is the log.
- `tally mirror run` moves too, converges (`tally verify --server
  <surviving hub>` exits 0), and the writes made with `tally mirror set`
  while it ran — before the kill, in flight at it, and after it — each
  land on the hub once, in order.

The hubs and PostgreSQL come from the `hub_cluster` fixture (conftest.py),
the writers from clusterlib.Load, the mirror's process and checks from
test_mirror.py. Every process is ours and stopped by PID; every wait is
bounded; 127.0.0.1 only. About 10 s.
"""

from __future__ import annotations

import socket
import time

from clusterlib import RestFailoverWriter, changes_after, head_of
from synclib import LongRunning, cli_env, rest, wait_until
from test_mirror import Mirror, OfflineWrites, converge

PREFIX = "fo/"
WRITERS_ON = [0, 1, 2, 0, 1, 2]  # each REST writer's first hub
ACKS_BEFORE, ACKS_AFTER = 200, 300
WAIT = 15.0


def hub_name(hub) -> str:
    """The hub's default name in /v1/admin/clients (`<hostname>:<port>`)."""
    return f"{socket.gethostname()}:{hub.port}"


def clients_on(hub) -> list[dict]:
    """The rows of ``hub``'s own clients in its /v1/admin/clients."""
    response = rest(hub, "GET", "/v1/admin/clients")
    assert response.status == 200, (response.status, response.body[:300])
    return [row for row in response.json()["clients"] if row.get("hub") == hub_name(hub)]


def records_under(hub, prefix: str, limit: int) -> list[dict]:
    response = rest(hub, "GET", f"/v1/records?prefix={prefix}&limit={limit}")
    assert response.status == 200, (response.status, response.body[:300])
    return response.json()["records"]


def test_kill_9_of_a_hub_moves_watch_and_mirror_and_loses_no_write(hub_cluster, load_factory, tmp_path):
    hubs = hub_cluster(3).hubs
    victim, survivors = hubs[1], [hubs[0], hubs[2]]
    listed = ",".join(hub.ws_url("") for hub in [victim, *survivors])
    watcher = LongRunning(["watch", PREFIX, "--json", "--server", listed], cli_env(tmp_path))
    (tmp_path / "mirror").mkdir()
    mirror = Mirror(tmp_path / "mirror", "m", listed, [PREFIX], [])
    writes = load_factory(hubs, PREFIX, writers_on=[], subscribers_on=[], rest_on=WRITERS_ON)
    mirrored = OfflineWrites(mirror, f"{PREFIX}m/")
    writes.add_writer(lambda: mirrored.set(f"{PREFIX}m/{mirrored.count}", {"i": mirrored.count}))
    try:
        mirror.start()
        # Both on the hub to be killed: the first of their list.
        status = wait_until(lambda: (s := mirror.status()) and s["online"] and s, WAIT,
                            lambda: f"the mirror online\n{mirror.describe()}")
        assert status["connectedTo"] == victim.ws_url("/v1/ws"), status
        rows = wait_until(lambda: (rows := clients_on(victim)) and len(rows) == 2 and rows, WAIT,
                          lambda: f"the watch and the mirror in {victim.url()}/v1/admin/clients: "
                                  f"{rest(victim, 'GET', '/v1/admin/clients').body[:1000]!r}")
        # Nothing else is connected yet: the mirror's session and the watch's.
        assert sorted(row["client"] == status["client"] for row in rows) == [False, True], (status["client"], rows)

        writes.start()
        writes.wait_for_acks(ACKS_BEFORE)
        wait_until(lambda: len(records_under(victim, f"{PREFIX}m/", 5)) == 5 or writes.errors, WAIT,
                   "mirror writes to land before the kill")
        writes.raise_errors()
        before_kill = mirrored.count
        victim.kill()
        killed_at = time.monotonic()
        after_kill = mirror.status()
        writes.wait_for_acks(ACKS_AFTER)
        wait_until(lambda: mirrored.count >= before_kill + 10 or writes.errors, WAIT, "mirror writes after the kill")
        writes.finish(survivors)
        print(f"REST writes {writes.acks()}, mirror writes {mirrored.count} ({before_kill} before the kill); "
              f"the mirror right after it: online={after_kill['online']}, outbox={after_kill['outbox']}")

        # The mirror moved, sent its outbox and agrees with the survivors.
        converge(mirror, survivors[0], [PREFIX])
        moved = mirror.status()["connectedTo"]
        assert moved in [hub.ws_url("/v1/ws") for hub in survivors], moved
        for hub in survivors:
            verified = mirror.verify(hub)
            assert verified.rc == 0, verified
        head = max(head_of(hub) for hub in survivors)
        print(f"mirror converged {time.monotonic() - killed_at:.1f}s after the kill, head {head}")

        # Every acknowledged write is in the log once, under its seq; the
        # log holds nothing else.
        log = changes_after(survivors[0], 0)
        assert [c["seq"] for c in log] == list(range(1, head + 1)), "the log is gap-free"
        assert changes_after(survivors[1], 0) == log
        by_seq = {c["seq"]: c for c in log}
        acks = [ack for writer in writes.rest_writers for ack in writer.acks]
        for ack in acks:
            change = by_seq[ack.seq]
            assert (change["name"], change["kind"], change["data"], change["version"]) == (
                ack.name, "set", ack.data, 1), (ack, change)
        rest_names = [c["name"] for c in log if not c["name"].startswith(f"{PREFIX}m/")]
        assert sorted(rest_names) == sorted(ack.name for ack in acks), "each REST write is one change"
        mirrored.check_exactly_once(survivors[0], 0, {})
        assert len(log) == len(acks) + mirrored.count

        # Writes in flight when their hub went were sent again with their key.
        resent = [ack for ack in acks if ack.attempts > 1]
        assert len([w for w in writes.rest_writers if w.lost]) >= 2 and resent, writes.stats()
        assert all(w.acks[-1].hub != 1 for w in writes.rest_writers), "every writer ended on a survivor"
        print(f"{writes.stats()}; {len(resent)} writes sent more than once")
        # And once more, by the test: every write the killed hub acknowledged,
        # sent to a survivor with its key, is answered with its first reply.
        by_victim = [ack for ack in acks if ack.hub == 1]
        assert by_victim, "the killed hub acknowledged writes"
        again = RestFailoverWriter(survivors, 0, "again")
        for ack in by_victim + resent:
            assert again.put(ack.name, ack.data, ack.key).seq == ack.seq, ack
        assert changes_after(survivors[1], 0) == log, "a key sent again changed nothing"
        assert head_of(survivors[0]) == head

        # tally watch printed the log: every change once, in order, across the move.
        printed = [watcher.json_line(WAIT) for _ in log]
        assert printed == log, "tally watch printed each change once, in seq order"
        moved_to = watcher.stderr_matching("reconnected to", timeout=5)
        assert any(f"127.0.0.1:{hub.port}" in moved_to for hub in survivors), moved_to
        watcher.no_line()
    finally:
        writes.stop.set()
        watcher.stop()
        mirror.stop()

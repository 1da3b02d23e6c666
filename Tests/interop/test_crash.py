"""Acknowledged means durable (PROTOCOL.md, guarantee 1): writers stream
writes and note every acknowledgement; the hub is killed with SIGKILL (by
its PID) at a random moment and restarted on the same data directory; every
acknowledged write must be there, and the change log must run 1..head
without a gap. Several kill cycles, one data directory, under a minute."""

from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass, field

from websockets.exceptions import ConnectionClosed

from synclib import SyncClient, all_changes

CYCLES = 4
WRITERS = 6
RECORDS_PER_WRITER = 4
COUNTER = "crash/counter"
BUDGET = 55.0  # seconds for the whole test


@dataclass
class Writer:
    """One writer's view: what it was told (acked) and the one write it may
    have had in flight when the hub died. Each writer is the only one to
    write its records, so it knows their exact data at every version."""

    index: int
    cycle: int
    model: dict[str, tuple[int, dict]] = field(default_factory=dict)  # name -> (version, data) sent
    acked: dict[str, tuple[int, dict, int]] = field(default_factory=dict)  # name -> (version, data, seq)
    acked_changes: list[tuple[int, str, int]] = field(default_factory=list)  # (seq, name, version)
    increments_acked: int = 0
    in_flight: tuple | None = None  # ("record", name, version, data) or ("increment",)
    acks: threading.Semaphore | None = None  # released once per acknowledged write
    error: BaseException | None = None

    def name(self, k: int) -> str:
        return f"crash/c{self.cycle}/w{self.index}/r{k % RECORDS_PER_WRITER}"

    def run(self, server, stop: threading.Event) -> None:
        try:
            client = SyncClient(server, timeout=10)
        except (ConnectionClosed, OSError, TimeoutError):
            return  # killed before we got in
        try:
            k = 0
            while not stop.is_set():
                self.step(client, k)
                k += 1
        except (ConnectionClosed, OSError, TimeoutError):
            pass  # the hub was killed under us
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            client.close()

    def step(self, client: SyncClient, k: int) -> None:
        if k % 5 == 4:
            self.in_flight = ("increment",)
            client.ok("increment", name=COUNTER, path="n", by=1)
            self.increments_acked += 1
            self.in_flight = None
            if self.acks:
                self.acks.release()
            return
        name = self.name(k)
        version, data = self.model.get(name, (0, {}))
        if k % 3 == 0 or not data:
            data = {"w": self.index, "k": k, "pad": "p" * (50 + k % 200)}
            fields = dict(data=data)
        else:
            data = {**data, "k": k}
            fields = dict(path="k", value=k)
        self.in_flight = ("record", name, version + 1, data)
        reply = client.ok("set", name=name, **fields)
        assert (reply["name"], reply["version"]) == (name, version + 1), reply
        self.model[name] = (version + 1, data)
        self.acked[name] = (version + 1, data, reply["seq"])
        self.acked_changes.append((reply["seq"], name, version + 1))
        self.in_flight = None
        if self.acks:
            self.acks.release()


def test_acknowledged_writes_survive_sigkill(tally_factory):
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    print(f"crash test seed {seed}")
    started = time.monotonic()
    server = tally_factory()
    settled: dict[str, tuple[int, dict]] = {}  # verified state of earlier cycles' records
    counter_floor = 0  # the counter is at least this (acknowledged increments so far)
    all_acked: list[tuple[int, str, int]] = []

    for cycle in range(CYCLES):
        assert time.monotonic() - started < BUDGET - 10, "out of time before a cycle"
        acks = threading.Semaphore(0)
        writers = [Writer(w, cycle, acks=acks) for w in range(WRITERS)]
        stop = threading.Event()
        threads = [threading.Thread(target=w.run, args=(server, stop), daemon=True) for w in writers]
        for thread in threads:
            thread.start()
        # Kill after a random number of acknowledged writes, with more in flight.
        for _ in range(rng.randint(100, 800)):
            assert acks.acquire(timeout=10), "the writers stopped making progress"
        server.kill()
        stop.set()
        for thread in threads:
            thread.join(15)
        assert not any(t.is_alive() for t in threads), "a writer hung after the kill"
        for writer in writers:
            assert writer.error is None, f"writer {writer.index}: {writer.error!r}"
        acked_count = sum(len(w.acked_changes) + w.increments_acked for w in writers)
        assert acked_count > 0, "no write was acknowledged before the kill"
        print(f"cycle {cycle}: {acked_count} acknowledged writes, then SIGKILL")

        server = tally_factory.restart(server)
        client = SyncClient(server)
        try:
            head = client.hello_reply["seq"]
            # Earlier cycles' records: exactly as verified then.
            for name, (version, data) in settled.items():
                envelope = client.ok("get", name=name)
                assert (envelope["version"], envelope["data"]) == (version, data), (
                    f"{name} changed across a restart")
            # This cycle's records: at least what was acknowledged.
            for writer in writers:
                names = {writer.name(k) for k in range(RECORDS_PER_WRITER)}
                for name in sorted(names):
                    reply = client.request("get", name=name)
                    pending = writer.in_flight if writer.in_flight and writer.in_flight[0] == "record" \
                        and writer.in_flight[1] == name else None
                    if name not in writer.acked:
                        if reply.get("ok") is False:
                            assert reply["error"]["code"] == "not_found", reply
                            continue
                        assert pending, f"{name} exists but was never written: {reply}"
                        assert (reply["version"], reply["data"]) == (pending[2], pending[3]), (
                            f"{name}: unacknowledged creation has the wrong content: {reply}")
                        settled[name] = (reply["version"], reply["data"])
                        continue
                    version, data, seq = writer.acked[name]
                    assert reply.get("ok") is True, f"acknowledged record {name} is missing: {reply}"
                    if reply["version"] == version:
                        assert reply["data"] == data, f"{name} v{version}: data differs from the acknowledged"
                    else:
                        assert pending and reply["version"] == pending[2] == version + 1, (
                            f"{name}: acknowledged v{version}, found v{reply['version']} "
                            f"(in flight: {pending and pending[2]})")
                        assert reply["data"] == pending[3]
                    assert reply["seq"] >= seq
                    settled[name] = (reply["version"], reply["data"])
            # The shared counter: every acknowledged increment counted, no more
            # than were sent.
            counter_floor += sum(w.increments_acked for w in writers)
            in_flight = sum(1 for w in writers if w.in_flight == ("increment",))
            reply = client.request("get", name=COUNTER)
            count = reply["data"]["n"] if reply.get("ok") else 0
            assert counter_floor <= count <= counter_floor + in_flight, (
                f"counter {count}: {counter_floor} increments acknowledged, {in_flight} in flight")
            counter_floor = count
        finally:
            client.close()

        # The change log: 1..head without gaps; every acknowledged change in it.
        all_acked += [c for w in writers for c in w.acked_changes]
        log_head, floor, changes = all_changes(server, since=0, limit=500)
        assert log_head == head
        assert [c["seq"] for c in changes] == list(range(floor + 1, head + 1)), (
            f"the change log has gaps or repeats (floor {floor}, head {head})")
        assert floor == 0, f"the default retention dropped changes after only {head}"
        by_seq = {c["seq"]: c for c in changes}
        for seq, name, version in all_acked:
            change = by_seq.get(seq)
            assert change and (change.get("name"), change["version"]) == (name, version), (
                f"acknowledged seq {seq} ({name} v{version}) is {change} in the log")
        assert max(seq for seq, _, _ in all_acked) <= head

    elapsed = time.monotonic() - started
    assert elapsed < BUDGET + 5, f"the crash test took {elapsed:.1f}s"

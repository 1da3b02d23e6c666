#!/usr/bin/env python3
"""Reconcile benchmark for the offline mirror (issue 5).

One hub (`tally serve`, default --durability full, its own temporary --data)
on 127.0.0.1, four mirror stores of the prefix `bench/`:

  A  synced, stopped; then ENTRIES offline writes made with
     `tally mirror set` (real outbox rows, made by the CLI's own code path;
     JOBS processes at a time), while MISSED changes are written straight to
     the hub (atomic `write` messages of 1,000 `set`s over 10,000 records).
  B  synced, stopped, no local writes: it misses the same MISSED changes
     (the pull alone).
  D  synced just before the last 9,000 of them: it catches up change by
     change (the hub answers a resume of more than 10,000 changes with a
     fresh snapshot instead — `maxReplayChanges` — so A and B resnapshot).
  C  a fresh store (the baseline: one snapshot of the same final data).

Then, once the hub is past the 30 s after its start during which it asks
reconnecting clients to wait (`retryAfterMs`, up to 5 s, which a mirror with
a resume point honours), `tally mirror run` is started on D, B, A and C, one
at a time, and timed from exec until it has converged: `tally mirror status --json` says
online, outbox 0 and last seq = the hub's head (every change is under
`bench/`, so the head is what the mirror must reach); after that
`tally verify` must exit 0 (timed separately). Prints a Markdown table:
entries, missed changes, seconds, changes/s (entries + missed changes
applied per second), verify seconds.

Usage: reconcile.py --tally PATH [--entries 10000] [--missed 100000]
                    [--records 10000] [--jobs 4] [--timeout 1800] [--keep]
Every process is started by us and stopped by its PID.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

PREFIX = "bench/"
CATCH_UP = 9_000  # under the hub's replay limit (10,000 changes)
LISTENING = re.compile(r"tally listening on http://127\.0\.0\.1:(\d+)")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Hub:
    def __init__(self, tally: str, work: Path):
        self.data = work / "hub-data"
        self.stderr = open(work / "hub.stderr", "wb")
        argv = [tally, "serve", "--host", "127.0.0.1", "--port", "0", "--data", str(self.data),
                "--log-level", "warning"]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr,
                                        cwd=work)
        line = b""
        deadline = time.monotonic() + 15
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        match = LISTENING.search(line.decode(errors="replace"))
        if not match:
            self.stop()
            raise SystemExit(f"tally serve did not start: {line!r}")
        self.port = int(match.group(1))
        self.ws = f"ws://127.0.0.1:{self.port}"

    def hello(self) -> dict:
        with connect(self.ws + "/v1/ws", open_timeout=10, max_size=None) as ws:
            ws.send(json.dumps({"op": "hello", "protocol": 1, "client": "bench-reconcile"}))
            return json.loads(ws.recv(timeout=10))

    def head(self) -> int:
        return self.hello()["seq"]

    def wait_settled(self, timeout: float = 45) -> None:
        """Until the hello reply no longer carries retryAfterMs (30 s after start)."""
        deadline = time.monotonic() + timeout
        while "retryAfterMs" in self.hello():
            if time.monotonic() > deadline:
                raise SystemExit("the hub still sends retryAfterMs")
            time.sleep(1)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.stderr.close()


class Mirror:
    def __init__(self, tally: str, work: Path, name: str, hub: Hub):
        self.tally, self.name, self.hub = tally, name, hub
        self.store = work / f"{name}.sqlite"
        self.log = work / f"{name}-run.log"
        home = work / "home"
        home.mkdir(exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_")}
        self.env["HOME"] = str(home)
        self.process: subprocess.Popen | None = None

    def cli(self, *args, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        argv = [self.tally, *map(str, args)]
        done = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=self.env)
        if check and done.returncode != 0:
            raise SystemExit(f"`{' '.join(argv)}` exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        return done

    def start(self) -> float:
        out = open(self.log, "ab")
        started = time.monotonic()
        self.process = subprocess.Popen([self.tally, "mirror", "run", "--store", str(self.store), "--server",
                                         self.hub.ws, PREFIX], stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=self.env)
        out.close()
        return started

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
                raise SystemExit(f"mirror {self.name} did not stop on SIGTERM within 15 s")
            if self.process.returncode != 0:
                raise SystemExit(f"mirror {self.name}: SIGTERM gave exit {self.process.returncode}")

    def status(self) -> dict:
        return json.loads(self.cli("mirror", "status", "--store", self.store, "--json").stdout)

    def wait_converged(self, head: int, started: float, timeout: float) -> float:
        """Seconds from ``started`` until status shows online, outbox 0 and
        last seq >= head."""
        deadline = started + timeout
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"mirror {self.name} exited {self.process.returncode}; log:\n"
                                 f"{self.log.read_text(errors='replace')[-3000:]}")
            status = self.status()
            now = time.monotonic()
            if status.get("online") is True and status.get("outbox") == 0 and status.get("lastSeq", -1) >= head:
                return now - started
            if now > deadline:
                raise SystemExit(f"mirror {self.name} did not converge within {timeout}s: {status}")
            time.sleep(0.05)

    def verify(self) -> float:
        started = time.monotonic()
        done = self.cli("verify", "--store", self.store, "--server", self.hub.ws, check=False, timeout=600)
        elapsed = time.monotonic() - started
        if done.returncode != 0:
            raise SystemExit(f"tally verify on {self.name} exited {done.returncode}: "
                             f"{(done.stdout + done.stderr).decode()[-3000:]}")
        return elapsed


def write_missed(hub: Hub, count: int, records: int, first: int = 0, batch: int = 1000) -> float:
    """``count`` changes (numbered from ``first``) as atomic writes of
    ``batch`` sets; returns seconds."""
    started = time.monotonic()
    with connect(hub.ws + "/v1/ws", open_timeout=10, max_size=None) as ws:
        ws.send(json.dumps({"op": "hello", "protocol": 1, "client": "bench-writer"}))
        json.loads(ws.recv(timeout=10))
        ids = itertools.count(1)
        sent = first
        count += first
        in_flight = 0
        while sent < count or in_flight:
            # Two writes in flight keep the hub's group commit busy.
            while sent < count and in_flight < 2:
                ops = [{"op": "set", "name": f"{PREFIX}hub/r{k % records:05d}",
                        "data": {"k": k, "note": "missed while offline"}}
                       for k in range(sent, min(count, sent + batch))]
                ws.send(json.dumps({"op": "write", "id": next(ids), "ops": ops}))
                sent += len(ops)
                in_flight += 1
            reply = json.loads(ws.recv(timeout=60))
            if "op" in reply:
                continue
            if reply.get("ok") is not True:
                raise SystemExit(f"hub write failed: {reply}")
            in_flight -= 1
    return time.monotonic() - started


def make_outbox(mirror: Mirror, entries: int, jobs: int) -> float:
    """``entries`` offline writes with `tally mirror set` (``jobs`` at a time)."""
    started = time.monotonic()

    def one(i: int) -> None:
        mirror.cli("mirror", "set", "--store", mirror.store, f"{PREFIX}local/e{i:05d}",
                   json.dumps({"i": i, "note": "written offline"}))

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for index, _ in enumerate(pool.map(one, range(entries)), 1):
            if index % 1000 == 0:
                log(f"  {index} outbox entries")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tally", required=True)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--missed", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=10_000, help="records the missed changes spread over")
    parser.add_argument("--jobs", type=int, default=4, help="`tally mirror set` processes at a time")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-reconcile-"))
    hub = Hub(args.tally, work)
    mirrors = {name: Mirror(args.tally, work, name, hub) for name in ("A", "B", "C", "D")}
    rows = []
    try:
        log(f"hub on port {hub.port}, work directory {work}")
        def sync_and_stop(name: str) -> None:
            mirror = mirrors[name]
            started = mirror.start()
            mirror.wait_converged(hub.head(), started, 600)
            mirror.stop()

        for name in ("A", "B"):  # synced once (empty), then offline
            sync_and_stop(name)
        tail = min(CATCH_UP, args.missed)
        log(f"{args.missed} missed changes over {args.records} records ...")
        missed_s = write_missed(hub, args.missed - tail, args.records)
        sync_and_stop("D")  # misses only the last `tail`
        missed_s += write_missed(hub, tail, args.records, first=args.missed - tail)
        log(f"  written in {missed_s:.1f}s ({args.missed / missed_s:,.0f} changes/s)")
        log(f"{args.entries} outbox entries with `tally mirror set` ({args.jobs} at a time) ...")
        outbox_s = make_outbox(mirrors["A"], args.entries, args.jobs)
        depth = mirrors["A"].status().get("outbox")
        log(f"  made in {outbox_s:.1f}s ({args.entries / outbox_s:,.0f}/s); outbox depth {depth}")
        if depth != args.entries:
            raise SystemExit(f"outbox depth {depth} after {args.entries} offline writes")

        hub.wait_settled()

        def measure(name: str, entries: int, missed: int, what: str) -> None:
            mirror = mirrors[name]
            head_before = hub.head()
            started = mirror.start()
            # The replay moves the head by one seq per entry.
            seconds = mirror.wait_converged(head_before + entries, started, args.timeout)
            head = hub.head()
            if head != head_before + entries:
                raise SystemExit(f"{name}: the hub's head moved {head - head_before}, not {entries}")
            verify_s = mirror.verify()
            mirror.stop()
            rows.append((what, entries, missed, seconds, (entries + missed) / seconds, verify_s))
            log(f"  {what}: {seconds:.2f}s, verify {verify_s:.2f}s")

        log("D: catch up ...")
        measure("D", 0, tail, "catch up change by change (D: no outbox)")
        log("B: pull only ...")
        measure("B", 0, args.missed, "pull only, as a resnapshot (B: no outbox)")
        log("A: pull and replay ...")
        measure("A", args.entries, args.missed, "**pull + replay (A)**")
        records = args.records + args.entries
        log(f"C: fresh snapshot of the same {records} records ...")
        mirror = mirrors["C"]
        head = hub.head()
        started = mirror.start()
        seconds = mirror.wait_converged(head, started, args.timeout)
        verify_s = mirror.verify()
        mirror.stop()
        rows.append((f"baseline: fresh snapshot of the {records:,} records (C)", 0, 0, seconds, records / seconds,
                     verify_s))

        print(f"| run | outbox entries | missed changes | seconds to converge | changes/s | `tally verify` |")
        print("| --- | --- | --- | --- | --- | --- |")
        for what, entries, missed, seconds, rate, verify_s in rows:
            unit = " records/s" if what.startswith("baseline") else ""
            print(f"| {what} | {entries:,} | {missed:,} | {seconds:.2f} | {rate:,.0f}{unit} | {verify_s:.2f} s |")
        print()
        print(f"Setup: {args.missed:,} missed changes written in {missed_s:.1f} s "
              f"({args.missed / missed_s:,.0f}/s, atomic writes of 1,000); "
              f"{args.entries:,} `tally mirror set` in {outbox_s:.1f} s ({args.entries / outbox_s:,.0f}/s, "
              f"{args.jobs} at a time).")
        return 0
    finally:
        for mirror in mirrors.values():
            if mirror.process and mirror.process.poll() is None:
                os.kill(mirror.process.pid, signal.SIGKILL)
                mirror.process.wait(10)
        hub.stop()
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""`addEntry`/s appending to a list of a given size (issue 14, lists that scale).

Starts `tally serve` (TALLY_BIN, default --durability full, its own temporary
--data) on 127.0.0.1, fills the list `bench` to SIZE entries (atomic `write`
groups of 1,000 `addEntry`s, not timed), waits SETTLE seconds (the
checkpoint of what the fill wrote runs meanwhile, not during the
measurement), then for SECONDS appends entries:

  1 conn    one connection, pipelined (WINDOW requests in flight)
  100 conn  100 connections, each closed-loop (one request in flight)

and prints one Markdown row per size: the acknowledged `addEntry`s per second.
A refused append (the old hub's 100,000-entry limit) ends the run with the
error. Usage:

  python3 Tests/bench/list_append.py --sizes 1000,1000000 [--seconds 10]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import websockets

LISTENING = re.compile(r"tally listening on http://127\.0\.0\.1:(\d+)")


def start_hub(binary: str, work: Path, durability: str) -> tuple[subprocess.Popen, int]:
    log = open(work / "stderr", "w+")
    process = subprocess.Popen([binary, "serve", "--data", str(work / "data"), "--port", "0",
                                "--durability", durability, "--no-echo", "--log-level", "warning"],
                               stdout=log, stderr=subprocess.STDOUT, cwd=work)
    deadline = time.time() + 20
    while time.time() < deadline:
        log.seek(0)
        match = LISTENING.search(log.read())
        if match:
            return process, int(match.group(1))
        time.sleep(0.05)
    raise SystemExit("the hub did not start")


@contextmanager
def running_hub(binary: str, durability: str):
    """A hub on its own temporary --data for the block; its WebSocket URL.
    Stopped (SIGTERM, by its PID) and its directory removed afterwards."""
    work = Path(tempfile.mkdtemp(prefix="tally-listbench-"))
    process, port = start_hub(binary, work, durability)
    try:
        yield f"ws://127.0.0.1:{port}/v1/ws"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(30)
        subprocess.run(["rm", "-rf", str(work)])


async def fill(url: str, size: int) -> None:
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        done, sent, window = 0, 0, 8
        groups = (size + 999) // 1000
        pending = 0
        while done < groups:
            while sent < groups and pending < window:
                count = min(1000, size - sent * 1000)
                ops = [{"op": "addEntry", "list": "bench", "entry": f"fill/{sent * 1000 + i:07}"} for i in range(count)]
                await ws.send(json.dumps({"op": "write", "ops": ops, "id": sent}))
                sent += 1
                pending += 1
            reply = json.loads(await ws.recv())
            if "id" in reply:
                if not reply.get("ok"):
                    raise SystemExit(f"fill refused: {reply}")
                done += 1
                pending -= 1


async def appender(url: str, tag: str, window: int, stop_at: float, counts: list[int], slot: int) -> None:
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        sent = acked = 0
        while True:
            now = time.monotonic()
            while now < stop_at and sent - acked < window:
                await ws.send(f'{{"op":"addEntry","list":"bench","entry":"{tag}/{sent}","id":{sent}}}')
                sent += 1
            if sent == acked:
                break
            reply = json.loads(await ws.recv())
            if "id" not in reply:
                continue
            if not reply.get("ok"):
                raise SystemExit(f"append refused: {reply}")
            acked += 1
            if time.monotonic() < stop_at:
                counts[slot] += 1


async def rate(url: str, connections: int, window: int, seconds: float, tag: str) -> float:
    counts = [0] * connections
    start = time.monotonic()
    stop_at = start + seconds
    await asyncio.gather(*(appender(url, f"{tag}-{i}", window, stop_at, counts, i) for i in range(connections)))
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.environ.get("TALLY_BIN", ".build/release/tally"))
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--durability", default="full")
    parser.add_argument("--settle", type=float, default=10)
    args = parser.parse_args()
    print(f"| list size | 1 conn (pipelined {args.window}) addEntry/s | 100 conn addEntry/s |")
    print("| ---: | ---: | ---: |")
    for size in [int(s) for s in args.sizes.split(",")]:
        with running_hub(args.bin, args.durability) as url:
            began = time.time()
            asyncio.run(fill(url, size))
            print(f"filled {size} in {time.time() - began:.1f} s", file=sys.stderr)
            time.sleep(args.settle)
            one = asyncio.run(rate(url, 1, args.window, args.seconds, "one"))
            hundred = asyncio.run(rate(url, 100, 1, args.seconds, "many"))
            print(f"| {size:,} | {one:,.0f} | {hundred:,.0f} |", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Block-device requests per durable `set`, for one or more tally binaries.

For each binary: starts `tally serve` on a fresh data directory, sends SETS
durable sets to one record over one WebSocket at RATE per second (waiting for
each acknowledgement), and divides the growth of the request counts of the
block device holding the data directory by SETS: writes, discards and
flushes (/sys/dev/block/MAJ:MIN/stat fields 5, 12 and 16; see the kernel's
Documentation/block/stat.rst). Other users of the same device add to the
figures, so run it on an otherwise quiet machine and compare binaries in one
invocation.

    python3 scripts/device-writes-per-set.py .build/release/tally [OTHER_TALLY ...]
        [--sets N] [--rate R] [--repeat K] [--dir PARENT]
"""
import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import websockets


def stat_file(path: str) -> str:
    device = os.stat(path).st_dev
    return f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/stat"


def requests(path: str) -> tuple[int, int, int]:
    """(writes, discards, flushes) completed so far by the device holding path."""
    with open(stat_file(path)) as stat:
        fields = [int(field) for field in stat.read().split()]
    return fields[4], fields[11], fields[15]


async def measure(binary: str, sets: int, rate: float, parent: str) -> list[float]:
    data = tempfile.mkdtemp(prefix="tally-devwrites-", dir=parent)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hub = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--data", data,
                            "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"ws://127.0.0.1:{port}/v1/ws"
        for _ in range(200):
            try:
                ws = await websockets.connect(url, compression=None)
                break
            except OSError:
                await asyncio.sleep(0.025)
        else:
            raise SystemExit(f"{binary} did not start listening on port {port}")
        await ws.send(json.dumps({"op": "hello", "client": "device-writes", "protocol": 1}))
        await ws.recv()
        await asyncio.sleep(0.5)  # let the open's own writes reach the device first
        before = requests(data)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(sets):
            await ws.send(json.dumps({"op": "set", "id": i, "name": "bench/device", "data": {"n": i}}))
            answer = json.loads(await ws.recv())
            if answer.get("ok") is not True:
                raise SystemExit(f"set {i} was not acknowledged: {answer}")
            await asyncio.sleep(max(0.0, start + (i + 1) / rate - loop.time()))
        after = requests(data)
        await ws.close()
        return [(a - b) / sets for a, b in zip(after, before)]
    finally:
        hub.terminate()
        hub.wait()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binaries", nargs="+", help="tally executables to compare")
    parser.add_argument("--sets", type=int, default=300, help="durable sets per measurement (default 300)")
    parser.add_argument("--rate", type=float, default=100.0, help="sets per second (default 100)")
    parser.add_argument("--repeat", type=int, default=2, help="alternating measurements per binary (default 2)")
    parser.add_argument("--dir", default=None, help="parent of the data directories (default: the temp directory)")
    args = parser.parse_args()
    if args.sets < 1 or args.rate <= 0 or args.repeat < 1:
        parser.error("--sets and --repeat must be at least 1 and --rate above 0")
    for binary in args.binaries:
        if not os.access(binary, os.X_OK):
            parser.error(f"{binary} is not an executable")
    parent = args.dir or tempfile.gettempdir()
    if not os.path.isdir(parent):
        parser.error(f"--dir {parent} is not a directory")
    if not os.path.exists(stat_file(parent)):
        parser.error(f"{parent} is not on a block device with request counts ({stat_file(parent)} is missing; "
                     "tmpfs?): pass --dir on a disk")
    print("| binary | run | writes per set | discards per set | flushes per set |")
    print("| --- | --- | --- | --- | --- |")
    for run in range(1, args.repeat + 1):
        for binary in args.binaries:
            figures = asyncio.run(measure(binary, args.sets, args.rate, parent))
            print(f"| {binary} | {run} | " + " | ".join(f"{figure:.2f}" for figure in figures) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())

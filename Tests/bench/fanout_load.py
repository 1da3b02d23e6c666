"""Load for scripts/profile-fanout.sh: S subscribers of topic "bench" and one
publisher sending N events at R per second, through the real `websockets`
client. Prints how many pushes arrived; exits 1 if any is missing.

Usage: python3 Tests/bench/fanout_load.py PORT N [--subscribers S] [--rate R]
"""
import argparse
import asyncio
import json
import sys
import time

import websockets


async def subscriber(url, counter, ready):
    async with websockets.connect(url, compression=None, max_queue=None) as ws:
        await ws.send('{"op":"subscribe","topic":"bench"}')
        await ws.recv()
        ready.release()
        async for _ in ws:
            counter[0] += 1


async def main(args):
    url = f"ws://127.0.0.1:{args.port}/v1/ws"
    counter = [0]
    ready = asyncio.Semaphore(0)
    tasks = [asyncio.create_task(subscriber(url, counter, ready)) for _ in range(args.subscribers)]
    for _ in range(args.subscribers):
        await asyncio.wait_for(ready.acquire(), 30)
    async with websockets.connect(url, compression=None) as publisher:
        for n in range(args.events):
            await publisher.send(json.dumps({"op": "publish", "topic": "bench",
                                             "data": {"t": time.monotonic_ns(), "n": n}}))
            await publisher.recv()
            await asyncio.sleep(1 / args.rate)
    expected = args.events * args.subscribers
    deadline = time.monotonic() + 10
    while counter[0] < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    print(f"delivered {counter[0]} of {expected}")
    return 0 if counter[0] == expected else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("events", type=int)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50)
    sys.exit(asyncio.run(main(parser.parse_args())))

#!/usr/bin/env python3
"""What one list write costs at each place in a list of 1,000,000 entries
(issue 14): round-trip milliseconds of an append, an insert near the start
and in the middle, a removal by entry near either end and in the middle,
and the time to page through the whole list. Durable hub (release build,
--durability full, 127.0.0.1), filled like list_append.py.

Usage: python3 Tests/bench/list_ops.py [--bin .build/release/tally]
"""
import argparse
import asyncio
import json
import os
import time

import websockets

from list_append import fill, running_hub


async def timed(url, message, n=5):
    """Median round trip of `n` sends of `message` (addEntry entries made unique)."""
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        times = []
        for i in range(n):
            m = dict(message, id=i)
            if m["op"] == "addEntry":
                m["entry"] = f"{m['entry']}-{i}"
            start = time.perf_counter()
            await ws.send(json.dumps(m))
            while (reply := json.loads(await ws.recv())).get("id") != i:
                pass
            assert reply.get("ok"), reply
            times.append((time.perf_counter() - start) * 1000)
        return sorted(times)[n // 2]


async def page_through(url):
    async with websockets.connect(url, compression=None, max_size=None) as ws:
        start, pages, cursor = time.perf_counter(), 0, None
        while True:
            message = {"op": "get", "list": "bench", "id": pages} | ({"cursor": cursor} if cursor else {})
            await ws.send(json.dumps(message))
            reply = json.loads(await ws.recv())
            pages += 1
            if not reply.get("more"):
                return pages, time.perf_counter() - start
            cursor = reply["cursor"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=os.environ.get("TALLY_BIN", ".build/release/tally"))
    args = parser.parse_args()
    with running_hub(args.bin, "full") as url:
        asyncio.run(fill(url, 1_000_000))
        time.sleep(10)  # let the fill's checkpoint finish
        rows = [("append", {"op": "addEntry", "list": "bench", "entry": "tail"}),
                ("insert at 10", {"op": "addEntry", "list": "bench", "entry": "head", "at": 10}),
                ("insert at 500,000", {"op": "addEntry", "list": "bench", "entry": "mid", "at": 500_000})]
        for label, message in rows:
            print(f"| {label} | {asyncio.run(timed(url, message)):.2f} ms |")
        for label, entry in [("near the start", "fill/0000100"), ("in the middle", "fill/0500000"),
                             ("near the end", "fill/0999000")]:
            ms = asyncio.run(timed(url, {"op": "removeEntry", "list": "bench", "entry": entry}, n=1))
            print(f"| removeEntry by entry {label} | {ms:.2f} ms |")
        pages, seconds = asyncio.run(page_through(url))
        print(f"| paging through all | {pages} pages, {seconds:.1f} s |")


if __name__ == "__main__":
    main()

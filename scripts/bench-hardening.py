#!/usr/bin/env python3
"""What a hostile client costs the hub: resident memory added by

- 100 unauthenticated photo uploads of 16 MiB each, sent in full, on a hub
  with users (the hub should refuse them from their headers);
- one client that pipelines GET /metrics for 20 s and never reads an answer.

Usage: scripts/bench-hardening.py TALLY_BIN [OTHER_TALLY_BIN …] [--seconds 20]
Each binary gets its own fresh hub (127.0.0.1, a free port, a temporary
--data, removed afterwards), stopped by its PID. Prints one table row per
binary. Exit status 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
import hub_process  # noqa: E402
from hub_process import stop  # noqa: E402

MiB = 1 << 20


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def start(binary: str, scratch: Path, args: list[str]) -> tuple[subprocess.Popen, int]:
    process, port = hub_process.start(binary, tempfile.mkdtemp(prefix="data-", dir=scratch), args=args)
    time.sleep(0.5)
    return process, port


def refused_uploads(binary: str, scratch: Path) -> float:
    config = scratch / "tally.json"
    config.write_text(json.dumps({"users": [{"name": "root", "role": "admin",
                                             "tokenSha256": hashlib.sha256(b"secret").hexdigest()}]}))
    process, port = start(binary, scratch, ["--config", str(config)])
    before = rss(process.pid)
    sha = hashlib.sha256(b"x").hexdigest()
    sockets = []
    for _ in range(100):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.settimeout(5)
        sock.sendall(f"PUT /v1/blobs/{sha} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/png\r\n"
                     f"Content-Length: {16 * MiB}\r\n\r\n".encode())
        try:
            for _ in range(16):
                sock.sendall(b"\0" * MiB)
        except OSError:
            pass  # refused and closed: the rest is not taken
        sockets.append(sock)
    time.sleep(1)
    grown = rss(process.pid) - before
    for sock in sockets:
        sock.close()
    stop(process)
    return grown / MiB


def never_reading_client(binary: str, scratch: Path, seconds: float) -> tuple[float, int]:
    process, port = start(binary, scratch, [])
    before = rss(process.pid)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.settimeout(1)
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 100
    sent, started = 0, time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            sock.sendall(request)
            sent += 100
    except OSError:
        pass  # the hub stopped reading: TCP pushes back
    time.sleep(0.5)
    grown = rss(process.pid) - before
    sock.close()
    stop(process)
    return grown / MiB, sent


def main() -> None:
    parser = argparse.ArgumentParser(description="What hostile clients cost a hub (resident memory added).")
    parser.add_argument("binaries", nargs="+", metavar="TALLY_BIN")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long the never-reading client sends (default 20)")
    options = parser.parse_args()
    if not 0 < options.seconds <= 600:
        parser.error("--seconds must be more than 0 and at most 600")
    for binary in options.binaries:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            parser.error(f"{binary} is not an executable (build it: swift build -c release)")
    print("| binary | 100 refused 16 MiB uploads: RSS added | never-reading client: requests taken | RSS added |")
    print("| --- | --- | --- | --- |")
    for binary in options.binaries:
        scratch = Path(tempfile.mkdtemp(prefix="tally-hardening-"))
        try:
            uploads = refused_uploads(binary, scratch)
            grown, sent = never_reading_client(binary, scratch, options.seconds)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"| {binary} | {uploads:.1f} MiB | {sent:,} | {grown:.1f} MiB |")


if __name__ == "__main__":
    main()

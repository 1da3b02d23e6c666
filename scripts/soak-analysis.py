#!/usr/bin/env python3
"""Does a hub's memory stay flat while it analyses photos, good and bad?

Starts a hub (temporary --data, 127.0.0.1, a free port; stopped by its PID)
and for SECONDS keeps its analysis busy with intake jobs of three photos
each, as the CLI's runner makes them over REST: PUT each photo, PUT the
record, advance it to created, then to media-uploaded with the photos. The
photos are the image fuzzer's inputs (Fuzz/corpus-seed/FuzzImageDecoder,
and Fuzz/corpus-FuzzImageDecoder when a run left one): valid JPEG, PNG,
WebP, GIF, HEIC and AVIF labels, truncated and damaged ones, each upload
made unique by flipping a few bytes past the header, so every job decodes
new photos; each photo's 128 px thumbnail is asked for too. Two jobs are
kept waiting, so the analysis thread never runs dry.

Every INTERVAL seconds it prints the hub's resident memory (VmRSS, and
VmHWM, the peak) next to the jobs the hub has analysed and the photos it
has refused; flat memory over a long run means nothing per photo stays
behind. The last line compares the last sample with the one at the end of
the first quarter (after the warm-up).

Usage: scripts/soak-analysis.py TALLY_BIN [--seconds 600] [--interval 30] [--wrap CMD]
Exit status 2 for bad arguments, 1 when the hub dies.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from hub_process import start, stop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class Hub:
    def __init__(self, port: int):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method: str, path: str, body: bytes | dict | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        headers = dict(headers or {})
        if isinstance(body, dict):
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.connection.request(method, path, body=body, headers=headers)
        response = self.connection.getresponse()
        return response.status, response.read()

    def metric(self, text: str, name: str) -> int:
        match = re.search(rf"^{re.escape(name)} (\d+)$", text, re.M)
        return int(match.group(1)) if match else 0


def hub_pid(process: subprocess.Popen, wrapped: bool) -> int:
    """The hub's PID: the process started, or with --wrap its child named tally."""
    if not wrapped:
        return process.pid
    found = subprocess.run(["pgrep", "-x", "-P", str(process.pid), "tally"], capture_output=True, text=True)
    return int(found.stdout.split()[0])


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def inputs() -> list[bytes]:
    folders = [ROOT / "Fuzz/corpus-seed/FuzzImageDecoder", ROOT / "Fuzz/corpus-FuzzImageDecoder"]
    return [path.read_bytes() for folder in folders if folder.is_dir()
            for path in sorted(folder.iterdir()) if path.is_file() and path.stat().st_size > 16]


def content_type(data: bytes) -> str:
    """What the hub's blob store would sniff (BlobStore.sniff); JPEG for
    what it would not, which it then refuses."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"hevc", b"hevx", b"heim", b"heis", b"mif1", b"msf1"):
        return "image/heic"
    return "image/jpeg"


def variant(data: bytes, rng: random.Random) -> bytes:
    """`data` with a few bytes flipped past its first 32 (the magic the
    hub's blob store checks stays), sometimes cut short."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if len(out) > 33:
            out[rng.randrange(32, len(out))] ^= 1 << rng.randrange(8)
    if rng.random() < 0.25 and len(out) > 64:
        del out[rng.randrange(64, len(out)):]
    return bytes(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tally")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--interval", type=float, default=30)
    parser.add_argument("--wrap", default="", help="a command the hub runs under, e.g. 'heaptrack -o /tmp/hub'")
    args = parser.parse_args()
    if args.seconds <= 0 or args.interval <= 0 or not Path(args.tally).is_file():
        parser.print_usage(sys.stderr)
        sys.exit(2)
    photos = inputs()
    if not photos:
        sys.exit("no fuzz inputs under Fuzz/corpus-seed/FuzzImageDecoder")

    rng = random.Random(1)
    scratch = tempfile.mkdtemp(prefix="tally-soak-analysis-")
    process, port = start(args.tally, scratch + "/data", args.wrap.split())
    pid = hub_pid(process, bool(args.wrap))
    hub = Hub(port)
    samples: list[tuple[float, int, int, int, int, int]] = []
    print(f"{len(photos)} fuzz inputs; {args.seconds:.0f} s, a sample every {args.interval:.0f} s\n")
    print("| time (s) | jobs analysed | photos refused at upload | RSS (MiB) | peak RSS (MiB) |")
    print("| --- | --- | --- | --- | --- |")
    try:
        began = time.monotonic()
        next_sample = began
        job = refused = 0
        while True:
            now = time.monotonic()
            if process.poll() is not None:
                sys.exit(f"the hub exited with {process.returncode}")
            _, text = hub.request("GET", "/metrics")
            text = text.decode()
            if now >= next_sample:
                analysed = sum(int(n) for n in re.findall(r'^tally_intake_analyses_total\{[^}]*\} (\d+)$', text, re.M))
                rss, peak = memory(pid)
                samples.append((now - began, analysed, refused, rss, peak, job))
                print(f"| {now - began:.0f} | {analysed:,} | {refused:,} | {rss / 1024:.0f} | {peak / 1024:.0f} |",
                      flush=True)
                next_sample += args.interval
                if now - began >= args.seconds:
                    break
            if hub.metric(text, "tally_intake_analysis_pending") >= 2:
                time.sleep(0.05)
                continue
            job += 1
            shas = []
            for _ in range(3):
                data = variant(rng.choice(photos), rng)
                sha = hashlib.sha256(data).hexdigest()
                status, _ = hub.request("PUT", f"/v1/blobs/{sha}", data, {"Content-Type": content_type(data)})
                if status not in (200, 201):
                    refused += 1
                    continue
                shas.append(sha)
                hub.request("GET", f"/v1/blobs/{sha}?w=128")
            name = f"intake/soak-{job}"
            for method, path, body in [
                ("PUT", f"/v1/records/items/soak-{job}", {"name": f"soak {job}", "codes": [], "serials": []}),
                ("PUT", f"/v1/records/{name}", {"item": f"items/soak-{job}", "expectedPhotos": len(shas)}),
                ("POST", f"/v1/records/{name}/advance", {"from": "queued", "to": "created"}),
                ("POST", f"/v1/records/{name}/advance",
                 {"from": "created", "to": "media-uploaded", "data": {"photos": shas}}),
            ]:
                status, reply = hub.request(method, path, body)
                if status not in (200, 201):
                    sys.exit(f"{method} {path}: {status} {reply[:300]!r}")
    finally:
        stop(process, pid)
        shutil.rmtree(scratch, ignore_errors=True)

    warm = samples[max(1, len(samples) // 4)]
    last = samples[-1]
    jobs = last[1] - warm[1]
    growth = (last[3] - warm[3]) / 1024
    per_job = (last[3] - warm[3]) * 1024 / jobs if jobs else 0
    print(f"\nafter the first quarter ({warm[0]:.0f} s): RSS {warm[3] / 1024:.0f} → {last[3] / 1024:.0f} MiB "
          f"({growth:+.1f} MiB) over {jobs:,} more jobs ({per_job:+,.0f} bytes per job)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What a board card's photo costs with thumbnails against the full photo.

Uploads PHOTOS generated ~12 MP JPEGs (4000 × 3000, Pillow: a gradient,
shapes and sensor-like noise, quality 90 — about the bytes of a phone
camera's photo) to a fresh hub, then fetches each as the board does:
the photo as uploaded, and `?w=128` / `?w=256` (a card's 84 px box at
devicePixelRatio 1 and 2) as JPEG and as WebP (Chromium's Accept). Reports
the median bytes per card, the ratio to the full photo (target ≤ 1/20),
and the time of the first request (the hub makes the thumbnail) and of a
later one (served from the kept copy).

Usage: scripts/bench-thumbnails.py TALLY_BIN [--photos 6]
Run with a Python that has Pillow (Tests/browser/requirements.txt), e.g.
.build/test-venv/bin/python scripts/bench-thumbnails.py .build/release/tally
The hub binds 127.0.0.1 on a free port with a temporary --data (removed
afterwards) and is stopped by its PID. Exit status 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import io
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "lib"))
from hub_process import start, stop  # noqa: E402

try:
    from PIL import Image, ImageDraw, ImageFilter
except ImportError:
    sys.exit("Pillow is missing: pip install -r Tests/browser/requirements.txt")

CHROME_ACCEPT = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"


def camera_photo(seed: int, size=(4000, 3000)) -> bytes:
    """A 12 MP photo: smooth light, a few objects with edges, sensor noise."""
    rng = random.Random(seed)
    image = Image.linear_gradient("L").resize(size).convert("RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(40):
        x, y = rng.randrange(size[0]), rng.randrange(size[1])
        w, h = rng.randrange(100, 1200), rng.randrange(100, 900)
        colour = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x, y, x + w, y + h], fill=colour)
    image = image.filter(ImageFilter.GaussianBlur(1))
    noise = Image.effect_noise(size, 24).convert("RGB")
    image = Image.blend(image, noise, 0.2)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str], float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    began = time.perf_counter()
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    payload = response.read()
    elapsed = (time.perf_counter() - began) * 1000
    connection.close()
    return response.status, payload, {k.lower(): v for k, v in response.getheaders()}, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tally")
    parser.add_argument("--photos", type=int, default=6)
    args = parser.parse_args()
    if args.photos < 1 or not Path(args.tally).is_file():
        parser.print_usage(sys.stderr)
        sys.exit(2)

    photos = [camera_photo(seed) for seed in range(args.photos)]
    scratch = tempfile.mkdtemp(prefix="tally-bench-thumbs-")
    process, port = start(args.tally, scratch + "/data")
    try:
        shas = []
        for photo in photos:
            sha = hashlib.sha256(photo).hexdigest()
            status, body, _, _ = request(port, "PUT", f"/v1/blobs/{sha}", photo, {"Content-Type": "image/jpeg"})
            assert status in (200, 201), body
            shas.append(sha)
        rows = [("photo as uploaded", "", None)]
        for width in (128, 256):
            rows.append((f"?w={width} JPEG", "", width))
            rows.append((f"?w={width} WebP", CHROME_ACCEPT, width))
        results = []
        for label, accept, width in rows:
            sizes, first, later = [], [], []
            for sha in shas:
                path = f"/v1/blobs/{sha}" + (f"?w={width}" if width else "")
                headers = {"Accept": accept} if accept else {}
                status, body, got, ms = request(port, "GET", path, headers=headers)
                assert status == 200, (path, status, body[:200])
                sizes.append(len(body))
                first.append(ms)
                status, again, _, ms = request(port, "GET", path, headers=headers)
                assert status == 200 and again == body
                later.append(ms)
            results.append((label, statistics.median(sizes), statistics.median(first), statistics.median(later)))
        # What keeping every width in both formats adds to the photos.
        kept = []
        for sha in shas:
            total = 0
            for width in (64, 128, 256, 512, 1024):
                for accept in ("", CHROME_ACCEPT):
                    status, body, _, _ = request(port, "GET", f"/v1/blobs/{sha}?w={width}",
                                                 headers={"Accept": accept} if accept else {})
                    assert status == 200
                    total += len(body)
            kept.append(total)
    finally:
        stop(process)
        shutil.rmtree(scratch, ignore_errors=True)

    full = results[0][1]
    print(f"{args.photos} photos of 4000 × 3000, median {full / 1e6:.2f} MB each\n")
    print("| request | bytes per card | ÷ full photo | first request (ms) | later requests (ms) |")
    print("| --- | --- | --- | --- | --- |")
    for label, size, first, later in results:
        ratio = "1" if size == full else f"1/{full / size:.0f}"
        print(f"| {label} | {size:,.0f} | {ratio} | {first:.1f} | {later:.1f} |")
    extra = statistics.median(kept)
    print(f"\nevery width in both formats kept: {extra:,.0f} bytes per photo ({100 * extra / full:.1f} % of it)")


if __name__ == "__main__":
    main()

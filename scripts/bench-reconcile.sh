#!/usr/bin/env bash
# Reconcile benchmark of the offline mirror (issue 5), release build:
# 10,000 outbox entries made offline with `tally mirror set` and 100,000
# changes missed while offline, then `tally mirror run` timed until it has
# converged (outbox empty, last seq = hub head, `tally verify` clean); in the
# same invocation the pull alone and, as the baseline, a fresh snapshot of the
# same data. Prints a Markdown table (figures in BENCHMARKS.md, "Offline mirror reconcile").
# Usage: scripts/bench-reconcile.sh [reconcile.py options: --entries N --missed N --jobs N …]
#   TALLY_BENCH_SCRATCH=DIR  build directory (default .build)
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=${TALLY_BENCH_SCRATCH:-.build}
scripts/install-deps.sh build >/dev/null
swift build -c release --scratch-path "$scratch" >/dev/null
# python3 with websockets: the test venv (scripts/test.sh makes it), else the system one.
python=python3
if [ -x .build/test-venv/bin/python ]; then python=.build/test-venv/bin/python; fi
"$python" -c 'import websockets' 2>/dev/null || { echo "bench-reconcile needs python3 with websockets (run scripts/test.sh once)" >&2; exit 1; }
exec "$python" Tests/bench/reconcile.py --tally "$scratch/release/tally" "$@"

#!/usr/bin/env bash
# Hub instructions per delivered push, counted by callgrind (repeatable on a
# noisy machine, unlike CPU time): the release hub serves 100 subscribers of
# one topic while a publisher sends N and then 3N events (50/s); the
# difference, divided by the 2N × 100 extra deliveries, leaves out start-up,
# connecting and shutdown.
# Usage: scripts/profile-fanout.sh [N]   (default 200; needs python3 with websockets)
#   TALLY=BIN profiles another release binary (a baseline) instead of this build.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
if [ -n "${TALLY:-}" ]; then
  tally=$TALLY
else
  swift build -c release --product tally >/dev/null
  tally=.build/release/tally
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. scripts/lib/callgrind-serve.sh

run() {
  local events=$1 out=$work/cg.$1
  callgrind_start "$out" --host 127.0.0.1 --port 0 --data :memory: --no-echo --log-level warning
  python3 Tests/bench/fanout_load.py "$hub_port" "$events" >&2
  callgrind_stop "$out"
}

a=$(run "$n")
b=$(run $((3 * n)))
echo "hub instructions: $a for $n events, $b for $((3 * n)) (100 subscribers)"
echo "per delivered push: $(( (b - a) / (2 * n * 100) ))"

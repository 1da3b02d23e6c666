#!/usr/bin/env bash
# Hub instructions per delivered push, counted by callgrind (repeatable on a
# noisy machine, unlike CPU time): the release hub serves 100 subscribers of
# one topic while a publisher sends N and then 3N events (50/s); the
# difference, divided by the 2N × 100 extra deliveries, leaves out start-up,
# connecting and shutdown.
# Usage: scripts/profile-fanout.sh [N]   (default 200; needs python3 with websockets)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
swift build -c release --product tally >/dev/null
tally=.build/release/tally
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
  local events=$1 out=$work/cg.$1
  valgrind --tool=callgrind --callgrind-out-file="$out" "$tally" serve --host 127.0.0.1 --port 0 --data :memory: \
    --no-echo --log-level warning >"$work/serve.out" 2>"$work/serve.err" &
  local pid=$!
  for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  local port
  port=$(grep -o '[0-9]*$' "$work/serve.out" | head -1)
  python3 Tests/bench/fanout_load.py "$port" "$events" >&2
  # Under valgrind a signal can wait for the next system call: ask until it goes.
  for _ in $(seq 15); do kill -INT "$pid" 2>/dev/null || break; sleep 2; kill -0 "$pid" 2>/dev/null || break; done
  wait "$pid" || true
  : > "$work/serve.out"
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

a=$(run "$n")
b=$(run $((3 * n)))
echo "hub instructions: $a for $n events, $b for $((3 * n)) (100 subscribers)"
echo "per delivered push: $(( (b - a) / (2 * n * 100) ))"

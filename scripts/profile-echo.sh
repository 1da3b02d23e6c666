#!/usr/bin/env bash
# Server instructions per echoed message, counted by callgrind (repeatable on
# a noisy machine, unlike timings). Runs the release server under callgrind
# twice — N and 2N round trips from 10 connections — and divides the
# difference by N, so start-up and shutdown costs cancel out.
# Usage: scripts/profile-echo.sh [N] [size] [extra bench flags]   (default 10000 64)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
size=${2:-64}
shift $(( $# > 2 ? 2 : $# )) || true
extra=("$@")
swift build -c release >/dev/null
tally=.build/release/tally
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. scripts/lib/callgrind-serve.sh

run() {
  local messages=$1 out=$work/cg.$1
  callgrind_start "$out" --port 0 --threads 1 --log-level warning
  "$tally" bench echo --url "ws://127.0.0.1:$hub_port/echo" --connections 10 --messages $((messages / 10)) --size "$size" \
    --no-compression "${extra[@]}" >"$work/bench.out" 2>&1 || cat "$work/bench.out" >&2
  callgrind_stop "$out"
}

a=$(run "$n")
b=$(run $((2 * n)))
echo "server instructions: $a for $n messages, $b for $((2 * n))"
echo "per echoed ${size}-byte message: $(( (b - a) / n ))"

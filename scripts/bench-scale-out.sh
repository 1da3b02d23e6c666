#!/usr/bin/env bash
# The figures of BENCHMARKS.md "Several hubs on PostgreSQL", in one
# invocation, release builds, a private PostgreSQL server on this machine:
#  1. durable writes, 100 closed-loop writers (`tally bench writes`): one hub
#     on SQLite, one hub on PostgreSQL, three hubs on one PostgreSQL database
#     (a fresh database each), RUNS times in turn;
#  2. one record's updates to 100 subscribers on the writing hub and on
#     another hub (`tally bench cross-hub`: SQLite, PostgreSQL same hub,
#     PostgreSQL across hubs, alternating rounds);
#  3. the single-hub SQLite figures before and after: `tally bench fanout`
#     (events and records, 100 subscribers, beside Mosquitto) and `tally
#     bench writes` with BASE, a release build of an earlier commit, and with
#     this build, in turn.
# Usage: scripts/bench-scale-out.sh [--base COMMIT] [--runs N] [--skip-base]
#   --base COMMIT  the baseline for part 3 (default d2704a9, before several
#                  hubs), built in a temporary git worktree
#   --runs N       repetitions of part 1 (default 3)
#   --skip-base    skip part 3
set -euo pipefail
cd "$(dirname "$0")/.."
base=d2704a9
runs=3
skip_base=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base=${2:?--base needs a commit}; shift 2 ;;
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --skip-base) skip_base=1; shift ;;
    *) echo "usage: $0 [--base COMMIT] [--runs N] [--skip-base]" >&2; exit 2 ;;
  esac
done
case "$runs" in ''|*[!0-9]*) echo "--runs takes a whole number, not '$runs'" >&2; exit 2 ;; esac

scripts/install-deps.sh test
if ! command -v mosquitto >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null || true
fi
swift build -c release --product tally >/dev/null
tally=$PWD/.build/release/tally
ulimit -n "$(ulimit -Hn)"

cluster=$(mktemp -d /tmp/tally-bench-pg.XXXXXX)
rmdir "$cluster"
base_tree=""
cleanup() {
  bash scripts/pg-test-cluster.sh stop "$cluster" >/dev/null 2>&1 || true
  if [ -n "$base_tree" ]; then git worktree remove --force "$base_tree" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
bash scripts/pg-test-cluster.sh start "$cluster" >/dev/null
# A new database named NAME (called in a command substitution, a subshell:
# the caller names each one).
fresh_database() {
  bash scripts/pg-test-cluster.sh createdb "$cluster" "bench_$1" | tail -n 1
}

echo "== 1. durable writes, 100 writers ($runs runs of each, in turn)"
for run in $(seq "$runs"); do
  echo "-- run $run"
  "$tally" bench writes --writers 100 --seconds 8 | tail -n 1
  "$tally" bench writes --writers 100 --seconds 8 --store "$(fresh_database "one_$run")" | tail -n 1
  "$tally" bench writes --writers 100 --seconds 8 --store "$(fresh_database "three_$run")" --hubs 3 | tail -n 1
done

echo "== 2. delivery on the writing hub and across hubs"
"$tally" bench cross-hub --store "$(fresh_database cross)" --subscribers 100 --seconds 12 --rounds 3

if [ "$skip_base" = 0 ]; then
  echo "== 3. single-hub SQLite figures: $base, then this build, in turn"
  base_tree=$(mktemp -d /tmp/tally-base.XXXXXX)
  rmdir "$base_tree"
  git worktree add --detach "$base_tree" "$base" >/dev/null
  (cd "$base_tree" && swift build -c release --product tally >/dev/null)
  for round in 1 2; do
    for binary in "$base_tree/.build/release/tally" "$tally"; do
      echo "-- round $round: $binary"
      "$binary" bench fanout --subscribers 100 --mode events,records --seconds 9 --rounds 3
      "$binary" bench writes --writers 100 --seconds 8 | tail -n 1
    done
  done
fi

#!/usr/bin/env bash
# Where the hub's heap goes under steady load: the release hub under
# heaptrack, `tally bench soak` against it for SECONDS, then heaptrack's
# summary and the heap at its peak by the hub function that allocated it
# (the innermost frames of TallyServer, TallyEngine, TallyStore, TallyNet or
# TallyProtocol, or SQLite). The soak's RSS column includes heaptrack's own
# memory (about 5 MiB here).
# Usage: scripts/profile-soak-heap.sh [SECONDS] [tally serve options…]
#   (default 120 s; e.g. scripts/profile-soak-heap.sh 300 --cache-size 64M)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-120}
[ $# -gt 0 ] && shift
command -v heaptrack >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq heaptrack >/dev/null
swift build -c release --product tally >/dev/null
tally=$PWD/.build/release/tally
work=$(mktemp -d)
hub_pid=
cleanup() { if [ -n "$hub_pid" ]; then kill "$hub_pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT

heaptrack -o "$work/heap" "$tally" serve --host 127.0.0.1 --port 0 --data "$work/data" --no-echo \
  --log-level warning "$@" >"$work/serve.out" 2>"$work/serve.err" &
wrapper=$!
for _ in $(seq 300); do grep -q "listening on" "$work/serve.out" 2>/dev/null && break; sleep 0.2; done
port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.out" | grep -o '[0-9]*$')
# heaptrack's script runs the hub as its child.
hub_pid=$(pgrep -P "$wrapper" -x tally)
"$tally" bench soak --url "ws://127.0.0.1:$port/v1/ws" --hub-pid "$hub_pid" --seconds "$seconds"
kill -TERM "$hub_pid"
wait "$wrapper" || true
hub_pid=

heaptrack_print -f "$work/heap.zst" --print-peaks 0 --print-allocators 0 --print-temporary 0 \
  --print-leaks 0 --print-flamegraph "$work/peak.txt" --flamegraph-cost-type peak | tail -6
echo
echo "heap at the peak, by allocating hub function (MiB):"
python3 - "$work/peak.txt" <<'EOF' | swift demangle --simplified
import collections, re, sys
ours = re.compile(r"^\$s(11TallyServer|11TallyEngine|10TallyStore|8TallyNet|13TallyProtocol)|^sqlite3")
cost = collections.Counter()
for line in open(sys.argv[1]):
    stack, _, size = line.rstrip("\n").rpartition(" ")
    if not size.isdigit():
        continue
    frames = [f for f in stack.rstrip(";").split(";") if ours.match(f)]
    cost[" <- ".join(reversed(frames[-2:])) if frames else "(runtime and libraries)"] += int(size)
for key, size in cost.most_common(15):
    print(f"{size / 1048576:8.2f}  {key}")
EOF

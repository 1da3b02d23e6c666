#!/usr/bin/env bash
# Network-layer benchmarks, one invocation, release build:
#  1. idle WebSocket connections: server memory per connection (RSS growth ÷ N)
#     and how fast a new connection is answered while N are open — for Tally
#     and, as the baseline in the same run, Mosquitto's WebSocket listener;
#  2. echo round trips: latency percentiles and messages/s, with and without
#     permessage-deflate.
#  3. the sync hub (each run starts its own hub, or Mosquitto, as a child of
#     `tally bench` and reads the broker's CPU time from /proc): fan-out to
#     100 and 1000 subscribers at 100 updates/s (events, one record, a record
#     per subscriber) beside Mosquitto; closed-loop durable writes with 1, 10
#     and 100 writers; start-up with a million records.
# Usage: scripts/bench.sh [--quick] [--sync-only] [connections]   (default 10000)
#   --quick (or BENCH_QUICK=1)  skip the long runs: 1000-subscriber fan-out,
#                               the random-record writes and the 1M-record start-up
#   --sync-only                 only part 3
set -euo pipefail
cd "$(dirname "$0")/.."
quick=${BENCH_QUICK:-0}
sync_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --sync-only) sync_only=1; shift ;;
    *) break ;;
  esac
done
count=${1:-10000}
scripts/install-deps.sh build
if ! command -v mosquitto >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null || true
fi
swift build -c release >/dev/null
tally=.build/release/tally
ulimit -n "$(ulimit -Hn)"
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

start_tally() {
  "$tally" serve --port 0 --log-level warning "$@" >"$work/tally.out" 2>"$work/tally.err" &
  tally_pid=$!
  pids+=("$tally_pid")
  for _ in $(seq 100); do grep -q listening "$work/tally.out" 2>/dev/null && break; sleep 0.1; done
  tally_port=$(grep -o '[0-9]*$' "$work/tally.out")
}

if [ "$sync_only" = 0 ]; then
# Each run leaves its client ports in TIME_WAIT for a minute; the loopback
# ephemeral range holds about 28,000, so the deflate and TLS runs use fewer
# connections (the per-connection figure does not depend on the count).
small=$(( count < 2000 ? count : 2000 ))
conns() { "$tally" bench connections --count "$1" --server-pid "$2" --url "$3" "${@:4}" 2>"$work/conns.err" \
  || { cat "$work/conns.err" >&2; exit 1; }; }

echo "## Idle connections"
echo
echo "### Tally ($count connections)"
start_tally
conns "$count" "$tally_pid" "ws://127.0.0.1:$tally_port/echo" | tee "$work/tally-conns.txt"
kill "$tally_pid"; wait "$tally_pid" 2>/dev/null || true

if command -v mosquitto >/dev/null 2>&1; then
  echo
  echo "### Mosquitto $(mosquitto -h 2>/dev/null | head -1 | awk '{print $3}' || true) ($count connections, WebSocket listener, baseline)"
  # Mosquitto 2.0 cannot start with only a WebSocket listener (libwebsockets
  # without external poll): a loopback MQTT listener goes beside it.
  mport=$((20000 + RANDOM % 20000))
  printf 'listener %d 127.0.0.1\nlistener %d\nsocket_domain ipv4\nprotocol websockets\nallow_anonymous true\nmax_connections -1\n' \
    $((mport + 1)) "$mport" >"$work/mosquitto.conf"
  mosquitto -c "$work/mosquitto.conf" >"$work/mosquitto.log" 2>&1 &
  mq_pid=$!
  pids+=("$mq_pid")
  sleep 1
  conns "$count" "$mq_pid" "ws://127.0.0.1:$mport/" --subprotocol mqtt | tee "$work/mq-conns.txt"
  kill "$mq_pid"; wait "$mq_pid" 2>/dev/null || true
  t=$(awk -F'|' 'NR==3 {gsub(/ /,"",$7); print $7}' "$work/tally-conns.txt")
  m=$(awk -F'|' 'NR==3 {gsub(/ /,"",$7); print $7}' "$work/mq-conns.txt")
  echo
  echo "Tally holds $t KiB per idle connection, Mosquitto $m KiB: ratio $(awk "BEGIN {printf \"%.2f\", $t / $m}")."
fi

echo
echo "### Tally, permessage-deflate negotiated ($small connections)"
start_tally
conns "$small" "$tally_pid" "ws://127.0.0.1:$tally_port/echo" --compression
kill "$tally_pid"; wait "$tally_pid" 2>/dev/null || true

echo
echo "### Tally over TLS (wss://, self-signed certificate; $small connections)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=localhost \
  -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
start_tally --tls-cert "$work/cert.pem" --tls-key "$work/key.pem"
conns "$small" "$tally_pid" "wss://127.0.0.1:$tally_port/echo" --insecure
kill "$tally_pid"; wait "$tally_pid" 2>/dev/null || true

echo
echo "## Echo round trips"
start_tally
for c in 1 10 100; do
  for comp in --no-compression ""; do
    echo
    label="permessage-deflate"; [ -n "$comp" ] && label="no compression"
    echo "### $c connection(s), 64-byte messages ($label)"
    "$tally" bench echo --url "ws://127.0.0.1:$tally_port/echo" --connections "$c" --messages $((200000 / c)) --size 64 $comp
  done
done
echo
echo "### 10 connections, 64 KiB messages (no compression)"
"$tally" bench echo --url "ws://127.0.0.1:$tally_port/echo" --connections 10 --messages 2000 --size 65536 --no-compression
fi

# Each fan-out or write run starts a fresh broker on a new port, so the client
# ports left in TIME_WAIT (a 4-tuple each) do not collide with later runs; the
# totals here stay far below the ~28,000 loopback ports anyway.
echo
echo "## Fan-out: one publisher, 100 updates/s for 10 s (Tally and Mosquitto, same run)"
subs="100,1000"; [ "$quick" = 1 ] && subs="100"
echo
echo "### Events (Tally publish to a topic; MQTT QoS 0 PUBLISH)"
"$tally" bench fanout --subscribers "$subs" --rate 100 --seconds 10 --mode events
echo
echo "### One record every subscriber follows (Tally set, durable; MQTT retained PUBLISH)"
"$tally" bench fanout --subscribers "$subs" --rate 100 --seconds 10 --mode records
echo
echo "### A record per subscriber, the publisher rotating over them (one delivery per update)"
"$tally" bench fanout --subscribers 100 --rate 100 --seconds 10 --mode record-per-sub

echo
echo "## Durable writes (--durability full): closed loop, each writer waits for its acknowledgement"
echo
echo "### Each writer cycles over its own 1000 records"
"$tally" bench writes --writers 1,10,100 --seconds 10 --durability full
if [ "$quick" = 0 ]; then
  echo
  echo "### Random records among 100,000 shared by all writers"
  "$tally" bench writes --writers 100 --seconds 10 --durability full --records 100000
  echo
  echo "## Start-up with a million records"
  "$tally" bench startup --records 1000000 --starts 3
fi

#!/usr/bin/env bash
# Three Tally hubs on one local PostgreSQL database, to try several hubs
# (docs/scale-out.md) on one machine:
#
#   scripts/cluster.sh start DIR [--base-port P]   prints the three hubs' URLs
#   scripts/cluster.sh stop DIR                    stops them and PostgreSQL, removes DIR
#
# `start` starts a private PostgreSQL server (scripts/pg-test-cluster.sh: trust
# auth on 127.0.0.1, its files in a directory under /tmp named in
# DIR/postgres.dir) and three hubs on 127.0.0.1, ports P, P+1 and P+2 (default
# 8080), the first with --demo (the demo data and its simulator), each naming
# the other two as --peers (the dashboard moves to them). Each hub has
# its own data directory, DIR/hub-N/data; its log is DIR/hub-N/log and its PID
# DIR/hub-N/pid. `stop` stops exactly those processes, by PID, then the
# PostgreSQL server, and removes DIR. DIR must not exist yet (or be empty).
#
# The hubs run $TALLY_BIN when it is set, else a release build made now (as
# scripts/serve.sh does). Works as root: PostgreSQL then runs as `postgres`.
# Exit status: 0 done, 1 it failed (what was started is stopped again), 2 usage.
set -euo pipefail

usage() {
  [ $# -gt 0 ] && echo "cluster.sh: $*" >&2
  echo "usage: $0 start DIR [--base-port P] | stop DIR" >&2
  exit 2
}

repo=$(cd "$(dirname "$0")/.." && pwd)
hubs=3
marker=.tally-cluster
stop_timeout=10  # seconds: a hub's graceful shutdown takes at most 5

[ $# -ge 1 ] || usage "say start or stop"
command=$1
case "$command" in
start | stop) ;;
*) usage "unknown command '$command'" ;;
esac
[ $# -ge 2 ] || usage "$command needs a directory"
dir=$2
shift 2
base=8080
while [ $# -gt 0 ]; do
  case "$1" in
  --base-port)
    [ "$command" = start ] || usage "--base-port is for start"
    [ $# -ge 2 ] || usage "--base-port needs a port number"
    base=$2
    shift 2
    ;;
  --base-port=*)
    [ "$command" = start ] || usage "--base-port is for start"
    base=${1#--base-port=}
    shift
    ;;
  *) usage "unknown option '$1'" ;;
  esac
done
if ! [[ "$base" =~ ^[0-9]{1,5}$ ]] || [ "$base" -lt 1 ] || [ "$base" -gt $((65535 - hubs + 1)) ]; then
  usage "--base-port must be a port number from 1 to $((65535 - hubs + 1)), not '$base'"
fi

# Whether PID is still the hub this cluster started in DIR (a PID the
# system gave to another process since is left alone).
is_our_hub() {
  local pid=$1 hub_dir=$2 argv
  # Not a pipeline into grep -q: with pipefail, tr's SIGPIPE would say no.
  argv=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  grep -qxF "$hub_dir/data" <<<"$argv"
}

# Stops the hubs (SIGTERM to all, then SIGKILL to any still there after
# stop_timeout) and the PostgreSQL server that DIR records, then removes DIR.
stop_all() {
  local pid_file pid waited pids=()
  for pid_file in "$dir"/hub-*/pid; do
    [ -f "$pid_file" ] || continue
    pid=$(cat "$pid_file")
    is_our_hub "$pid" "$(dirname "$pid_file")" || continue
    kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
  done
  # Until each process is gone, not only its command line (which an
  # exiting process loses first).
  for pid in "${pids[@]}"; do
    waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((stop_timeout * 10)) ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "hub $pid did not stop within ${stop_timeout}s: killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  if [ -f "$dir/postgres.dir" ]; then
    bash "$repo/scripts/pg-test-cluster.sh" stop "$(cat "$dir/postgres.dir")" || true
  fi
  rm -rf -- "$dir"
}

if [ "$command" = stop ]; then
  [ -f "$dir/$marker" ] || { echo "$dir was not made by $0 start; not touching it" >&2; exit 1; }
  dir=$(cd "$dir" && pwd)
  stop_all
  exit 0
fi

if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
  echo "$dir exists and is not empty (a cluster runs there? scripts/cluster.sh stop $dir)" >&2
  exit 1
fi
if [ -n "${TALLY_BIN:-}" ]; then
  [ -x "$TALLY_BIN" ] || { echo "TALLY_BIN=$TALLY_BIN is not an executable" >&2; exit 1; }
  tally=$TALLY_BIN
  bash "$repo/scripts/install-deps.sh" cluster
else
  bash "$repo/scripts/install-deps.sh" cluster
  (cd "$repo" && swift build -c release >&2)
  tally=$repo/.build/release/tally
fi

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
touch "$dir/$marker"
# From here on a failure stops what was started.
trap 'echo "cluster.sh: start failed; stopping what it started" >&2; stop_all' ERR

# PostgreSQL's files go under /tmp, which the postgres user can reach
# whatever DIR is (when this runs as root).
pg_dir=$(mktemp -d /tmp/tally-cluster-pg.XXXXXX)
rmdir "$pg_dir"
echo "$pg_dir" >"$dir/postgres.dir"
bash "$repo/scripts/pg-test-cluster.sh" start "$pg_dir" >/dev/null
store=$(bash "$repo/scripts/pg-test-cluster.sh" createdb "$pg_dir" tally | tail -n 1)
echo "$store" >"$dir/store-url"

for i in $(seq 1 $hubs); do
  hub_dir=$dir/hub-$i
  mkdir -p "$hub_dir"
  # The other hubs, for the dashboard to move to (GET /v1/hubs).
  peers=$(for j in $(seq 1 $hubs); do [ "$j" = "$i" ] || echo "ws://127.0.0.1:$((base + j - 1))"; done | paste -sd,)
  extra=(--peers "$peers")
  [ "$i" = 1 ] && extra+=(--demo)
  # setsid: the hub outlives this script and its terminal's signals.
  setsid "$tally" serve --host 127.0.0.1 --port $((base + i - 1)) --data "$hub_dir/data" --store "$store" \
    "${extra[@]}" </dev/null >"$hub_dir/stdout" 2>"$hub_dir/log" &
  echo $! >"$hub_dir/pid"
done

# Each hub prints `tally listening on URL` once it accepts connections.
for i in $(seq 1 $hubs); do
  hub_dir=$dir/hub-$i
  pid=$(cat "$hub_dir/pid")
  for _ in $(seq 300); do
    grep -q '^tally listening on ' "$hub_dir/stdout" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! grep -q '^tally listening on ' "$hub_dir/stdout"; then
    echo "hub $i (port $((base + i - 1))) did not start; its log:" >&2
    tail -n 20 "$hub_dir/log" >&2
    false
  fi
done
trap - ERR

for i in $(seq 1 $hubs); do
  sed -n 's/^tally listening on //p' "$dir/hub-$i/stdout" | head -n 1
done
echo "three hubs on $store (the first with demo data); logs: $dir/hub-N/log;" \
  "stop them with: scripts/cluster.sh stop $dir" >&2

#!/usr/bin/env bash
# A private PostgreSQL server for tests outside Swift (the Python suites),
# the same as TallyTestSupport's PostgresCluster: initdb with trust auth and
# superuser `tally`, on a free 127.0.0.1 port, its socket and log in DIR.
#
#   scripts/pg-test-cluster.sh start DIR          prints postgres://tally@127.0.0.1:PORT/postgres
#   scripts/pg-test-cluster.sh createdb DIR NAME  prints the new database's URL
#   scripts/pg-test-cluster.sh stop DIR           stops the server and removes DIR
#   scripts/pg-test-cluster.sh stop-server DIR    stops the server only (an outage: DIR is kept)
#   scripts/pg-test-cluster.sh start-server DIR   starts it again on the same port
#   scripts/pg-test-cluster.sh sql DIR STATEMENT  runs STATEMENT in database postgres, prints
#                                                 the rows (unaligned, `|` between fields)
#
# DIR must not exist yet (or be empty) and must be reachable by the `postgres`
# user when run as root (PostgreSQL refuses root; its programs then run as
# `postgres` through runuser): a directory under /tmp works. Programs come from
# TALLY_PG_BINDIR, else the newest /usr/lib/postgresql/N/bin, else PATH.
# `stop` only touches a DIR that `start` made (it checks for its marker file).
set -euo pipefail

usage() {
  echo "usage: $0 start DIR | createdb DIR NAME | stop DIR | stop-server DIR | start-server DIR | sql DIR STATEMENT" >&2
  exit 2
}
[ $# -ge 2 ] || usage
command=$1
dir=$2
marker=.tally-pg-test-cluster

find_bindir() {
  if [ -n "${TALLY_PG_BINDIR:-}" ]; then
    [ -x "$TALLY_PG_BINDIR/initdb" ] && [ -x "$TALLY_PG_BINDIR/pg_ctl" ] && { echo "$TALLY_PG_BINDIR"; return; }
    echo "TALLY_PG_BINDIR=$TALLY_PG_BINDIR has no executable initdb and pg_ctl" >&2; exit 1
  fi
  local version
  for version in $(ls /usr/lib/postgresql 2>/dev/null | sort -rn); do
    [ -x "/usr/lib/postgresql/$version/bin/initdb" ] && { echo "/usr/lib/postgresql/$version/bin"; return; }
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"; return
  fi
  echo "PostgreSQL's server programs (initdb, pg_ctl) were not found: apt-get install -y postgresql" \
       "(or scripts/install-deps.sh test), or set TALLY_PG_BINDIR" >&2
  exit 1
}

# Runs a server program as the postgres user when this is root, from DIR.
as_server() {
  if [ "$(id -u)" = 0 ]; then
    (cd "$dir" && runuser -u postgres -- "$@")
  else
    (cd "$dir" && "$@")
  fi
}

# Starts the server of DIR on 127.0.0.1:$1 and waits until it accepts connections.
start_server() {
  as_server "$(find_bindir)/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $1 -k $dir -c listen_addresses=127.0.0.1" start >"$dir/pg_ctl.log" 2>&1
}

# Stops the server of DIR, fast: sessions are terminated at once, as when a
# database machine goes away.
stop_server() {
  as_server "$(find_bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
}

# Says what the server said when it would not start, and exits 1.
start_failed() {
  cat "$dir/pg_ctl.log" >&2
  tail -n 20 "$dir/server.log" >&2 || true
  exit 1
}

# Fails unless DIR is a cluster that `start` made and left running (or stopped, with
# stop-server): its marker and port are there.
require_cluster() {
  [ -f "$dir/$marker" ] && [ -f "$dir/port" ] || { echo "$dir is not a test cluster made by $0 start" >&2; exit 1; }
}

case "$command" in
start)
  [ $# -eq 2 ] || usage
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
    echo "$dir exists and is not empty" >&2; exit 1
  fi
  bindir=$(find_bindir)
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "running as root and there is no postgres user to run PostgreSQL as: apt-get install -y postgresql" >&2; exit 1
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  touch "$dir/$marker"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir"
    if ! runuser -u postgres -- test -w "$dir"; then
      echo "the postgres user cannot write $dir (choose a directory under /tmp)" >&2; exit 1
    fi
  fi
  as_server "$bindir/initdb" -D "$dir/data" -U tally -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # A random port; another one if it was taken.
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    if start_server "$port"; then
      echo "$port" >"$dir/port"
      echo "postgres://tally@127.0.0.1:$port/postgres" | tee "$dir/url"
      exit 0
    fi
    grep -q "could not bind" "$dir/server.log" 2>/dev/null || break
  done
  start_failed
  ;;
createdb)
  [ $# -eq 3 ] || usage
  require_cluster
  port=$(cat "$dir/port")
  "$(find_bindir)/createdb" -h 127.0.0.1 -p "$port" -U tally "$3"
  echo "postgres://tally@127.0.0.1:$port/$3"
  ;;
stop)
  [ $# -eq 2 ] || usage
  [ -f "$dir/$marker" ] || { echo "$dir was not made by $0 start; not touching it" >&2; exit 1; }
  if [ -f "$dir/data/postmaster.pid" ]; then stop_server; fi
  rm -rf -- "$dir"
  ;;
stop-server)
  [ $# -eq 2 ] || usage
  require_cluster
  [ -f "$dir/data/postmaster.pid" ] || { echo "the server of $dir is not running" >&2; exit 1; }
  stop_server
  ;;
start-server)
  [ $# -eq 2 ] || usage
  require_cluster
  [ ! -f "$dir/data/postmaster.pid" ] || { echo "the server of $dir is running already" >&2; exit 1; }
  # The same port, so that clients holding the URL reconnect by themselves.
  start_server "$(cat "$dir/port")" || start_failed
  ;;
sql)
  [ $# -eq 3 ] || usage
  require_cluster
  "$(find_bindir)/psql" -X -q -A -t -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(cat "$dir/port")" -U tally -d postgres -c "$3"
  ;;
*)
  usage
  ;;
esac

# Sourced by the profile-*.sh scripts: runs a release `tally serve` under
# callgrind and reads back its instruction total. Expects $tally (the
# binary) and $work (a scratch directory).

# callgrind_start OUT ARGS... — `tally serve ARGS...` under callgrind writing
# OUT; sets $hub_pid and $hub_port once the hub says it is listening.
callgrind_start() {
  local out=$1
  shift
  valgrind --tool=callgrind --callgrind-out-file="$out" "$tally" serve "$@" \
    >"$work/serve.out" 2>"$work/serve.err" &
  hub_pid=$!
  for _ in $(seq 300); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
  hub_port=$(grep -o '[0-9]*$' "$work/serve.out" | head -1)
}

# callgrind_stop OUT — stops the hub (SIGINT) and prints OUT's instruction total.
callgrind_stop() {
  local out=$1
  # Under valgrind a signal can wait for the next system call: ask until it goes.
  for _ in $(seq 15); do kill -INT "$hub_pid" 2>/dev/null || break; sleep 2; kill -0 "$hub_pid" 2>/dev/null || break; done
  wait "$hub_pid" || true
  : > "$work/serve.out"
  callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

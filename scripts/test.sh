#!/usr/bin/env bash
# Runs every test: the Swift unit and integration tests, then the Python
# interop and protocol-violation suite against the real `websockets` library.
# Installs what it needs (Debian packages, a Python venv with the PyPI packages).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh test

echo "== build"
swift build --build-tests

echo "== swift test"
# TallyPostgresTests run in a process of their own, after the rest: their
# PostgreSQL server and the counter-row test's writers load both cores and the
# loopback, which the other suites' real-time waits need not share.
# TallyStoreTests start a private server in this run too (Backend.postgres),
# for light contract tests: a fresh database per store.
swift test --skip-build --skip TallyPostgresTests

echo "== swift test: TallyPostgresTests (a private PostgreSQL server)"
swift test --skip-build --filter TallyPostgresTests

echo "== fuzz targets: build, replay regressions and seed corpora"
SANITIZERS=fuzzer Fuzz/run.sh regress

echo "== python interop suite"
venv=.build/test-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r Tests/interop/requirements.txt
TALLY_BIN="$PWD/.build/debug/tally" "$venv/bin/python" -m pytest Tests/interop -q -p no:cacheprovider

echo "== the offline mirror suite on two hubs of one PostgreSQL database"
# Every hub those tests start is a pair on a fresh database of a private
# server; the fault proxies forward to the second hub while the tests talk
# to the first, so the mirror's writes cross hubs (Tests/interop/README.md).
pg_dir=$(mktemp -d /tmp/tally-pg-two-hubs.XXXXXX)
trap 'scripts/pg-test-cluster.sh stop "$pg_dir" >/dev/null 2>&1 || true' EXIT
scripts/pg-test-cluster.sh start "$pg_dir" >/dev/null
TALLY_TEST_PG_CLUSTER="$pg_dir" TALLY_TEST_TWO_HUBS=1 TALLY_BIN="$PWD/.build/debug/tally" \
  "$venv/bin/python" -m pytest Tests/interop/test_mirror.py Tests/interop/test_mirror_cli.py -q -p no:cacheprovider
scripts/pg-test-cluster.sh stop "$pg_dir"
trap - EXIT

echo "== browser suite: the dashboard and the JS client in headless Chromium"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r Tests/browser/requirements.txt
TALLY_BIN="$PWD/.build/debug/tally" "$venv/bin/python" -m pytest Tests/browser -q -p no:cacheprovider

# The same JS replay under node, where node is there and has a WebSocket.
if command -v node >/dev/null 2>&1 && node --experimental-websocket -e 'process.exit(typeof WebSocket === "function" ? 0 : 1)' >/dev/null 2>&1; then
  echo "== JS client under node"
  TALLY_BIN="$PWD/.build/debug/tally" node --experimental-websocket --test Clients/js/test/vectors.test.mjs
fi

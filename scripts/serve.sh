#!/usr/bin/env bash
# Builds Tally (release) and runs the hub on 127.0.0.1:8080 with the embedded
# defaults. Extra arguments go to `tally serve` (see `tally serve --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
swift build -c release
exec .build/release/tally serve "$@"

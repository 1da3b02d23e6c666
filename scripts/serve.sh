#!/usr/bin/env bash
# Builds Tally (release) and runs the hub on 127.0.0.1:8080 with the embedded
# defaults and demo data (--demo). Extra arguments go to `tally serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh build
swift build -c release
exec .build/release/tally serve --demo "$@"

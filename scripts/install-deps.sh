#!/usr/bin/env bash
# Installs the Debian packages Tally builds and tests with, when missing.
# Usage: scripts/install-deps.sh [build|cluster|test]
#   cluster adds PostgreSQL's server (scripts/cluster.sh); test adds it and the rest the test suite needs
set -euo pipefail
# libpq-dev: the PostgreSQL client library TallyPostgres links (Sources/CLibPQ).
want=(libssl-dev zlib1g-dev libsqlite3-dev libpq-dev pkg-config openssl)
# Photo analysis and thumbnails (Sources/TallyImaging): libvips decodes (HEIC
# through libheif), ZBar and libdmtx read codes, Tesseract reads label text.
want+=(libvips-dev libheif-dev libzbar-dev libdmtx-dev libtesseract-dev tesseract-ocr-eng)
case "${1:-build}" in
  build|cluster|test) ;;
  *) echo "usage: $0 [build|cluster|test]" >&2; exit 2 ;;
esac
# scripts/cluster.sh runs a private server (initdb, pg_ctl) as the postgres user.
[ "${1:-build}" = cluster ] && want+=(postgresql)
if [ "${1:-build}" = test ]; then
  # TallyPostgresTests start a private server (initdb, pg_ctl) as the postgres
  # user this package creates; its own cluster is not used.
  want+=(postgresql)
  want+=(python3 python3-venv python3-pip)
  # The browser tests (Tests/browser): headless Chromium driven by Selenium.
  want+=(chromium chromium-driver fonts-dejavu-core)
  # The fan-out benchmark's baseline broker (Tests/interop/test_bench.py runs it in miniature).
  want+=(mosquitto)
fi
missing=()
for pkg in "${want[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# python3 may come from elsewhere (pyenv); only ask apt for it when there is none.
if command -v python3 >/dev/null 2>&1 && python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing=("${missing[@]/python3-venv}"); missing=("${missing[@]/python3-pip}"); missing=("${missing[@]/python3}")
fi
pkgs=()
for p in "${missing[@]}"; do [ -n "$p" ] && pkgs+=("$p"); done
if [ ${#pkgs[@]} -gt 0 ]; then
  echo "installing: ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi

#!/usr/bin/env bash
# Builds the libFuzzer targets and runs them for a bounded time.
#
#   Fuzz/run.sh [target] [seconds]     target: FuzzFrameDecoder (or ws),
#                                      FuzzHTTPParser (or http), FuzzJSON (or
#                                      json), FuzzEngine (or engine),
#                                      FuzzImageDecoder (or image), all
#                                      (default); seconds per target, default 60
#   Fuzz/run.sh regress                replays Fuzz/regressions/ and the seed
#                                      corpora once each; exit 1 if any fails
#                                      (a reproducer of a bug the target lists
#                                      as known and open prints "open")
#
# Environment:
#   SANITIZERS=fuzzer,address   what to build with (plain "fuzzer" runs faster, misses memory errors)
#   JOBS=1                      parallel fuzzing processes (the machine has 2 cores)
#   FUZZ_ARGS="..."             extra libFuzzer flags (e.g. -seed=1 -only_ascii=1)
#
# Crashes, timeouts and OOMs are written to Fuzz/artifacts/<target>/ and the
# script exits non-zero. Working corpora grow in Fuzz/corpus-<target>/ (git-
# ignored) and are seeded from Fuzz/corpus-seed/<target>/ (committed). Logs go
# to Fuzz/logs/.
#
# Needs only the Swift toolchain plus the C libraries the main package needs
# (apt-get install -y libssl-dev zlib1g-dev pkg-config libvips-dev libheif-dev
# libzbar-dev libdmtx-dev libtesseract-dev).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

sanitizers="${SANITIZERS:-fuzzer,address}"
jobs="${JOBS:-1}"

# The Swift runtime's own crash backtracer runs after libFuzzer's handler and
# can take a long time; libFuzzer already prints a symbolized stack.
export SWIFT_BACKTRACE="${SWIFT_BACKTRACE:-enable=no}"

resolve() {
    case "$1" in
        FuzzFrameDecoder|ws|frame|websocket) echo FuzzFrameDecoder ;;
        FuzzHTTPParser|http) echo FuzzHTTPParser ;;
        FuzzJSON|json) echo FuzzJSON ;;
        FuzzEngine|engine) echo FuzzEngine ;;
        FuzzImageDecoder|image|images) echo FuzzImageDecoder ;;
        *) echo "unknown target '$1' (FuzzFrameDecoder, FuzzHTTPParser, FuzzJSON, FuzzEngine, FuzzImageDecoder, all, regress)" >&2; exit 2 ;;
    esac
}

max_len() {
    case "$1" in
        FuzzFrameDecoder) echo 4096 ;;
        FuzzHTTPParser) echo 16384 ;;
        FuzzJSON) echo 8192 ;;
        FuzzEngine) echo 4096 ;;
        # Photos: room for the seeds (a few KiB each) and what mutation adds.
        FuzzImageDecoder) echo 65536 ;;
    esac
}

# Seconds one input may take before libFuzzer calls it a hang: the image
# target decodes each input five times through libvips under ASan.
input_timeout() {
    case "$1" in
        FuzzImageDecoder) echo 10 ;;
        *) echo 25 ;;
    esac
}

build() {
    for module in openssl zlib vips zbar libdmtx tesseract; do
        if ! pkg-config --exists "$module" 2>/dev/null; then
            echo "run.sh: pkg-config cannot find $module: apt-get install -y libssl-dev zlib1g-dev pkg-config" \
                "libvips-dev libheif-dev libzbar-dev libdmtx-dev libtesseract-dev" >&2
            exit 2
        fi
    done
    # lld, not the default gold: gold aborts with an internal error
    # (dwarf_reader.cc) linking ASan-instrumented Swift with debug info.
    # SwiftPM names the entry point <target>_main (it links with
    # --defsym main=<target>_main); each target defines it and starts
    # libFuzzer through LLVMFuzzerRunDriver.
    for product in "$@"; do
        echo "== building $product (release, -sanitize=$sanitizers)"
        swift build -c release --product "$product" \
            -Xswiftc "-sanitize=$sanitizers" -Xswiftc -parse-as-library \
            -Xswiftc -g -Xswiftc -use-ld=lld
    done
}

binary() { echo "$here/.build/release/$1"; }

# ASAN_OPTIONS for a target. FuzzImageDecoder: no leak detection, because
# Debian's libdav1d (AVIF, through libheif) leaks 40 bytes on every AVIF
# decode, valid or not (regressions/FuzzImageDecoder/README.md); every
# LeakSanitizer report would be that one.
asan_options() {
    local options="${ASAN_OPTIONS:-}"
    case "$1" in
        FuzzImageDecoder) options="detect_leaks=0${options:+:$options}" ;;
    esac
    echo "$options"
}

all_targets=(FuzzFrameDecoder FuzzHTTPParser FuzzJSON FuzzEngine FuzzImageDecoder)

run_target() {
    local target="$1" seconds="$2"
    local corpus="$here/corpus-$target" seeds="$here/corpus-seed/$target"
    local artifacts="$here/artifacts/$target" logs="$here/logs"
    mkdir -p "$corpus" "$artifacts" "$logs"
    local log="$logs/$target-$(date +%Y%m%d-%H%M%S).log"
    local args=(
        -max_total_time="$seconds"
        -max_len="$(max_len "$target")"
        -timeout="$(input_timeout "$target")"
        -rss_limit_mb=4096
        -artifact_prefix="$artifacts/"
        -print_final_stats=1
    )
    if [ -f "$here/dict/$target.dict" ]; then args+=(-dict="$here/dict/$target.dict"); fi
    if [ "$jobs" -gt 1 ]; then args+=(-jobs="$jobs" -workers="$jobs"); fi
    # shellcheck disable=SC2206
    args+=(${FUZZ_ARGS:-})
    local marker="$logs/.start-$target"
    touch "$marker"
    echo "== fuzzing $target for ${seconds}s (log: ${log#"$here"/})"
    echo "   $(binary "$target") ${args[*]} $corpus $seeds"
    local status=0
    # New inputs go to the first directory only; the seeds stay untouched.
    ASAN_OPTIONS="$(asan_options "$target")" "$(binary "$target")" "${args[@]}" "$corpus" "$seeds" >"$log" 2>&1 || status=$?
    # With -jobs, libFuzzer copies each job's fuzz-N.log into its own output.
    if [ "$jobs" -gt 1 ]; then rm -f fuzz-*.log; fi
    local new
    new=$(find "$artifacts" -type f -newer "$marker")
    grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 || true
    grep -E '^stat::' "$log" || true
    if [ "$status" -ne 0 ] || [ -n "$new" ]; then
        echo "!! $target: libFuzzer exited $status; new artifacts:" >&2
        echo "$new" | sed 's/^/   /' >&2
        grep -E -A3 'Fatal error|ERROR: (libFuzzer|AddressSanitizer)' "$log" | head -20 >&2 || true
        echo "   reproduce: $(binary "$target") <artifact>; minimize: add -minimize_crash=1 -max_total_time=60" >&2
        return 1
    fi
    return 0
}

regress() {
    local failed=0
    mkdir -p "$here/logs"
    build "${all_targets[@]}"
    for target in "${all_targets[@]}"; do
        for input in "$here/regressions/$target"/*; do
            [ -f "$input" ] || continue
            case "$input" in *.md) continue ;; esac
            # Strict: a target that tolerates known open bugs while fuzzing
            # (FuzzEngine's KnownBugs.swift) checks them here. A reproducer
            # that fails only because of a bug on that list is "open" (listed,
            # not a failure, so scripts/test.sh keeps running until the fix
            # lands); any other failure is FAILS.
            if ASAN_OPTIONS="$(asan_options "$target")" TALLY_FUZZ_STRICT=1 "$(binary "$target")" "$input" >/dev/null 2>&1; then
                echo "fixed   $target/$(basename "$input")"
            elif ASAN_OPTIONS="$(asan_options "$target")" "$(binary "$target")" "$input" >/dev/null 2>&1; then
                echo "open    $target/$(basename "$input") (a known open bug: Fuzz/regressions/$target/README.md)"
            else
                echo "FAILS   $target/$(basename "$input")"
                failed=1
            fi
        done
        # The seed corpus, each input once: the targets' checks still hold.
        if ASAN_OPTIONS="$(asan_options "$target")" "$(binary "$target")" -runs=0 "$here/corpus-seed/$target" \
            >"$here/logs/seed-$target.log" 2>&1; then
            echo "ok      $target seed corpus"
        else
            echo "FAILS   $target seed corpus (see Fuzz/logs/seed-$target.log)"
            failed=1
        fi
    done
    return "$failed"
}

main() {
    local which="${1:-all}" seconds="${2:-60}"
    if [ "$which" = regress ]; then regress; return; fi
    local targets=()
    if [ "$which" = all ]; then
        targets=("${all_targets[@]}")
    else
        targets=("$(resolve "$which")")
    fi
    build "${targets[@]}"
    local failed=0
    for target in "${targets[@]}"; do
        run_target "$target" "$seconds" || failed=1
    done
    return "$failed"
}

main "$@"

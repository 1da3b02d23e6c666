"""`tally bench analysis` and `tally bench analysis-fanout` in miniature:
small photos and sub-second rounds on 127.0.0.1. These check what the
commands report (BENCHMARKS.md "Photo analysis"), not how fast anything is.
"""

from __future__ import annotations

import pytest

from synclib import run_tally
from test_bench import markdown_tables

TIMEOUT = 180.0


def test_analysis_times_each_step_and_reads_the_drawn_codes():
    result = run_tally(["bench", "analysis", "--photos", "2", "--formats", "jpeg,png", "--size", "1400x1000"],
                       None, TIMEOUT)
    assert result.rc == 0, result.err
    steps, found, thumbs = markdown_tables(result.out)
    assert steps[0] == ["format", "photo (KiB)", "step", "p50 (ms)", "p95 (ms)", "max (ms)"]
    names = [(row[0], row[2]) for row in steps[1:]]
    for fmt in ("jpeg", "png"):
        for step in ("decode", "zbar", "dmtx", "ocr", "total", "analyze()"):
            assert (fmt, step) in names, result.out
    for row in steps[1:]:
        assert float(row[3]) >= 0 and float(row[4]) >= float(row[3]), row
    # The drawn EAN-13 and Data Matrix are found in every photo.
    assert found[1:] == [["jpeg", "2", "2/2", found[1][3]], ["png", "2", "2/2", found[2][3]]], result.out
    # Thumbnails: each photo format × 2 widths × JPEG and WebP.
    assert [row[:3] for row in thumbs[1:]] == [
        [fmt, width, out] for fmt in ("jpeg", "png") for width in ("256", "1024") for out in ("jpeg", "webp")]


def test_analysis_fanout_prints_idle_and_busy_p99_and_their_ratio():
    result = run_tally(["bench", "analysis-fanout", "--subscribers", "3", "--rate", "20", "--seconds", "1",
                        "--rounds", "1", "--photos", "1", "--wait", "60"], None, TIMEOUT)
    assert result.rc == 0, result.err
    latency, ratio, load = markdown_tables(result.out)
    assert [row[0] for row in latency[1:]] == ["idle", "analysing"]
    assert all(row[3] == "60" for row in latency[1:]), latency  # 20 updates × 3 subscribers, nothing lost
    assert ratio[0][:5] == ["p99 idle (ms)", "p99 analysing (ms)", "ratio", "target", "met"]
    assert ratio[1][2].endswith("×") and ratio[1][3] == "≤ 1.2×"
    # The hub analyses (analysis is on by default): the load says so.
    assert ratio[1][5] == "analysis", result.out
    assert int(load[1][0]) >= 1 and int(load[1][3]) >= 1, load


@pytest.mark.parametrize("args, complaint", [
    (["analysis", "--size", "4000"], "--size takes WIDTHxHEIGHT"),
    (["analysis", "--formats", "gif"], "--formats takes jpeg, webp and/or png"),
    (["analysis-fanout", "--rounds", "0"], "--rounds"),
    (["analysis-fanout", "--seconds", "0"], "--seconds must be more than 0"),
])
def test_analysis_benches_refuse_bad_arguments(args, complaint):
    result = run_tally(["bench", *args], None, 30)
    assert result.rc == 2, result.out
    assert complaint in result.err

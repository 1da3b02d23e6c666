"""`tally bench fanout` in miniature: the brokers take turns in rounds and
each row pools its broker's rounds (README "Benchmarks", BENCHMARKS.md); and
`scripts/device-writes-per-set.py`, which counts a build's device requests
per durable set.

Tiny loads (3 subscribers, 20 updates/s, well under a second per round) on
127.0.0.1: these check what the command reports, not how fast anything is.
Mosquitto is the second broker (scripts/install-deps.sh test installs it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from conftest import REPO, TALLY_BIN
from synclib import run_tally

TIMEOUT = 120.0


def table_rows(out: str) -> dict[tuple[str, str], list[str]]:
    """The result table's data rows by (broker, mode)."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 14 and cells[0] in ("tally", "mosquitto"):
            rows[(cells[0], cells[1])] = cells
    return rows


def fanout(*extra: str):
    return run_tally(["bench", "fanout", "--subscribers", "3", "--rate", "20", "--drain", "1", *extra],
                     None, TIMEOUT)


def test_rounds_are_pooled_into_one_row_per_broker():
    result = fanout("--mode", "records", "--broker", "tally", "--seconds", "1.5", "--rounds", "3")
    assert result.rc == 0, result
    for round_number in (1, 2, 3):
        assert f"round {round_number} of 3" in result.err, result
    rows = table_rows(result.out)
    assert list(rows) == [("tally", "records")], result
    cells = rows[("tally", "records")]
    # 3 rounds of 0.5 s at 20 updates/s, to 3 subscribers: 3 × 10 × 3.
    assert cells[4] == "90" and cells[5] == "90", result
    assert float(cells[11]) > 0, "the hub's CPU time is measured finer than a 10 ms tick"


def test_brokers_alternate_and_the_ratio_is_of_the_pooled_figures():
    result = fanout("--mode", "events", "--seconds", "1", "--rounds", "2")
    assert result.rc == 0, result
    assert "events, 3 subscribers: Tally ÷ Mosquitto by round" in result.err, result
    starts = [line.split()[0] for line in result.err.splitlines() if " pid " in line and "opening" in line]
    assert starts == ["tally", "mosquitto", "tally", "mosquitto"], result.err
    rows = table_rows(result.out)
    tally, mosquitto = rows[("tally", "events")], rows[("mosquitto", "events")]
    assert tally[5] == mosquitto[5] == "60", result
    # The µs cells are rounded to 2 decimals, the ratio is of the unrounded figures.
    ratio = float(tally[12]) / float(mosquitto[12])
    assert tally[13].endswith("×"), result
    assert abs(float(tally[13][:-1]) - ratio) <= 0.01 + 0.01 * ratio, result


@pytest.mark.parametrize("flag", ["0", "-1", "many"])
def test_a_bad_rounds_count_is_refused(flag):
    result = run_tally(["bench", "fanout", "--rounds", flag], None, 15.0)
    assert result.rc == 2, result
    assert "--rounds" in result.err, result
    assert result.out == "", result


def run_device_writes(*args: str) -> subprocess.CompletedProcess:
    script = REPO / "scripts" / "device-writes-per-set.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=TIMEOUT)


def test_device_writes_per_set_prints_one_row_per_binary_and_run():
    # Beside the build, which is on a disk; the temporary directory may be a tmpfs.
    with tempfile.TemporaryDirectory(dir=REPO / ".build") as parent:
        result = run_device_writes(str(TALLY_BIN), "--sets", "5", "--rate", "50", "--repeat", "2", "--dir", parent)
        assert result.returncode == 0, result
        rows = [line for line in result.stdout.splitlines() if line.startswith(f"| {TALLY_BIN} |")]
        assert len(rows) == 2, result.stdout
        for row in rows:
            writes, discards, flushes = (float(cell) for cell in row.strip("|").split("|")[2:])
            assert writes >= 1, "every durable set is written to the device before it is acknowledged"
            assert discards >= 0 and flushes >= 0, row
        assert os.listdir(parent) == [], "the hubs' data directories are removed"


@pytest.mark.parametrize("args, complaint", [
    (["--sets", "0"], "--sets"),
    (["--dir", "/dev/shm"], "pass --dir on a disk"),
    (["/nonexistent/tally"], "is not an executable"),
])
def test_device_writes_per_set_refuses_bad_arguments(args, complaint):
    binaries = [] if args[0].startswith("/nonexistent") else [str(TALLY_BIN)]
    result = run_device_writes(*binaries, *args)
    assert result.returncode == 2, result
    assert complaint in result.stderr, result.stderr
    assert "| binary |" not in result.stdout

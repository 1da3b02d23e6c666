"""The stage timing of a workflow's stats record (PROTOCOL.md, "Stats
records": `stageTime[stage].enteredSum`, `finished`), recounted from the
workflow's records, for tests that compare the two."""

from __future__ import annotations

HOUR_MS = 3_600_000
HOURS = 24


def entered(record: dict) -> int:
    """When the record entered its stage: its history's last time."""
    history = record["data"].get("history") or []
    return history[-1]["time"] if history else record["created"]


def recount_timing(records: list[dict], stages: list[str], terminal: set[str]) -> tuple[dict, dict]:
    """(enteredSum per open stage that holds records, `finished`) as the hub
    should have them for ``records``."""
    sums: dict[str, int] = {}
    for record in records:
        stage = record["data"]["stage"]
        if stage not in terminal:
            sums[stage] = sums.get(stage, 0) + entered(record)
    finishes = [(entry["to"], entry["time"]) for record in records
                for entry in record["data"].get("history") or [] if entry.get("to") in terminal]
    last = max(time for _, time in finishes) // HOUR_MS * HOUR_MS if finishes else None
    finished: dict = {"hour": last}
    for stage in stages:
        if stage not in terminal:
            continue
        counts = [0] * HOURS
        for to, time in finishes:
            index = HOURS - 1 - (last - time // HOUR_MS * HOUR_MS) // HOUR_MS
            if to == stage and index >= 0:
                counts[index] += 1
        finished[stage] = counts
    return sums, finished


def assert_timing_matches(stats: dict, records: list[dict], stages: list[str], terminal: set[str], where: str = "") -> None:
    sums, finished = recount_timing(records, stages, terminal)
    written = {stage: figures["enteredSum"] for stage, figures in stats["stageTime"].items() if "enteredSum" in figures}
    assert written == sums, (where, written, sums)
    assert stats["finished"] == finished, (where, stats["finished"], finished)

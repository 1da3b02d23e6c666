"""The JS client (Clients/js/tally.js) in a real browser: every file in
Protocol/vectors/ is replayed through it inside headless Chromium, each
against a fresh hub (empty store, so the vector's seqs are exact) that also
serves the page (Clients/js/test/vectors.html, same origin), by
Clients/js/test/replay.js. Then the client's API checks
(Clients/js/test/client-checks.js) run on a fresh hub: subscription state
against fresh reads, errors, idempotency, and a dropped connection that
resumes from the last seen seq.

The same two run under node too (Clients/js/test/vectors.test.mjs) where
node has a WebSocket; this is the run CI relies on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, wait_until

VECTORS = sorted((REPO / "Protocol" / "vectors").glob("*.json"))


def open_test_page(driver, server) -> None:
    driver.get(server.url("/js/test/vectors.html"))
    wait_until("the test page's modules", lambda: driver.execute_script("return window.replayReady === true"))


def run_async(driver, call: str, *args):
    """Runs ``call`` (a promise-returning expression over ``args``) in the page."""
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        f"Promise.resolve().then(() => {call}).then(done, (e) => done({{ok: false, problems: [String(e && e.stack || e)]}}));",
        *args)


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_vector_replays_through_the_js_client(path: Path, hubs, module_browser, tmp_path):
    vector = json.loads(path.read_text())
    server = hubs("--data", str(tmp_path / "data"))
    open_test_page(module_browser, server)
    result = run_async(module_browser, "window.replayVector(arguments[0])", vector)
    assert result["ok"], f"{path.name}:\n" + "\n".join(result["problems"]) + \
        "\ntranscript (latest last):\n" + "\n".join(result.get("transcript", [])[-25:])


def test_vectors_exist():
    assert len(VECTORS) >= 30, VECTORS


def test_client_api_checks(hubs, module_browser, tmp_path):
    server = hubs("--data", str(tmp_path / "data"))
    open_test_page(module_browser, server)
    result = run_async(module_browser, "window.runClientChecks()")
    assert result["ok"], "\n".join(result["problems"]) + f"\npassed: {result.get('passed')}"
    assert len(result["passed"]) >= 10, result["passed"]

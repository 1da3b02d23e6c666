"""Fixtures for the browser tests: hubs that serve the dashboard, and
headless Chromium (Debian's `chromium` + `chromium-driver`) driven by
Selenium.

Hubs come from the interop suite's fixtures (Tests/interop/conftest.py,
loaded under another module name so both suites can run): 127.0.0.1 only,
port 0 unless a test asks for a port, data in a temporary directory, stopped
by PID. Every hub here runs with `--web <repo>/Clients`. Hubs that share a
PostgreSQL database take `--store` with the interop suite's `pg_database`
(a fresh database of a private server, `pg_server`).

Browsers: one chromedriver (and its Chromium) per `browser()` call, with its
own profile directory under tmp_path; each is quit at teardown, and the
chromedriver process is killed by its PID if quitting did not end it.
Selenium Manager is kept offline: the driver and the browser are given by
path ($CHROMEDRIVER, $CHROMIUM; default /usr/bin/chromedriver,
/usr/bin/chromium), so nothing is downloaded.

Screenshots go to $TALLY_ARTIFACTS (default <repo>/.build/artifacts).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

os.environ.setdefault("SE_OFFLINE", "true")
os.environ.setdefault("SE_AVOID_STATS", "true")

from selenium import webdriver  # noqa: E402  (Tests/browser/requirements.txt)
from selenium.webdriver.chrome.service import Service  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "Clients"
ARTIFACTS = Path(os.environ.get("TALLY_ARTIFACTS", REPO / ".build" / "artifacts"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 10.0  # seconds: the longest any single UI wait may take

_spec = importlib.util.spec_from_file_location("tally_interop_conftest", REPO / "Tests" / "interop" / "conftest.py")
interop = importlib.util.module_from_spec(_spec)
sys.modules["tally_interop_conftest"] = interop
_spec.loader.exec_module(interop)
TALLY_BIN = interop.TALLY_BIN
# A private PostgreSQL server per module and a fresh database per test, for
# hubs that share one (the interop suite's fixtures, clusterlib.PgServer).
pg_server = interop.pg_server
pg_database = interop.pg_database


class Hubs(interop.TallyFactory):
    """`hubs(*args)` starts a hub serving the dashboard;
    `hubs.restart_same_port(server)` stops it (SIGTERM) and starts it again
    on the same port and data directory."""

    def __call__(self, *args: str, tls: bool = False):
        return super().__call__("--web", str(CLIENTS), *args, tls=tls)

    def stop(self, server) -> None:
        code = server.stop()
        if code != 0:
            pytest.fail(f"tally did not stop cleanly (exit {code}); stderr:\n{server.stderr()[-3000:]}")

    def start_again(self, server, *extra: str):
        """A new hub on ``server``'s port and data directory (``server`` must
        be stopped), with ``extra`` arguments added. The port was just freed;
        retried briefly in case the kernel still holds it."""
        deadline = time.monotonic() + 5
        while True:
            try:
                return self._start([*server.serve_args, *extra, "--port", str(server.port)], server.data_dir)
            except pytest.fail.Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


@pytest.fixture
def hubs(tmp_path, request):
    factory = Hubs(tmp_path, request)
    yield factory
    factory.finish()


def http_json(server, method: str, path: str, body=None, token: str | None = None):
    """(status, parsed JSON body) of a REST request to ``server``."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url(path), data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def cli(server, *args: str, token: str | None = None) -> str:
    """Runs `tally ARGS --server URL` (bounded); its standard output."""
    env = {k: v for k, v in os.environ.items() if k not in ("TALLY_URL", "TALLY_SERVER", "TALLY_TOKEN")}
    if token:
        env["TALLY_TOKEN"] = token
    result = subprocess.run([str(TALLY_BIN), *args, "--server", server.url("/")], capture_output=True, text=True,
                            timeout=30, env=env, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"tally {' '.join(args)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def wait_until(what: str, condition, timeout: float = WAIT, interval: float = 0.02):
    """Polls ``condition`` until it returns something truthy (returned);
    fails after ``timeout`` seconds saying what it waited for."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as error:  # a stale element while the board redraws, say
            last_error = error
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}"
                        + (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(interval)


class Browsers:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.drivers: list[tuple[webdriver.Chrome, Service]] = []

    def __call__(self, width: int = 1280, height: int = 900) -> webdriver.Chrome:
        for path in (CHROMIUM, CHROMEDRIVER):
            if not Path(path).exists():
                pytest.fail(f"{path} is missing: scripts/install-deps.sh test installs chromium and chromium-driver")
        index = len(self.drivers)
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         f"--window-size={width},{height}", f"--user-data-dir={self.tmp_path / f'profile-{index}'}",
                         "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                         "--disable-background-networking", "--disable-component-update", "--disable-sync",
                         "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                         "--disable-backgrounding-occluded-windows", "--remote-debugging-port=0",
                         "--force-color-profile=srgb", "--hide-scrollbars", "--lang=en-US"):
            options.add_argument(argument)
        service = Service(executable_path=CHROMEDRIVER, log_output=str(self.tmp_path / f"chromedriver-{index}.log"))
        driver = webdriver.Chrome(options=options, service=service)
        driver.set_page_load_timeout(30)
        driver.set_script_timeout(120)
        self.drivers.append((driver, service))
        return driver

    def quit_all(self) -> None:
        for driver, service in self.drivers:
            try:
                driver.quit()
            except Exception:
                pass
            process = getattr(service, "process", None)
            if process is not None and process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(5)
        self.drivers.clear()


@pytest.fixture
def browser(tmp_path):
    """Call for a new headless Chromium (``browser(width, height)``)."""
    browsers = Browsers(tmp_path)
    yield browsers
    browsers.quit_all()


@pytest.fixture(scope="module")
def module_browser(tmp_path_factory):
    browsers = Browsers(tmp_path_factory.mktemp("browser"))
    yield browsers()
    browsers.quit_all()


def save_screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), f"could not save {path}"
    return path


def save_full_page(driver, name: str, width: int | None = None) -> Path:
    """A screenshot of the whole page (the window grown to its height)."""
    height = driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)")
    size = driver.get_window_size()
    driver.set_window_size(width or size["width"], min(max(height, 600), 4000))
    try:
        return save_screenshot(driver, name)
    finally:
        driver.set_window_size(size["width"], size["height"])


def copy_artifact(path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)

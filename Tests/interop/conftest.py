"""Fixtures: start and stop `tally serve`, and a throwaway TLS certificate.

The binary comes from $TALLY_BIN (default: <repo>/.build/debug/tally; build
it with `swift build`). Servers bind 127.0.0.1 on a free port. Each server is
stopped by the PID we started (SIGTERM, then SIGKILL after a bounded wait).
Each server stores its data in its own temporary directory (`--data`), and
runs with a temporary directory as its cwd, so nothing lands in the repo.
With TALLY_TEST_PG_CLUSTER the stores are PostgreSQL databases instead, and
with TALLY_TEST_TWO_HUBS as well each server is a pair of hubs on one
database (see below).
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import signal
import ssl
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[2]
TALLY_BIN = Path(os.environ.get("TALLY_BIN", REPO / ".build" / "debug" / "tally"))
HOST = "127.0.0.1"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 8.0  # the server's close timeout is 5 s
LISTENING = re.compile(r"^tally listening on (https?)://127\.0\.0\.1:(\d+)$")


@dataclass
class TallyServer:
    process: subprocess.Popen
    scheme: str
    host: str
    port: int
    stderr_path: Path
    args: list[str] = field(default_factory=list)  # the whole argv
    serve_args: list[str] = field(default_factory=list)  # what the test asked for
    data_dir: Path | None = None
    exit_code: int | None = None
    # The second hub of a pair on one database (TALLY_TEST_TWO_HUBS): stopped
    # with this one, and what a fault proxy in front of this one forwards to.
    partner: "TallyServer | None" = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    def url(self, path: str = "/") -> str:
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    def ws_url(self, path: str = "/echo") -> str:
        return f"{'wss' if self.tls else 'ws'}://{self.host}:{self.port}{path}"

    @property
    def proxy_address(self) -> tuple[str, int]:
        """Where a fault proxy put in front of this hub forwards to: the
        second hub of a pair (faultproxy.py), else this one."""
        hub = self.partner or self
        return (hub.host, hub.port)

    def stderr(self) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            text = ""
        if self.partner:
            text += f"\n--- the second hub of the pair ({self.partner.url()}):\n" + self.partner.stderr()[-3000:]
        return text

    def alive(self) -> bool:
        return self.process.poll() is None and (self.partner is None or self.partner.alive())

    def send_signal(self, sig: int) -> None:
        """Signals our process, by PID."""
        assert self.process.poll() is None, "tally is not running"
        os.kill(self.process.pid, sig)

    def wait(self, timeout: float = STOP_TIMEOUT) -> int:
        """Waits (bounded) for the process to exit by itself; its exit code."""
        self.exit_code = self.process.wait(timeout)
        return self.exit_code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT) -> int:
        """Signals our process (by PID) and waits; SIGKILL if it hangs.
        Returns the exit code (negative: killed by that signal). A pair's
        second hub gets the same signal after the first; the first nonzero
        code of the two is returned."""
        code = self._stop_process(sig, timeout)
        if self.partner:
            second = self.partner.stop(sig, timeout)
            self.exit_code = code = code or second
        return code

    def _stop_process(self, sig: int, timeout: float) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT)
        self.exit_code = self.process.returncode
        if self.process.stdout:
            self.process.stdout.close()
        return self.exit_code

    def kill(self) -> int:
        """SIGKILL by PID (a crash: nothing is flushed), then reap it."""
        return self.stop(signal.SIGKILL)


_data_flag_supported: bool | None = None


def data_flag_supported() -> bool:
    """Whether this binary's `tally serve` takes --data (asked once, from
    `tally serve --help`): the transport-only hub refuses unknown options."""
    global _data_flag_supported
    if _data_flag_supported is None:
        try:
            result = subprocess.run([str(TALLY_BIN), "serve", "--help"], stdin=subprocess.DEVNULL,
                                    capture_output=True, timeout=START_TIMEOUT)
            _data_flag_supported = b"--data" in result.stdout + result.stderr
        except (OSError, subprocess.TimeoutExpired):
            _data_flag_supported = False
    return _data_flag_supported


# TALLY_TEST_PG_CLUSTER=DIR (a server from `scripts/pg-test-cluster.sh start
# DIR`): every hub these tests start keeps its store in PostgreSQL, one
# database per data directory (so a restart finds its data), instead of SQLite.
PG_CLUSTER = os.environ.get("TALLY_TEST_PG_CLUSTER")

# TALLY_TEST_TWO_HUBS=1, with TALLY_TEST_PG_CLUSTER: each of those hubs is a
# pair, two `tally serve` on the one database. The test talks to the first
# (its URL, its REST and WebSocket connections); a fault proxy put in front
# of it forwards to the second (`proxy_address`), so what goes through the
# proxy — the offline mirror's traffic in test_mirror.py — crosses hubs. The
# pair is stopped, killed and restarted together.
TWO_HUBS = os.environ.get("TALLY_TEST_TWO_HUBS") == "1"
if TWO_HUBS and not PG_CLUSTER:
    raise RuntimeError("TALLY_TEST_TWO_HUBS=1 needs TALLY_TEST_PG_CLUSTER=DIR (scripts/pg-test-cluster.sh start DIR)")


# A test of the SQLite store itself (its file, its backups, its migrations
# from an old file, a full disk under it): not run when hubs use PostgreSQL.
sqlite_only = pytest.mark.skipif(bool(PG_CLUSTER), reason="tests the SQLite store's own file")


def pg_database_for(data_dir: Path) -> str:
    """The URL of the database that stands for ``data_dir`` (made once)."""
    name = "d_" + hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:20]
    made = subprocess.run(["bash", str(REPO / "scripts" / "pg-test-cluster.sh"), "createdb", PG_CLUSTER, name],
                          capture_output=True, text=True, timeout=60)
    if made.returncode != 0 and "already exists" not in made.stderr:
        pytest.fail(f"cannot create the database for {data_dir}: {made.stderr}")
    port = (Path(PG_CLUSTER) / "port").read_text().strip()
    return f"postgres://tally@127.0.0.1:{port}/{name}"


def start_tally(args: list[str], stderr_path: Path, data_dir: Path | None = None) -> TallyServer:
    """Starts `tally serve` on 127.0.0.1, port 0, and waits for its listening
    line. Unless ``args`` has its own --data, the store goes to ``data_dir``
    (default: beside ``stderr_path``), never to ./tally-data in the repo: the
    process also runs with the stderr file's directory as its cwd."""
    if not TALLY_BIN.is_file():
        pytest.fail(f"tally binary not found at {TALLY_BIN}: run `swift build` or set TALLY_BIN")
    serve_args = list(args)
    if "--data" in serve_args:
        data_dir = Path(serve_args[serve_args.index("--data") + 1])
        extra = []
    else:
        data_dir = data_dir or stderr_path.with_name(stderr_path.name.removesuffix(".stderr") + ".data")
        data_dir.mkdir(parents=True, exist_ok=True)
        extra = ["--data", str(data_dir)] if data_flag_supported() else []
    store = None
    if PG_CLUSTER and "--store" not in serve_args and str(data_dir) != ":memory:":
        store = pg_database_for(data_dir)
        extra += ["--store", store]
    server = spawn_tally([*extra, *serve_args], stderr_path, serve_args, data_dir)
    if TWO_HUBS and store:
        try:
            server.partner = spawn_tally(["--data", str(partner_data_dir(data_dir)), "--store", store,
                                          *partner_args(serve_args)],
                                         stderr_path.with_name(stderr_path.name + ".second"), [], None)
        except BaseException:
            server.kill()
            raise
    return server


def settle(server: TallyServer, timeout: float = 10.0) -> None:
    """Until ``server`` has applied every change its pair's second hub has:
    what a client wrote through the second (a fault proxy) is then in the
    first's reads too, as it is at once on a lone hub (a no-op there). A
    hub's reads are as fresh as the last notification it heard
    (docs/scale-out.md, "Reads wait for writes in flight")."""
    if server.partner is None:
        return
    from synclib import rest, wait_until

    def head(hub) -> int:
        response = rest(hub, "GET", "/v1/changes?since=0&limit=1")
        assert response.status == 200, (response.status, response.body[:300])
        return response.json()["seq"]

    target = head(server.partner)
    wait_until(lambda: head(server) >= target, timeout, f"{server.url()} to apply the second hub's seq {target}")


def partner_data_dir(data_dir: Path) -> Path:
    """The second hub's data directory (only its lock: the store is the
    database): beside the first's."""
    directory = Path(str(data_dir) + ".second")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def partner_args(serve_args: list[str]) -> list[str]:
    """The first hub's arguments for the second, without its port, data
    directory, name and demo (one simulator is enough for a database)."""
    out, skip = [], False
    for arg in serve_args:
        if skip:
            skip = False
        elif arg in ("--port", "--data", "--demo-interval", "--hub-name"):
            skip = True
        elif arg != "--demo":
            out.append(arg)
    return out


def spawn_tally(args: list[str], stderr_path: Path, serve_args: list[str], data_dir: Path | None) -> TallyServer:
    """`tally serve --host 127.0.0.1 --port 0 ARGS…` (a later --port wins),
    once it printed its listening line."""
    argv = [str(TALLY_BIN), "serve", "--host", HOST, "--port", "0", *args]
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=stderr, cwd=stderr_path.parent)
    deadline = time.monotonic() + START_TIMEOUT
    line = b""
    fd = process.stdout.fileno()
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    match = LISTENING.match(line.decode(errors="replace").rstrip("\n"))
    if not match:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT)
        process.stdout.close()
        pytest.fail(f"`{' '.join(argv)}` did not print the listening line within {START_TIMEOUT}s "
                    f"(got {line!r}, exit {process.returncode}); stderr:\n"
                    f"{stderr_path.read_text(errors='replace')}")
    return TallyServer(process, match.group(1), HOST, int(match.group(2)), stderr_path, argv,
                       serve_args, data_dir)


@contextmanager
def tally_process(args: list[str], stderr_path: Path):
    """A running `tally serve` for the block; stopped (by PID) after it."""
    server = start_tally(args, stderr_path)
    try:
        yield server
    finally:
        server.stop()


class TallyFactory:
    """Starts servers for one test (see the `tally_factory` fixture) and
    restarts them on the same data directory."""

    def __init__(self, tmp_path: Path, request):
        self.tmp_path = tmp_path
        self.request = request
        self.started: list[TallyServer] = []

    def __call__(self, *args: str, tls: bool = False) -> TallyServer:
        argv = list(args)
        if tls:
            cert, key = self.request.getfixturevalue("tls_cert")
            argv += ["--tls-cert", str(cert), "--tls-key", str(key)]
        return self._start(argv, None)

    def _start(self, argv: list[str], data_dir: Path | None) -> TallyServer:
        server = start_tally(argv, self.tmp_path / f"tally-{len(self.started)}.stderr", data_dir)
        self.started.append(server)
        return server

    def restart(self, server: TallyServer, *, kill: bool = False) -> TallyServer:
        """Stops ``server`` (SIGTERM, which must succeed; or SIGKILL with
        ``kill``) and starts a new one with the same arguments on the same
        data directory. The new one listens on a new port."""
        if kill:
            server.kill()
        elif server.exit_code is None:
            died = not server.alive()
            code = server.stop()
            if died or code != 0:
                pytest.fail(f"tally {'had died' if died else 'failed to stop'} before the restart "
                            f"(exit {code}); stderr:\n{server.stderr()[-4000:]}")
        return self._start(server.serve_args, server.data_dir)

    def finish(self) -> None:
        problems = []
        for server in self.started:
            if server.exit_code is None and not server.alive():
                problems.append((server, f"tally exited on its own with status "
                                         f"{server.process.returncode} during the test"))
            if server.exit_code is None:
                # Every test ends with a graceful shutdown, which must succeed.
                code = server.stop()
                if code != 0 and not problems:
                    problems.append((server, f"SIGTERM at teardown: exit status {code}, not 0 "
                                             f"(-9: it hung for {STOP_TIMEOUT:.0f} s and was killed)"))
        if problems:
            server, message = problems[0]
            pytest.fail(f"{message}; stderr:\n{server.stderr()[-4000:]}")


@pytest.fixture
def tally_factory(tmp_path, request):
    """Call with extra `tally serve` arguments (``tls=True`` adds the test
    certificate); returns a running TallyServer with its own data directory
    under tmp_path (unless the arguments name one with --data).
    ``tally_factory.restart(server)`` restarts it on the same data. All are
    stopped at teardown, and a server that died on its own during the test
    fails the test."""
    factory = TallyFactory(tmp_path, request)
    yield factory
    factory.finish()


@pytest.fixture
def tally(tally_factory) -> TallyServer:
    """A plain-HTTP server with default options."""
    return tally_factory()


@pytest.fixture(scope="module")
def module_tally(tmp_path_factory, request):
    """One default server shared by a module's tests (for many small cases
    that each check they changed nothing). Fails the module's last test's
    teardown if it died on its own."""
    factory = TallyFactory(tmp_path_factory.mktemp("tally-module"), request)
    server = factory()
    yield server
    factory.finish()


# --------------------------------------------------------------------------
# PostgreSQL and several hubs on it (clusterlib.py)


@pytest.fixture(scope="module")
def pg_server():
    """A private PostgreSQL server for the module (clusterlib.PgServer),
    which its tests may stop and start; removed at the module's end."""
    from clusterlib import PgServer
    server = PgServer.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def pg_database(pg_server, request) -> str:
    """The URL of a fresh database of ``pg_server`` for one test."""
    from clusterlib import database_name
    return pg_server.createdb(database_name(request.node.name))


@pytest.fixture
def hub_cluster(pg_server, pg_database, tally_factory):
    """Call with a number of hubs (and extra `tally serve` arguments):
    returns a clusterlib.HubCluster of that many hubs on one fresh database,
    each with its own data directory. At teardown the PostgreSQL server is
    started again if a test left it stopped, before the hubs are stopped
    (each must then exit 0, as with `tally_factory`)."""
    from clusterlib import HubCluster

    def start(count: int = 3, *args: str) -> HubCluster:
        return HubCluster(pg_server, pg_database, [tally_factory("--store", pg_database, *args) for _ in range(count)])

    yield start
    if not pg_server.running:
        pg_server.start_server()


@pytest.fixture
def load_factory():
    """Makes clusterlib.Loads (its arguments); closes them at teardown, even
    when the test failed."""
    from clusterlib import Load
    made: list[Load] = []

    def make(*args, **kwargs) -> Load:
        load = Load(*args, **kwargs)
        made.append(load)
        return load

    yield make
    for load in made:
        load.close()


@pytest.fixture
def sync_client(request):
    """Opens synclib.SyncClient connections (``sync_client(server, **options)``)
    that are closed at teardown, even when the test fails."""
    from synclib import SyncClient
    opened = []

    def open_client(server, **options):
        client = SyncClient(server, **options)
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


# --------------------------------------------------------------------------
# TLS


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory) -> tuple[Path, Path]:
    """(cert.pem, key.pem): a self-signed P-256 certificate for 127.0.0.1
    and localhost, made once per session with the openssl CLI."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=30)
    return cert, key


@pytest.fixture(scope="session")
def client_ssl_context(tls_cert) -> ssl.SSLContext:
    """Trusts only the test certificate; verifies the IP SAN."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(tls_cert[0]))
    return context


@pytest.fixture(scope="session")
def server_ssl_context(tls_cert) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls_cert[0]), str(tls_cert[1]))
    return context

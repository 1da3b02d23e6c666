"""The dashboard's files over HTTP (no browser): `/`, `/app/…` and `/js/…`
with their types and validators, 304 on a matching If-None-Match, HEAD,
and nothing outside Clients/web and Clients/js (`..` in any spelling,
hidden files, symlinks are not followed out). Also: `--web` must name a
Clients directory, and without one no dashboard is served."""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess

import pytest

from conftest import CLIENTS, TALLY_BIN


def fetch(server, path: str, method: str = "GET", headers: dict | None = None):
    connection = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path, file, kind", [
    ("/", "web/index.html", "text/html; charset=utf-8"),
    ("/mine", "web/mine.html", "text/html; charset=utf-8"),
    ("/mine.html", "web/mine.html", "text/html; charset=utf-8"),
    ("/app/app.js", "web/app.js", "text/javascript; charset=utf-8"),
    ("/app/style.css", "web/style.css", "text/css; charset=utf-8"),
    ("/js/tally.js", "js/tally.js", "text/javascript; charset=utf-8"),
    ("/js/path.js", "js/path.js", "text/javascript; charset=utf-8"),
])
def test_files_with_type_and_validator(hubs, path, file, kind):
    server = hubs()
    status, headers, body = fetch(server, path)
    assert status == 200, (status, body[:200])
    assert headers["content-type"] == kind
    assert body == (CLIENTS / file).read_bytes()
    assert headers["cache-control"] == "no-cache" and headers["x-content-type-options"] == "nosniff"
    etag = headers["etag"]
    status, again, body = fetch(server, path, headers={"If-None-Match": etag})
    assert status == 304 and body == b"" and again["etag"] == etag
    status, head, body = fetch(server, path, "HEAD")
    assert status == 200 and body == b"" and int(head["content-length"]) == (CLIENTS / file).stat().st_size
    if kind.startswith("text/html"):
        assert "default-src 'self'" in headers["content-security-policy"]


@pytest.mark.parametrize("path", [
    "/app/../../README.md", "/app/..%2f..%2fREADME.md", "/app/%2e%2e/%2e%2e/README.md", "/js/../web/index.html",
    "/app/./index.html", "/app//index.html", "/app/.hidden", "/js/%00tally.js", "/app/missing.js", "/app/",
    "/app", "/js/test", "/index.html", "/app/..\\..\\README.md",
])
def test_nothing_outside_the_dashboard(hubs, path):
    server = hubs()
    status, headers, body = fetch(server, path)
    assert status in (400, 404), (path, status, body[:200])
    assert b"Tally" not in body and b"import" not in body, path


def test_web_must_name_a_clients_directory(tmp_path):
    result = subprocess.run([str(TALLY_BIN), "serve", "--port", "0", "--data", ":memory:", "--web", str(tmp_path)],
                            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result
    assert "--web" in result.stderr and "index.html" in result.stderr


def test_posts_are_not_files(hubs):
    server = hubs()
    status, headers, _ = fetch(server, "/js/tally.js", "POST")
    assert status == 405 and "GET" in headers["allow"]


def serve_from(cwd, data_dir, binary=TALLY_BIN):
    """`tally serve` (no --web) run in ``cwd``; (process, port)."""
    process = subprocess.Popen([str(binary), "serve", "--host", "127.0.0.1", "--port", "0", "--data", str(data_dir)],
                               cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = process.stdout.readline().decode()  # the listening line comes first, at once
    assert line.startswith("tally listening on http://127.0.0.1:"), (line, process.poll())
    return process, int(line.strip().rsplit(":", 1)[1])


class Address:
    def __init__(self, port):
        self.host, self.port = "127.0.0.1", port


def stop(process):
    process.terminate()  # our own child, by PID
    try:
        process.wait(8)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(8)
    process.stdout.close()
    process.stderr.close()


def test_default_web_directory_from_the_working_directory(tmp_path):
    """Without --web the hub looks for Clients/ above its working directory."""
    process, port = serve_from(CLIENTS / "web", tmp_path / "data")
    try:
        status, headers, body = fetch(Address(port), "/")
        assert status == 200 and body == (CLIENTS / "web" / "index.html").read_bytes()
    finally:
        stop(process)


def test_default_web_directory_beside_the_binary(tmp_path):
    """…and above its executable (`.build/debug/tally` in a checkout): the
    binary is linked into a checkout-shaped directory of its own, so this
    holds wherever TALLY_BIN was built."""
    checkout = tmp_path / "checkout"
    binary = checkout / ".build" / "debug" / "tally"
    binary.parent.mkdir(parents=True)
    (checkout / "Clients").symlink_to(CLIENTS)
    try:
        os.link(TALLY_BIN.resolve(), binary)
    except OSError:  # another filesystem
        shutil.copy2(TALLY_BIN.resolve(), binary)
    process, port = serve_from(tmp_path, tmp_path / "data", binary)
    try:
        status, _, body = fetch(Address(port), "/js/tally.js")
        assert status == 200 and body == (CLIENTS / "js" / "tally.js").read_bytes()
    finally:
        stop(process)

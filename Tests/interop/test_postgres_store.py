"""`tally serve --store postgres://…`: the hub keeps its records, lists and
change log in PostgreSQL (a private server started by
scripts/pg-test-cluster.sh, the `pg_server` fixture), and loses nothing
across a restart or a kill."""
import json
import subprocess
import urllib.request

from conftest import TALLY_BIN


def cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(TALLY_BIN), *args, "--server", server.ws_url("/v1/ws")],
                          capture_output=True, text=True, timeout=30)


def get_json(server, path: str):
    with urllib.request.urlopen(server.url(path), timeout=10) as response:
        return json.load(response)


def test_records_lists_and_the_log_survive_a_restart_and_a_kill(tally_factory, pg_database):
    store_url = pg_database
    hub = tally_factory("--store", store_url)
    started = next(line for line in hub.stderr().splitlines() if "event=server.started" in line)
    assert f"store={store_url}" in started and "durability=" not in started, started
    assert cli(hub, "set", "items/drill-01", '{"name":"Drill","stock":5}').returncode == 0
    assert cli(hub, "set", "items/drill-01", "stock", "7").returncode == 0
    for entry in ["a", "b", "c"]:
        assert cli(hub, "list", "add", "orders/open", entry).returncode == 0
    before = get_json(hub, "/v1/changes?since=0")
    assert [c["seq"] for c in before["changes"]] == [1, 2, 3, 4, 5]

    hub = tally_factory.restart(hub)
    assert json.loads(cli(hub, "get", "items/drill-01").stdout) == {"name": "Drill", "stock": 7}
    after = get_json(hub, "/v1/changes?since=2")
    assert after["changes"] == before["changes"][2:], "the log resumes byte for byte"

    assert cli(hub, "set", "items/drill-01", "stock", "8").returncode == 0
    hub = tally_factory.restart(hub, kill=True)
    assert json.loads(cli(hub, "get", "items/drill-01").stdout) == {"name": "Drill", "stock": 8}
    assert get_json(hub, "/v1/lists/orders/open")["entries"] == ["a", "b", "c"]
    assert get_json(hub, "/v1/changes?since=0")["seq"] == 6


def test_a_bad_store_url_is_a_usage_error_and_starts_nothing(tmp_path):
    data = tmp_path / "data"
    result = subprocess.run([str(TALLY_BIN), "serve", "--port", "0", "--data", str(data),
                             "--store", "mysql://root@127.0.0.1/tally"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2, result.stderr
    assert "--store: the scheme is 'mysql'" in result.stderr
    assert not data.exists()


def test_an_unreachable_store_fails_start_saying_so_without_the_password(tmp_path):
    # Port 1 on loopback: nothing listens there.
    result = subprocess.run([str(TALLY_BIN), "serve", "--port", "0", "--data", str(tmp_path / "data"),
                             "--store", "postgres://tally:sekrit@127.0.0.1:1/tally"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "cannot open the store" in result.stderr, result.stderr
    assert "sekrit" not in result.stderr

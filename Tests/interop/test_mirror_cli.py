"""`tally mirror …` and `tally verify`, the command-line details (help,
usage errors, exit statuses, --json shapes, offline use without any hub or
`mirror run`). The acceptance tests of issue 5 (faults, restarts, SIGKILL,
conflicts between mirrors) are in test_mirror.py; this file checks what a
script relies on.

Every hub binds 127.0.0.1; every `mirror run` is started by us and stopped
by its PID; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import TALLY_BIN
from synclib import cli_env, get_record, put_record, run_tally, wait_until

RUN_TIMEOUT = 15.0
WAIT = 20.0
SUBCOMMANDS = ["run", "get", "set", "del", "ls", "status", "conflicts"]


class CLI:
    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        self.home.mkdir(exist_ok=True)
        self.env = cli_env(self.home)
        self.store = tmp_path / "m.sqlite"
        self.runs: list[subprocess.Popen] = []

    def __call__(self, *args, store: bool = True):
        """(exit status, stdout, stderr) of `tally ARGS…` (`--store` added to mirror commands)."""
        argv = [str(a) for a in args]
        if store and argv[0] == "mirror" and len(argv) > 1 and argv[1] != "--help":
            argv[2:2] = ["--store", str(self.store)]
        result = run_tally(argv, self.env, RUN_TIMEOUT)
        return result.rc, result.out, result.err

    def json(self, *args):
        rc, out, err = self(*args, "--json")
        assert rc == 0, (args, rc, out, err)
        return json.loads(out)

    def start(self, server, *patterns, extra=()):
        argv = [str(TALLY_BIN), "mirror", "run", "--store", str(self.store), "--server",
                f"ws://{server.host}:{server.port}", *extra, *patterns]
        log = open(self.store.with_suffix(".log"), "wb")
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        self.runs.append(process)
        return process

    def wait_status(self, predicate, what):
        status = None

        def check():
            nonlocal status
            rc, out, _ = self("mirror", "status", "--json")
            if rc == 0:
                status = json.loads(out)
                return predicate(status) and status
            return None

        return wait_until(check, WAIT, lambda: f"{what}; last status {status}; log:\n{self.log()}")

    def wait_record(self, name: str):
        """Until the mirror holds ``name`` (`mirror get` exits 0)."""
        wait_until(lambda: self("mirror", "get", name)[0] == 0, WAIT,
                   lambda: f"the mirror to hold {name}; log:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.store.with_suffix(".log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop_all(self):
        for process in self.runs:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(10)


@pytest.fixture
def cli(tmp_path):
    made = CLI(tmp_path)
    yield made
    made.stop_all()


# --------------------------------------------------------------------------
# Help and usage


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(cli, sub):
    rc, out, err = cli("mirror", sub, "--help", store=False)
    assert rc == 0 and out.startswith("Usage: tally mirror " + sub), (rc, out, err)
    assert "--store" in out


def test_mirror_and_verify_help(cli):
    rc, out, _ = cli("mirror", "--help", store=False)
    assert rc == 0 and all(sub in out for sub in SUBCOMMANDS)
    rc, out, _ = cli("verify", "--help", store=False)
    assert rc == 0 and "Exit status" in out and "--server" in out
    rc, out, _ = cli("--help", store=False)
    assert "mirror" in out and "verify" in out


@pytest.mark.parametrize("args", [
    ["mirror"],
    ["mirror", "frob"],
    ["mirror", "set", "notes/a"],
    ["mirror", "set", "notes/a", "not-an-object"],
    ["mirror", "set", "notes/a", "x..y", "1"],
    ["mirror", "get", "/bad"],
    ["mirror", "del"],
    ["mirror", "set", "notes/a", "{}", "--if-version", "-1"],
    ["mirror", "conflicts", "resolve", "abc"],
    ["mirror", "run", "--policy", "notes/=sometimes", "notes/"],
    ["mirror", "run"],
    ["verify", "extra"],
])
def test_usage_mistakes_exit_2_and_change_nothing(cli, args):
    rc, out, err = cli(*args)
    assert rc == 2 and err.strip() and not out.strip(), (args, rc, out, err)
    rc, out, _ = cli("mirror", "status", "--json")
    assert json.loads(out)["outbox"] == 0


# --------------------------------------------------------------------------
# Offline, with no hub and no mirror run at all


def test_reads_and_writes_work_with_no_hub_and_no_run(cli):
    body = cli.json("mirror", "set", "notes/a", '{"n":1,"tags":["x"]}')
    assert body["pending"] is True and body["name"] == "notes/a" and body["version"] == 0 and body["outbox"] == 1
    assert body["data"] == {"n": 1, "tags": ["x"]} and isinstance(body["idem"], str)
    cli.json("mirror", "set", "notes/a", "tags[1]", "y")
    got = cli.json("mirror", "get", "notes/a")
    assert got == {"name": "notes/a", "version": 0, "seq": 0, "data": {"n": 1, "tags": ["x", "y"]}, "pending": True}
    assert cli.json("mirror", "get", "notes/a", "--path", "tags[1]")["value"] == "y"
    rc, out, _ = cli("mirror", "get", "notes/a")
    assert rc == 0 and json.loads(out) == {"n": 1, "tags": ["x", "y"]}

    cli.json("mirror", "del", "notes/a", "n")
    assert cli.json("mirror", "get", "notes/a")["data"] == {"tags": ["x", "y"]}
    listed = cli.json("mirror", "ls", "notes/")
    assert [r["name"] for r in listed["records"]] == ["notes/a"] and listed["records"][0]["pending"] is True
    cli.json("mirror", "del", "notes/a")
    rc, out, err = cli("mirror", "get", "notes/a")
    assert rc == 1 and "not_found" in err, (rc, out, err)
    rc, out, err = cli("mirror", "del", "notes/a")
    assert rc == 1 and "not_found" in err

    status = cli.json("mirror", "status")
    assert status["online"] is False and status["running"] is False and status["outbox"] == 4
    rc, out, _ = cli("mirror", "status")
    assert rc == 0 and "offline" in out and "4 writes waiting" in out


def test_idempotency_key_and_if_version_locally(cli):
    first = cli.json("mirror", "set", "notes/k", '{"v":1}', "--idem", "key-1")
    again = cli.json("mirror", "set", "notes/k", '{"v":2}', "--idem", "key-1")
    assert again["entries"] == first["entries"] and again["outbox"] == 1
    assert cli.json("mirror", "get", "notes/k")["data"] == {"v": 1}
    rc, _, err = cli("mirror", "set", "notes/k", "v", "3", "--if-version", "5")
    assert rc == 1 and "conflict" in err
    cli.json("mirror", "set", "notes/k", "v", "3", "--if-version", "0")
    assert cli.json("mirror", "status")["outbox"] == 2


def test_hub_kept_records_and_illegal_stage_moves_are_refused_locally(cli, tally):
    put_record(tally, "items/x", {"name": "x", "stock": 1})
    put_record(tally, "orders/o1", {"item": "items/x", "qty": 1})
    cli.start(tally, "orders/")
    cli.wait_status(lambda s: s["online"], "online")
    cli.wait_record("orders/o1")
    rc, _, err = cli("mirror", "set", "orders/o1", "stage", "delivered")
    assert rc == 1 and "illegal_transition" in err and "in-progress" in err, err
    rc, _, err = cli("mirror", "set", "orders/o1", "history", "[]")
    assert rc == 1 and "use_advance" in err
    rc, _, err = cli("mirror", "set", "stats/orders", "total", "0")
    assert rc == 1 and "forbidden" in err
    assert cli.json("mirror", "status")["outbox"] == 0
    # A legal one goes through as an advance.
    cli.json("mirror", "set", "orders/o1", "stage", "in-progress")
    cli.wait_status(lambda s: s["outbox"] == 0, "the advance to be sent")
    assert get_record(tally, "orders/o1").json()["data"]["stage"] == "in-progress"
    lists = cli.json("mirror", "ls", "--lists")["lists"]
    assert lists == [{"list": "orders", "version": 1, "seq": lists[0]["seq"], "entries": ["orders/o1"]}]


# --------------------------------------------------------------------------
# run, status, verify against a hub


def test_run_status_verify_and_a_clean_stop(cli, tally):
    put_record(tally, "notes/a", {"v": 1})
    process = cli.start(tally, "notes/")
    status = cli.wait_status(lambda s: s["online"] and s["lastSeq"] >= 1, "online")
    assert status["running"] is True and status["server"] == f"ws://{tally.host}:{tally.port}"
    assert status["patterns"] == ["notes/"] and status["client"].startswith("mirror:")
    assert status["lastError"] is None and status["conflicts"] == 0 and status["failed"] == 0

    rc, out, err = cli("verify", "--store", cli.store, store=False)
    assert rc == 0 and "agree" in out, (rc, out, err)
    put_record(tally, "notes/b", {"v": 2})
    cli.wait_status(lambda s: s["lastSeq"] >= 2, "the hub's change")
    assert cli.json("mirror", "get", "notes/b")["data"] == {"v": 2}

    # A second run on the same store is refused while the first holds it.
    rc, _, err = cli("mirror", "run", "--server", f"ws://{tally.host}:{tally.port}", "notes/")
    assert rc == 1 and "another" in err

    os.kill(process.pid, signal.SIGINT)
    assert process.wait(10) == 0, cli.log()
    status = cli.json("mirror", "status")
    assert status["online"] is False and status["running"] is False

    # Behind the mirror's back: verify names the difference, exit 1; --json says which.
    put_record(tally, "notes/a", {"v": "changed"})
    rc, out, err = cli("verify", "--store", cli.store, store=False)
    assert rc == 1 and "notes/a" in out and "v" in out, (rc, out, err)
    body = json.loads(cli("verify", "--store", cli.store, "--json", store=False)[1])
    assert body["equal"] is False and [d["name"] for d in body["differences"]] == ["notes/a"]
    assert body["differences"][0]["kind"] == "data differs" and body["differences"][0]["fields"] == ["v"]


def test_verify_cannot_compare_without_a_hub(cli, tmp_path):
    cli.json("mirror", "set", "notes/a", '{"v":1}')
    rc, _, err = cli("verify", "--store", cli.store, "--server", "ws://127.0.0.1:1", store=False)
    assert rc == 3 and "cannot reach" in err, err
    rc, _, err = cli("verify", "--store", tmp_path / "none.sqlite", "--server", "ws://127.0.0.1:1", store=False)
    assert rc == 3 and "no mirror store" in err, err


def test_conflicts_resolve_taking_the_hub(cli, tally):
    put_record(tally, "notes/c", {"title": "t0"})
    process = cli.start(tally, "notes/", extra=["--policy", "notes/=both"])
    cli.wait_status(lambda s: s["online"], "online")
    cli.wait_record("notes/c")
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(10) == 0
    cli.json("mirror", "set", "notes/c", "title", "mine")
    put_record(tally, "notes/c", {"title": "theirs"})
    cli.start(tally, "notes/", extra=["--policy", "notes/=both"])
    status = cli.wait_status(lambda s: s["online"] and s["outbox"] == 0 and s["conflicts"] == 1, "the conflict")
    [conflict] = cli.json("mirror", "conflicts")["conflicts"]
    assert conflict["field"] == "title" and conflict["local"] == "mine" and conflict["hub"] == "theirs"
    assert conflict["base"] == "t0" and conflict["resolved"] is None and conflict["policy"] == "both"
    rc, out, _ = cli("mirror", "conflicts")
    assert rc == 0 and conflict["id"] in out and "open" in out

    rc, _, err = cli("mirror", "conflicts", "resolve", "nope", "--take", "hub")
    assert rc == 1 and "not_found" in err
    resolved = cli.json("mirror", "conflicts", "resolve", conflict["id"], "--take", "hub")
    assert resolved["resolved"] == "hub"
    cli.wait_status(lambda s: s["outbox"] == 0 and s["conflicts"] == 0, "the resolution to be sent")
    record = get_record(tally, f"conflicts/{conflict['id']}").json()["data"]
    assert record["resolved"] is True and record["take"] == "hub" and record["mirror"] == status["client"]
    assert get_record(tally, "notes/c").json()["data"] == {"title": "theirs"}
    assert cli.json("mirror", "conflicts")["conflicts"] == []
    assert [c["id"] for c in cli.json("mirror", "conflicts", "--all")["conflicts"]] == [conflict["id"]]


def test_a_stage_change_carries_its_reason(cli, tally):
    put_record(tally, "intake/j1", {})
    cli.start(tally, "intake/")
    cli.wait_status(lambda s: s["online"], "online")
    cli.wait_record("intake/j1")
    cli.json("mirror", "set", "intake/j1", "stage", "failed", "--reason", "camera broke")
    cli.wait_status(lambda s: s["outbox"] == 0, "the advance to be sent")
    data = get_record(tally, "intake/j1").json()["data"]
    assert data["stage"] == "failed" and data["history"][-1]["reason"] == "camera broke", data
    assert cli.json("mirror", "status")["failed"] == 0

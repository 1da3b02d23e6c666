"""Lists that scale (issue 14): entries stored as rows, paged reads, no
entry limit for addEntry, and a store written by tally 0.3.0 migrating on
open with everything kept.

The 0.3.0 store and its manifest are Tests/fixtures/store-0.3.0-schema3.*
(made by Tests/fixtures/make_store_fixture.py with the 0.3.0 release).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from urllib.parse import quote

from synclib import expect_error, list_path, rest
from test_cli import cli
from conftest import sqlite_only

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PAGE = 10_000


def data_hash(data) -> str:
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def all_entries(client, name: str, limit: int | None = None) -> tuple[dict, list[str], int]:
    """Pages through list `name` with cursors; its first page, every entry,
    and how many pages it took."""
    request = {"list": name} | ({"limit": limit} if limit else {})
    first = page = client.ok("get", **request)
    entries, pages = list(page["entries"]), 1
    while page.get("more"):
        assert page["count"] == first["count"]
        page = client.ok("get", **request, cursor=page["cursor"])
        entries += page["entries"]
        pages += 1
    return first, entries, pages


def fill(client, name: str, count: int, start: int = 0) -> None:
    """Appends entries `name/start` … in atomic writes of 1,000 addEntry."""
    for base in range(start, start + count, 1000):
        ops = [{"op": "addEntry", "list": name, "entry": f"e/{i:07}"} for i in range(base, min(base + 1000, start + count))]
        client.ok("write", ops=ops)


@sqlite_only
def test_a_store_from_0_3_0_opens_with_every_record_and_entry(tally_factory, sync_client, tmp_path):
    manifest = json.loads((FIXTURES / "store-0.3.0-schema3.manifest.json").read_text())
    data = tmp_path / "data"
    data.mkdir()
    shutil.copyfile(FIXTURES / "store-0.3.0-schema3.sqlite", data / "tally.sqlite3")
    server = tally_factory("--data", str(data))
    client = sync_client(server)
    assert client.hello_reply["seq"] == manifest["headSeq"]

    records, after = [], None
    while True:
        page = client.ok("get", prefix="", limit=1000, **({"after": after} if after else {}))
        records += [{"name": r["name"], "version": r["version"], "seq": r["seq"], "dataSHA256": data_hash(r["data"])}
                    for r in page["records"]]
        if not page["more"]:
            break
        after = page["records"][-1]["name"]
    assert records == manifest["records"]

    for expected in manifest["lists"]:
        first, entries, _ = all_entries(client, expected["name"], limit=3000)
        assert (first["version"], first["seq"]) == (expected["version"], expected["seq"]), expected["name"]
        assert entries == expected["entries"], expected["name"]
    for name in manifest["absentLists"]:
        expect_error(client.request("get", list=name), "not_found")

    # The migrated list takes an append and a removal, and pushes their indexes.
    client.ok("subscribe", list="big")
    client.ok("addEntry", list="big", entry="appended")
    push = client.next_push()
    assert (push["kind"], push["index"], push["version"]) == ("addEntry", 10_000, 10_001)
    client.ok("removeEntry", list="big", entry="entries/05000")
    push = client.next_push()
    assert (push["kind"], push["indexes"]) == ("removeEntry", [5000])
    _, entries, _ = all_entries(client, "big")
    assert len(entries) == 10_000 and entries[-1] == "appended" and "entries/05000" not in entries
    # …and keeps them across a restart.
    server = tally_factory.restart(server)
    _, again, _ = all_entries(sync_client(server), "big")
    assert again == entries


def test_a_long_list_is_read_in_pages_and_takes_its_100001st_entry(tally, sync_client):
    client = sync_client(tally)
    fill(client, "long", 100_001)
    first, entries, pages = all_entries(client, "long")
    assert len(first["entries"]) == PAGE and first["more"] is True and first["count"] == 100_001
    assert pages == 11
    assert entries == [f"e/{i:07}" for i in range(100_001)]

    # A subscription's snapshot is one page too.
    snapshot = client.ok("subscribe", list="long")["list"]
    assert len(snapshot["entries"]) == PAGE and snapshot["more"] is True and snapshot["cursor"] == first["cursor"]

    # The pushes line up with what a pager has: an insert before the cursor
    # and a removal after it, then the next page starts after the same entry.
    client.ok("addEntry", list="long", entry="early", at=5)
    assert client.next_push()["index"] == 5
    client.ok("removeEntry", list="long", entry="e/0050000")
    assert client.next_push()["indexes"] == [50_001]
    page = client.ok("get", list="long", cursor=first["cursor"], limit=3)
    assert page["entries"] == [f"e/{i:07}" for i in range(PAGE, PAGE + 3)]
    assert page["count"] == 100_001

    # `tally list show` pages through all of it.
    shown = cli(tally, "list", "show", "long", "--json").ok().json()
    assert len(shown["entries"]) == 100_001 and "more" not in shown and "cursor" not in shown
    assert shown["entries"][5] == "early" and shown["entries"][-1] == "e/0100000"

    # A conflict on a list this long does not carry its entries.
    error = expect_error(client.request("addEntry", list="long", entry="x", version=1), "conflict")
    assert error["version"] == 100_003 and "entries" not in error


def test_rest_pages_a_list_and_refuses_bad_paging(tally, sync_client):
    client = sync_client(tally)
    client.ok("setEntries", list="r/l", entries=[f"x{i}" for i in range(7)])
    response = rest(tally, "GET", list_path("r/l") + "?limit=3")
    assert response.status == 200
    body = response.json()
    assert (body["name"], body["entries"], body["more"], body["count"]) == ("r/l", ["x0", "x1", "x2"], True, 7)
    rest_page = rest(tally, "GET", list_path("r/l") + "?limit=3&cursor=" + quote(body["cursor"])).json()
    assert rest_page["entries"] == ["x3", "x4", "x5"]
    assert rest(tally, "GET", list_path("r/l")).json()["entries"] == [f"x{i}" for i in range(7)]
    assert "more" not in rest(tally, "GET", list_path("r/l")).json()
    for query in ["limit=0", "limit=10001", "limit=-1", "limit=x", "cursor=zz", "cursor=8000", "cursor="]:
        response = rest(tally, "GET", list_path("r/l") + "?" + query)
        assert response.status == 400, query
        assert response.error_code() == "bad_field", query
    assert client.ok("get", list="r/l")["version"] == 1, "nothing changed"


def test_pipelined_inserts_and_removals_anywhere_report_the_right_indexes(tally, sync_client):
    """Inserts and removals at random places in a list of 5,000 (five
    counted blocks, split and merged as it goes), sent 50 at a time without
    waiting, so each is ranked while earlier ones are still uncommitted:
    every push's index matches a model, and so do the entries after."""
    import random

    writer, watcher = sync_client(tally), sync_client(tally)
    fill(writer, "mid", 5_000)
    model = [f"e/{i:07}" for i in range(5_000)]
    watcher.ok("subscribe", list="mid")
    rng = random.Random(14)
    expected = []
    for burst in range(12):
        ids = []
        for k in range(50):
            choice = rng.random()
            if choice < 0.45 or not model:
                at = rng.randrange(len(model) + 1)
                entry = f"n/{burst}/{k}"
                model.insert(at, entry)
                message = {"op": "addEntry", "list": "mid", "entry": entry, "at": at}
                expected.append(("index", at))
            elif choice < 0.75:
                at = rng.randrange(len(model))
                message = {"op": "removeEntry", "list": "mid", "entry": model.pop(at), "at": at}
                expected.append(("indexes", [at]))
            else:
                entry = model[rng.randrange(len(model))]
                found = [i for i, e in enumerate(model) if e == entry]
                model = [e for e in model if e != entry]
                message = {"op": "removeEntry", "list": "mid", "entry": entry}
                expected.append(("indexes", found))
            message["id"] = writer.next_id()
            ids.append(message["id"])
            writer.send(message)
        for request_id in ids:
            reply = writer.recv_reply(request_id)
            assert reply.get("ok") is True, reply
    pushes = watcher.take_pushes(len(expected), timeout=30)
    for number, (push, (field, value)) in enumerate(zip(pushes, expected)):
        assert push.message[field] == value, f"change {number}: {push.message}"
    first, entries, _ = all_entries(writer, "mid")
    assert entries == model

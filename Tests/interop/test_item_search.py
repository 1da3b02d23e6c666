"""`GET /v1/items` (PROTOCOL.md, "Item search") against a real hub, black box:

- `q` finds an item by its code (SKU, serial, a link, as /v1/resolve), by
  the beginnings of its name's words (any case, every word typed), and by
  the start of its record name; each item once, the code's first; `limit`;
- a rename moves the name words: the old ones no longer find it, across a
  restart too;
- without `q`, pages of the items in name order (`after`, `more`), with the
  config's `lowStock` (default 5) in every answer;
- bad input is a 400 `bad_field` naming the field;
- a role that may read some items only gets those; one that may read none
  is refused the page (403) and finds nothing by search.

Hubs bind 127.0.0.1 and are stopped by PID.
"""

from __future__ import annotations

import hashlib
import urllib.parse

from authlib import start_hub
from synclib import put_record, rest


def found(server, query: str, token: str | None = None) -> list[str]:
    response = rest(server, "GET", f"/v1/items?{query}",
                    headers={"Authorization": f"Bearer {token}"} if token else None)
    assert response.status == 200, (query, response.status, response.body[:300])
    body = response.json()
    assert set(body) >= {"seq", "lowStock", "items"}, body
    return [item["name"] for item in body["items"]]


def q(text: str, limit: int | None = None) -> str:
    return urllib.parse.urlencode({"q": text, **({"limit": limit} if limit else {})})


def test_search_by_code_name_words_and_id(tally_factory):
    server = tally_factory()
    put_record(server, "items/drill-01", {"name": "Cordless Drill 18V", "sku": "D-18", "serials": ["SN-4711"]})
    put_record(server, "items/drill-02", {"name": "Hammer drill", "sku": "D-20"})
    put_record(server, "items/anvil", {"name": "Anvil", "codes": ["drill"]})
    put_record(server, "items/glue", {"name": "Wood glue (fast)", "stock": 2})
    assert found(server, q("SN-4711")) == ["items/drill-01"]
    assert found(server, q("http://tally.example/items/drill-02?src=qr")) == ["items/drill-02"]
    # The code first (anvil's extra code "drill"), then the name words, then ids.
    assert found(server, q("drill")) == ["items/anvil", "items/drill-01", "items/drill-02"]
    assert found(server, q("drill", limit=2)) == ["items/anvil", "items/drill-01"]
    assert found(server, q("cordless 18")) == ["items/drill-01"]
    assert found(server, q("WOOD fa")) == ["items/glue"]
    assert found(server, q("wood hammer")) == []
    assert found(server, q("drill-0")) == ["items/drill-01", "items/drill-02"]
    assert found(server, q("zzz")) == []
    put_record(server, "items/glue", {"name": "Epoxy", "stock": 2})
    assert found(server, q("wood")) == []
    assert found(server, q("epox")) == ["items/glue"]
    again = tally_factory.restart(server)
    assert found(again, q("epox")) == ["items/glue"]
    assert found(again, q("wood")) == []


def test_pages_and_low_stock(tally_factory):
    server = start_hub(tally_factory, {"lowStock": 3})
    for n in range(5):
        put_record(server, f"items/i{n}", {"name": f"Item {n}"})
    put_record(server, "orders/x", {"item": "items/i0", "qty": 1})
    first = rest(server, "GET", "/v1/items?limit=2").json()
    assert [i["name"] for i in first["items"]] == ["items/i0", "items/i1"] and first["more"] is True
    assert first["lowStock"] == 3
    last = rest(server, "GET", "/v1/items?after=items/i3&limit=2").json()
    assert [i["name"] for i in last["items"]] == ["items/i4"] and last["more"] is False
    assert rest(server, "GET", "/v1/items?q=item").json()["lowStock"] == 3
    default = tally_factory()
    assert rest(default, "GET", "/v1/items").json()["lowStock"] == 5


def test_bad_input_is_a_bad_field(tally_factory):
    server = tally_factory()
    for query, field in (("q=", "q"), ("limit=0", "limit"), ("limit=101", "limit"), ("q=a&limit=x", "limit"),
                         ("q=" + "a" * 2049, "q")):
        response = rest(server, "GET", f"/v1/items?{query}")
        assert response.status == 400, (query, response.status, response.body[:200])
        assert response.error_code() == "bad_field", response.body[:300]
        assert field in response.json()["error"]["message"], response.body[:300]


def test_search_is_read_checked(tally_factory):
    tokens = {"root": "root-token-for-search", "bench": "bench-token-for-search", "none": "none-token-for-search"}
    config = {
        "users": [{"name": name, "role": role, "tokenSha256": hashlib.sha256(tokens[name].encode()).hexdigest()}
                  for name, role in (("root", "admin"), ("bench", "bench"), ("none", "nobody"))],
        "roles": {"bench": [{"names": "items/bench-*", "allow": ["read"]}], "nobody": []},
    }
    server = start_hub(tally_factory, config)
    auth = {"Authorization": f"Bearer {tokens['root']}"}
    put_record(server, "items/bench-vise", {"name": "Bench vise", "sku": "V-1"}, headers=auth)
    put_record(server, "items/safe", {"name": "Bench safe", "sku": "S-1"}, headers=auth)
    assert found(server, q("bench"), tokens["root"]) == ["items/bench-vise", "items/safe"]
    assert found(server, q("bench"), tokens["bench"]) == ["items/bench-vise"]
    assert found(server, q("S-1"), tokens["bench"]) == []
    assert found(server, q("bench"), tokens["none"]) == []
    page = rest(server, "GET", "/v1/items", headers={"Authorization": f"Bearer {tokens['none']}"})
    assert page.status == 403 and page.error_code() == "forbidden", page.body[:300]
    assert rest(server, "GET", "/v1/items?q=bench").status == 401


def test_search_on_postgresql_across_hubs(tally_factory, pg_database):
    """The word index lives in the store: on PostgreSQL a second hub of the
    same database finds what the first wrote, and a rename moves it."""
    first = tally_factory("--store", pg_database)
    second = tally_factory("--store", pg_database)
    put_record(first, "items/drill-01", {"name": "Cordless drill", "serials": ["SN-1"]})
    put_record(first, "items/saw", {"name": "Band saw"})
    for hub in (first, second):
        assert found(hub, q("cordl")) == ["items/drill-01"]
        assert found(hub, q("SN-1")) == ["items/drill-01"]
    put_record(second, "items/saw", {"name": "Circular saw"})
    assert found(first, q("circ")) == ["items/saw"]
    assert found(first, q("band")) == []

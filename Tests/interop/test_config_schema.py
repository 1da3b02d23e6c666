"""The config file's JSON Schema (docs/config.schema.json) against the hub's
parser (`tally serve --config FILE`), black box:

- the schema is a valid 2020-12 schema and documents every member;
- docs/tally.example.json and the README's config example (the first ```json
  or ```jsonc block after "Config file", comments stripped) validate against
  it, and the hub starts with either;
- the example's users hash the example tokens docs/config.md gives, and a hub
  started with the example (`tally serve --config docs/tally.example.json
  --port 0`) listens and enforces its users, custom role and workflow override;
- bad configs are refused by both the schema and the hub (exit 2, stderr
  `tally: bad config file F: PATH: message`, the same JSON path);
- configs at the edges of every range are accepted by both;
- the rules the schema cannot express (cross-references, unique names,
  environment variables, integer literals) are refused by the hub with their
  path while the schema lets them through, as its description says.

Hubs bind 127.0.0.1; each is stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from authlib import AuthClient, rest_as
from conftest import HOST, START_TIMEOUT, STOP_TIMEOUT, TALLY_BIN

REPO = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO / "docs" / "config.schema.json"
EXAMPLE_PATH = REPO / "docs" / "tally.example.json"
CONFIG_DOC = REPO / "docs" / "config.md"
README = REPO / "README.md"

# The example's users: name -> (role, token). The tokens are stated in
# docs/config.md; the example holds only their SHA-256.
EXAMPLE_USERS = {
    "root": ("admin", "example-token-root"),
    "ana": ("staff", "example-token-ana"),
    "ben": ("staff", "example-token-ben"),
    "wall": ("dashboard", "example-token-wall"),
    "cleo": ("client", "example-token-cleo"),
    "pat": ("packer", "example-token-pat"),
}

RUN_TIMEOUT = 10.0


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


@pytest.fixture(scope="module")
def validator(schema) -> Draft202012Validator:
    return Draft202012Validator(schema)


def example() -> dict:
    return json.loads(EXAMPLE_PATH.read_text())


# --------------------------------------------------------------------------
# Schema error paths, in the parser's notation ($.users[0].tokenSha256)


def _extra_members(error) -> list[str]:
    """The members an `additionalProperties: false` error is about."""
    schema = error.schema
    known = set(schema.get("properties", {}))
    patterns = [re.compile(p) for p in schema.get("patternProperties", {})]
    return [key for key in error.instance
            if key not in known and not any(p.search(key) for p in patterns)]


def json_path(error) -> str:
    """The error's location as the parser writes it: `$`, `.member` (never
    quoted: `$.workflows.orders/.roles.*`) and `[index]`."""
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                         for part in error.absolute_path)


def _paths(error) -> set[str]:
    """The JSON paths an error (and the errors under a oneOf/anyOf) names.
    An error about a missing or unexpected member, or a bad member name,
    names that member, as the parser does."""
    base = json_path(error)
    paths = {base}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        paths |= {f"{base}.{key}" for key in _extra_members(error)}
    elif error.validator == "required" and isinstance(error.instance, dict):
        paths |= {f"{base}.{key}" for key in error.validator_value if key not in error.instance}
    elif error.validator == "propertyNames" or (
            error.relative_schema_path and "propertyNames" in error.relative_schema_path):
        if isinstance(error.instance, str):
            paths.add(f"{base}.{error.instance}")
    for sub in error.context or []:
        paths |= _paths(sub)
    return paths


def schema_error_paths(validator, instance) -> set[str]:
    paths: set[str] = set()
    for error in validator.iter_errors(instance):
        paths |= _paths(error)
    return paths


# --------------------------------------------------------------------------
# Running the hub on a config


def write_config(directory: Path, config, name: str = "tally.json") -> Path:
    path = directory / name
    path.write_text(config if isinstance(config, str) else json.dumps(config, indent=1))
    return path


def serve_refusal(tmp_path: Path, config_path: Path, env: dict | None = None) -> tuple[int, str]:
    """Runs `tally serve --config F` (127.0.0.1, port 0, its own --data) and
    expects it to stop by itself; (exit status, stderr). A hub that starts
    instead is killed (by its PID when the timeout passes) and fails the test."""
    argv = [str(TALLY_BIN), "serve", "--config", str(config_path), "--host", HOST, "--port", "0",
            "--data", str(tmp_path / "data")]
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=RUN_TIMEOUT,
                              cwd=tmp_path, env=env)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"`{' '.join(argv)}` accepted the config and kept running; stdout: {expired.stdout!r}")
    return done.returncode, done.stderr.decode(errors="replace")


class Hub:
    """`tally serve ARGS` started by hand (the literal command a reader would
    type), stopped by its PID."""

    def __init__(self, argv: list[str], cwd: Path, env: dict | None = None):
        self.argv = argv
        self.stderr_path = cwd / "hub.stderr"
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=stderr, cwd=cwd, env=env)
        self.lines: list[str] = []
        self.host, self.port, self.tls = HOST, 0, False

    def wait_listening(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        buffer = b""
        fd = self.process.stdout.fileno()
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, remaining))
            if not ready:
                break
            chunk = os.read(fd, 1)
            if not chunk:
                break
            buffer += chunk
        line = buffer.decode(errors="replace").strip()
        match = re.fullmatch(r"tally listening on http://(127\.0\.0\.1):(\d+)", line)
        assert match, (f"`{' '.join(self.argv)}` printed {line!r} (exit {self.process.poll()}); "
                       f"stderr:\n{self.stderr_path.read_text(errors='replace')[-3000:]}")
        self.port = int(match.group(2))

    def ws_url(self, path: str) -> str:
        return f"ws://{self.host}:{self.port}{path}"

    def stop(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_TIMEOUT)
        self.process.stdout.close()
        return self.process.returncode


# --------------------------------------------------------------------------
# The schema itself


def test_the_schema_is_a_2020_12_schema(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"host", "port", "threads", "data", "hubName", "durability", "retention",
                                         "maxRecordSize", "maxMessageSize", "maxBlobSize", "blobQuota", "cacheSize", "echo",
                                         "allowOrigins", "allowHosts", "peers", "maxSubscriptions",
                                         "maxUnauthenticated", "lowStock", "users", "roles", "workflows", "indexes",
                                         "analysis"}


def test_every_member_is_described(schema):
    """The schema is documentation: every member it declares says what it is."""
    missing = []

    def walk(node, where):
        if isinstance(node, dict):
            for key in ("properties", "patternProperties"):
                for name, member in node.get(key, {}).items():
                    if isinstance(member, dict) and "description" not in member:
                        missing.append(f"{where}/{key}/{name}")
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and "description" not in extra and "$ref" not in extra:
                missing.append(f"{where}/additionalProperties")
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}/{index}")

    walk(schema, "#")
    assert not missing, f"members without a description: {missing}"


# --------------------------------------------------------------------------
# The examples


def test_the_example_validates(validator):
    errors = sorted(validator.iter_errors(example()), key=lambda e: json_path(e))
    assert not errors, [f"{json_path(e)}: {e.message}" for e in errors]


def test_the_example_covers_every_shipped_role_a_custom_role_and_a_workflow_override():
    config = example()
    roles = {user["role"] for user in config["users"]}
    assert {"admin", "staff", "dashboard", "client"} <= roles
    custom = set(config["roles"]) - {"admin", "staff", "dashboard", "client"}
    assert custom & roles, "a custom role that some user has"
    assert config["workflows"]["orders/"]["roles"]["ready->delivered"] == ["admin"]


def test_the_example_tokens_are_documented():
    """Each example user's tokenSha256 is the hash of the token docs/config.md
    gives for it, so a reader can try the example."""
    config = example()
    by_name = {user["name"]: user for user in config["users"]}
    assert set(by_name) == set(EXAMPLE_USERS)
    doc = CONFIG_DOC.read_text()
    for name, (role, token) in EXAMPLE_USERS.items():
        assert by_name[name]["role"] == role
        assert by_name[name]["tokenSha256"] == sha256_hex(token), name
        assert token in doc, f"docs/config.md does not give {name}'s example token {token}"


def strip_comments(text: str) -> str:
    """JSONC to JSON: drops `//` line comments and `/* */` block comments
    outside strings (the README's example carries comments for reading)."""
    out, i, in_string = [], 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1:i + 2])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            assert end >= 0, "unterminated /* comment"
            i = end + 2
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def readme_config_example() -> str | None:
    """The first ```json (or ```jsonc, comments stripped) block after the
    "Config file" heading of README.md (a Markdown heading, or a paragraph
    starting **Config file**), as plain JSON text; None when there is none."""
    lines = README.read_text().splitlines()
    start = None
    for index, line in enumerate(lines):
        if re.match(r"^#{1,6}\s+.*\bConfig file\b", line) or line.startswith("**Config file"):
            start = index
            break
    if start is None:
        return None
    for index in range(start + 1, len(lines)):
        fence = lines[index].strip()
        if fence in ("```json", "```jsonc"):
            end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), None)
            assert end is not None, "README: unterminated code block after \"Config file\""
            text = "\n".join(lines[index + 1:end])
            return strip_comments(text) if fence == "```jsonc" else text
        if re.match(r"^#{1,6}\s", lines[index]):
            return None
    return None


def test_the_readme_example_validates(validator, tmp_path):
    text = readme_config_example()
    if text is None:
        pytest.skip('README.md has no ```json/```jsonc block after a "Config file" heading yet')
    config = json.loads(text)
    errors = sorted(validator.iter_errors(config), key=lambda e: json_path(e))
    assert not errors, [f"{json_path(e)}: {e.message}" for e in errors]
    # And the hub takes it (its tokenEnv variables, if any, set for the run).
    env = dict(os.environ)
    for user in config.get("users", []):
        if "tokenEnv" in user:
            env[user["tokenEnv"]] = "readme-example-token"
    config_path = write_config(tmp_path, text, "readme.json")
    hub = Hub([str(TALLY_BIN), "serve", "--config", str(config_path), "--host", HOST, "--port", "0",
               "--data", str(tmp_path / "data"), "--threads", "1"], tmp_path, env)
    try:
        hub.wait_listening()
    finally:
        assert hub.stop() == 0


def test_the_hub_starts_with_the_example(tmp_path):
    """`tally serve --config docs/tally.example.json --port 0`, as written
    (the example binds 127.0.0.1 and keeps its data in ./tally-data, here a
    temporary directory), then its users, custom role and workflow override
    at work."""
    hub = Hub([str(TALLY_BIN), "serve", "--config", str(EXAMPLE_PATH), "--port", "0"], tmp_path)
    try:
        hub.wait_listening()
        assert (tmp_path / "tally-data").is_dir()
        token = {name: t for name, (_, t) in EXAMPLE_USERS.items()}

        # Every user's token works and gives its role; no token is refused.
        for name, (role, secret) in EXAMPLE_USERS.items():
            with AuthClient(hub, token=secret) as client:
                assert (client.hello_reply["user"], client.hello_reply["role"]) == (name, role)
        assert rest_as(hub, None, "GET", "/v1/records?prefix=items/").status == 401
        assert rest_as(hub, "not-a-token", "GET", "/v1/records?prefix=items/").status == 401

        with AuthClient(hub, token=token["root"]) as root, AuthClient(hub, token=token["ana"]) as ana, \
                AuthClient(hub, token=token["pat"]) as pat, AuthClient(hub, token=token["wall"]) as wall:
            root.ok("set", name="items/drill-01", data={"sku": "DRILL-01", "stock": 5})
            wall.fail("set", "forbidden", name="items/drill-01", data={"stock": 0})
            # The custom role: writes items, may not create or delete them.
            pat.ok("set", name="items/drill-01", data={"sku": "DRILL-01", "stock": 6})
            pat.fail("set", "forbidden", name="items/new-one", data={"stock": 1})
            pat.fail("delete", "forbidden", name="items/drill-01")

            ana.ok("set", name="orders/o1", data={"item": "items/drill-01", "qty": 2})
            ana.ok("advance", name="orders/o1", to="in-progress")
            # The override: packers may mark an order ready, only admin delivers.
            pat.ok("advance", name="orders/o1", to="ready")
            ana.fail("advance", "forbidden", name="orders/o1", to="delivered")
            pat.fail("advance", "forbidden", name="orders/o1", to="delivered")
            reply = root.ok("advance", name="orders/o1", to="delivered")
            assert (reply["from"], reply["to"]) == ("ready", "delivered")
            assert root.ok("get", name="items/drill-01")["data"]["stock"] == 4

            # The new workflow: a reason is needed to scrap.
            ana.ok("set", name="repairs/r1", data={"item": "items/drill-01"})
            ana.fail("advance", "bad_field", name="repairs/r1", to="scrapped")
            ana.ok("advance", name="repairs/r1", to="scrapped", reason="motor burnt out")
            stats = root.ok("get", name="stats/repairs")["data"]
            assert stats["counts"] == {"reported": 0, "diagnosed": 0, "fixed": 0, "scrapped": 1}
            # The list holds open repairs: a scrapped one has left it.
            assert root.ok("get", list="repairs")["entries"] == []
    finally:
        assert hub.stop() == 0


# --------------------------------------------------------------------------
# Refused by both


def _user(**fields) -> dict:
    return {"name": "ana", "role": "staff", **fields}


GOOD_HASH = sha256_hex("example-token-ana")

# (id, config, the parser's path, the schema's path when it differs)
BAD_CONFIGS = [
    ("not-an-object", [], "$", None),
    ("unknown-member", {"prot": 1}, "$.prot", None),
    ("port-type", {"port": "8080"}, "$.port", None),
    ("port-range", {"port": 70000}, "$.port", None),
    ("port-negative", {"port": -1}, "$.port", None),
    ("threads-zero", {"threads": 0}, "$.threads", None),
    ("threads-range", {"threads": 257}, "$.threads", None),
    ("host-empty", {"host": ""}, "$.host", None),
    ("data-type", {"data": 7}, "$.data", None),
    ("hub-name-empty", {"hubName": ""}, "$.hubName", None),
    ("hub-name-space", {"hubName": "store room"}, "$.hubName", None),
    ("hub-name-long", {"hubName": "x" * 129}, "$.hubName", None),
    ("durability", {"durability": "fast"}, "$.durability", None),
    ("retention-type", {"retention": 5}, "$.retention", None),
    ("retention-member", {"retention": {"days": 1}}, "$.retention.days", None),
    ("retention-changes", {"retention": {"changes": 0}}, "$.retention.changes", None),
    ("retention-changes-big", {"retention": {"changes": 2147483648}}, "$.retention.changes", None),
    ("retention-age", {"retention": {"ageSeconds": 0}}, "$.retention.ageSeconds", None),
    ("retention-bytes", {"retention": {"bytes": 0}}, "$.retention.bytes", None),
    ("retention-bytes-big", {"retention": {"bytes": 1099511627777}}, "$.retention.bytes", None),
    ("blob-quota", {"blobQuota": "10G"}, "$.blobQuota", None),
    ("blob-quota-zero", {"blobQuota": 0}, "$.blobQuota", None),
    ("retention-age-type", {"retention": {"ageSeconds": "7d"}}, "$.retention.ageSeconds", None),
    ("record-size", {"maxRecordSize": 0}, "$.maxRecordSize", None),
    ("message-size", {"maxMessageSize": 1073741825}, "$.maxMessageSize", None),
    ("blob-size", {"maxBlobSize": "16M"}, "$.maxBlobSize", None),
    ("cache-size", {"cacheSize": 1048575}, "$.cacheSize", None),
    ("users-type", {"users": {"ana": "staff"}}, "$.users", None),
    ("user-type", {"users": ["ana"]}, "$.users[0]", None),
    ("user-no-token", {"users": [_user()]}, "$.users[0]", None),
    ("user-both-tokens", {"users": [_user(tokenSha256=GOOD_HASH, tokenEnv="PATH")]}, "$.users[0]", None),
    ("user-short-hash", {"users": [_user(tokenSha256=GOOD_HASH[:-1])]}, "$.users[0].tokenSha256", None),
    ("user-non-hex", {"users": [_user(tokenSha256="g" * 64)]}, "$.users[0].tokenSha256", None),
    ("user-hash-type", {"users": [_user(tokenSha256=None)]}, "$.users[0].tokenSha256", None),
    ("user-env-empty", {"users": [_user(tokenEnv="")]}, "$.users[0].tokenEnv", None),
    ("user-no-name", {"users": [{"role": "staff", "tokenSha256": GOOD_HASH}]}, "$.users[0].name", None),
    ("user-no-role", {"users": [{"name": "ana", "tokenSha256": GOOD_HASH}]}, "$.users[0].role", None),
    ("user-member", {"users": [_user(tokenSha256=GOOD_HASH, password="x")]}, "$.users[0].password", None),
    ("second-user", {"users": [_user(tokenSha256=GOOD_HASH), {"name": "ben", "role": "staff",
                                                               "tokenSha256": "xyz"}]},
     "$.users[1].tokenSha256", None),
    ("roles-type", {"roles": ["auditor"]}, "$.roles", None),
    ("role-not-array", {"roles": {"auditor": {"names": "**", "allow": ["read"]}}}, "$.roles.auditor", None),
    ("rule-type", {"roles": {"auditor": ["**"]}}, "$.roles.auditor[0]", None),
    ("rule-no-names", {"roles": {"auditor": [{"allow": ["read"]}]}}, "$.roles.auditor[0].names", None),
    ("rule-no-allow", {"roles": {"auditor": [{"names": "**"}]}}, "$.roles.auditor[0].allow", None),
    ("rule-bad-op", {"roles": {"auditor": [{"names": "**", "allow": ["read", "view"]}]}},
     "$.roles.auditor[0].allow[1]", None),
    ("rule-own-type", {"roles": {"auditor": [{"names": "orders/*", "allow": ["read"], "own": "yes"}]}},
     "$.roles.auditor[0].own", None),
    ("rule-member", {"roles": {"auditor": [{"names": "**", "allow": ["read"], "deny": ["write"]}]}},
     "$.roles.auditor[0].deny", None),
    ("workflows-type", {"workflows": ["orders/"]}, "$.workflows", None),
    ("workflow-type", {"workflows": {"orders/": "off"}}, "$.workflows.orders/", None),
    ("workflow-member", {"workflows": {"orders/": {"colour": "red"}}}, "$.workflows.orders/.colour", None),
    ("workflow-kind", {"workflows": {"orders/": {"kind": "shop"}}}, "$.workflows.orders/.kind", None),
    ("workflow-stages-empty", {"workflows": {"orders/": {"stages": []}}}, "$.workflows.orders/.stages", None),
    ("workflow-stages-twice", {"workflows": {"orders/": {"stages": ["a", "b", "a"]}}},
     "$.workflows.orders/.stages", None),
    ("workflow-stage-empty", {"workflows": {"orders/": {"stages": ["received", ""]}}},
     "$.workflows.orders/.stages[1]", None),
    ("workflow-transitions-type", {"workflows": {"orders/": {"transitions": ["received"]}}},
     "$.workflows.orders/.transitions", None),
    ("workflow-roles-key", {"workflows": {"orders/": {"roles": {"anyone": ["admin"]}}}},
     "$.workflows.orders/.roles.anyone", None),
    ("workflow-roles-type", {"workflows": {"orders/": {"roles": {"*": "admin"}}}},
     "$.workflows.orders/.roles.*", None),
    ("workflow-stats-name", {"workflows": {"orders/": {"stats": "/stats/orders"}}},
     "$.workflows.orders/.stats", None),
    ("workflow-list-name", {"workflows": {"orders/": {"list": "orders//all"}}}, "$.workflows.orders/.list", None),
    ("workflow-max-photos", {"workflows": {"intake/": {"maxPhotos": 1001}}}, "$.workflows.intake/.maxPhotos", None),
    ("workflow-reason-type", {"workflows": {"intake/": {"reasonRequired": "failed"}}},
     "$.workflows.intake/.reasonRequired", None),
    ("workflow-new-no-stages", {"workflows": {"repairs/": {"transitions": {}}}}, "$.workflows.repairs/.stages", None),
    ("workflow-prefix-null", {"workflows": {"orders": None}}, "$.workflows.orders", None),
    ("retention-age-high", {"retention": {"ageSeconds": 315360001}}, "$.retention.ageSeconds", None),
    ("workflow-prefix-slash", {"workflows": {"repairs": {"stages": ["open"]}}}, "$.workflows.repairs", None),
    ("echo-type", {"echo": "on"}, "$.echo", None),
    ("origins-type", {"allowOrigins": "https://app.example"}, "$.allowOrigins", None),
    ("origin-path", {"allowOrigins": ["https://app.example/board"]}, "$.allowOrigins[0]", None),
    ("origin-scheme", {"allowOrigins": ["app.example"]}, "$.allowOrigins[0]", None),
    ("host-port", {"allowHosts": ["tally.lan:8080"]}, "$.allowHosts[0]", None),
    ("peers-type", {"peers": "ws://10.0.0.2:8080"}, "$.peers", None),
    ("peer-type", {"peers": [8080]}, "$.peers[0]", None),
    ("peer-empty", {"peers": ["ws://10.0.0.2:8080", ""]}, "$.peers[1]", None),
    ("peer-scheme", {"peers": ["ws://10.0.0.2:8080", "10.0.0.3:8080"]}, "$.peers[1]", None),
    ("peer-port", {"peers": ["ws://10.0.0.2:70000"]}, "$.peers[0]", None),
    ("peer-no-host", {"peers": ["wss://"]}, "$.peers[0]", None),
    ("peer-credentials", {"peers": ["ws://ana@10.0.0.2:8080"]}, "$.peers[0]", None),
    ("subscriptions-zero", {"maxSubscriptions": 0}, "$.maxSubscriptions", None),
    ("unauthenticated-type", {"maxUnauthenticated": "many"}, "$.maxUnauthenticated", None),
    ("low-stock-negative", {"lowStock": -1}, "$.lowStock", None),
    ("indexes-type", {"indexes": {"prefix": "items/"}}, "$.indexes", None),
    ("index-member", {"indexes": [{"prefix": "items/", "path": "location", "unique": True}]}, "$.indexes[0]", None),
]


@pytest.mark.parametrize("config, path, schema_path", [case[1:] for case in BAD_CONFIGS],
                         ids=[case[0] for case in BAD_CONFIGS])
def test_a_bad_config_is_refused_by_schema_and_hub(validator, tmp_path, config, path, schema_path):
    paths = schema_error_paths(validator, config)
    assert paths, f"the schema accepts {json.dumps(config)}"
    assert (schema_path or path) in paths, (
        f"the schema refuses {json.dumps(config)} but names {sorted(paths)}, not {schema_path or path}")
    if schema_path:
        assert path.startswith(schema_path + "."), (path, schema_path)

    config_path = write_config(tmp_path, config)
    status, stderr = serve_refusal(tmp_path, config_path)
    assert status == 2, f"exit {status}, stderr: {stderr!r}"
    assert stderr.startswith(f"tally: bad config file {config_path}: {path}: "), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


def test_a_file_that_is_not_json_is_refused(tmp_path):
    config_path = write_config(tmp_path, '{"port": 8080,}')
    status, stderr = serve_refusal(tmp_path, config_path)
    assert status == 2, stderr
    assert stderr.startswith(f"tally: bad config file {config_path}: "), stderr
    assert "not valid JSON" in stderr, stderr


# --------------------------------------------------------------------------
# Accepted by both: the edges of every range


EDGE_CONFIGS = [
    ("lowest", {"host": "127.0.0.1", "port": 0, "threads": 1, "data": "d", "hubName": "a", "durability": "off",
                "retention": {"changes": 1, "bytes": 1, "ageSeconds": 0.001},
                "maxRecordSize": 1, "maxMessageSize": 1, "maxBlobSize": 1, "blobQuota": 1, "cacheSize": 1048576}),
    ("highest", {"port": 65535, "threads": 256, "hubName": "eu-west/store.room:1@b_" + "x" * 105,
                 "retention": {"changes": 2147483647, "bytes": 1099511627776, "ageSeconds": 315360000},
                 "maxRecordSize": 1073741824, "maxMessageSize": 1073741824, "maxBlobSize": 1073741824,
                 "blobQuota": 1099511627776, "cacheSize": 1099511627776}),
    ("empty-members", {"retention": {}, "users": [], "roles": {}, "workflows": {}, "allowOrigins": [],
                       "allowHosts": []}),
    ("indexes", {"indexes": [{"prefix": "items/", "path": "location"}, {"prefix": "", "path": "lines[0].sku"}]}),
    ("peers", {"peers": ["ws://10.0.0.2:8080", "wss://hub-3.example", "http://[fd00::4]:8080/v1/ws",
                         "https://hub-5.example:8443/"]}),
    ("no-peers", {"peers": []}),
    ("browsers-and-caps", {"echo": False, "allowOrigins": ["https://app.example:8443", "http://10.0.0.5"],
                           "allowHosts": ["tally.lan", "10.0.0.5"], "maxSubscriptions": 1,
                           "maxUnauthenticated": 10000000}),
    ("low-stock-edges", {"lowStock": 0}),
    ("low-stock-top", {"lowStock": 2147483647}),
    ("users", {"users": [{"name": "ana", "role": "staff", "tokenSha256": GOOD_HASH.upper()},
                         {"name": "wall", "role": "auditor", "tokenEnv": "PATH"}],
               "roles": {"auditor": [{"names": "**", "allow": []},
                                     {"names": "orders/*", "allow": ["read"], "own": False}],
                         "client": []}}),
    ("workflows", {"workflows": {"orders/": {}, "intake/": None, "shelf/": None,
                                 "repairs/": {"stages": ["open"]},
                                 "sales/": {"stageField": "status", "stages": ["new", "delivered"],
                                            "transitions": {"new": ["delivered"]}, "terminal": ["delivered"],
                                            "roles": {"*": ["admin"], "new->delivered": ["staff"]},
                                            "deleteRoles": [], "stats": "stats/sales", "list": "sales",
                                            "kind": "order", "reasonRequired": ["delivered"],
                                            "stockStage": "delivered", "maxPhotos": 0}}}),
]


@pytest.mark.parametrize("config", [case[1] for case in EDGE_CONFIGS], ids=[case[0] for case in EDGE_CONFIGS])
def test_an_edge_config_is_accepted_by_schema_and_hub(validator, tmp_path, config):
    errors = [f"{json_path(e)}: {e.message}" for e in validator.iter_errors(config)]
    assert not errors, errors
    config_path = write_config(tmp_path, config)
    # Flags win over the file: the hub still binds 127.0.0.1 on a free port
    # with one thread and its own data, whatever the config says.
    hub = Hub([str(TALLY_BIN), "serve", "--config", str(config_path), "--host", HOST, "--port", "0",
               "--threads", "1", "--data", str(tmp_path / "data")], tmp_path)
    try:
        hub.wait_listening()
    finally:
        assert hub.stop() == 0


# --------------------------------------------------------------------------
# What only the hub checks (the schema's description lists these)


HUB_ONLY = [
    ("unknown-user-role", {"users": [_user(tokenSha256=GOOD_HASH, role="boss")]}, "$.users[0].role"),
    ("duplicate-user", {"users": [_user(tokenSha256=GOOD_HASH), _user(tokenSha256=GOOD_HASH)]},
     "$.users[1].name"),
    ("unset-token-env", {"users": [_user(tokenEnv="TALLY_SCHEMA_TEST_UNSET_VARIABLE")]}, "$.users[0].tokenEnv"),
    ("unknown-stage", {"workflows": {"orders/": {"transitions": {"received": ["shipped"]}}}},
     "$.workflows.orders/.transitions.received"),
    ("terminal-unknown", {"workflows": {"orders/": {"terminal": ["lost"]}}}, "$.workflows.orders/.terminal"),
    ("terminal-with-transitions",
     {"workflows": {"orders/": {"transitions": {"received": ["delivered"], "delivered": ["received"]}}}},
     "$.workflows.orders/.transitions.delivered"),
    ("roles-key-not-a-transition", {"workflows": {"orders/": {"roles": {"received->delivered": ["admin"]}}}},
     "$.workflows.orders/.roles.received->delivered"),
    ("workflow-unknown-role", {"workflows": {"orders/": {"roles": {"*": ["admin"], "ready->delivered": ["boss"]}}}},
     "$.workflows.orders/.roles.ready->delivered"),
    ("stock-stage", {"workflows": {"orders/": {"stockStage": "shipped"}}}, "$.workflows.orders/.stockStage"),
    ("index-path", {"indexes": [{"prefix": "items/", "path": "[0]"}]}, "$.indexes[0].path"),
    ("integer-with-fraction", '{"port": 8080.0}', "$.port"),
    ("integer-with-exponent", '{"maxBlobSize": 1e6}', "$.maxBlobSize"),
]


@pytest.mark.parametrize("config, path", [case[1:] for case in HUB_ONLY], ids=[case[0] for case in HUB_ONLY])
def test_what_only_the_hub_checks(validator, tmp_path, config, path):
    instance = json.loads(config) if isinstance(config, str) else config
    errors = [f"{json_path(e)}: {e.message}" for e in validator.iter_errors(instance)]
    assert not errors, ("the schema now refuses this too; move the case to BAD_CONFIGS and update the "
                        f"schema's description: {errors}")
    config_path = write_config(tmp_path, config)
    env = {k: v for k, v in os.environ.items() if k != "TALLY_SCHEMA_TEST_UNSET_VARIABLE"}
    status, stderr = serve_refusal(tmp_path, config_path, env)
    assert status == 2, f"exit {status}, stderr: {stderr!r}"
    assert stderr.startswith(f"tally: bad config file {config_path}: {path}: "), stderr


def test_the_example_with_a_mistake_names_its_path(validator, tmp_path):
    """The documented error format on the example itself: an unknown role."""
    config = copy.deepcopy(example())
    config["users"][0]["role"] = "x"
    config_path = write_config(tmp_path, config)
    status, stderr = serve_refusal(tmp_path, config_path)
    assert status == 2, stderr
    assert stderr.startswith(f'tally: bad config file {config_path}: $.users[0].role: unknown role "x"; known: '), stderr
    assert "packer" in stderr, stderr

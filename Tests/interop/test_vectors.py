"""Protocol conformance: replays every vector in Protocol/vectors against a
fresh `tally serve` (one hub with an empty store per vector), with the
matching rules of Protocol/vectors/README.md.

Also, without a hub:
- each vector is well formed (steps, clients, one action per step);
- Protocol/schema.json (checked with `jsonschema`, a test requirement) is a valid 2020-12
  schema; every message a vector sends validates against `clientMessage`
  (and every one the hub must refuse as malformed -- bad_message,
  unknown_op, bad_field, bad_name, bad_path with an offset -- does not,
  unless only the hub's state or byte counts can tell); every expect
  pattern agrees with the server message definition it stands for, as far as
  the pattern goes (members it leaves out, and "<any>" values, are not
  judged); patterns name only members the schema knows.
- the matcher itself (pure unit tests at the end).

During a replay every message the hub sends is also validated, in full,
against the definition for it (which reply shape follows from the request).
"""

from __future__ import annotations

import json
from collections import deque
from contextlib import ExitStack
from functools import lru_cache
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import jsonschema  # Tests/interop/requirements.txt: the schema checks are not optional
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[2]
VECTORS_DIR = REPO / "Protocol" / "vectors"
SCHEMA_PATH = REPO / "Protocol" / "schema.json"
VECTOR_FILES = sorted(VECTORS_DIR.glob("*.json"))
VECTOR_IDS = [path.stem for path in VECTOR_FILES]

EXPECT_TIMEOUT = 5.0
ANY, ABSENT = "<any>", "<absent>"
ACTIONS = ("send", "sendText", "expect", "close")
# Error codes a schema-aware client could have predicted from the message alone.
MALFORMED_CODES = {"bad_message", "unknown_op", "bad_field", "bad_name"}
# Members whose value is client data (any JSON): not checked against schema names.
PAYLOAD_MEMBERS = {"data", "value"}



# --------------------------------------------------------------------------
# Matching (Protocol/vectors/README.md, "Matching a pattern")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def mismatches(pattern, actual, where: str = "$") -> list[str]:
    """Every place where `actual` fails `pattern`; empty when it matches.

    Objects: every pattern member present and matching ("<absent>": must be
    missing), other members ignored. Arrays: same length, element-wise.
    Numbers by value, other scalars by equality (true is not 1). "<any>"
    matches any value."""
    if pattern == ANY:
        return []
    if pattern == ABSENT:
        return [f"{where}: \"<absent>\" is only meaningful as an object member's value"]
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object, got {json.dumps(actual)}"]
        problems = []
        for key, sub in pattern.items():
            child = f"{where}.{key}"
            if sub == ABSENT:
                if key in actual:
                    problems.append(f"{child}: must be absent, got {json.dumps(actual[key])}")
            elif key not in actual:
                problems.append(f"{child}: missing")
            else:
                problems += mismatches(sub, actual[key], child)
        return problems
    if isinstance(pattern, list):
        if not isinstance(actual, list):
            return [f"{where}: expected an array, got {json.dumps(actual)}"]
        if len(pattern) != len(actual):
            return [f"{where}: expected {len(pattern)} elements, got {len(actual)}: {json.dumps(actual)}"]
        problems = []
        for index, (sub, element) in enumerate(zip(pattern, actual)):
            problems += mismatches(sub, element, f"{where}[{index}]")
        return problems
    if _is_number(pattern):
        if _is_number(actual) and pattern == actual:
            return []
        return [f"{where}: expected {json.dumps(pattern)}, got {json.dumps(actual)}"]
    # strings, booleans, null: same type and equal
    if type(pattern) is type(actual) and pattern == actual:
        return []
    return [f"{where}: expected {json.dumps(pattern)}, got {json.dumps(actual)}"]


def matches(pattern, actual) -> bool:
    return not mismatches(pattern, actual)


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _unique_members(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def parse_strict(text: str):
    """RFC 8259 only: no NaN/Infinity, no duplicate members."""
    return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_members)


# --------------------------------------------------------------------------
# Vectors


def load_vector(path: Path) -> dict:
    return parse_strict(path.read_text(encoding="utf-8"))


def shape_problems(vector) -> list[str]:
    problems = []
    if not isinstance(vector, dict):
        return ["a vector is a JSON object"]
    for key in ("name", "description"):
        if not isinstance(vector.get(key), str) or not vector.get(key):
            problems.append(f"`{key}` must be a non-empty string")
    steps = vector.get("steps")
    if not isinstance(steps, list) or not steps:
        return problems + ["`steps` must be a non-empty array"]
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            problems.append(f"step {index}: not an object")
            continue
        if not isinstance(step.get("client"), str) or not step["client"]:
            problems.append(f"step {index}: `client` must be a non-empty string")
        actions = [key for key in ACTIONS if key in step]
        unknown = set(step) - set(ACTIONS) - {"client"}
        if len(actions) != 1:
            problems.append(f"step {index}: exactly one of {ACTIONS}, found {actions}")
        if unknown:
            problems.append(f"step {index}: unknown members {sorted(unknown)}")
        if "send" in step and not isinstance(step["send"], dict):
            problems.append(f"step {index}: `send` must be an object (use sendText for anything else)")
        if "sendText" in step and not isinstance(step["sendText"], str):
            problems.append(f"step {index}: `sendText` must be a string")
        if "close" in step and step["close"] is not True:
            problems.append(f"step {index}: `close` must be true")
        if "expect" in step:
            problems += [f"step {index}: {p}" for p in _absent_misuse(step["expect"], "$", member=False)]
    return problems


def _absent_misuse(pattern, where, member) -> list[str]:
    if pattern == ABSENT and not member:
        return [f"{where}: \"<absent>\" only as an object member's value"]
    if isinstance(pattern, dict):
        return [p for key, sub in pattern.items() for p in _absent_misuse(sub, f"{where}.{key}", True)]
    if isinstance(pattern, list):
        return [p for i, sub in enumerate(pattern) for p in _absent_misuse(sub, f"{where}[{i}]", False)]
    return []


def is_reply(message) -> bool:
    """Replies have `ok` and no `op`; pushes have `op`."""
    return isinstance(message, dict) and "op" not in message


def sent_message(step):
    """The JSON value a send/sendText step sends, or None when it is not JSON."""
    if "send" in step:
        return step["send"]
    try:
        return parse_strict(step["sendText"])
    except ValueError:
        return None


def pair_requests(vector) -> list[tuple[int, object, int | None, object]]:
    """(send step index, message sent, reply step index or None, reply
    pattern or None) for every send/sendText, pairing each reply expect of a
    client with that client's oldest unanswered request."""
    pending: dict[str, deque] = {}
    pairs = []
    for index, step in enumerate(vector["steps"]):
        client = step["client"]
        queue = pending.setdefault(client, deque())
        if "send" in step or "sendText" in step:
            queue.append((index, sent_message(step)))
        elif "close" in step:
            for send_index, message in queue:
                pairs.append((send_index, message, None, None))
            queue.clear()
        elif "expect" in step and is_reply(step["expect"]) and queue:
            send_index, message = queue.popleft()
            pairs.append((send_index, message, index, step["expect"]))
    for queue in pending.values():
        pairs += [(send_index, message, None, None) for send_index, message in queue]
    return sorted(pairs, key=lambda pair: pair[0])


# --------------------------------------------------------------------------
# Which schema definition a server message stands for


def reply_definition(request, message) -> str:
    if message.get("ok") is False:
        return "errorReply"
    if not isinstance(request, dict):
        return "reply"
    op = request.get("op")
    if op == "hello":
        return "helloReply"
    if op == "get":
        if "name" in request:
            return "getPathReply" if "path" in request else "getRecordReply"
        return "getListReply" if "list" in request else "getPrefixReply"
    if op == "subscribe":
        if "changes" in message:
            return "subscribeChangesReply"
        if "topic" in request:
            return "emptyReply"
        if "name" in request:
            return "subscribePathReply" if "path" in request else "subscribeRecordReply"
        return "subscribeListReply" if "list" in request else "subscribePrefixReply"
    if op == "unsubscribe":
        return "emptyReply"
    if op == "increment":
        return "incrementReply"
    if op in ("set", "merge") or (op == "delete" and "name" in request):
        return "recordWriteReply"
    if op in ("addEntry", "removeEntry", "setEntries", "delete"):
        return "listWriteReply"
    if op == "write":
        return "writeReply"
    if op == "publish":
        return "publishReply"
    return "reply"


def push_definition(message) -> str:
    if message.get("op") == "event":
        return "event"
    if message.get("op") == "change":
        kind = message.get("kind")
        if "list" in message:
            names = {"addEntry": "listChangeAddEntry", "removeEntry": "listChangeRemoveEntry",
                     "setEntries": "listChangeSetEntries", "delete": "listChangeDelete"}
            return names.get(kind, "listChange")
        names = {"set": "recordChangeSet", "setPath": "recordChangeSetPath",
                 "deletePath": "recordChangeDeletePath", "delete": "recordChangeDelete"}
        return names.get(kind, "recordChange")
    return "push"


@lru_cache(maxsize=None)
def schema_document() -> dict:
    return parse_strict(SCHEMA_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def validator_for(definition: str):
    schema = schema_document()
    assert definition in schema["$defs"], f"schema.json has no $defs/{definition}"
    return Draft202012Validator({
        "$schema": schema["$schema"], "$id": schema["$id"], "$defs": schema["$defs"],
        "$ref": f"#/$defs/{definition}"})


def schema_errors(definition: str, instance) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path)) or '(root)'}: {error.message}"
            for error in validator_for(definition).iter_errors(instance)]


def _strip_absent(pattern, where=()):
    """(the pattern without "<absent>" members, the paths of those members)."""
    if isinstance(pattern, dict):
        stripped, absent = {}, set()
        for key, sub in pattern.items():
            if sub == ABSENT:
                absent.add(where + (key,))
            else:
                stripped[key], inner = _strip_absent(sub, where + (key,))
                absent |= inner
        return stripped, absent
    if isinstance(pattern, list):
        stripped, absent = [], set()
        for index, sub in enumerate(pattern):
            element, inner = _strip_absent(sub, where + (index,))
            stripped.append(element)
            absent |= inner
        return stripped, absent
    return pattern, set()


def _unexplained(error, absent) -> list:
    """The parts of a validation error that a partial pattern does not explain.
    Explained: a required member the pattern leaves out (unless it says
    "<absent>"), a value "<any>", and an anyOf/oneOf with a branch whose every
    error is explained."""
    if error.validator == "required":
        location = tuple(error.absolute_path)
        if any(location + (member,) in absent for member in error.validator_value
               if member not in error.instance):
            return [error]
        return []
    if error.instance == ANY:
        return []
    if error.validator in ("anyOf", "oneOf") and error.context:
        for branch in range(len(error.validator_value)):
            branch_errors = [e for e in error.context if e.relative_schema_path[0] == branch]
            if not any(_unexplained(e, absent) for e in branch_errors):
                return []
    return [error]


def pattern_schema_problems(definition: str, pattern) -> list[str]:
    stripped, absent = _strip_absent(pattern)
    problems = []
    for error in validator_for(definition).iter_errors(stripped):
        for bad in _unexplained(error, absent):
            where = "/".join(map(str, bad.absolute_path)) or "(root)"
            problems.append(f"{where}: {bad.message}")
    return problems


@lru_cache(maxsize=None)
def schema_member_names() -> frozenset:
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for key in ("properties", "dependentRequired"):
                if isinstance(node.get(key), dict):
                    names.update(node[key])
            for key in ("required",):
                if isinstance(node.get(key), list):
                    names.update(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema_document())
    return frozenset(names)


def unknown_members(pattern, where="$") -> list[str]:
    """Members of a server-message pattern the schema never names (typos)."""
    problems = []
    if isinstance(pattern, dict):
        for key, sub in pattern.items():
            if key not in schema_member_names():
                problems.append(f"{where}.{key}: no schema definition has this member")
            if key not in PAYLOAD_MEMBERS:
                problems += unknown_members(sub, f"{where}.{key}")
    elif isinstance(pattern, list):
        for index, sub in enumerate(pattern):
            problems += unknown_members(sub, f"{where}[{index}]")
    return problems


def _schema_can_see(message, reply) -> bool:
    """False for malformed-message errors that depend on the hub's state or on
    byte counts, which a schema cannot express: a second hello, an `at` past
    the end of a list, a query on a path the hub has no index for, and
    strings too long in UTF-8 bytes but not in characters."""
    error = reply.get("error", {}) if isinstance(reply, dict) else {}
    if error.get("code") == "bad_message" and isinstance(message, dict) and message.get("op") == "hello":
        return False
    if error.get("code") == "bad_field" and error.get("field") in ("at", "query.where"):
        return False
    byte_limits = (128, 256, 512, 1024)  # id, idem, names, paths
    return not any(len(value.encode()) > limit >= len(value)
                   for value in _strings(message) for limit in byte_limits)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for sub in value.values():
            yield from _strings(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub)


# --------------------------------------------------------------------------
# Static tests (no hub)


def test_vectors_exist():
    assert VECTOR_FILES, f"no vectors in {VECTORS_DIR}"
    names = [load_vector(path).get("name") for path in VECTOR_FILES]
    duplicates = {name for name in names if names.count(name) > 1}
    assert not duplicates, f"vector names used twice: {duplicates}"


@pytest.mark.parametrize("path", VECTOR_FILES, ids=VECTOR_IDS)
def test_vector_is_well_formed(path):
    problems = shape_problems(load_vector(path))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_schema_is_valid_2020_12():
    schema = schema_document()
    Draft202012Validator.check_schema(schema)
    for definition in ("clientMessage", "serverMessage", "error", "push", "reply"):
        assert definition in schema["$defs"]


@pytest.mark.parametrize("path", VECTOR_FILES, ids=VECTOR_IDS)
def test_vector_agrees_with_schema(path):
    vector = load_vector(path)
    problems = []
    for send_index, message, reply_index, reply in pair_requests(vector):
        if message is None:
            continue  # not JSON: nothing for a schema to say
        error = reply.get("error", {}) if isinstance(reply, dict) and reply.get("ok") is False else {}
        refused = error.get("code") in MALFORMED_CODES or (
            error.get("code") == "bad_path" and "offset" in error)  # offset: a syntax error
        if error.get("code") == "bad_path" and not refused:
            continue  # the path parses but does not fit the record: the schema cannot know
        errors = schema_errors("clientMessage", message)
        if refused and _schema_can_see(message, reply):
            if not errors:
                problems.append(f"step {send_index}: the hub refuses this as "
                                f"{reply['error']['code']} (step {reply_index}), but "
                                f"clientMessage accepts it: {json.dumps(message)}")
        elif not refused and errors:
            problems.append(f"step {send_index}: clientMessage rejects {json.dumps(message)}: "
                            + "; ".join(errors[:3]))
    pending: dict[str, deque] = {}
    for index, step in enumerate(vector["steps"]):
        queue = pending.setdefault(step["client"], deque())
        if "send" in step or "sendText" in step:
            queue.append(sent_message(step))
        elif "close" in step:
            queue.clear()
        elif "expect" in step:
            pattern = step["expect"]
            if not isinstance(pattern, dict):
                problems.append(f"step {index}: an expect pattern is an object")
                continue
            if is_reply(pattern):
                definition = reply_definition(queue.popleft() if queue else None, pattern)
            else:
                definition = push_definition(pattern)
            problems += [f"step {index} ({definition}): {p}"
                         for p in pattern_schema_problems(definition, pattern)]
            problems += [f"step {index}: {p}" for p in unknown_members(pattern)]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


# --------------------------------------------------------------------------
# Replay against a hub


class Replay:
    """One vector's clients: connects on first use, records a transcript for
    failure messages, validates what the hub sends."""

    def __init__(self, server, vector_name: str):
        self.url = server.ws_url("/v1/ws")
        self.server = server
        self.vector_name = vector_name
        self.clients: dict[str, object] = {}
        self.contexts: dict[str, ExitStack] = {}
        self.pending: dict[str, deque] = {}
        self.transcript: list[str] = []

    def client(self, name: str):
        if name not in self.clients:
            stack = ExitStack()
            self.clients[name] = stack.enter_context(connect(
                self.url, open_timeout=EXPECT_TIMEOUT, close_timeout=EXPECT_TIMEOUT,
                ping_interval=None, max_size=None, compression=None))
            self.contexts[name] = stack
            self.pending[name] = deque()
            self.transcript.append(f"   {name}: (connected)")
        return self.clients[name]

    def fail(self, index: int, step: dict, problem: str, actual=None) -> None:
        lines = [f"{self.vector_name}: step {index} (client {step['client']}): {problem}"]
        if "expect" in step:
            lines.append(f"  pattern: {json.dumps(step['expect'], ensure_ascii=False)}")
        if actual is not None:
            lines.append(f"  actual:  {actual}")
        lines.append("  transcript (latest last):")
        lines += self.transcript[-25:]
        stderr = self.server.stderr()
        if stderr:
            lines.append("  hub stderr (tail):")
            lines += ["    " + line for line in stderr[-2000:].splitlines()]
        pytest.fail("\n".join(lines), pytrace=False)

    def run(self, steps: list[dict]) -> None:
        for index, step in enumerate(steps):
            name = step["client"]
            if "close" in step:
                self.clients.pop(name, None)
                stack = self.contexts.pop(name, None)
                if stack is not None:
                    stack.close()
                self.pending.pop(name, None)
                self.transcript.append(f"{index:>3} {name}: (closed)")
                continue
            ws = self.client(name)
            if "send" in step or "sendText" in step:
                text = step["sendText"] if "sendText" in step else json.dumps(step["send"], ensure_ascii=False)
                self.pending[name].append(sent_message(step))
                self.transcript.append(f"{index:>3} {name} -> {text[:300]}")
                try:
                    ws.send(text)
                except ConnectionClosed as closed:
                    self.fail(index, step, f"the connection is closed: {closed}")
                continue
            self.expect(index, step, ws)

    def expect(self, index: int, step: dict, ws) -> None:
        name = step["client"]
        try:
            frame = ws.recv(timeout=EXPECT_TIMEOUT)
        except TimeoutError:
            self.fail(index, step, f"nothing received within {EXPECT_TIMEOUT:.0f} s")
        except ConnectionClosed as closed:
            self.fail(index, step, f"the connection closed instead: {closed}")
        if isinstance(frame, bytes):
            self.fail(index, step, "a binary frame (the hub sends text frames only)", repr(frame[:200]))
        self.transcript.append(f"{index:>3} {name} <- {frame[:300]}")
        try:
            message = parse_strict(frame)
        except ValueError as error:
            self.fail(index, step, f"not RFC 8259 JSON: {error}", frame)
        if not isinstance(message, dict):
            self.fail(index, step, "not a JSON object", frame)
        problems = mismatches(step["expect"], message)
        if problems:
            self.fail(index, step, "mismatch:\n    " + "\n    ".join(problems), frame)
        if is_reply(message):
            queue = self.pending[name]
            request = queue.popleft() if queue else None
            definition = reply_definition(request, message)
        else:
            definition = push_definition(message)
        errors = schema_errors(definition, message)
        if errors:
            self.fail(index, step, f"matches, but is not a valid {definition} "
                                   f"(Protocol/schema.json):\n    " + "\n    ".join(errors), frame)

    def close(self) -> None:
        for stack in self.contexts.values():
            stack.close()
        self.contexts.clear()
        self.clients.clear()


@pytest.mark.parametrize("path", VECTOR_FILES, ids=VECTOR_IDS)
def test_vector_replay(path, tally_factory, tmp_path):
    vector = load_vector(path)
    assert not shape_problems(vector), f"{path.name} is malformed: see test_vector_is_well_formed"
    data = tmp_path / "data"
    data.mkdir()
    server = tally_factory("--data", str(data))
    replay = Replay(server, path.name)
    try:
        replay.run(vector["steps"])
    finally:
        replay.close()


# --------------------------------------------------------------------------
# The matcher and the helpers, without a hub


def test_match_objects_ignore_unnamed_members():
    assert matches({"ok": True}, {"ok": True, "time": 5})
    assert not matches({"ok": True, "seq": 1}, {"ok": True})
    assert matches({}, {"anything": 1})
    assert not matches({}, [])


def test_match_any_and_absent():
    assert matches({"time": ANY}, {"time": None})
    assert matches({"time": ANY}, {"time": {"a": [1]}})
    assert not matches({"time": ANY}, {}), "<any> still requires the member"
    assert matches({"id": ABSENT}, {"ok": True})
    assert not matches({"id": ABSENT}, {"id": None}), "a null member is present"
    assert matches({"a": [ANY, 2]}, {"a": ["x", 2]})
    assert mismatches(ABSENT, 1), "<absent> outside an object is a vector mistake"


def test_match_numbers_by_value_and_types_strictly():
    assert matches({"v": 1}, {"v": 1.0})
    assert matches({"v": 2.5}, {"v": 2.5})
    assert matches({"v": 100}, {"v": 1e2})
    assert not matches({"v": 1}, {"v": True}), "true is not the number 1"
    assert not matches({"v": True}, {"v": 1})
    assert not matches({"v": 0}, {"v": False})
    assert not matches({"v": "1"}, {"v": 1})
    assert not matches({"v": None}, {"v": 0})
    assert matches({"v": None}, {"v": None})


def test_match_arrays_same_length_in_order():
    assert matches([1, {"a": 1}], [1, {"a": 1, "b": 2}])
    assert not matches([1, 2], [1, 2, 3])
    assert not matches([1, 2], [2, 1])
    assert not matches([], {})
    assert matches({"entries": []}, {"entries": []})
    assert not matches({"entries": []}, {"entries": ["x"]})


def test_mismatch_messages_say_where():
    problems = mismatches({"error": {"code": "bad_json", "field": ABSENT}},
                          {"error": {"code": "bad_name", "field": "name"}})
    assert problems == ['$.error.code: expected "bad_json", got "bad_name"',
                        '$.error.field: must be absent, got "name"']


def test_parse_strict_rejects_non_json():
    assert parse_strict('{"a":1}') == {"a": 1}
    for text in ('{"a":NaN}', '{"a":Infinity}', '{"a":1,"a":2}'):
        with pytest.raises(ValueError):
            parse_strict(text)


def test_pair_requests_follows_reply_order_per_client():
    vector = {"steps": [
        {"client": "a", "send": {"id": 1, "op": "get", "name": "x"}},
        {"client": "b", "send": {"id": 2, "op": "get", "name": "y"}},
        {"client": "a", "sendText": "{oops"},
        {"client": "b", "expect": {"id": 2, "ok": True}},
        {"client": "a", "expect": {"op": "change"}},
        {"client": "a", "expect": {"id": 1, "ok": True}},
        {"client": "a", "expect": {"ok": False}},
    ]}
    assert [(s, r) for s, _, r, _ in pair_requests(vector)] == [(0, 5), (1, 3), (2, 6)]


def test_reply_definitions_follow_the_request():
    assert reply_definition({"op": "get", "name": "a", "path": "b"}, {"ok": True}) == "getPathReply"
    assert reply_definition({"op": "get", "prefix": ""}, {"ok": True}) == "getPrefixReply"
    assert reply_definition({"op": "subscribe", "name": "a", "since": 0},
                            {"ok": True, "changes": []}) == "subscribeChangesReply"
    assert reply_definition({"op": "delete", "list": "l"}, {"ok": True}) == "listWriteReply"
    assert reply_definition({"op": "set"}, {"ok": False}) == "errorReply"
    assert push_definition({"op": "change", "list": "l", "kind": "delete"}) == "listChangeDelete"


def test_partial_patterns_are_judged_as_far_as_they_go():
    # Leaving out `time` and `created` is fine; "<any>" is fine.
    assert not pattern_schema_problems("recordChangeSet", {"op": "change", "seq": 1, "kind": "set",
                                                           "name": "a", "data": {}})
    assert not pattern_schema_problems("subscribeRecordReply",
                                       {"ok": True, "seq": ANY, "record": {"name": "a", "version": 1}})
    # A wrong type, a wrong kind of push, a required member said to be absent: not fine.
    assert pattern_schema_problems("recordChangeSet", {"op": "change", "seq": "1", "kind": "set"})
    assert pattern_schema_problems("recordChangeSet", {"op": "change", "kind": "setPath"})
    assert pattern_schema_problems("recordWriteReply", {"ok": True, "seq": ABSENT})
    assert pattern_schema_problems("errorReply", {"ok": False, "error": {"code": "no_such_code"}})
    assert unknown_members({"ok": True, "verison": 1}) == ["$.verison: no schema definition has this member"]
    assert unknown_members({"op": "event", "data": {"anything": 1}}) == []

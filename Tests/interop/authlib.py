"""Helpers for the auth and workflow suites (test_auth.py, test_workflows.py):
a hub config with users, roles and workflows, hubs started with it, and
clients that present a token.

- `Tokens`: one random token per user of `USERS`; `config()` writes the
  users with `tokenSha256` (the hash of the token) or `tokenEnv` (the name of
  an environment variable that holds it), and `env()` is that environment.
- `start_hub(factory, config, env)`: `tally serve --config FILE` through the
  conftest factory (127.0.0.1, its own --data, stopped by PID at teardown),
  with `env` set in os.environ only while the hub starts (it reads tokenEnv
  variables at start-up; the factory's Popen inherits os.environ).
- `AuthClient`: a synclib.SyncClient whose connection may carry
  `Authorization: Bearer …` on the upgrade, and whose hello may carry a
  token.
- `rest_as(server, token, method, path, body)`: a REST request with a token.

Nothing here listens beyond 127.0.0.1: the hubs come from conftest, which
binds 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import secrets
from collections import deque
from contextlib import contextmanager
from pathlib import Path

from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from synclib import TIMEOUT, WS_PATH, Response, SyncClient, rest

# user name -> (role, how the config gives the token: "sha" or "env")
USERS = {
    "root": ("admin", "sha"),
    "ana": ("staff", "sha"),
    "sam": ("staff", "env"),
    "wall": ("dashboard", "env"),
    "cleo": ("client", "env"),
    "carl": ("client", "sha"),
    "pat": ("packer", "sha"),
}
ROLE_USER = {"admin": "root", "staff": "ana", "dashboard": "wall", "client": "cleo"}

# A role only the config defines: writes existing items (no creating, no
# deleting), reads orders, nothing else.
CUSTOM_ROLES = {
    "packer": [
        {"names": "items/**", "allow": ["read", "subscribe", "write"]},
        {"names": "orders/*", "allow": ["read"]},
    ],
}

ORDER_STAGES = ["received", "in-progress", "ready", "delivered", "cancelled"]
ORDER_TRANSITIONS = {
    "received": ["in-progress", "cancelled"],
    "in-progress": ["ready", "cancelled"],
    "ready": ["delivered", "cancelled"],
    "delivered": [],
    "cancelled": [],
}
ORDER_TERMINAL = {"delivered", "cancelled"}
INTAKE_STAGES = ["queued", "created", "media-uploaded", "analyzed", "cover-set", "done", "failed"]
INTAKE_TRANSITIONS = {
    "queued": ["created", "failed"],
    "created": ["media-uploaded", "failed"],
    "media-uploaded": ["analyzed", "cover-set", "done", "failed"],
    "analyzed": ["cover-set", "done", "failed"],
    "cover-set": ["done", "failed"],
    "done": [],
    "failed": [],
}
INTAKE_TERMINAL = {"done", "failed"}


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def path_to(transitions: dict[str, list[str]], first: str, target: str) -> list[str]:
    """The stages to advance through (first excluded) to reach ``target``,
    by a shortest path."""
    queue = deque([[first]])
    seen = {first}
    while queue:
        path = queue.popleft()
        if path[-1] == target:
            return path[1:]
        for nxt in transitions.get(path[-1], []):
            if nxt not in seen:
                seen.add(nxt)
                queue.append(path + [nxt])
    raise AssertionError(f"{target} is not reachable from {first}")


class Tokens:
    """A fresh random token per user (never reused across hubs)."""

    def __init__(self, users: dict[str, tuple[str, str]] = USERS):
        self.users = dict(users)
        self.token = {name: "tk-" + secrets.token_urlsafe(24) for name in self.users}
        suffix = secrets.token_hex(4).upper()
        self.env_name = {name: f"TALLY_TEST_TOKEN_{name.upper()}_{suffix}" for name in self.users}

    def __getitem__(self, user: str) -> str:
        return self.token[user]

    def for_role(self, role: str) -> str:
        return self.token[ROLE_USER[role]]

    def config(self, **extra) -> dict:
        users = []
        for name, (role, how) in self.users.items():
            entry = {"name": name, "role": role}
            if how == "sha":
                entry["tokenSha256"] = sha256_hex(self.token[name])
            else:
                entry["tokenEnv"] = self.env_name[name]
            users.append(entry)
        config = {"users": users, "roles": CUSTOM_ROLES}
        config.update(extra)
        return config

    def env(self) -> dict[str, str]:
        return {self.env_name[name]: self.token[name]
                for name, (_, how) in self.users.items() if how == "env"}


@contextmanager
def environ(values: dict[str, str]):
    """os.environ with ``values`` for the block, restored after it."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_config_numbers = itertools.count()


def write_config(directory: Path, config: dict) -> Path:
    path = directory / f"tally-config-{next(_config_numbers)}.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def start_hub(factory, config: dict | None = None, env: dict[str, str] | None = None, *args: str):
    """A hub from the conftest factory: with ``config`` written to a file
    and passed as --config (none: open mode), ``env`` set while it starts."""
    argv = list(args)
    if config is not None:
        argv += ["--config", str(write_config(factory.tmp_path, config))]
    with environ(env or {}):
        return factory(*argv)


class AuthClient(SyncClient):
    """SyncClient with a token: ``header`` goes on the upgrade as
    `Authorization: Bearer …`; ``token`` goes in the hello (``hello=False``:
    no hello at all)."""

    def __init__(self, server, *, token: str | None = None, header: str | None = None,
                 hello: bool | dict = True, client: str = "interop-tests/auth",
                 timeout: float = TIMEOUT):
        self.server = server
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {header}"} if header is not None else None
        self.ws = connect(server.ws_url(WS_PATH), open_timeout=timeout, close_timeout=2,
                          ping_interval=None, max_size=None, compression=None, max_queue=None,
                          additional_headers=headers, proxy=None, legacy=True)
        self._ids = itertools.count(1)
        self._id_prefix = None
        self.pushes = deque()
        self.hello_reply = None
        if hello:
            fields = dict(hello) if isinstance(hello, dict) else {}
            fields.setdefault("protocol", 1)
            fields.setdefault("client", client)
            if token is not None:
                fields.setdefault("token", token)
            self.hello_reply = self.ok("hello", **fields)


def drain_via(client: SyncClient, prefix: str) -> list:
    """SyncClient.drain() with the barrier read under ``prefix`` (a role
    that may not read "~barrier/" still needs one): returns every push
    buffered once the reply arrives."""
    reply = client.ok("get", prefix=prefix, limit=1)
    assert reply.get("records") == [], reply
    pushes = list(client.pushes)
    client.pushes.clear()
    return pushes


def upgrade_refusal(server, header_value: str) -> Response:
    """Tries a WebSocket upgrade with `Authorization: header_value`; returns
    the HTTP response that refused it (fails when the upgrade succeeds)."""
    try:
        ws = connect(server.ws_url(WS_PATH), open_timeout=TIMEOUT, close_timeout=2,
                     ping_interval=None, compression=None, proxy=None,
                     additional_headers={"Authorization": header_value}, legacy=True)
    except InvalidStatus as refused:
        response = refused.response
        headers = {k.lower(): v for k, v in response.headers.raw_items()}
        return Response(response.status_code, headers, bytes(response.body or b""))
    ws.close()
    raise AssertionError(f"the upgrade with Authorization: {header_value!r} was accepted")


def rest_as(server, token: str | None, method: str, path: str, body=None,
            headers: dict | None = None) -> Response:
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return rest(server, method, path, body, headers)


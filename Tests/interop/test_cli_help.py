"""Every command's `--help` lists exactly the options it takes, checked from
the outside and generated, not hand-listed:

- the commands come from `tally --help` (its Commands section), and the
  subcommands from each command's help (`Usage: tally CMD SUB …` lines and
  a Commands section); a subcommand whose `--help` prints its own text is
  checked on its own;
- every `--option` a help text lists (in its usage lines and its option
  lines; not one named in passing in prose) is accepted by that command: run as
  `tally CMD [SUB] --help --option` (a switch) or, when the parser says it
  needs a value, `--help --option=VALUE` with a plausible value; `--help`
  makes the command exit once its arguments are parsed, so nothing runs
  (no hub is served, no mirror run starts), and an option the parser does
  not know is refused before that (exit 2, "unknown option");
- an option the help does not name is refused with exit 2 and a message:
  `--no-such-option`, and each option the help of another subcommand of the
  same command (or of another command) names but this one does not.

Every run has a timeout, HOME and the TALLY_* variables point into a
temporary directory, and --server points at a closed 127.0.0.1 port.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import pytest

from conftest import TALLY_BIN

TIMEOUT = 20.0
OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)")
# Options every help may name in passing without taking them (`--help`), or
# that name another command's option in prose.
NOT_OPTIONS = {"help"}


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-help-home")
    values = {k: v for k, v in os.environ.items() if not k.startswith("TALLY_") and k != "XDG_DATA_HOME"}
    values.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"),
                  TALLY_SERVER=f"ws://127.0.0.1:{closed_port()}",
                  TALLY_MIRROR=str(home / "mirror.sqlite"), TALLY_OUTBOX=str(home / "outbox.sqlite"))
    return values, home


def run(env, *args: str) -> subprocess.CompletedProcess:
    values, _ = env
    try:
        return subprocess.run([str(TALLY_BIN), *args], capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL, env=values)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`tally {' '.join(args)}` did not exit within {TIMEOUT}s")


@lru_cache(maxsize=None)
def plain_help(*words: str) -> str:
    done = subprocess.run([str(TALLY_BIN), *words, "--help"], capture_output=True, text=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", ""), "HOME": "/nonexistent"})
    assert done.returncode == 0, f"tally {' '.join(words)} --help: exit {done.returncode}\n{done.stderr}"
    return done.stdout


def commands() -> list[str]:
    text = plain_help()
    section = text.split("Commands:", 1)[1]
    names = []
    for line in section.splitlines():
        match = re.match(r"^  ([a-z][a-z-]*)\s{2,}", line)
        if match:
            names.append(match.group(1))
        elif line.strip() and not line.startswith("  "):
            break
    assert len(names) >= 10, text
    return [name for name in names if name != "help"]


def subcommands(command: str) -> list[str]:
    """Subcommands named in the command's help: `tally CMD SUB` in usage
    lines (`new|advance` alternatives too) and a Commands section."""
    text = plain_help(command)
    found: list[str] = []
    for match in re.finditer(rf"tally {re.escape(command)} ([a-z][a-z-]*(?:\|[a-z][a-z-]*)*)", text):
        found += match.group(1).split("|")
    if "Commands:" in text:
        for line in text.split("Commands:", 1)[1].splitlines():
            match = re.match(r"^  ([a-z][a-z-]*)\s{2,}", line)
            if match:
                found.append(match.group(1))
            elif line.strip() and not line.startswith("  "):
                break
    return list(dict.fromkeys(found))


def contexts() -> list[tuple[str, ...]]:
    """Each command, and each subcommand whose --help is its own text."""
    result = []
    for command in commands():
        result.append((command,))
        for sub in subcommands(command):
            if plain_help(command, sub) != plain_help(command):
                result.append((command, sub))
    return result


def listed(words: tuple[str, ...]) -> list[str]:
    """The options the help lists: in its usage lines (`Usage: tally …`,
    `tally …` and `[--…]` continuations) and its option lines (`  --name …`).
    An option named in passing in prose (`the hub's --durability`) is not
    listed."""
    found = set()
    for line in plain_help(*words).splitlines():
        text = line.strip()
        if text.startswith(("Usage:", "tally ", "[--", "--")):
            found |= set(OPTION.findall(text if not text.startswith("--") else text.split("  ")[0]))
    return sorted(found - NOT_OPTIONS)


def value_for(option: str, home: Path) -> str:
    if option in ("server", "url", "urls", "peers", "hubs"):
        return f"ws://127.0.0.1:{closed_port()}"
    if option in ("store", "outbox", "config", "data", "out", "output", "cert", "key", "photo", "file", "tls-cert",
                  "tls-key", "backup", "from", "to-dir"):
        return str(home / f"{option}.value")
    if option == "policy":
        return "orders/=hub"
    if option in ("kind",):
        return "issue"
    if option in ("take",):
        return "hub"
    if option in ("gps",):
        return "48.85,2.29"
    return "1"


def accepted(env, words: tuple[str, ...], option: str) -> tuple[bool, str]:
    """Whether `tally WORDS --help --OPTION[=VALUE]` parses (exit 0 with the help)."""
    _, home = env
    done = run(env, *words, "--help", f"--{option}")
    if done.returncode != 0 and "needs a value" in done.stderr:
        done = run(env, *words, "--help", f"--{option}={value_for(option, home)}")
    ok = done.returncode == 0 and "Usage" in done.stdout
    return ok, f"exit {done.returncode}, stderr: {done.stderr.strip()[:300]}"


def refused(env, words: tuple[str, ...], option: str) -> tuple[bool, str]:
    """Whether `--OPTION` is refused as unknown: exit 2 with a message naming
    it (a switch the command takes would exit 0, an option with a value
    "needs a value")."""
    done = run(env, *words, "--help", f"--{option}")
    if done.returncode != 2 or f"--{option}" not in done.stderr or "unknown option" not in done.stderr:
        return False, f"exit {done.returncode}, stderr: {done.stderr.strip()[:300]}"
    return True, ""


def check_all(options, check) -> list[str]:
    """`check(option)` for each option, a few processes at a time; the problems."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(check, options))
    return [f"--{option}: {why}" for option, (ok, why) in zip(options, results) if not ok]


CONTEXTS = contexts() if Path(str(TALLY_BIN)).exists() else []


def test_every_command_and_subcommand_is_found():
    names = {" ".join(words) for words in CONTEXTS}
    for expected in ("serve", "order", "intake", "intake status", "mirror", "mirror run", "mirror status", "bench",
                     "bench echo", "verify", "get"):
        assert expected in names, sorted(names)


@pytest.mark.parametrize("words", CONTEXTS, ids=[" ".join(w) for w in CONTEXTS])
def test_every_listed_option_is_accepted(env, words):
    problems = check_all(listed(words), lambda option: accepted(env, words, option))
    assert not problems, f"tally {' '.join(words)} --help lists options it refuses:\n" + "\n".join(problems)


@pytest.mark.parametrize("words", CONTEXTS, ids=[" ".join(w) for w in CONTEXTS])
def test_options_not_listed_are_refused(env, words):
    mine = set(listed(words))
    # Options other helps of the same command list (siblings share code,
    # and so once shared option tables), and the options of every help.
    others = set()
    for other in CONTEXTS:
        if other[0] == words[0] or len(other) == 1:
            others |= set(listed(other))
    problems = check_all(sorted({"no-such-option"} | (others - mine)), lambda option: refused(env, words, option))
    assert not problems, (f"tally {' '.join(words)} takes options its --help does not list "
                          f"(or does not refuse them with exit 2):\n" + "\n".join(problems))


def test_intake_status_takes_the_server_its_help_lists(env):
    """The issue's case: `tally intake status --server URL` exited 2."""
    assert "--server" in plain_help("intake", "status")
    done = run(env, "intake", "status", "--server", f"ws://127.0.0.1:{closed_port()}")
    assert done.returncode != 2 and "unknown option" not in done.stderr, done.stderr


def test_bench_help_keeps_each_name_apart_from_its_text():
    """`analysis-fanout` is longer than the name column and once ran into
    its description ("analysis-fanoutthe fan-out load …")."""
    text = plain_help("bench")
    names = re.findall(r"tally bench ([a-z-]+) \[options\]", text)
    assert "analysis-fanout" in names, text[:400]
    for name in names:
        heads = [line for line in text.splitlines() if line.startswith(name)]
        assert any(line == name or line.startswith(name + "  ") for line in heads), (name, heads)

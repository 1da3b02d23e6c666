"""Starting and stopping a `tally serve` for the benchmark scripts.

The hub binds 127.0.0.1 on a free port with the given --data; it is stopped
by the PID this module started (or the hub's own PID under a wrapper such
as heaptrack), never by name.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys


def start(binary: str, data: str, wrap: list[str] | None = None,
          args: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    """Starts `binary serve` (under `wrap`, e.g. ["heaptrack"], with more
    serve `args`) and returns it with its port, once it prints "listening
    on"; exits naming the binary if it does not start."""
    process = subprocess.Popen([*(wrap or []), binary, "serve", "--host", "127.0.0.1", "--port", "0", "--data", data,
                                *(args or [])],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = ""
    while process.poll() is None and "listening on" not in line:
        line = process.stdout.readline().decode().strip()
    match = re.search(r":(\d+)$", line)
    if not match:
        stop(process)
        sys.exit(f"{binary} did not start: {line!r}")
    return process, int(match.group(1))


def stop(process: subprocess.Popen, pid: int | None = None) -> None:
    """Stops the hub started by `start`, by its PID (`pid`: the hub under a
    wrapper, which then ends with it)."""
    if pid is None or pid == process.pid:
        process.terminate()
    else:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()

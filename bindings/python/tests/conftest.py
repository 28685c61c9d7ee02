"""Shared fixtures: the test kit's MCP server (the CLI's `serve`) on
127.0.0.1, started per test and stopped whole, with what it counted."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: Past this, something hung.
BOUND = 20.0


@pytest.fixture
def anyio_backend() -> str:
    # The native futures are asyncio's (pyo3-async-runtimes).
    return "asyncio"


def kit_bin() -> str:
    """The CLI (`mcp-scoped-http`): $MCP_SCOPED_HTTP_BIN, else a build in
    target/."""
    given = os.environ.get("MCP_SCOPED_HTTP_BIN")
    if given:
        return given
    for build in ("release", "ci-release/release", "debug"):
        candidate = ROOT / "target" / build / "mcp-scoped-http"
        if candidate.exists():
            return str(candidate)
    pytest.fail("no mcp-scoped-http binary: set MCP_SCOPED_HTTP_BIN or `cargo build -p mcp-scoped-http-cli`")


@dataclass
class Stats:
    connections: int
    sessions_created: int
    deletes: int


class KitServer:
    """`mcp-scoped-http serve` in a process group of its own."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [kit_bin(), "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        line = self._first_line()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/\S*)", line)
        if not found:
            self.stop()
            pytest.fail(f"the test server said {line!r}")
        self.url = found.group(1)

    def _first_line(self) -> str:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(BOUND):
                self.stop()
                pytest.fail("the test server did not start")
        return self.process.stdout.readline().decode()

    def stop(self) -> Stats:
        """Stops the server (SIGINT to its group) and returns its counts."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            _, stderr = self.process.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.communicate()
            pytest.fail("the test server did not stop")
        found = re.search(
            rb"stopped after (\d+) connection\(s\), (\d+) session\(s\) created, (\d+) DELETE\(s\)",
            stderr,
        )
        if not found:
            pytest.fail(f"the test server's counts are missing: {stderr[-500:]!r}")
        return Stats(*(int(n) for n in found.groups()))


@pytest.fixture
def kit():
    """A factory of test kit servers; every one started is stopped."""
    started: list[KitServer] = []

    def start(*args: str) -> KitServer:
        server = KitServer(*args)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.stop()


def settled_ledger() -> dict[str, int]:
    """The crate's ledger once everything dropped so far was collected and
    reaped: the baseline a test compares its end with."""
    import gc

    import mcp_scoped_http

    gc.collect()
    assert mcp_scoped_http.drain(BOUND)
    return mcp_scoped_http.ledger()


def processes_marked(mark: str) -> list[int]:
    """The pids whose environment holds `mark` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found

"""The SDK's ClientSession over mcp_scoped_http.transport against real
servers: the official Python SDK's (1.x over Streamable HTTP and HTTP+SSE,
2.x, and both over stdio) and the TypeScript server-everything, as
`.ci/install-peers` installs them under .peers/ (skipped without them).
Each ends with the server's own account of the DELETE, or no process left."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession

import mcp_scoped_http
from conftest import BOUND, ROOT, processes_marked

pytestmark = pytest.mark.anyio

PEERS = ROOT / ".peers"
SOURCES = ROOT / "tests" / "peers"


def installed(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is not installed: run .ci/install-peers")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Peer:
    """A peer server in a process group of its own, its output in a file."""

    def __init__(self, command: list[str], port: int, tmp_path: Path, env: dict[str, str] | None = None):
        self.log = tmp_path / f"peer-{port}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the peer exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)  # polling the port, bounded
        self.stop()
        pytest.fail("the peer did not listen")

    def seen(self, method: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.startswith(f"SEEN {method} ")]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(BOUND)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture
def peers(tmp_path):
    started: list[Peer] = []

    def start(command: list[str], port: int, env: dict[str, str] | None = None) -> Peer:
        peer = Peer(command, port, tmp_path, env)
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


async def exercise(scoped: mcp_scoped_http.ScopedTransport, tool: str, arguments: dict, want: str) -> list[str]:
    async with scoped as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(BOUND):
                await session.initialize()
                names = [t.name for t in (await session.list_tools()).tools]
                result = await session.call_tool(tool, arguments)
                assert want in result.content[0].text, result
    return names


@pytest.mark.parametrize("mode", ["stateful", "json", "stateless"])
async def test_the_python_sdk_1x_server(peers, mode):
    python = installed(PEERS / "venv/bin/python")
    port = free_port()
    peer = peers([str(python), str(SOURCES / "python_server.py"), "--port", str(port), "--mode", mode], port)
    scoped = mcp_scoped_http.transport(f"http://127.0.0.1:{port}/mcp")
    names = await exercise(scoped, "add", {"a": 2, "b": 3}, "5")
    assert {"add", "echo", "count_down"} <= set(names), names
    if mode == "stateless":
        assert scoped.released.session == "no_session_id", scoped.released
    else:
        assert scoped.released.session == "deleted", scoped.released
        deadline = time.monotonic() + BOUND
        while not peer.seen("DELETE") and time.monotonic() < deadline:
            time.sleep(0.02)  # the server logs the DELETE as it answers; bounded
        assert len(peer.seen("DELETE")) == 1, peer.seen("DELETE")


async def test_the_python_sdk_1x_http_sse_server(peers):
    python = installed(PEERS / "venv/bin/python")
    port = free_port()
    peers([str(python), str(SOURCES / "python_server.py"), "--port", str(port), "--mode", "sse"], port)
    scoped = mcp_scoped_http.transport(f"http://127.0.0.1:{port}/sse")
    await exercise(scoped, "echo", {"text": "über"}, "über")
    assert scoped.released.session == "no_session_id", scoped.released


@pytest.mark.parametrize("mode", ["stateful", "stateless"])
async def test_the_python_sdk_2x_server(peers, mode):
    python = installed(PEERS / "venv2/bin/python")
    port = free_port()
    peers([str(python), str(SOURCES / "python2_server.py"), "--port", str(port), "--mode", mode], port)
    scoped = mcp_scoped_http.transport(f"http://127.0.0.1:{port}/mcp")
    await exercise(scoped, "add", {"a": 2, "b": 3}, "5")
    # Detected as 2026-07-28 (its server/discover), told to the SDK as the
    # 2025 revision its initialize proposed.
    assert scoped.released.session == "stateless", scoped.released


@pytest.mark.parametrize("venv", ["venv", "venv2"])
async def test_the_python_sdks_stdio_server(venv):
    python = installed(PEERS / venv / "bin/python")
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    scoped = mcp_scoped_http.transport(
        command=str(python), args=["-u", str(SOURCES / "python_stdio_server.py")], env={mark: "1"}
    )
    await exercise(scoped, "echo", {"text": "über"}, "über")
    assert scoped.released.process is not None, scoped.released
    assert processes_marked(mark) == []


async def test_server_everything(peers):
    main = installed(PEERS / "node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    port = free_port()
    peers(
        ["node", "--require", str(SOURCES / "loopback.cjs"), str(main), "streamableHttp"],
        port,
        env={"PORT": str(port)},
    )
    scoped = mcp_scoped_http.transport(f"http://127.0.0.1:{port}/mcp")
    names = await exercise(scoped, "echo", {"message": "über"}, "über")
    assert "get-sum" in names, names
    assert scoped.released.session == "deleted", scoped.released

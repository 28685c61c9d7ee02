"""mcp_scoped_http.connect: the crate runs the protocol for a Python host
(discovery, calls with progress, requests, close), against the test kit
server, and every way out leaves nothing."""

from __future__ import annotations

import socket
import threading
import uuid

import anyio
import pytest

import mcp_scoped_http
from conftest import BOUND, kit_bin, processes_marked, settled_ledger

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28", "2024-11-05"])
async def test_connect_discovers_calls_and_close_releases(kit, revision):
    server = kit("--revision", revision, "--sse") if revision != "2024-11-05" else kit("--revision", revision)
    with anyio.fail_after(BOUND):
        session = await mcp_scoped_http.connect(server.url, bearer="a-token")
        async with session:
            info = session.info
            assert info["protocol_version"] == revision, info
            names = [tool["name"] for tool in session.catalog["tools"]]
            assert names == ["tool-000", "tool-001", "tool-002"]
            seen = []
            result = await session.call_tool(
                "tool-001", {"text": "hi"}, on_progress=lambda *p: seen.append(p)
            )
            assert result["structuredContent"]["tool"] == "tool-001", result
            if revision != "2024-11-05":
                assert [p[0] for p in seen] == [1, 2, 3], seen
            prompts = session.catalog["prompts"]
            prompt = await session.get_prompt(prompts[0]["name"], {})
            assert prompt["messages"], prompt
    assert session.closed
    assert session.released is not None
    assert session.released.session == {"2025-11-25": "deleted", "2026-07-28": "stateless", "2024-11-05": "no_session_id"}[revision]
    assert await session.close() is session.released, "close is idempotent"
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert stats.deletes == (1 if revision == "2025-11-25" else 0), stats


async def test_a_progress_callback_that_blocks_holds_up_no_other_request(kit):
    """A callable that blocks (the GIL released) runs on a thread of its
    own: another request goes on meanwhile, and the call's result comes
    after every update."""
    server = kit("--revision", "2025-11-25", "--sse")
    entered, release = threading.Event(), threading.Event()
    seen = []

    def blocking(*update):
        seen.append(update)
        entered.set()
        release.wait(BOUND)

    with anyio.fail_after(BOUND):
        session = await mcp_scoped_http.connect(server.url)
        async with session:
            results = []

            async def slow():
                results.append(await session.call_tool("tool-001", {"text": "hi"}, on_progress=blocking))

            async with anyio.create_task_group() as group:
                group.start_soon(slow)
                while not entered.is_set():  # bounded by fail_after
                    await anyio.sleep(0.01)
                try:
                    with anyio.fail_after(5):
                        other = await session.call_tool("tool-002", {"text": "x"})
                finally:
                    release.set()
                assert other["structuredContent"]["tool"] == "tool-002", other
            assert [update[0] for update in seen] == [1, 2, 3], seen
            assert results[0]["structuredContent"]["tool"] == "tool-001", results


async def test_a_stdio_session_ends_its_tree():
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    with anyio.fail_after(BOUND):
        async with await mcp_scoped_http.connect(
            command=kit_bin(), args=["serve", "--stdio"], env={mark: "1"}
        ) as session:
            assert processes_marked(mark)
            assert len(session.catalog["tools"]) == 3
            await session.call_tool("tool-000", {"text": "hi"})
    assert session.released.process is not None
    assert processes_marked(mark) == []


async def test_errors_are_the_predicates_exceptions(kit):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(mcp_scoped_http.McpScopedHttpError) as raised:
        await mcp_scoped_http.connect(f"http://127.0.0.1:{port}/mcp", timeout=BOUND)
    assert raised.value.retryable is True, raised.value
    with pytest.raises(mcp_scoped_http.ConfigError):
        await mcp_scoped_http.connect("not a url")
    with pytest.raises(mcp_scoped_http.ConfigError):
        await mcp_scoped_http.connect(command="/nonexistent/program")
    server = kit()
    async with await mcp_scoped_http.connect(server.url) as session:
        with pytest.raises(mcp_scoped_http.McpScopedHttpError) as raised:
            await session.request("no/such/method")
        assert raised.value.rpc_code == -32601, raised.value
    with pytest.raises(mcp_scoped_http.ClosedError):
        await session.call_tool("tool-000")


async def test_a_connect_cancelled_at_any_moment_leaves_nothing(kit):
    server = kit()
    before = settled_ledger()
    for step in range(30):
        with anyio.move_on_after(step / 1000):
            async with await mcp_scoped_http.connect(server.url) as session:
                await session.call_tool("tool-000", {"text": "hi"})
    assert settled_ledger() == before
    stats = server.stop()
    assert stats.deletes == stats.sessions_created, stats


async def test_a_session_dropped_unclosed_is_released_by_the_reaper(kit):
    import gc

    server = kit()
    session = await mcp_scoped_http.connect(server.url)
    await session.call_tool("tool-000", {"text": "hi"})
    del session
    gc.collect()
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats

"""mcp_scoped_http.Fleet: an mcpServers document of HTTP and stdio test
kit servers (and a broken entry) run, called, and shut down with nothing
left."""

from __future__ import annotations

import json
import uuid

import anyio
import pytest

import mcp_scoped_http
from conftest import BOUND, kit_bin, processes_marked, settled_ledger

pytestmark = pytest.mark.anyio


async def test_a_fleet_runs_its_config_and_shutdown_leaves_nothing(kit, tmp_path, monkeypatch):
    web = kit()
    modern = kit("--revision", "2026-07-28")
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    monkeypatch.setenv("KIT_TOKEN", "a-token")
    config = {
        "mcpServers": {
            "web": {"url": web.url, "headers": {"Authorization": "Bearer ${KIT_TOKEN}"}},
            "modern": {"url": modern.url},
            "local": {"command": kit_bin(), "args": ["serve", "--stdio"], "env": {mark: "1"}},
            "broken": {"url": 42},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    async with mcp_scoped_http.Fleet() as fleet:
        applied = await fleet.apply(path)
        assert sorted(applied["started"]) == ["broken", "local", "modern", "web"], applied
        assert applied["invalid"], applied
        ready = await fleet.ready(BOUND)
        assert sorted(ready["ready"]) == ["local", "modern", "web"], ready
        assert list(ready["not_ready"]) == ["broken"], ready
        assert processes_marked(mark)
        qualified = sorted(t["qualified_name"] for t in fleet.catalog["tools"])
        assert len(qualified) == 9 and "web__tool-001" in qualified, qualified
        with anyio.fail_after(BOUND):
            result = await fleet.call("local__tool-002", {"text": "hi"})
            assert result["structuredContent"]["tool"] == "tool-002", result
            result = await fleet.call_tool("modern", "tool-000", {"text": "hi"})
            assert result["structuredContent"]["tool"] == "tool-000", result
        with pytest.raises(mcp_scoped_http.McpScopedHttpError):
            await fleet.call_tool("broken", "tool-000")
        # Reconcile by name: `modern` stops, the rest are left alone.
        del config["mcpServers"]["modern"]
        applied = await fleet.apply(config)
        assert applied["stopped"] == ["modern"], applied
    report = fleet.shutdown_report
    assert report is not None and sorted(report) == ["broken", "local", "web"], report
    assert processes_marked(mark) == []
    assert mcp_scoped_http.drain(BOUND)
    assert web.stop().deletes == 1
    assert modern.stop().deletes == 0


def web_and_local(web, mark: str, down: str | None = None) -> dict:
    """A config of the kit server `web` and a stdio kit server marked
    `mark` (and `down`, a URL nothing answers, when given)."""
    servers = {
        "web": {"url": web.url},
        "local": {"command": kit_bin(), "args": ["serve", "--stdio"], "env": {mark: "1"}},
    }
    if down is not None:
        servers["down"] = {"url": down}
    return {"mcpServers": servers}


async def test_a_host_stopped_with_a_reconnect_parked_leaves_nothing(kit):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    web = kit()
    before = settled_ledger()
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    fleet = mcp_scoped_http.Fleet()
    await fleet.apply(web_and_local(web, mark, down=f"http://127.0.0.1:{closed_port}/mcp"))
    ready = await fleet.ready(BOUND)
    assert sorted(ready["ready"]) == ["local", "web"], ready
    # The events since the fleet began: each server's states, the catalog.
    seen = []
    with anyio.move_on_after(1):  # what is queued now; then stop reading
        async for event in fleet.events():
            seen.append(event)
            if {"web", "local"} <= {e["server"] for e in seen if e["kind"] == "catalog"}:
                break
    assert {"web", "local"} <= {e["server"] for e in seen if e["kind"] == "catalog"}, seen
    assert any(e["kind"] == "state" and e["server"] == "down" for e in seen), seen
    assert "down" in ready["not_ready"], ready
    # `down` waits to reconnect (its backoff), the others are up: stop now.
    with anyio.fail_after(BOUND):
        report = await fleet.shutdown()
    assert report["down"] == "no_session", report
    assert report["web"].startswith("closed"), report
    assert processes_marked(mark) == []
    assert settled_ledger() == before
    assert mcp_scoped_http.drain(BOUND)
    stats = web.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats
    with pytest.raises(mcp_scoped_http.McpScopedHttpError):
        await fleet.call_tool("web", "tool-000")


async def test_a_fleet_dropped_without_shutdown_is_released(kit):
    """A host that forgets `shutdown` (the fleet collected, not closed):
    its sessions are DELETEd, its stdio tree is gone and the ledger is
    back, through the reaper."""
    import gc

    web = kit()
    before = settled_ledger()
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    fleet = mcp_scoped_http.Fleet()
    await fleet.apply(web_and_local(web, mark))
    ready = await fleet.ready(BOUND)
    assert sorted(ready["ready"]) == ["local", "web"], ready
    assert processes_marked(mark)
    del fleet
    gc.collect()
    with anyio.fail_after(BOUND):
        while processes_marked(mark):
            await anyio.sleep(0.02)
    assert settled_ledger() == before
    stats = web.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
async def test_the_hosts_handlers_answer_the_servers_requests(kit, revision):
    server = kit("--revision", revision, "--ask")
    asked = []

    async def on_elicitation(name, params):
        asked.append(("elicitation", name, params["message"]))
        return {"action": "accept", "content": {"confirm": True}}

    def on_sampling(name, params):  # a plain function works too
        asked.append(("sampling", name, params["messages"][0]["role"]))
        return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "host"}

    roots = [{"uri": "file:///work", "name": "work"}]
    async with mcp_scoped_http.Fleet(
        on_sampling=on_sampling, on_elicitation=on_elicitation, roots=roots
    ) as fleet:
        await fleet.apply({"mcpServers": {"kit": {"url": server.url}}})
        assert (await fleet.ready(BOUND))["ready"] == ["kit"]
        with anyio.fail_after(BOUND):
            if revision == "2025-11-25":
                # The kit asks only in 2026-07-28: a 2025 call is a tool error.
                result = await fleet.call_tool("kit", "ask-elicitation")
                assert result.get("isError"), result
                return
            result = await fleet.call_tool("kit", "ask-elicitation")
            assert result["structuredContent"]["inputResponses"]["confirm"]["action"] == "accept", result
            result = await fleet.call_tool("kit", "ask-sampling")
            assert result["structuredContent"]["inputResponses"]["sample"]["model"] == "host", result
            result = await fleet.call_tool("kit", "ask-roots")
            assert result["structuredContent"]["inputResponses"]["roots"]["roots"] == roots, result
    assert [kind for kind, *_ in asked] == ["elicitation", "sampling"], asked
    assert all(name == "kit" for _, name, _ in asked), asked


async def test_a_handler_that_raises_is_the_requests_error(kit):
    server = kit("--revision", "2026-07-28", "--ask")

    async def refuse(name, params):
        raise RuntimeError("not now")

    async with mcp_scoped_http.Fleet(on_elicitation=refuse) as fleet:
        await fleet.apply({"mcpServers": {"kit": {"url": server.url}}})
        await fleet.ready(BOUND)
        with anyio.fail_after(BOUND):
            with pytest.raises(mcp_scoped_http.McpScopedHttpError) as raised:
                await fleet.call_tool("kit", "ask-elicitation")
    assert "not now" in str(raised.value), raised.value


def test_handlers_need_a_running_loop():
    with pytest.raises(mcp_scoped_http.ConfigError):
        mcp_scoped_http.Fleet(on_sampling=lambda name, params: {})


async def test_a_handler_outlasting_its_request_is_cancelled_with_it(kit):
    server = kit("--revision", "2026-07-28", "--ask")
    started, cancelled = anyio.Event(), anyio.Event()

    async def never(name, params):
        started.set()
        try:
            await anyio.sleep_forever()
        except BaseException:
            cancelled.set()
            raise

    async with mcp_scoped_http.Fleet(on_elicitation=never) as fleet:
        await fleet.apply({"mcpServers": {"kit": {"url": server.url}}})
        await fleet.ready(BOUND)
        with pytest.raises(mcp_scoped_http.McpScopedHttpError):
            await fleet.call_tool("kit", "ask-elicitation", timeout=1)
        with anyio.fail_after(BOUND):
            await started.wait()
            await cancelled.wait()

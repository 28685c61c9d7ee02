"""A host over mcp_scoped_http.transport: Microsoft agent-framework's MCP
tools (`agent_framework.MCPStreamableHTTPTool`, `MCPStdioTool`), whose
`get_mcp_client()` is the one hook for the transport they hand to the SDK's
`Client(server=...)` inside the tool's own lifecycle task and exit stack.
Against the test kit server: the tool connects, discovers, calls and closes,
and what it leaves is counted (sessions, DELETEs, processes). Skipped where
agent-framework is not installed (it needs mcp 2.x)."""

from __future__ import annotations

import socket
import uuid

import anyio
import pytest

agent_framework = pytest.importorskip("agent_framework")

import mcp_scoped_http  # noqa: E402
from conftest import BOUND, kit_bin, processes_marked  # noqa: E402

pytestmark = [
    pytest.mark.anyio,
    # agent-framework pings a legacy (2025) session, which mcp 2.x marks deprecated.
    pytest.mark.filterwarnings("ignore:ping is removed"),
]

TOOLS = ["tool-000", "tool-001", "tool-002"]


class ScopedHTTPTool(agent_framework.MCPStreamableHTTPTool):
    """agent-framework's HTTP tool over our transport instead of the SDK's
    streamable_http_client; keeps every transport it made, to read
    `.released` after the tool closed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transports: list[mcp_scoped_http.ScopedTransport] = []

    def get_mcp_client(self):
        scoped = mcp_scoped_http.transport(self.url)
        self.transports.append(scoped)
        return scoped


class ScopedStdioTool(agent_framework.MCPStdioTool):
    """agent-framework's stdio tool over our supervised stdio transport."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.transports: list[mcp_scoped_http.ScopedTransport] = []

    def get_mcp_client(self):
        scoped = mcp_scoped_http.transport(command=self.command, args=self.args, env=self.env)
        self.transports.append(scoped)
        return scoped


def text_of(contents) -> str:
    return "".join(content.text or "" for content in contents if content.type == "text")


async def discover_and_call(tool) -> None:
    """What an agent does with the tool: its functions, a call by name, and
    a call through the FunctionTool it would hand to a model."""
    with anyio.fail_after(BOUND):
        await tool.connect()
        assert tool.is_connected
        names = [function.name for function in tool.functions]
        assert names[:3] == TOOLS, names
        direct = await tool.call_tool("tool-001", text="hi")
        assert text_of(direct), direct
        function = next(function for function in tool.functions if function.name == "tool-002")
        invoked = await function.invoke(arguments={"text": "hello"})
        assert text_of(invoked), invoked


@pytest.mark.parametrize(
    ("revision", "session", "counts"),
    [("2025-11-25", "deleted", (1, 1)), ("both", "stateless", (0, 0))],
)
async def test_the_http_tool_over_our_transport_leaves_no_session(kit, revision, session, counts):
    server = kit("--revision", revision)
    tool = ScopedHTTPTool("kit", server.url, load_prompts=False)
    async with tool:
        await discover_and_call(tool)
    assert not tool.is_connected
    assert len(tool.transports) == 1, "one connection, no reconnect"
    released = tool.transports[0].released
    assert released is not None and released.session == session, released
    assert released.owned_client_released
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == counts, stats


async def test_the_http_tool_with_prompts_closed_without_the_context_manager(kit):
    # The default configuration (tools and prompts discovered), closed by
    # close() as a long-lived agent would, not by `async with`.
    server = kit()
    tool = ScopedHTTPTool("kit", server.url)
    try:
        await discover_and_call(tool)
        names = [function.name for function in tool.functions]
        assert names[3:] == ["prompt-000", "prompt-001"], names
        with anyio.fail_after(BOUND):
            assert await tool.get_prompt("prompt-000")
    finally:
        with anyio.fail_after(BOUND):
            await tool.close()
    assert len(tool.transports) == 1
    released = tool.transports[0].released
    assert released is not None and released.session == "deleted", released
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats


async def test_the_stdio_tool_over_our_transport_ends_the_server_tree(tmp_path):
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    tool = ScopedStdioTool("kit", kit_bin(), args=["serve", "--stdio"], env={mark: "1"}, load_prompts=False)
    async with tool:
        assert processes_marked(mark), "the server runs"
        await discover_and_call(tool)
    assert len(tool.transports) == 1
    released = tool.transports[0].released
    assert released is not None and released.process is not None, released
    assert processes_marked(mark) == [], "the tree ended and was reaped"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_a_connect_that_fails_raises_and_leaves_nothing():
    tool = ScopedHTTPTool("closed", f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(agent_framework.exceptions.ToolException) as raised:
        with anyio.fail_after(BOUND):
            async with tool:
                pytest.fail("connected to a closed port")
    assert "connection refused" in str(raised.value), raised.value
    # The SDK's own error, as its contract wants, carrying the transport's
    # cause and whether a retry may succeed.
    answered = [e for e in causes(raised.value) if getattr(getattr(e, "error", None), "data", None)]
    assert answered and answered[0].error.data["transport"] == "mcp-scoped-http", repr(raised.value)
    assert answered[0].error.data["retryable"] is True
    assert not tool.is_connected
    assert len(tool.transports) == 1, "no retry of its own"
    released = tool.transports[0].released
    assert released is not None and released.session == "not_owned", released
    assert mcp_scoped_http.drain(BOUND)


def causes(error: BaseException):
    """The error, its causes and contexts, and the members of groups."""
    seen, pending = [], [error]
    while pending:
        current = pending.pop()
        if current is None or any(current is known for known in seen):
            continue
        seen.append(current)
        pending += [current.__cause__, current.__context__]
        pending += getattr(current, "exceptions", ())
        pending += [arg for arg in current.args if isinstance(arg, BaseException)]
    return seen


async def test_a_failed_connect_then_a_good_one_with_the_same_tool(kit):
    # The tool is usable again after the failure: the same tool connects to
    # a live server and leaves nothing there either.
    server = kit()
    port = free_port()
    tool = ScopedHTTPTool("kit", f"http://127.0.0.1:{port}/mcp", load_prompts=False)
    with pytest.raises(agent_framework.exceptions.ToolException):
        with anyio.fail_after(BOUND):
            await tool.connect()
    assert tool.transports[0].released is not None
    assert tool.transports[0].released.session == "not_owned"
    tool.url = server.url
    try:
        await discover_and_call(tool)
    finally:
        with anyio.fail_after(BOUND):
            await tool.close()
    assert len(tool.transports) == 2
    assert tool.transports[1].released is not None
    assert tool.transports[1].released.session == "deleted"
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats

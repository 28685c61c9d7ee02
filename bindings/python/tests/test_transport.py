"""The official Python SDK's ClientSession (and 2.x's Client) over
mcp_scoped_http.transport, against the test kit server over HTTP in every
era and as a stdio server: the session's work, and what is left after
every way out (a close, a failed connect, a cancelled one)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import socket
import uuid

import anyio
import pytest
from mcp import ClientSession
from mcp.shared.message import SessionMessage

import mcp_scoped_http
from conftest import BOUND, kit_bin, processes_marked, settled_ledger

SDK_MAJOR = int(importlib.metadata.version("mcp").split(".")[0])

pytestmark = pytest.mark.anyio


async def list_and_call(read, write) -> None:
    async with ClientSession(read, write) as session:
        with anyio.fail_after(BOUND):
            await session.initialize()
            tools = await session.list_tools()
            names = [tool.name for tool in tools.tools]
            assert names[:3] == ["tool-000", "tool-001", "tool-002"], names
            result = await session.call_tool("tool-001", {"text": "hi"})
            assert not (result.isError if SDK_MAJOR == 1 else result.is_error)


@pytest.mark.parametrize(
    ("revision", "session"),
    [("2025-11-25", "deleted"), ("2026-07-28", "stateless"), ("both", "stateless"), ("2024-11-05", "no_session_id")],
)
async def test_a_client_session_works_in_every_era_and_leaves_nothing(kit, revision, session):
    server = kit("--revision", revision)
    scoped = mcp_scoped_http.transport(server.url, bearer="a-token")
    async with scoped as (read, write):
        await list_and_call(read, write)
    released = scoped.released
    assert released is not None and released.session == session, released
    assert released.owned_client_released
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert stats.deletes == (1 if session == "deleted" else 0), stats
    assert stats.deletes == stats.sessions_created or session != "deleted", stats


async def test_a_stdio_server_is_supervised_and_its_tree_ends_with_the_block(tmp_path):
    before = settled_ledger()
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    scoped = mcp_scoped_http.transport(
        command=kit_bin(), args=["serve", "--stdio"], env={mark: "1"}, cwd=tmp_path
    )
    async with scoped as (read, write):
        assert processes_marked(mark), "the server runs"
        await list_and_call(read, write)
    assert scoped.released is not None and scoped.released.process is not None, scoped.released
    assert processes_marked(mark) == [], "the tree ended and was reaped"
    assert mcp_scoped_http.ledger() == before


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def leaf(error: BaseException) -> BaseException:
    """The one error inside the SDK's task groups."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def sdk_error() -> type[Exception]:
    exceptions = importlib.import_module("mcp.shared.exceptions")
    return getattr(exceptions, "MCPError", None) or exceptions.McpError


async def test_a_connect_that_fails_is_the_sdks_error_with_our_cause_and_leaves_nothing():
    scoped = mcp_scoped_http.transport(f"http://127.0.0.1:{free_port()}/mcp")
    with pytest.raises(BaseException) as raised:
        async with scoped as (read, write):
            async with ClientSession(read, write) as session:
                with anyio.fail_after(BOUND):
                    await session.initialize()
    failed = leaf(raised.value)
    # The request was answered with a JSON-RPC error naming the cause, as
    # the SDK's contract wants: its own exception, raised to the caller.
    assert isinstance(failed, sdk_error()), repr(raised.value)
    assert "connection refused" in str(failed), str(failed)
    error = getattr(failed, "error", None)
    assert error is not None and error.data["transport"] == "mcp-scoped-http", error
    assert error.data["retryable"] is True
    assert scoped.released is not None and scoped.released.session == "not_owned"


async def test_a_failed_notification_does_not_raise_and_a_closed_transport_is_closed(kit, caplog):
    from mcp_scoped_http._transport import _parse

    def notification() -> SessionMessage:
        return SessionMessage(_parse(b'{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}'))

    server = kit()
    scoped = mcp_scoped_http.transport(server.url)
    async with scoped as (read, write):
        async with ClientSession(read, write) as session:
            with anyio.fail_after(BOUND):
                await session.initialize()
                server.stop()  # every later POST fails
                await write.send(notification())  # logged, not raised
                with pytest.raises(sdk_error()):
                    await session.list_tools()
    assert "could not send 'notifications/roots/list_changed'" in caplog.text
    with pytest.raises(anyio.ClosedResourceError):
        await write.send(notification())


async def test_a_connect_cancelled_at_any_moment_leaves_no_session(kit):
    server = kit()
    before = settled_ledger()
    # Cancelled after 0, 1, 2, ... ms: before the POST, while it is in
    # flight, after the session exists, during list_tools.
    for step in range(30):
        scoped = mcp_scoped_http.transport(server.url)
        with anyio.move_on_after(step / 1000):
            async with scoped as (read, write):
                await list_and_call(read, write)
        assert scoped.released is not None or step == 0, step
    assert settled_ledger() == before, "hooks, clients, tasks, sessions, reaps, processes"
    stats = server.stop()
    assert stats.deletes == stats.sessions_created, stats


async def test_a_transport_dropped_unclosed_is_released_by_the_reaper(kit):
    server = kit()
    scoped = mcp_scoped_http.transport(server.url)
    read, write = await scoped.__aenter__()
    async with ClientSession(read, write) as session:
        with anyio.fail_after(BOUND):
            await session.initialize()
    del read, write, session, scoped  # never closed
    import gc

    gc.collect()
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == (1, 1), stats


async def test_bad_arguments_are_refused_before_anything_starts():
    with pytest.raises(mcp_scoped_http.ConfigError):
        mcp_scoped_http.transport()
    with pytest.raises(mcp_scoped_http.ConfigError):
        mcp_scoped_http.transport("http://127.0.0.1:1/mcp", command="x")
    with pytest.raises(mcp_scoped_http.ConfigError):
        async with mcp_scoped_http.transport("ftp://127.0.0.1/mcp"):
            pass
    with pytest.raises(mcp_scoped_http.ConfigError):
        async with mcp_scoped_http.transport(command="/nonexistent/program"):
            pass


@pytest.mark.skipif(SDK_MAJOR < 2, reason="Client(transport) is the 2.x API")
async def test_the_2x_client_takes_it_as_its_transport_and_speaks_2026(kit):
    from mcp import Client

    server = kit("--revision", "both")
    scoped = mcp_scoped_http.transport(server.url)
    async with Client(scoped) as client:
        with anyio.fail_after(BOUND):
            assert client.protocol_version == "2026-07-28"
            tools = await client.list_tools()
            assert len(tools.tools) == 3
            await client.call_tool("tool-002", {"text": "hi"})
    assert scoped.released is not None and scoped.released.session == "stateless"


def test_a_forked_child_refuses_to_use_the_runtime():
    import os
    import time

    # The runtime exists in the parent (the tests above used it).
    mcp_scoped_http._native.http("http://127.0.0.1:1/mcp")
    pid = os.fork()
    if pid == 0:  # the child: every call refuses, none hangs
        code = 1
        try:
            mcp_scoped_http._native.http("http://127.0.0.1:1/mcp")
        except mcp_scoped_http.ClosedError:
            code = 0 if mcp_scoped_http.drain(1.0) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.01)  # polling the child's exit, bounded
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


async def test_a_lent_client_is_shared_and_never_closed(kit):
    server = kit()
    client = mcp_scoped_http.HttpClient(no_proxy=True)
    for round in range(3):
        scoped = mcp_scoped_http.transport(server.url, bearer=f"token-{round}", client=client)
        async with scoped as (read, write):
            await list_and_call(read, write)
            assert client.hooks == 1, "the transport's bearer hook, on the lent client"
        assert client.hooks == 0, "removed on the way out"
        assert scoped.released.session == "deleted"
        assert not scoped.released.owned_client_released
        # A session of the crate's own through the same client.
        async with await mcp_scoped_http.connect(server.url, client=client) as session:
            assert len(session.catalog["tools"]) == 3
        assert not session.released.owned_client_released
    assert mcp_scoped_http.drain(BOUND)
    stats = server.stop()
    assert (stats.sessions_created, stats.deletes) == (6, 6), stats
    # The server is gone; the client still works for another server.
    other = kit()
    async with mcp_scoped_http.transport(other.url, client=client) as (read, write):
        await list_and_call(read, write)
    with pytest.raises(mcp_scoped_http.ConfigError):
        mcp_scoped_http.HttpClient(roots_pem=b"not pem")


async def test_oauth_runs_the_flow_through_the_loopback_agent(kit):
    import threading
    import urllib.request

    server = kit("--oauth")
    shown = []

    def browse(url: str) -> None:
        # The browser: the kit's authorization server approves at once and
        # redirects to our loopback listener.
        shown.append(url)
        threading.Thread(target=lambda: urllib.request.urlopen(url, timeout=BOUND).read(), daemon=True).start()

    oauth = mcp_scoped_http.OAuth(open_browser=False, on_url=browse)
    scoped = mcp_scoped_http.transport(server.url, oauth=oauth)
    async with scoped as (read, write):
        await list_and_call(read, write)
    assert len(shown) == 1 and "code_challenge" in shown[0], shown
    assert scoped.released.session == "deleted"
    # Without OAuth the same server refuses: the SDK's error, status 401.
    with pytest.raises(BaseException) as raised:
        async with mcp_scoped_http.transport(server.url) as (read, write):
            await list_and_call(read, write)
    refused = leaf(raised.value)
    assert isinstance(refused, sdk_error()), repr(raised.value)
    assert refused.error.data["status"] == 401, refused.error


async def test_a_message_on_its_way_to_a_cancelled_receive_goes_to_the_next(tmp_path):
    """A receive cancelled while its answer was on its way to the loop (the
    loop busy meanwhile, as a host's can be): the next receive gets that
    answer, each once and in order."""
    import asyncio
    import time

    from mcp_scoped_http._transport import _parse

    def message(text: str) -> SessionMessage:
        return SessionMessage(_parse(text.encode()))

    def request_id(got: SessionMessage) -> object:
        return getattr(got.message, "root", got.message).id

    scoped = mcp_scoped_http.transport(command=kit_bin(), args=["serve", "--stdio"], cwd=tmp_path)
    async with scoped as (read, write):
        with anyio.fail_after(BOUND):
            await write.send(message(
                '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
                '"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
            ))
            assert request_id(await read.receive()) == 1
            await write.send(message('{"jsonrpc":"2.0","method":"notifications/initialized"}'))
            seen = []
            for n in range(2, 22):
                await write.send(message(f'{{"jsonrpc":"2.0","id":{n},"method":"ping"}}'))
                receiving = asyncio.ensure_future(read.receive())
                await asyncio.sleep(0)  # it waits for the answer now
                time.sleep(0.005)  # the loop busy while the answer comes
                receiving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    seen.append(request_id(await receiving))
                if len(seen) < n - 1:
                    seen.append(request_id(await read.receive()))
    assert seen == list(range(2, 22)), seen


#: A stdio server that answers `initialize`, and to `tell` with
#: `{"n": N}` sends the notifications N and N + 1, in that order, before
#: its answer. (The answers to requests in flight together reach the SDK
#: in no set order, the SDK matches them by id; notifications keep the
#: server's order.)
IN_ORDER = """
import json, sys
def send(message):
    print(json.dumps(dict(jsonrpc="2.0", **message)), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue
    result = {}
    if request["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {},
                  "serverInfo": {"name": "in-order", "version": "1"}}
    elif request["method"] == "tell":
        for n in (request["params"]["n"], request["params"]["n"] + 1):
            send({"method": "notifications/message", "params": {"level": "info", "data": n}})
    send({"id": request["id"], "result": result})
"""


async def opened_in_order(scoped) -> object:
    """The native transport of `scoped` (entered), past the handshake."""
    import json

    native = scoped._native
    with anyio.fail_after(BOUND):
        await native.send(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
            b'"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
        )
        assert json.loads(await native.receive())["id"] == 1
        await native.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    return native


def told(message: bytes) -> object:
    """A notification's number, or None for an answer."""
    import json

    parsed = json.loads(message)
    return parsed["params"]["data"] if "method" in parsed else None


async def test_order_is_kept_when_a_receive_is_cancelled_with_its_message_in_hand(tmp_path):
    """The notifications came while the loop was busy; the receive waiting
    for them is cancelled in the same turn of the loop that hands them over
    (before it hears of the cancellation), and another receive asks: it
    gets the first, then the second."""
    import asyncio
    import sys
    import time

    scoped = mcp_scoped_http.transport(
        command=sys.executable, args=["-c", IN_ORDER], cwd=tmp_path, protocol_version="2025-11-25"
    )
    async with scoped:
        native = await opened_in_order(scoped)
        for n in range(0, 40, 2):
            waiting = native.receive()
            await native.send(f'{{"jsonrpc":"2.0","id":{n + 2},"method":"tell","params":{{"n":{n}}}}}'.encode())
            time.sleep(0.02)  # the loop busy while they come
            got = []
            if waiting.done():  # the first came while the request was sent
                got.append(told(waiting.result()))
            else:
                asyncio.get_running_loop().call_soon(waiting.cancel)  # as a timeout would
                await asyncio.sleep(0)
            with anyio.fail_after(BOUND):
                while len(got) < 3:
                    got.append(told(await native.receive()))
            assert got == [n, n + 1, None], got


async def test_two_receives_at_once_each_get_a_message_in_turn(tmp_path):
    import asyncio
    import sys

    scoped = mcp_scoped_http.transport(
        command=sys.executable, args=["-c", IN_ORDER], cwd=tmp_path, protocol_version="2025-11-25"
    )
    async with scoped:
        native = await opened_in_order(scoped)
        first, second = native.receive(), native.receive()
        await native.send(b'{"jsonrpc":"2.0","id":2,"method":"tell","params":{"n":7}}')
        with anyio.fail_after(BOUND):
            got = await asyncio.gather(first, second, native.receive())
        assert [told(message) for message in got] == [7, 8, None]


async def test_a_receive_waiting_when_its_transport_is_dropped_ends_with_none(tmp_path):
    """Dropped unclosed with a receive waiting: the receive has None (the
    end), and the server's tree is gone after the reaper's drain."""
    import gc
    import sys

    before = settled_ledger()
    mark = f"MCP_SCOPED_HTTP_PY_{uuid.uuid4().hex}"
    scoped = mcp_scoped_http.transport(
        command=sys.executable, args=["-c", IN_ORDER], env={mark: "1"}, cwd=tmp_path,
        protocol_version="2025-11-25",
    )
    await scoped.__aenter__()
    native = await opened_in_order(scoped)
    waiting = native.receive()
    del native, scoped  # never closed
    gc.collect()
    with anyio.fail_after(BOUND):
        assert await waiting is None
    assert mcp_scoped_http.drain(BOUND)
    assert processes_marked(mark) == [], "the tree ended and was reaped"
    assert mcp_scoped_http.ledger() == before

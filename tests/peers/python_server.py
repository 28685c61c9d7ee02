"""An MCP server on the official Python SDK (PyPI `mcp`, 1.x: FastMCP), a peer
for tests/interop.rs. Streamable HTTP on 127.0.0.1, endpoint /mcp, with the
SDK's default DNS-rebinding protection (Host must be 127.0.0.1:*, no foreign
Origin).

    python_server.py --port P --mode stateful|stateless|json|paginated|sse [--bearer TOKEN] [--shout]

- stateful: sessions (an Mcp-Session-Id), SSE answers.
- stateless: no session id; DELETE is answered 405.
- json: sessions, answers as application/json.
- paginated: stateful, plus filler tools, and the low-level `tools/list`
  handler replaced by one that serves PAGE_SIZE tools per page with
  `nextCursor` (FastMCP never paginates by itself).
- sse: the deprecated 2024-11-05 HTTP+SSE transport instead: `GET /sse`
  opens the stream, whose first event (`endpoint`) names
  `/messages/?session_id=<hex>`; each POST there is answered 202 and its
  answer comes on the stream. No /mcp endpoint.

Tools: `echo`, `add`, `count_down` (sends a progress notification per step
when the request carries a progressToken); with --shout also `shout`
(sends its text as a `notifications/message` at level info, then answers).

--bearer TOKEN: every request without `Authorization: Bearer TOKEN` is
answered 401 (what a config's `${VAR}` header must reach).

Prints `LISTENING <port>` once the app is up, `SEEN <METHOD> <path>
<status> <content-type>` when each HTTP exchange's answer starts and
`ENDED <METHOD> <path>` when it is over (for a stream: closed), so the test
can check what it saw.
"""

import argparse
import sys

import anyio
import uvicorn
from mcp import types
from mcp.server.fastmcp import Context, FastMCP

PAGE_SIZE = 3
FILLERS = 5


def build(mode: str, shout: bool = False) -> FastMCP:
    mcp = FastMCP(
        "python-peer",
        host="127.0.0.1",
        streamable_http_path="/mcp",
        stateless_http=(mode == "stateless"),
        json_response=(mode == "json"),
        log_level="WARNING",
    )

    @mcp.tool()
    def echo(text: str) -> str:
        """Echoes the text back."""
        return text

    if shout:

        @mcp.tool()
        async def shout(text: str, ctx: Context) -> str:
            """Logs the text (notifications/message), then answers."""
            await ctx.info(text)
            return "logged"

        @mcp.tool()
        async def sample(text: str, ctx: Context) -> str:
            """Asks the client's model (sampling/createMessage), and answers
            with what it said."""
            result = await ctx.session.create_message(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(type="text", text=text)
                    )
                ],
                max_tokens=16,
                # On this call's own stream (the fleet does not listen).
                related_request_id=ctx.request_id,
            )
            return result.content.text if result.content.type == "text" else "?"

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        return a + b

    @mcp.tool()
    async def count_down(steps: int, ctx: Context) -> str:
        """Sends `steps` progress notifications, then answers."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"step {step}")
            await anyio.sleep(0.02)
        return f"counted {steps}"

    if mode == "paginated":
        def filler(i: int):
            def tool() -> str:
                return f"filler {i}"

            return tool

        for i in range(FILLERS):
            mcp.add_tool(filler(i), name=f"filler_{i}", description="A filler tool.")

        async def paged(request: types.ListToolsRequest) -> types.ListToolsResult:
            tools = await mcp.list_tools()
            if request is None:
                # The SDK's own lookup (to validate a tools/call): all of them.
                return types.ListToolsResult(tools=tools)
            cursor = request.params.cursor if request.params else None
            start = int(cursor) if cursor else 0
            end = start + PAGE_SIZE
            return types.ListToolsResult(
                tools=tools[start:end],
                nextCursor=str(end) if end < len(tools) else None,
            )

        mcp._mcp_server.list_tools()(paged)

    return mcp


def logged(app, bearer=None):
    """An ASGI wrapper printing every HTTP exchange's method, path and status,
    and its end; with `bearer`, refusing (401) a request without it."""

    async def wrapper(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if bearer is not None:
            given = dict(scope.get("headers") or []).get(b"authorization", b"").decode()
            if given != f"Bearer {bearer}":
                print(f"SEEN {scope['method']} {scope['path']} 401 refused", flush=True)
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"a bearer token is required"})
                return

        async def send_logged(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                kind = headers.get(b"content-type", b"-").decode().split(";")[0]
                print(f"SEEN {scope['method']} {scope['path']} {message['status']} {kind}", flush=True)
            await send(message)

        try:
            await app(scope, receive, send_logged)
        finally:
            # When the exchange is over: for a stream, when it closed.
            print(f"ENDED {scope['method']} {scope['path']}", flush=True)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["stateful", "stateless", "json", "paginated", "sse"], default="stateful")
    parser.add_argument("--bearer", default=None)
    parser.add_argument("--shout", action="store_true")
    args = parser.parse_args()
    mcp = build(args.mode, args.shout)
    app = logged(mcp.sse_app() if args.mode == "sse" else mcp.streamable_http_app(), args.bearer)
    config = uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")
    server = uvicorn.Server(config)

    async def serve():
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.02)
            print(f"LISTENING {args.port}", flush=True)

    anyio.run(serve)
    sys.exit(0)


if __name__ == "__main__":
    main()

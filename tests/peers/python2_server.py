"""An MCP server on the official Python SDK 2.x (PyPI `mcp` 2.3: MCPServer),
a peer for tests/interop.rs. One endpoint, /mcp, on 127.0.0.1, serves both
eras: 2026-07-28 (chosen by the `MCP-Protocol-Version` header alone) and the
2025 `initialize` handshake (a request without that header, or with a 2025
revision in it). The SDK's DNS-rebinding protection is on.

    python2_server.py --port P --mode stateful|stateless|json

- stateful: 2025 sessions (an Mcp-Session-Id), SSE answers.
- stateless: no session id on the 2025 path; DELETE is answered 405.
- json: sessions, answers as application/json (both eras).

Tools: `echo`, `add`, `count_down` (a progress notification per step when
the request carries a progressToken), `regional` (its `region` must arrive
as the `Mcp-Param-Region` header too: `x-mcp-header`), and `confirm` (asks
for a confirmation: an input request inside its result in 2026-07-28, an
`elicitation/create` request mid-call in 2025).

Prints `LISTENING <port>` once the app is up and `SEEN <METHOD> <path>
<status> <content-type>` for every HTTP exchange, so the test can check what
it saw.
"""

import argparse
import sys
from typing import Annotated

import anyio
import uvicorn
from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve


class Confirmation(BaseModel):
    confirmed: bool


def ask(action: str) -> Elicit[Confirmation]:
    return Elicit(f"Really {action}?", Confirmation)


def build() -> MCPServer:
    mcp = MCPServer("python2-peer", version="2.3.0", log_level="WARNING")

    @mcp.tool()
    def echo(text: str) -> str:
        """Echoes the text back."""
        return text

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

    @mcp.tool()
    def regional(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
        query: str,
    ) -> str:
        """Runs a query in a region (mirrored in the Mcp-Param-Region header)."""
        return f"{query} in {region}"

    @mcp.tool()
    def confirm(action: str, answer: Annotated[Confirmation, Resolve(ask)]) -> str:
        """Asks for a confirmation first."""
        return f"{action}: {'confirmed' if answer.confirmed else 'not confirmed'}"

    return mcp


def logged(app):
    """An ASGI wrapper printing every HTTP exchange's method, path and status."""

    async def wrapper(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def send_logged(message):
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                kind = headers.get(b"content-type", b"-").decode().split(";")[0]
                print(f"SEEN {scope['method']} {scope['path']} {message['status']} {kind}", flush=True)
            await send(message)

        await app(scope, receive, send_logged)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=["stateful", "stateless", "json"], default="stateful")
    args = parser.parse_args()
    app = build().streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=(args.mode == "stateless"),
        json_response=(args.mode == "json"),
        host="127.0.0.1",
    )
    config = uvicorn.Config(logged(app), host="127.0.0.1", port=args.port, log_level="warning")
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

"""An MCP server on the official Python SDK over stdio, a peer for the stdio
tests: one script for both majors, picked by what imports. With PyPI `mcp`
2.x (.peers/venv2) it is `MCPServer(...).run()` (2026-07-28, answering
`server/discover`, and the 2025 `initialize` handshake); with 1.x
(.peers/venv) it is `FastMCP(...).run("stdio")` (the 2025 handshake only).
Run it unbuffered, as hosts should:

    python -u python_stdio_server.py [options]

Tools: `echo`, `add`, `count_down` (a progress notification per step when
the request carries a progressToken), and with `--print-env` `env`. A
resource `peer://greeting` and a prompt `greet`.

Options, each a way real servers behave toward their host:

- `--stderr-flood N`: writes N bytes of log lines to stderr at start, before
  serving (a chatty server: a host that does not drain stderr blocks it
  here, on a full pipe, before it ever answers).
- `--stdout-noise`: prints one line that is not JSON to stdout before
  serving (many real servers log a banner there).
- `--crash-at-start`: prints `fatal: bad config` to stderr and exits 1
  before reading anything.
- `--exit-after-init`: exits 1 right after its answer to `initialize` is
  written, printing the reason to stderr.
- `--print-env VAR`: adds a tool `env` whose text is the JSON of the value
  of VAR in its environment: `"value"`, or `null` when unset.
- `--ignore-term`: ignores SIGTERM (only SIGKILL ends it).
- `--ignore-eof`: does not exit when its stdin closes: it keeps running
  (at most `--linger` seconds, 300 by default, so that a broken test still
  ends), a server that never honors the spec's shutdown signal.
- `--start-delay SECONDS`: sleeps that long before it serves (before it
  reads its stdin): a server slow to start, on a busy machine or behind
  heavy imports; what the host wrote meanwhile waits in the pipe.

Exits 0 once its stdin is closed (unless `--ignore-eof`).
"""

import argparse
import io
import json
import os
import signal
import sys
import time

import anyio

try:  # 2.x
    from typing import Annotated

    from mcp.server.mcpserver import Context, Elicit, MCPServer as Server, Resolve
    from pydantic import BaseModel

    MAJOR = 2

    class Confirmation(BaseModel):
        confirmed: bool

    def ask(action: str) -> Elicit[Confirmation]:
        return Elicit(f"Really {action}?", Confirmation)
except ImportError:  # 1.x
    from mcp.server.fastmcp import Context, FastMCP as Server

    MAJOR = 1


def build(print_env):
    kwargs = {"log_level": "WARNING"}
    if MAJOR == 2:
        kwargs["version"] = "2"
    mcp = Server(f"python{MAJOR}-stdio-peer", **kwargs)

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

    if MAJOR == 2:
        # An input request inside the result in 2026-07-28 (a multi
        # round-trip request), an `elicitation/create` request in 2025.
        @mcp.tool()
        def confirm(action: str, answer: Annotated[Confirmation, Resolve(ask)]) -> str:
            """Asks for a confirmation first."""
            return f"{action}: {'confirmed' if answer.confirmed else 'not confirmed'}"

    if print_env is not None:

        @mcp.tool()
        def env() -> str:
            """The JSON of one environment variable's value (null: unset)."""
            return json.dumps(os.environ.get(print_env))

    @mcp.resource("peer://greeting")
    def greeting() -> str:
        """A fixed text."""
        return "hello from the stdio peer"

    @mcp.prompt()
    def greet(name: str) -> str:
        """Asks to greet someone."""
        return f"Please greet {name}."

    return mcp


class ExitAfterInitialize(io.RawIOBase):
    """fd 1, written through, watched line by line: once a line holding the
    answer to `initialize` (a result with `protocolVersion` and `serverInfo`)
    is out, the process exits 1. Below the SDK, so it holds for both majors;
    it has no fileno, so 2.x serves it in place instead of a private dup."""

    def __init__(self):
        self.partial = b""

    def writable(self):
        return True

    def write(self, data):
        data = bytes(data)
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]
        self.partial += data
        *lines, self.partial = self.partial.split(b"\n")
        for line in lines:
            try:
                result = json.loads(line).get("result") or {}
            except (ValueError, AttributeError):
                continue
            if "protocolVersion" in result and "serverInfo" in result:
                sys.stderr.write("exiting after initialize, as asked (--exit-after-init)\n")
                sys.stderr.flush()
                os._exit(1)
        return len(data)


def flood_stderr(size):
    line = b"chatty: " + b"x" * 55 + b"\n"  # 64 bytes a line
    written = 0
    while written < size:
        chunk = (line * 64)[: size - written]
        os.write(2, chunk)
        written += len(chunk)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stderr-flood", type=int, default=0, metavar="N")
    parser.add_argument("--stdout-noise", action="store_true")
    parser.add_argument("--crash-at-start", action="store_true")
    parser.add_argument("--exit-after-init", action="store_true")
    parser.add_argument("--print-env", metavar="VAR")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--ignore-eof", action="store_true")
    parser.add_argument("--linger", type=float, default=300.0)
    parser.add_argument("--start-delay", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()

    if args.crash_at_start:
        sys.stderr.write("fatal: bad config\n")
        sys.stderr.flush()
        sys.exit(1)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.stderr_flood:
        flood_stderr(args.stderr_flood)
    if args.stdout_noise:
        os.write(1, b"starting the python stdio peer (not JSON)\n")
    if args.exit_after_init:
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(ExitAfterInitialize()), encoding="utf-8")
    if args.start_delay:
        time.sleep(args.start_delay)

    build(args.print_env).run("stdio")

    if args.ignore_eof:
        # stdin is closed; a server that does not care stays up.
        deadline = time.monotonic() + args.linger
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
    sys.exit(0)


if __name__ == "__main__":
    main()

"""Reconnect churn through the official MCP Python SDK's ``ClientSession``:
``mcp_scoped_http.transport`` against the SDK's own transports, in one run.

A cycle: enter the transport and a ``ClientSession``, ``initialize``,
``list_tools``, one ``call_tool("tool-001", {"text": "hi"})``, leave both.
Blocks of ``--cycles`` cycles per client run interleaved in ``--rounds``
rounds (the pair's order alternates each round: A B, B A, ...), so a noisy
machine disturbs both sides alike. Per client it reports the median over
rounds of cycles per second and of CPU milliseconds per cycle: this
process's (``time.process_time``, every thread), and the server's (HTTP:
the one server process, from /proc; stdio: the servers started per cycle,
from ``getrusage(RUSAGE_CHILDREN)`` and, for ours, what the package's launcher
reaped). Ratios are ours over the SDK's, for
ours with a client of its own per transport (``ours``) and with one
``HttpClient`` lent to every transport (``lent``).

    python benches/churn.py --cycles 200 --rounds 5 [--http-only|--stdio-only]

The server is the test kit's (the CLI's ``serve``): ``--server-bin`` or
$MCP_SCOPED_HTTP_BIN. The HTTP server runs in a process group of its own on
127.0.0.1 and is stopped on every way out (SIGKILL of this process aside, it
then gets SIGTERM from the kernel); its counts (connections, sessions,
DELETEs) are checked against the cycles run.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Past this, something hung.
BOUND = 30.0
TOOL, ARGUMENTS = "tool-001", {"text": "hi"}
STDIO_ARGS = ["serve", "--stdio"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=40, help="cycles per block (default 40)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of blocks (default 3)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed cycles per client first (default 5)")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--http-only", action="store_true")
    only.add_argument("--stdio-only", action="store_true")
    parser.add_argument("--server-bin", default=os.environ.get("MCP_SCOPED_HTTP_BIN"),
                        help="the mcp-scoped-http CLI (default: $MCP_SCOPED_HTTP_BIN)")
    args = parser.parse_args()
    if not args.server_bin:
        parser.error("give --server-bin or set MCP_SCOPED_HTTP_BIN")
    if not os.access(args.server_bin, os.X_OK):
        parser.error(f"not an executable: {args.server_bin}")
    if args.cycles < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--cycles and --rounds at least 1, --warmup at least 0")
    return args


def _die_with_parent() -> None:
    """In the server, before exec: SIGTERM when this process dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class HttpServer:
    """`serve --port 0` in a process group of its own, output to files (a
    pipe nobody drains could stall it)."""

    def __init__(self, binary: str) -> None:
        self.out = tempfile.TemporaryFile()
        self.err = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [binary, "serve", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stdout=self.out,
            stderr=self.err,
            start_new_session=True,
            # Started before anything here starts a thread.
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        try:
            self.url = self._wait_for_url()
        except BaseException:
            self.stop()
            raise

    def _wait_for_url(self) -> str:
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            self.out.seek(0)
            found = re.search(rb"at (http://127\.0\.0\.1:\d+/\S*)", self.out.read())
            if found:
                return found.group(1).decode()
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"the test server did not start: {self._stderr()[-500:]!r}")

    def _stderr(self) -> bytes:
        self.err.seek(0)
        return self.err.read()

    def cpu_seconds(self) -> float:
        """The server's user + system CPU so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> tuple[int, int, int] | None:
        """SIGINT to its group (SIGKILL past BOUND); its counts, if said."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGINT)
                self.process.wait(BOUND)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            except ProcessLookupError:
                pass
        if self.err.closed:
            return None
        stderr = self._stderr()
        self.out.close()
        self.err.close()
        found = re.search(
            rb"stopped after (\d+) connection\(s\), (\d+) session\(s\) created, (\d+) DELETE\(s\)",
            stderr,
        )
        return tuple(int(n) for n in found.groups()) if found else None  # type: ignore[return-value]


@dataclass
class Block:
    per_second: float
    cpu_ms: float
    server_ms: float


@dataclass
class Client:
    kind: str  # "http" | "stdio"
    name: str  # "ours" | "sdk"
    open: object  # () -> async context manager yielding (read, write[, ...])
    blocks: list[Block] = field(default_factory=list)
    cycles: int = 0


def sdk_version() -> str:
    from importlib.metadata import version

    return version("mcp")


def make_clients(args: argparse.Namespace, url: str | None) -> list[Client]:
    import mcp_scoped_http
    from mcp import StdioServerParameters
    from mcp.client import streamable_http
    from mcp.client.stdio import stdio_client

    clients = []
    if url is not None:
        # 1.x: a 3-tuple; 2.x: a pair. Either way the first two are the streams.
        sdk_http = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client
        clients.append(Client("http", "ours", lambda: mcp_scoped_http.transport(url)))
        # One client lent to every transport: its pool and remembered era.
        shared = mcp_scoped_http.HttpClient()
        clients.append(Client("http", "lent", lambda: mcp_scoped_http.transport(url, client=shared)))
        clients.append(Client("http", "sdk", lambda: sdk_http(url)))
    if not args.http_only:
        binary = args.server_bin
        clients.append(Client("stdio", "ours", lambda: mcp_scoped_http.transport(command=binary, args=STDIO_ARGS)))
        params = StdioServerParameters(command=binary, args=STDIO_ARGS)
        clients.append(Client("stdio", "sdk", lambda: stdio_client(params)))
    return clients


async def cycle(client: Client) -> None:
    import anyio
    from mcp import ClientSession

    with anyio.fail_after(BOUND):
        async with client.open() as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                if TOOL not in {tool.name for tool in tools.tools}:
                    raise RuntimeError(f"{TOOL} not listed: {[tool.name for tool in tools.tools]}")
                result = await session.call_tool(TOOL, ARGUMENTS)
                if getattr(result, "isError", getattr(result, "is_error", False)):
                    raise RuntimeError(f"{TOOL} failed: {result}")
    client.cycles += 1


def children_cpu_seconds() -> float:
    """The CPU of every process started for stdio cycles and reaped: this
    process's children (the SDK's servers), and what the package's
    launcher reaped (its watchdogs, which reaped their servers: the
    launcher's ``cutime`` + ``cstime`` in /proc)."""
    own = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        head, tail = text.rsplit(")", 1)
        fields = tail.split()
        if head.endswith("(mcp-launcher") and fields[1] == me:
            total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    return total


async def block(client: Client, cycles: int, server: HttpServer | None) -> Block:
    server_cpu = (server.cpu_seconds if server is not None and client.kind == "http"
                  else children_cpu_seconds)
    wall, cpu, served = time.perf_counter(), time.process_time(), server_cpu()
    for _ in range(cycles):
        await cycle(client)
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    served = server_cpu() - served
    return Block(cycles / wall, 1000 * cpu / cycles, 1000 * served / cycles)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def threads() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1


def stdio_servers_left(binary: str) -> list[int]:
    """Processes of `binary serve --stdio` still alive (Linux /proc)."""
    left = []
    want = [binary, *STDIO_ARGS]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            except OSError:
                continue
            if [a.decode(errors="replace") for a in argv] == want:
                left.append(int(entry.name))
    return left


async def run(args: argparse.Namespace, clients: list[Client], server: HttpServer | None) -> tuple[int, int]:
    pairs = [[c for c in clients if c.kind == kind] for kind in ("http", "stdio")]
    pairs = [pair for pair in pairs if pair]
    for client in clients:
        for _ in range(args.warmup):
            await cycle(client)
    fds, tasks = open_fds(), threads()
    for round_ in range(args.rounds):
        for pair in pairs:
            for client in pair if round_ % 2 == 0 else reversed(pair):
                client.blocks.append(await block(client, args.cycles, server))
    return fds, tasks


def report(clients: list[Client], args: argparse.Namespace) -> None:
    print(f"mcp {sdk_version()}, Python {sys.version.split()[0]}, {args.cycles} cycles x {args.rounds} rounds "
          f"(+{args.warmup} warm-up) per client; medians over rounds (min-max of cycles/s)")
    print(f"{'transport':<10}{'client':<7}{'cycles/s':>10}{'  (min-max)':<17}{'CPU ms/cyc':>11}{'server ms/cyc':>15}")
    medians = {}
    for c in clients:
        rates = [b.per_second for b in c.blocks]
        m = (statistics.median(rates), statistics.median(b.cpu_ms for b in c.blocks),
             statistics.median(b.server_ms for b in c.blocks))
        medians[c.kind, c.name] = m
        spread = f"  ({min(rates):.1f}-{max(rates):.1f})"
        print(f"{c.kind:<10}{c.name:<7}{m[0]:>10.1f}{spread:<17}{m[1]:>11.2f}{m[2]:>15.2f}")
    for kind in ("http", "stdio"):
        for name in ("ours", "lent"):
            if (kind, name) in medians and (kind, "sdk") in medians:
                ours, sdk = medians[kind, name], medians[kind, "sdk"]
                ratios = [o / s if s else float("nan") for o, s in zip(ours, sdk)]
                label = f"{name[0]}/sdk"
                print(f"{kind:<10}{label:<7}{ratios[0]:>9.2f}x{'':<17}{ratios[1]:>10.2f}x{ratios[2]:>14.2f}x")
    print("(server: HTTP = the server process's CPU from /proc; stdio = the servers' and watchdogs' CPU, "
          "RUSAGE_CHILDREN and the launcher's reaped children)")


def main() -> int:
    args = parse_args()

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, terminate)
    server = None
    status = 0
    try:
        if not args.stdio_only:
            server = HttpServer(args.server_bin)
        # Imported once the server is up: nothing started threads before its fork.
        import asyncio

        clients = make_clients(args, None if server is None else server.url)
        fds, tasks = asyncio.run(run(args, clients, server))
        report(clients, args)
        fds_after, tasks_after = open_fds(), threads()
        print(f"this process: fds {fds} -> {fds_after}, threads {tasks} -> {tasks_after} (after warm-up -> end)")
    except BaseException as error:
        if not isinstance(error, (SystemExit, KeyboardInterrupt)):
            import traceback

            traceback.print_exc()
        if isinstance(error, SystemExit):
            status = error.code if isinstance(error.code, int) else 1
        else:
            status = 130 if isinstance(error, KeyboardInterrupt) else 1
    finally:
        if server is not None:
            counts = server.stop()
            if counts is None:
                print("HTTP server: its counts are missing", file=sys.stderr)
            else:
                http_clients = sum(1 for c in clients if c.kind == "http")
                expected = http_clients * (args.warmup + args.cycles * args.rounds) if status == 0 else None
                connections, sessions, deletes = counts
                line = f"HTTP server: {connections} connection(s), {sessions} session(s), {deletes} DELETE(s)"
                if expected is not None:
                    line += f" (cycles run: {expected})"
                    if sessions != expected or deletes != expected:
                        line += "  <-- sessions/DELETEs != cycles"
                print(line)
        if not args.http_only:
            left = stdio_servers_left(args.server_bin)
            deadline = time.monotonic() + 2
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = stdio_servers_left(args.server_bin)
            if left:
                print(f"stdio servers still running: {left}", file=sys.stderr)
                status = status or 1
    return status


if __name__ == "__main__":
    sys.exit(main())

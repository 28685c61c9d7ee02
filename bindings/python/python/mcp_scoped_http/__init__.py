"""mcp-scoped-http for Python hosts: a transport for the official MCP Python
SDK (``mcp``, 1.x and 2.x) whose sessions release everything they acquire,
on every way out.

``transport(url)`` (an HTTP server, its era detected) or
``transport(command=..., args=...)`` (a stdio server, supervised) is an
async context manager yielding ``(read_stream, write_stream)``: what 1.x's
``ClientSession(read, write)`` takes, and a 2.x ``Transport`` for
``Client(transport)``::

    from mcp import ClientSession
    import mcp_scoped_http

    async with mcp_scoped_http.transport("http://127.0.0.1:8000/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()

``connect(url)`` (or ``connect(command=...)``) is a ``Session`` for hosts that
let the crate run the protocol: the catalog discovered, ``call_tool`` with
progress, notifications as an async iterator. ``Fleet`` runs a host's
``mcpServers`` as one owner's servers.

Leaving the block, by return, exception or cancellation, closes the
transport: background work stopped, the server session DELETEd once, hooks
removed, a stdio server's process tree ended. A transport dropped without
closing is released by the reaper, which the package drains at exit.
"""

from __future__ import annotations

import atexit
import os

from . import _native
from ._native import (
    AuthError,
    ClosedError,
    ConfigError,
    DeadlineError,
    HttpClient,
    LimitError,
    McpScopedHttpError,
    OAuth,
    Released,
)
from ._fleet import Fleet
from ._session import Session, connect
from ._transport import ScopedTransport, transport

__all__ = [
    "AuthError",
    "ClosedError",
    "ConfigError",
    "DeadlineError",
    "Fleet",
    "HttpClient",
    "LimitError",
    "McpScopedHttpError",
    "OAuth",
    "Released",
    "ScopedTransport",
    "Session",
    "connect",
    "drain",
    "ledger",
    "transport",
]


def drain(timeout: float = 10.0) -> bool:
    """Waits, at most ``timeout`` seconds, for what transports dropped
    without closing left to the reaper (DELETEs, process trees). Returns
    True when all of it was done. Runs at interpreter exit by itself."""
    return _native.drain(timeout)


def ledger() -> dict[str, int]:
    """What the process holds now for transports, sessions and fleets:
    ``hooks``, ``owned_clients``, ``tasks``, ``owned_sessions``,
    ``pending_reaps``, ``processes``. All zero once everything was closed
    (or dropped and drained)."""
    return dict(_native.ledger())


atexit.register(_native._at_exit)
if hasattr(os, "register_at_fork"):
    # The runtime's threads are not copied into a forked child: there every
    # call refuses instead of hanging.
    os.register_at_fork(after_in_child=_native._after_fork_in_child)

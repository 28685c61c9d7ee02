"""``Fleet``: a host's ``mcpServers`` run as one owner's servers."""

from __future__ import annotations

import functools
import inspect
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from . import _native
from ._transport import _shielded


#: A server request's handler: ``(server_name, params) -> result``, sync or
#: async.
Handler = Callable[[str, dict[str, Any]], Any]


async def _answer(handler: Handler, server: str, params: str) -> str:
    result = handler(server, json.loads(params))
    if inspect.isawaitable(result):
        result = await result
    return json.dumps(result)


class Fleet:
    """Many named MCP servers (HTTP and stdio) under one owner: each kept
    connected by a task of its own (reconnecting with backoff), reconciled
    by name on ``apply``, merged into one catalog, and drained by
    ``shutdown`` (every session closed, every process tree ended). Use it
    as an async context manager: leaving it shuts the fleet down, shielded
    from cancellation."""

    def __init__(
        self,
        *,
        on_sampling: Handler | None = None,
        on_elicitation: Handler | None = None,
        roots: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """``on_sampling`` and ``on_elicitation`` answer every server's
        ``sampling/createMessage`` and ``elicitation/create`` (a 2025
        server's request, a 2026-07-28 server's input request): called as
        ``handler(server_name, params)``, sync or async, returning the
        result (a mapping); what it raises is the request's error. They
        run on the event loop running when the fleet is made (so make it
        inside one). ``roots`` (each ``{"uri": "file:///...", "name":
        ...}``) answer ``roots/list``; ``set_roots`` changes them. Without
        one, the capability is not declared and servers are told the
        method is not handled."""
        self._native = _native.NativeFleet(
            on_sampling=None if on_sampling is None else functools.partial(_answer, on_sampling),
            on_elicitation=None if on_elicitation is None else functools.partial(_answer, on_elicitation),
            roots=None if roots is None else json.dumps([dict(root) for root in roots]),
        )
        #: How each server ended, once shut down.
        self.shutdown_report: dict[str, str] | None = None

    async def apply(self, config: Mapping[str, Any] | str | os.PathLike[str]) -> dict[str, Any]:
        """Applies an ``mcpServers`` document: a mapping (``{"mcpServers":
        {...}}``), or the path of a JSON file. ``${VAR}`` references are
        expanded from the environment. Servers are started, stopped or
        replaced by name; an entry that cannot be used fails alone (its
        reason in ``invalid``). Returns what changed."""
        if isinstance(config, Mapping):
            text = json.dumps(config)
        else:
            with open(config, encoding="utf-8") as file:
                text = file.read()
        return json.loads(await self._native.apply(text))

    async def ready(self, timeout: float) -> dict[str, Any]:
        """Waits, at most ``timeout`` seconds, until every server is ready
        or failed: ``ready``, ``not_ready`` (name: state) and ``pending``."""
        return json.loads(await self._native.ready(timeout))

    def states(self) -> dict[str, str]:
        """Every server's state, in words."""
        return json.loads(self._native.states())

    @property
    def catalog(self) -> dict[str, Any]:
        """``servers`` (each one's catalog) and ``tools``, each with its
        ``server`` and ``qualified_name`` (``server__tool``)."""
        return json.loads(self._native.catalog())

    async def call_tool(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Calls ``tool`` on ``server`` once it is ready."""
        args = None if arguments is None else json.dumps(arguments)
        return json.loads(await self._native.call_tool(server, tool, args, timeout))

    async def call(self, qualified: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Calls a tool by its qualified name, as a model was given it."""
        args = None if arguments is None else json.dumps(arguments)
        return json.loads(await self._native.call_qualified(qualified, args))

    async def notifications(self) -> AsyncIterator[dict[str, Any]]:
        """Every server's notifications (``server``, ``message``, and
        ``missed``: how many were dropped before it while the reader was
        behind), until the fleet shuts down. One iterator at a time."""
        while True:
            text = await self._native.next_notification()
            if text is None:
                return
            yield json.loads(text)

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """What happens in the fleet: ``{"kind": "state", "server",
        "state"}``, ``{"kind": "catalog", "server", "generation",
        "tools"}``, ``{"kind": "renewed", "server", "protocol_version"}``,
        each with ``missed`` (dropped while the reader was behind), until
        the fleet shuts down. Events before the first read are not kept
        beyond the fleet's event capacity. One iterator at a time."""
        while True:
            text = await self._native.next_event()
            if text is None:
                return
            yield json.loads(text)

    async def set_roots(self, roots: Sequence[Mapping[str, Any]]) -> list[str]:
        """Replaces the roots (the fleet must have been made with some);
        the servers that take ``notifications/roots/list_changed`` are
        told. Returns their names."""
        return json.loads(await self._native.set_roots(json.dumps([dict(r) for r in roots])))

    async def shutdown(self) -> dict[str, str]:
        """Shuts every server down, shielded from cancellation and bounded
        by the fleet's deadline; how each ended, by name. Idempotent."""
        if self.shutdown_report is None:
            self.shutdown_report = json.loads(await _shielded(self._native.shutdown()))
        return self.shutdown_report

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.shutdown()

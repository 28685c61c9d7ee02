"""``Session``: the crate runs the protocol (handshake, discovery, calls,
notifications), for hosts that do not need the SDK's session."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

from . import _native
from ._transport import _shielded

#: Called with ``(progress, total, message)``, in order, on a thread of the
#: runtime's blocking pool (not the event loop's): keep it short.
ProgressCallback = Callable[[float, "float | None", "str | None"], object]


def _text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


class Session:
    """A connected MCP session, with its catalog discovered. Use it as an
    async context manager (or call ``close``): leaving it closes the
    session shielded from cancellation, releasing in reverse order what it
    acquired (tasks, the DELETE, hooks, the client it built, a stdio
    server's process tree)."""

    def __init__(self, native: _native.NativeSession) -> None:
        self._native = native
        #: What closing released, once closed.
        self.released: _native.Released | None = None

    @property
    def info(self) -> dict[str, Any]:
        """``server_info``, ``capabilities``, ``instructions``,
        ``protocol_version`` and ``transport``."""
        return json.loads(self._native.info())

    @property
    def catalog(self) -> dict[str, Any]:
        """``tools``, ``prompts``, ``resources`` and ``resource_templates``
        as the server listed them (every page)."""
        return json.loads(self._native.catalog())

    @property
    def session_id(self) -> str | None:
        """The server's session id (a credential: do not log it)."""
        return self._native.session_id

    @property
    def closed(self) -> bool:
        return self._native.closed

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Calls tool ``name``; the result as the server sent it. A tool's
        own failure is a result with ``isError``; a failed exchange raises."""
        text = await self._native.call_tool(name, _text(arguments), timeout, on_progress)
        return json.loads(text)

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Any:
        """Any request (``prompts/get``, ``resources/read``, ...); its result."""
        text = await self._native.request(method, _text(params), timeout, on_progress)
        return json.loads(text)

    async def read_resource(self, uri: str, *, timeout: float | None = None) -> dict[str, Any]:
        return await self.request("resources/read", {"uri": uri}, timeout=timeout)

    async def get_prompt(
        self, name: str, arguments: Mapping[str, str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name}
        if arguments is not None:
            params["arguments"] = dict(arguments)
        return await self.request("prompts/get", params, timeout=timeout)

    async def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        await self._native.notify(method, _text(params))

    async def notifications(self) -> AsyncIterator[dict[str, Any]]:
        """The server's notifications (progress, logs, list changes), until
        the session closes. One iterator at a time."""
        while True:
            text = await self._native.next_notification()
            if text is None:
                return
            yield json.loads(text)

    async def close(self) -> _native.Released | None:
        """Closes the session (shielded from cancellation; bounded on the
        Rust side). Idempotent: later calls return what the first did."""
        if self.released is None:
            self.released = await _shielded(self._native.close())
        return self.released

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


async def connect(
    url: str | None = None,
    *,
    command: str | None = None,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
    bearer: str | None = None,
    protocol_version: str | None = None,
    timeout: float | None = None,
    listen: bool = True,
    client: _native.HttpClient | None = None,
    oauth: _native.OAuth | None = None,
) -> Session:
    """Connects to the MCP server at ``url`` (HTTP, every era detected) or
    starts the stdio server ``command`` (supervised), runs the handshake
    and discovers its catalog, within ``timeout`` seconds (default 60),
    through ``client`` when one is lent (never closed). A
    connect that fails, or is cancelled at any await, leaves nothing: what
    it acquired is released before it raises."""
    native = await _native.connect(
        url,
        command=command,
        args=None if args is None else list(args),
        env=None if env is None else list(env.items()),
        cwd=None if cwd is None else os.fspath(cwd),
        headers=None if headers is None else list(headers.items()),
        bearer=bearer,
        protocol_version=protocol_version,
        timeout=timeout,
        listen=listen,
        client=client,
        oauth=oauth,
    )
    return Session(native)

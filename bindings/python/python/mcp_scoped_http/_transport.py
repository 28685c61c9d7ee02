"""The transport for the official Python SDK: streams of ``SessionMessage``
over the native transport, which carries bytes."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Awaitable, Callable

import anyio
import mcp.types as types
from mcp.shared.message import SessionMessage

from . import _native

#: The SDK's `initialize` takes only a 2025 revision (1.x knows no other;
#: 2.x reaches 2026-07-28 by its own `server/discover`): with a 2026-07-28
#: server, `initialize` is answered with the revision it proposed and the
#: transport speaks 2026-07-28 for it.
LEGACY_SDK = True

# The SDK's own (de)serialization, per major version, as its stdio client
# does it: 2.x leaves fields unset on purpose (no `"params": null`).
if hasattr(types, "jsonrpc_message_adapter"):  # mcp 2.x

    def _parse(data: bytes) -> Any:
        return types.jsonrpc_message_adapter.validate_json(data, by_name=False)

    def _dump(message: Any) -> bytes:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode()

else:  # mcp 1.x

    def _parse(data: bytes) -> Any:
        return types.JSONRPCMessage.model_validate_json(data)

    def _dump(message: Any) -> bytes:
        return message.model_dump_json(by_alias=True, exclude_none=True).encode()


_log = logging.getLogger("mcp_scoped_http")


def _is_request(message: Any) -> bool:
    root = getattr(message, "root", message)  # 1.x wraps it in a RootModel
    return getattr(root, "method", None) is not None and getattr(root, "id", None) is not None


def _describe(message: Any) -> str:
    root = getattr(message, "root", message)
    method = getattr(root, "method", None)
    return f"{method!r}" if method else f"the answer to request {getattr(root, 'id', '?')!r}"


class _ReadStream:
    """The server's messages, as the SDK's sessions read them: an async
    iterator of ``SessionMessage`` (or the ``Exception`` a message that does
    not validate raised), ending when the transport closes."""

    def __init__(self, native: _native.Transport) -> None:
        self._native = native

    async def receive(self) -> SessionMessage | Exception:
        data = await self._native.receive()
        if data is None:
            raise anyio.EndOfStream
        try:
            return SessionMessage(_parse(data))
        except Exception as error:  # handed to the session, as the SDK's own do
            return error

    def __aiter__(self) -> _ReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """The transport is closed by its context manager, not here."""

    async def __aenter__(self) -> _ReadStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class _WriteStream:
    """The SDK's messages, sent through the native transport. A request
    that cannot be sent is answered with a JSON-RPC error on the read
    stream; a notification or an answer that cannot be sent is logged; a
    send on a closed transport raises ``anyio.ClosedResourceError`` (the SDK
    then fails the request as a closed connection)."""

    def __init__(self, native: _native.Transport) -> None:
        self._native = native

    async def send(self, message: SessionMessage) -> None:
        data = _dump(message.message)
        try:
            await self._native.send(data)
        except _native.ClosedError as error:
            raise anyio.ClosedResourceError from error
        except _native.McpScopedHttpError as error:
            # A request's failure comes back as its JSON-RPC error answer (the
            # SDK raises it to the caller); a notification or an answer to a
            # server request has nobody waiting, and the SDK's contract is
            # that sending one does not raise.
            if _is_request(message.message):
                raise
            _log.warning("could not send %s: %s", _describe(message.message), error)

    async def aclose(self) -> None:
        """The transport is closed by its context manager, not here."""

    async def __aenter__(self) -> _WriteStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


class ScopedTransport:
    """An async context manager yielding ``(read_stream, write_stream)`` for
    the SDK's ``ClientSession(read, write)`` (1.x and 2.x) or ``Client``
    (2.x). Entered once. Leaving it, however, closes the native transport
    shielded from cancellation (the close is bounded on the Rust side);
    ``released`` then says what was released."""

    def __init__(self, opener: Callable[[], Awaitable[_native.Transport]]) -> None:
        self._opener = opener
        self._native: _native.Transport | None = None
        self._entered = False
        #: What closing released (a ``Released``), once closed.
        self.released: _native.Released | None = None

    @property
    def session_id(self) -> str | None:
        """The server's session id once issued (a credential: do not log it)."""
        return None if self._native is None else self._native.session_id

    async def __aenter__(self) -> tuple[_ReadStream, _WriteStream]:
        if self._entered:
            raise RuntimeError("a ScopedTransport is entered once")
        self._entered = True
        self._native = await self._opener()
        return _ReadStream(self._native), _WriteStream(self._native)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        native = self._native
        if native is None:
            return
        self.released = await _shielded(native.close())


async def _shielded(closing: Awaitable[Any]) -> Any:
    """Awaits a close that no cancellation stops, anyio's (a cancel scope)
    or asyncio's (``Task.cancel``, ``wait_for``): when one comes, the close
    is awaited to its end (it is bounded on the Rust side) and the
    cancellation raised after."""
    closing = asyncio.ensure_future(closing)
    with anyio.CancelScope(shield=True):
        try:
            return await asyncio.shield(closing)
        except asyncio.CancelledError:
            await asyncio.wait([closing])
            raise


def transport(
    url: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    bearer: str | None = None,
    protocol_version: str | None = None,
    command: str | None = None,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    client: _native.HttpClient | None = None,
    oauth: _native.OAuth | None = None,
) -> ScopedTransport:
    """A transport to the MCP server at ``url`` (HTTP: every era detected,
    ``headers`` and a ``bearer`` token on each request, through ``client``
    when one is lent: its pool and the eras it remembers are shared, and it
    is never closed; else through a client of its own; with ``oauth``,
    OAuth 2.1 when the server asks for it), or to the stdio
    server ``command`` with ``args`` (started when entered, in its own
    process group under a watchdog; ``env`` added to a minimal allowlisted
    environment, in ``cwd``). ``protocol_version`` pins a revision instead
    of detecting it. Nothing is sent until the SDK's ``initialize``."""
    if (url is None) == (command is None):
        raise _native.ConfigError("give either a url or a command, not both")
    if url is not None:
        if args is not None or env is not None or cwd is not None:
            raise _native.ConfigError("args, env and cwd are for a stdio command")
        header_items = list((headers or {}).items())

        async def open_http() -> _native.Transport:
            return _native.http(
                url,
                headers=header_items,
                bearer=bearer,
                protocol_version=protocol_version,
                legacy_sdk=LEGACY_SDK,
                client=client,
                oauth=oauth,
            )

        return ScopedTransport(open_http)
    if headers is not None or bearer is not None or client is not None or oauth is not None:
        raise _native.ConfigError("headers, bearer, client and oauth are for an HTTP url")
    assert command is not None
    arg_list = list(args or [])
    env_items = list((env or {}).items())
    directory = None if cwd is None else os.fspath(cwd)

    async def open_stdio() -> _native.Transport:
        return await _native.stdio(
            command,
            arg_list,
            env=env_items,
            cwd=directory,
            protocol_version=protocol_version,
            legacy_sdk=LEGACY_SDK,
        )

    return ScopedTransport(open_stdio)


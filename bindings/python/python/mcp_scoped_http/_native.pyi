"""Type stubs of the native module (Rust, PyO3)."""

from collections.abc import Awaitable, Callable, Sequence

class McpScopedHttpError(Exception):
    retryable: bool
    status: int | None
    rpc_code: int | None

class LimitError(McpScopedHttpError): ...
class DeadlineError(McpScopedHttpError): ...
class ClosedError(McpScopedHttpError): ...
class AuthError(McpScopedHttpError): ...
class ConfigError(McpScopedHttpError): ...

class Released:
    session: str
    delete_status: int | None
    tasks_stopped: int
    hooks_removed: int
    owned_client_released: bool
    process: str | None

class HttpClient:
    def __init__(
        self,
        *,
        proxy: str | None = None,
        no_proxy: bool = False,
        roots_pem: bytes | None = None,
        system_roots: bool = True,
        identity_pem: tuple[bytes, bytes] | None = None,
    ) -> None: ...
    @property
    def hooks(self) -> int: ...

class OAuth:
    def __init__(
        self,
        *,
        open_browser: bool = True,
        on_url: Callable[[str], object] | None = None,
        port: int | None = None,
        scopes: Sequence[str] | None = None,
        client_name: str | None = None,
    ) -> None: ...

class Transport:
    @property
    def session_id(self) -> str | None: ...
    def send(self, message: bytes) -> Awaitable[None]: ...
    def receive(self) -> Awaitable[bytes | None]: ...
    def close(self) -> Awaitable[Released | None]: ...

class NativeSession:
    @property
    def session_id(self) -> str | None: ...
    @property
    def closed(self) -> bool: ...
    def info(self) -> str: ...
    def catalog(self) -> str: ...
    def call_tool(
        self,
        name: str,
        arguments: str | None = None,
        timeout: float | None = None,
        on_progress: Callable[[float, float | None, str | None], object] | None = None,
    ) -> Awaitable[str]: ...
    def request(
        self,
        method: str,
        params: str | None = None,
        timeout: float | None = None,
        on_progress: Callable[[float, float | None, str | None], object] | None = None,
    ) -> Awaitable[str]: ...
    def notify(self, method: str, params: str | None = None) -> Awaitable[None]: ...
    def next_notification(self) -> Awaitable[str | None]: ...
    def close(self) -> Awaitable[Released]: ...

class NativeFleet:
    def __init__(
        self,
        *,
        on_sampling: Callable[[str, str], Awaitable[str]] | None = None,
        on_elicitation: Callable[[str, str], Awaitable[str]] | None = None,
        roots: str | None = None,
    ) -> None: ...
    def set_roots(self, roots: str) -> Awaitable[str]: ...
    def apply(self, config: str) -> Awaitable[str]: ...
    def ready(self, timeout: float) -> Awaitable[str]: ...
    def states(self) -> str: ...
    def catalog(self) -> str: ...
    def call_tool(
        self, server: str, tool: str, arguments: str | None = None, timeout: float | None = None
    ) -> Awaitable[str]: ...
    def call_qualified(self, qualified: str, arguments: str | None = None) -> Awaitable[str]: ...
    def next_notification(self) -> Awaitable[str | None]: ...
    def next_event(self) -> Awaitable[str | None]: ...
    def shutdown(self) -> Awaitable[str]: ...

def connect(
    url: str | None = None,
    *,
    command: str | None = None,
    args: Sequence[str] | None = None,
    env: Sequence[tuple[str, str]] | None = None,
    cwd: str | None = None,
    headers: Sequence[tuple[str, str]] | None = None,
    bearer: str | None = None,
    protocol_version: str | None = None,
    timeout: float | None = None,
    listen: bool = True,
    client: HttpClient | None = None,
    oauth: OAuth | None = None,
) -> Awaitable[NativeSession]: ...
def http(
    url: str,
    *,
    headers: Sequence[tuple[str, str]] | None = None,
    bearer: str | None = None,
    protocol_version: str | None = None,
    legacy_sdk: bool = False,
    client: HttpClient | None = None,
    oauth: OAuth | None = None,
) -> Transport: ...
def stdio(
    command: str,
    args: Sequence[str] | None = None,
    *,
    env: Sequence[tuple[str, str]] | None = None,
    cwd: str | None = None,
    protocol_version: str | None = None,
    legacy_sdk: bool = False,
) -> Awaitable[Transport]: ...
def drain(timeout: float = 10.0) -> bool: ...
def ledger() -> dict[str, int]: ...
def _after_fork_in_child() -> None: ...

"""Typed exceptions for fedrouter API errors.

Every error the router answers is ``{"error": {"code": ..., "message": ...}}``
with a stable snake_case ``code`` (docs/api.md). Each code has its own
exception class here, all subclasses of :class:`FedrouterError`, so callers
can write ``except NoCapacity as e: time.sleep(e.retry_after)``.

Errors that never reached the router (connection refused, a connection
dropped mid-call, a client-side timeout) are :class:`TransportError`
subclasses, also under :class:`FedrouterError`.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "FedrouterError", "APIError", "TransportError", "ConnectError", "ConnectionLost", "Timeout",
    "InvalidJson", "InvalidField", "InvalidArgv", "InvalidId", "Unauthorized", "Forbidden",
    "NotFound", "SandboxNotFound", "PoolNotFound", "ClusterNotFound", "ProcessNotFound",
    "MethodNotAllowed", "RequestTimeout", "PoolExists", "SandboxNotRunning", "BodyTooLarge",
    "TenantLimit", "HeadersTooLarge", "InternalError", "ExecFailed", "NoCapacity",
    "ClusterUnavailable", "AgentUnavailable", "SandboxUnreachable", "NotReady", "ShuttingDown", "error_class_for",
    "AgentDied", "InvalidPath",
    "ERROR_CLASSES", "NotSupported", "OutOfMemory", "NotSynced", "CommitFailed", "TooManyConnections",
    "AgentBusy", "AgentError", "PathNotFound", "FileTooLarge", "DiskFull", "ListingTooLarge",
    "TokenExpired", "SecretNotWritten", "SecretUnreadable", "InvalidKey", "InvalidValue", "ValueTooLarge",
    "QueueFull",
    "NoWorkspace", "SandboxBusy", "ResumeFailed", "InvalidArchive",
]


class FedrouterError(Exception):
    """Base of every error this SDK raises about a call.

    Attributes:
        status: HTTP status (0 when no response arrived).
        code: the router's stable error code (``"sandbox_not_found"``, ...),
            or a client-side code (``"connection_lost"``, ``"timeout"``, ...).
        message: the human message.
        request_id: the ``X-Request-Id`` of the call (the router's answer, or
            the id the SDK sent when no answer arrived).
        body: the whole decoded ``error`` object (extra fields included).
        retry_after: seconds from ``Retry-After`` when the router sent one.
    """

    code_default = "error"

    def __init__(self, message: str = "", *, status: int = 0, code: Optional[str] = None,
                 request_id: Optional[str] = None, body: Optional[Mapping[str, Any]] = None,
                 retry_after: Optional[float] = None, headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or self.code_default
        self.message = message
        self.request_id = request_id
        self.body: Dict[str, Any] = dict(body or {})
        self.retry_after = retry_after
        self.headers: Dict[str, str] = dict(headers or {})

    def __str__(self) -> str:
        s = f"{self.code}: {self.message}" if self.message else self.code
        if self.status:
            s = f"{self.status} {s}"
        if self.request_id:
            s += f" (request id {self.request_id})"
        return s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"

    def __reduce__(self):  # picklable across processes (multiprocessing pools)
        return (_rebuild, (type(self), self.message, self.status, self.code, self.request_id,
                           self.body, self.retry_after, self.headers))


def _rebuild(cls, message, status, code, request_id, body, retry_after, headers):
    return cls(message, status=status, code=code, request_id=request_id, body=body,
               retry_after=retry_after, headers=headers)


class APIError(FedrouterError):
    """The router answered with an error (an HTTP status >= 400)."""

    def _body_str(self, key: str) -> Optional[str]:
        v = self.body.get(key)
        return v if isinstance(v, str) else None


class TransportError(FedrouterError):
    """No complete answer from the router (connection, protocol, timeout)."""
    code_default = "transport_error"


class ConnectError(TransportError):
    """The router could not be reached (refused, DNS, TLS)."""
    code_default = "connect_error"


class ConnectionLost(TransportError):
    """The connection dropped after the request was sent and before the
    whole answer arrived. The call may or may not have taken effect (an exec
    may have run): it is never retried automatically."""
    code_default = "connection_lost"


class Timeout(TransportError):
    """No answer within the client-side timeout."""
    code_default = "timeout"


# One class per stable code of docs/api.md (and SPEC §8's agent codes).
class InvalidJson(APIError):
    code_default = "invalid_json"


class InvalidField(APIError):
    """A field has the wrong type or value, or is unknown; ``field`` names it."""
    code_default = "invalid_field"

    @property
    def field(self) -> Optional[str]:
        return self._body_str("field")


class SecretNotFound(APIError):
    """A create's ``secrets`` names a key (``key``) the tenant's Secret lacks
    in ``cluster``, or the Secret is missing there; nothing was created."""
    code_default = "secret_not_found"

    @property
    def key(self) -> Optional[str]:
        return self._body_str("key")

    @property
    def cluster(self) -> Optional[str]:
        return self._body_str("cluster")


class SecretInvalid(APIError):
    """A requested Secret value cannot be an env var value."""
    code_default = "secret_invalid"


class SecretTooLarge(APIError):
    """The requested Secret values are too large together."""
    code_default = "secret_too_large"


class AgentRequired(APIError):
    """``secrets`` on a router that runs sandboxes without the agent."""
    code_default = "agent_required"


class InvalidArgv(APIError):
    code_default = "invalid_argv"


class InvalidId(APIError):
    code_default = "invalid_id"


class Unauthorized(APIError):
    code_default = "unauthorized"


class Forbidden(APIError):
    code_default = "forbidden"


class NotFound(APIError):
    """404 ``not_found``: no such endpoint (e.g. a router without the agent
    endpoints of SPEC §8)."""
    code_default = "not_found"


class SandboxNotFound(NotFound):
    code_default = "sandbox_not_found"


class PoolNotFound(NotFound):
    code_default = "pool_not_found"


class ClusterNotFound(NotFound):
    code_default = "cluster_not_found"


class ProcessNotFound(NotFound):
    code_default = "process_not_found"


class MethodNotAllowed(APIError):
    code_default = "method_not_allowed"


class RequestTimeout(APIError):
    code_default = "request_timeout"


class PoolExists(APIError):
    code_default = "pool_exists"


class SandboxNotRunning(APIError):
    code_default = "sandbox_not_running"


class BodyTooLarge(APIError):
    code_default = "body_too_large"


class NoWorkspace(APIError):
    """409: only a sandbox created with a ``workspace`` can be paused."""
    code_default = "no_workspace"


class InvalidArchive(APIError):
    """400: a restore's archive was refused (the message names the entry);
    nothing was written."""
    code_default = "invalid_archive"


class ResumeFailed(APIError):
    """The paused sandbox could not be made again (its cluster said why)."""
    code_default = "resume_failed"


class _RetryAfter(APIError):
    """An error that comes with ``Retry-After`` (``retry_after`` seconds)."""


class TenantLimit(_RetryAfter):
    """429: a tenant limit would be exceeded; ``retry_after`` seconds,
    ``limit`` names it (``max_sandboxes``, ``max_requests_in_flight``,
    ``max_concurrent_execs``, ``max_pool_replicas``)."""
    code_default = "tenant_limit"

    @property
    def limit(self) -> Optional[str]:
        return self._body_str("limit")


class HeadersTooLarge(APIError):
    code_default = "headers_too_large"


class InternalError(APIError):
    code_default = "internal"


class ExecFailed(APIError):
    code_default = "exec_failed"


class NoCapacity(_RetryAfter):
    """503: the federation cannot place the request. ``retry_after`` seconds,
    ``clusters`` the per-cluster reasons, ``shortfall`` when known."""
    code_default = "no_capacity"

    @property
    def clusters(self) -> Any:
        return self.body.get("clusters")

    @property
    def shortfall(self) -> Optional[int]:
        v = self.body.get("shortfall")
        return v if isinstance(v, int) else None


class ClusterUnavailable(_RetryAfter):
    code_default = "cluster_unavailable"


class AgentUnavailable(_RetryAfter):
    code_default = "agent_unavailable"


class SandboxUnreachable(_RetryAfter):
    code_default = "sandbox_unreachable"


class NotReady(_RetryAfter):
    code_default = "not_ready"


class ShuttingDown(_RetryAfter):
    code_default = "shutting_down"


class OutOfMemory(InternalError):
    """503: the router could not allocate what the answer needs (what it
    answers for any failure of its own); worth a retry."""
    code_default = "out_of_memory"


class SandboxBusy(_RetryAfter):
    """409: the paused sandbox's previous pod is still stopping."""
    code_default = "sandbox_busy"


class NotSynced(_RetryAfter):
    """503: this router replica has not finished its first list of the
    sandbox's cluster (it just started); the sandbox may well exist."""
    code_default = "not_synced"


class CommitFailed(_RetryAfter):
    """503: the clusters that got a create's sandboxes did not take its
    commit marker and no other cluster could; nothing was kept."""
    code_default = "commit_failed"


class TooManyConnections(_RetryAfter):
    """503: the router's connection limits refused the connection."""
    code_default = "too_many_connections"


class AgentBusy(_RetryAfter):
    """429: the sandbox's agent is out of a resource (stdin backlog,
    process slots)."""
    code_default = "agent_busy"


class AgentError(APIError):
    """502: the sandbox's agent failed the call in a way that has no code
    of its own."""
    code_default = "agent_error"


class AgentDied(APIError):
    """502: the command started, then the sandbox's agent stopped (code in
    the sandbox killed it, or it crashed); whether the command finished is
    unknown. Not the cluster's fault, and not retried."""
    code_default = "agent_died"


class InvalidPath(APIError):
    """400: a path the router refuses (dot segments, encoded slashes, NUL,
    bytes that are not UTF-8, ...)."""
    code_default = "invalid_path"


class PathNotFound(NotFound):
    code_default = "path_not_found"


class FileTooLarge(APIError):
    """413: an upload over the tenant's ``max_file_bytes``."""
    code_default = "file_too_large"


class DiskFull(APIError):
    """507: the sandbox's disk is full."""
    code_default = "disk_full"


class ListingTooLarge(APIError):
    """400: a directory of more than 100,000 entries; list a subdirectory."""
    code_default = "listing_too_large"


class TokenExpired(Unauthorized):
    """401: the bearer token is past the expiry its operator gave it (the
    message names the token); ask for its successor."""
    code_default = "token_expired"


class SecretNotWritten(_RetryAfter):
    """503: ``secrets.set``/``delete`` reached some clusters and not others;
    ``clusters`` says what happened where. The same call again is safe."""
    code_default = "secret_not_written"

    @property
    def clusters(self) -> Any:
        return self.body.get("clusters")


class SecretUnreadable(_RetryAfter):
    """503: ``secrets.list`` could not read some clusters (``clusters``)."""
    code_default = "secret_unreadable"


class InvalidKey(APIError):
    """400: a secret's key must be an env var name."""
    code_default = "invalid_key"


class InvalidValue(APIError):
    """400: a secret's value must be UTF-8 text without NUL bytes."""
    code_default = "invalid_value"


class ValueTooLarge(APIError):
    """413: a secret's value is larger than 128 KiB."""
    code_default = "value_too_large"


class QueueFull(_RetryAfter):
    """503: the router's create queue holds as many sandboxes as it may
    (``queue.max_sandboxes``); retry after ``retry_after``."""
    code_default = "queue_full"


class NotSupported(FedrouterError):
    """The router does not serve this call yet (it answered 404 ``not_found``
    for the endpoint, or 400 ``invalid_field`` for the field that asks for
    it, e.g. ``stream``). ``cause`` is the router's error."""
    code_default = "not_supported"


ERROR_CLASSES: Dict[str, Type[APIError]] = {
    c.code_default: c for c in (
        InvalidJson, InvalidField, SecretNotFound, SecretInvalid, SecretTooLarge, AgentRequired, InvalidArgv, InvalidId, Unauthorized, Forbidden, NotFound,
        SandboxNotFound, PoolNotFound, ClusterNotFound, ProcessNotFound, MethodNotAllowed,
        RequestTimeout, PoolExists, SandboxNotRunning, BodyTooLarge, TenantLimit, HeadersTooLarge,
        InternalError, ExecFailed, NoCapacity, ClusterUnavailable, AgentUnavailable, SandboxUnreachable, NotReady,
        ShuttingDown, OutOfMemory, NotSynced, CommitFailed, TooManyConnections, AgentBusy, AgentError,
        AgentDied, InvalidPath, PathNotFound, FileTooLarge, DiskFull, ListingTooLarge, TokenExpired,
        SecretNotWritten, SecretUnreadable, InvalidKey, InvalidValue, ValueTooLarge, QueueFull, NoWorkspace,
        SandboxBusy, ResumeFailed, InvalidArchive)
}


def error_class_for(code: Optional[str]) -> Type[APIError]:
    """The exception class for an API error code (``APIError`` if unknown)."""
    return ERROR_CLASSES.get(code or "", APIError)

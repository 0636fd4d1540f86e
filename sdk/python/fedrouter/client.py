"""The fedrouter client: every v1 API call, blocking and asyncio.

A :class:`Client` holds one router endpoint (URL, token, region hint,
timeouts, retry budget) with a keep-alive connection pool for blocking calls
and one per event loop for ``.aio`` calls. Every call is a "dual" method:
``client.create(...)`` blocks, ``await client.create.aio(...)`` does not.
:mod:`fedrouter.sandbox` exposes the same calls as module functions on a
default client configured from ``FEDROUTER_URL`` / ``FEDROUTER_TOKEN``.
"""
from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import email.utils
import itertools
import json
import math
import os
import ssl
import threading
import time
import urllib.parse
from typing import (Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, Union)

from ._dual import dual
from ._progress import ProgressArg, make_reporter
from ._transport import AioPool, Response, SyncPool
from .errors import (APIError, ConnectionLost, FedrouterError, InvalidField, NotSupported, SandboxNotFound,
                     error_class_for)

__all__ = ["Client", "Sandbox", "SandboxList", "ExecResult", "ExecChunk", "Execution", "Record", "Files",
           "Processes", "Process", "DEFAULT_URL", "CODE_INTERPRETER_PORT"]

DEFAULT_URL = "http://127.0.0.1:8080"
# The Code Interpreter's port in a sandbox of the code-interpreter image.
CODE_INTERPRETER_PORT = 49999
JSON = "application/json"

LabelFilter = Union[None, str, Mapping[str, str], Sequence[str]]


# ------------------------------------------------------------- records ---

class Record(dict):
    """A JSON object from the API: ``r['key']`` and ``r.key`` both work."""

    def __getattr__(self, name: str) -> Any:
        try:
            v = self[name]
        except KeyError:
            raise AttributeError(name) from None
        if type(v) is dict:
            v = self[name] = Record(v)
        elif type(v) is list and v and type(v[0]) is dict:
            v = self[name] = [Record(x) if type(x) is dict else x for x in v]
        return v

    def __dir__(self) -> Iterable[str]:
        return list(super().__dir__()) + [k for k in self.keys() if isinstance(k, str)]


def _b64_text(d: Mapping[str, Any], key: str) -> Tuple[str, Optional[bytes]]:
    """(text, exact bytes or None when the text is exact) of an exec output
    field that may be base64."""
    v = d.get(key) or ""
    if d.get(key + "_encoding") == "base64":
        raw = base64.b64decode(v)
        return raw.decode("utf-8", errors="replace"), raw
    return v, None


class ExecResult(Record):
    """The answer of an exec: ``r['stdout']`` or ``r.stdout``.

    Keys: ``stdout``, ``stderr`` (text), ``exit_code``, ``timed_out``,
    ``stdout_truncated``, ``stderr_truncated``, ``duration_ms``, and
    ``stdout_encoding``/``stderr_encoding`` (``"base64"``) when the output
    was not UTF-8: then ``stdout`` is the text with U+FFFD for the bad bytes
    and :attr:`stdout_bytes` the exact bytes."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(data)
        self._raw: Dict[str, Optional[bytes]] = {}
        for k in ("stdout", "stderr"):
            self[k], self._raw[k] = _b64_text(data, k)
        for k, dv in (("exit_code", None), ("timed_out", False), ("stdout_truncated", False),
                      ("stderr_truncated", False), ("duration_ms", None)):
            if k not in self:
                self[k] = dv

    stdout: str
    stderr: str
    exit_code: Optional[int]
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_ms: Optional[float]

    @property
    def stdout_bytes(self) -> bytes:
        """stdout exactly as the command wrote it."""
        raw = self._raw.get("stdout")
        return raw if raw is not None else self["stdout"].encode("utf-8", errors="surrogatepass")

    @property
    def stderr_bytes(self) -> bytes:
        """stderr exactly as the command wrote it."""
        raw = self._raw.get("stderr")
        return raw if raw is not None else self["stderr"].encode("utf-8", errors="surrogatepass")

    @property
    def ok(self) -> bool:
        """Exit code 0 and not timed out."""
        return self.get("exit_code") == 0 and not self.get("timed_out")

    @property
    def returncode(self) -> Optional[int]:
        """``exit_code`` (the ``subprocess`` name)."""
        return self.get("exit_code")


class ExecChunk(Record):
    """One chunk of a streamed exec: ``{"stdout": ...}``, ``{"stderr": ...}``
    (``stdout_b64``/``stderr_b64`` where not UTF-8) or the last one,
    ``{"exit_code": N, "timed_out": bool, "duration_ms": N}``.

    ``kind`` is ``"stdout"``, ``"stderr"`` or ``"exit"``; ``data`` the bytes
    of an output chunk; ``text`` its text."""

    @property
    def kind(self) -> str:
        if "exit_code" in self:
            return "exit"
        if "stdout" in self or "stdout_b64" in self:
            return "stdout"
        if "stderr" in self or "stderr_b64" in self:
            return "stderr"
        return "other"

    @property
    def data(self) -> bytes:
        for k in ("stdout", "stderr"):
            if k + "_b64" in self:
                return base64.b64decode(self[k + "_b64"])
            if k in self:
                return str(self[k]).encode("utf-8", errors="surrogatepass")
        return b""

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


# ------------------------------------------------------------- helpers ---

def _argv(args: Tuple[Any, ...]) -> List[str]:
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = tuple(args[0])
    if not args:
        raise TypeError("exec needs a command: sb.exec('python', '-c', 'print(1)')")
    return [os.fspath(a) if not isinstance(a, str) else a for a in args]


def _seconds(v: Optional[float], what: str) -> Optional[int]:
    if v is None:
        return None
    if v <= 0:
        raise ValueError(f"{what} must be > 0 seconds")
    return int(math.ceil(v))


def _pod_options(runtime_class: Optional[str], node_selector: Optional[Mapping[str, str]],
                 tolerations: Optional[Sequence[Mapping[str, Any]]], gpus: Optional[int]) -> Dict[str, Any]:
    """The pod options of a create or pool body (those given), type-checked
    only: the router checks them as the API server would (``InvalidField``
    with ``field`` naming the option)."""
    out: Dict[str, Any] = {}
    if runtime_class is not None:
        if not isinstance(runtime_class, str):
            raise TypeError("runtime_class must be a str (a RuntimeClass name, e.g. 'gvisor')")
        out["runtime_class"] = runtime_class
    if node_selector is not None:
        if not isinstance(node_selector, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items()):
            raise TypeError("node_selector must be a mapping of str label keys to str label values")
        out["node_selector"] = dict(node_selector)
    if tolerations is not None:
        if isinstance(tolerations, (str, bytes, Mapping)) or not isinstance(tolerations, (list, tuple)) \
                or not all(isinstance(t, Mapping) for t in tolerations):
            raise TypeError("tolerations must be a list of mappings "
                            "({'key': ..., 'operator': ..., 'value': ..., 'effect': ...})")
        out["tolerations"] = [dict(t) for t in tolerations]
    if gpus is not None:
        if isinstance(gpus, bool) or not isinstance(gpus, int):
            raise TypeError("gpus must be an int")
        out["gpus"] = gpus
    return out


def _label_query(label: LabelFilter) -> List[Tuple[str, str]]:
    if label is None:
        return []
    if isinstance(label, str):
        return [("label", label)]
    if isinstance(label, Mapping):
        return [("label", f"{k}={v}") for k, v in label.items()]
    return [("label", str(x)) for x in label]


def _retry_after(headers: Mapping[str, str]) -> Optional[float]:
    v = headers.get("retry-after")
    if v is None:
        return None
    v = v.strip()
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        t = email.utils.parsedate_to_datetime(v)
        return max(0.0, t.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _stdin_text(stdin: Union[None, str, bytes]) -> Optional[str]:
    if stdin is None or isinstance(stdin, str):
        return stdin
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        return bytes(stdin).decode("utf-8")
    raise TypeError("stdin must be str or bytes")


class _Req:
    """One API call: what to send and how to read the answer."""
    __slots__ = ("method", "path", "query", "body", "raw", "content_type", "idempotent", "retry",
                 "timeout", "parse", "unsupported")

    def __init__(self, method: str, path: str, *, query: Optional[List[Tuple[str, str]]] = None,
                 body: Any = None, raw: Optional[bytes] = None, content_type: str = JSON,
                 idempotent: Optional[bool] = None, retry: bool = False, timeout: Optional[float] = None,
                 parse: Optional[Callable[[Any], Any]] = None, unsupported: Optional[str] = None) -> None:
        self.method = method
        self.path = path
        self.query = query or []
        self.body = body
        self.raw = raw
        self.content_type = content_type
        self.idempotent = method in ("GET", "HEAD", "DELETE", "PUT") if idempotent is None else idempotent
        self.retry = retry
        self.timeout = timeout
        self.parse = parse
        # "endpoint": 404 not_found means the router lacks the endpoint;
        # "field:<name>": 400 invalid_field on <name> means it lacks the field.
        self.unsupported = unsupported


class Execution(Record):
    """The answer of :meth:`Client.run_code` (a cell of the Code Interpreter,
    docs/e2b.md), shaped like E2B's ``Execution``:

    ``text`` (the main result's text, or None), ``results`` (each a
    :class:`Record` of the MIME forms the cell displayed: ``text``,
    ``html``, ``png`` (base64), ...; ``is_main_result``), ``logs``
    (``{"stdout": [...], "stderr": [...]}``, the pieces as they came),
    ``error`` (``{"name", "value", "traceback"}`` or None) and
    ``execution_count``."""

    text: Optional[str]
    results: List[Record]
    logs: Record
    error: Optional[Record]
    execution_count: Optional[int]

    @property
    def ok(self) -> bool:
        """The cell ran without raising."""
        return self.get("error") is None

    @property
    def stdout(self) -> str:
        return "".join(self["logs"]["stdout"])

    @property
    def stderr(self) -> str:
        return "".join(self["logs"]["stderr"])


class _Cell:
    """Folds the Code Interpreter's NDJSON lines into an :class:`Execution`."""

    def __init__(self, on_stdout: Optional[Callable[[str], Any]], on_stderr: Optional[Callable[[str], Any]],
                 on_result: Optional[Callable[[Record], Any]]) -> None:
        self.ex = Execution({"text": None, "results": [], "logs": {"stdout": [], "stderr": []}, "error": None,
                             "execution_count": None})
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.on_result = on_result
        self.ended = False

    def feed(self, line: bytes) -> None:
        if not line.strip():
            return
        d = json.loads(line)
        kind = d.get("type")
        if kind in ("stdout", "stderr"):
            self.ex["logs"][kind].append(d.get("text", ""))
            cb = self.callbacks[kind]
            if cb is not None:
                cb(d.get("text", ""))
        elif kind == "result":
            r = Record({k: v for k, v in d.items() if k != "type"})
            self.ex["results"].append(r)
            if r.get("is_main_result"):
                self.ex["text"] = r.get("text")
            if self.on_result is not None:
                self.on_result(r)
        elif kind == "error":
            self.ex["error"] = Record({k: d.get(k) for k in ("name", "value", "traceback")})
        elif kind == "number_of_executions":
            self.ex["execution_count"] = d.get("execution_count")
        elif kind == "end_of_execution":
            self.ended = True


# --------------------------------------------------------------- client ---

class Client:
    """One fedrouter endpoint.

    Args:
        url: the router, e.g. ``http://127.0.0.1:8080`` (default
            ``$FEDROUTER_URL``, else ``http://127.0.0.1:8080``).
        token: bearer token (default ``$FEDROUTER_TOKEN``).
        region: region hint sent as ``X-Client-Region`` on every call
            (default ``$FEDROUTER_REGION``); ``create(region=...)`` overrides
            it per create.
        timeout: seconds to wait for an answer to ordinary calls (60).
        create_timeout: seconds to wait for a create to answer (900: a batch
            returns when every sandbox is exec-ready).
        connect_timeout: seconds to connect (10).
        retry_budget_s: how long creates keep retrying after ``429``/``503``
            with ``Retry-After`` (60; 0 disables). Exec is never retried.
        default_pool: pool used by ``create()`` when neither ``pool`` nor
            ``image`` is given (``"default"``, or ``$FEDROUTER_POOL``).
        max_connections: bound of the asyncio connection pool per event loop
            (2048; calls beyond it wait for a free connection).
        max_idle: idle keep-alive connections kept by the blocking pool (64).
        ssl_context: for ``https://`` routers with a private CA.
        headers: extra headers sent on every call.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, *,
                 region: Optional[str] = None, timeout: float = 60.0, create_timeout: float = 900.0,
                 connect_timeout: float = 10.0, retry_budget_s: float = 60.0,
                 default_pool: Optional[str] = None, max_connections: int = 2048, max_idle: int = 64,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        self.url = (url or os.environ.get("FEDROUTER_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else (os.environ.get("FEDROUTER_TOKEN") or None)
        self.region = region if region is not None else (os.environ.get("FEDROUTER_REGION") or None)
        self.timeout = timeout
        self.create_timeout = create_timeout
        self.connect_timeout = connect_timeout
        self.retry_budget_s = retry_budget_s
        self.default_pool = default_pool or os.environ.get("FEDROUTER_POOL") or "default"
        u = urllib.parse.urlsplit(self.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"fedrouter URL must be http(s)://host[:port][/prefix], got {self.url!r}")
        tls = u.scheme == "https"
        port = u.port or (443 if tls else 80)
        self._prefix = u.path.rstrip("/")
        if tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
        self._sync = SyncPool(u.hostname, port, tls, ssl_context, connect_timeout, max_idle)
        self._aio = AioPool(u.hostname, port, tls, ssl_context, connect_timeout, max_connections)
        base = {"Accept": JSON, "User-Agent": "fedrouter-python/0.1"}
        if self.token:
            base["Authorization"] = "Bearer " + self.token
        if self.region:
            base["X-Client-Region"] = self.region
        base.update(headers or {})
        self._base_headers = base
        self._rid_prefix = "py-" + os.urandom(4).hex() + "-"
        self._rid = itertools.count(1)

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # ------------------------------------------------------- plumbing ---

    def _prepare(self, req: _Req) -> Tuple[str, Optional[bytes], Dict[str, str], str, float]:
        path = self._prefix + req.path
        if req.query:
            path += "?" + urllib.parse.urlencode(req.query, safe="=/")
        rid = self._rid_prefix + str(next(self._rid))
        headers = dict(self._base_headers)
        headers["X-Request-Id"] = rid
        data: Optional[bytes] = None
        if req.raw is not None:
            data = req.raw
            headers["Content-Type"] = req.content_type
        elif req.body is not None:
            data = json.dumps(req.body, separators=(",", ":")).encode()
            headers["Content-Type"] = JSON
        timeout = req.timeout if req.timeout is not None else self.timeout
        return path, data, headers, rid, timeout

    def _error(self, req: _Req, status: int, headers: Mapping[str, str], body: bytes,
               rid: str) -> FedrouterError:
        rid = headers.get("x-request-id", rid)
        err: Dict[str, Any] = {}
        try:
            parsed = json.loads(body) if body else None
            if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                err = parsed["error"]
        except ValueError:
            pass
        code = err.get("code") if isinstance(err.get("code"), str) else None
        msg = err.get("message") if isinstance(err.get("message"), str) else \
            (body[:300].decode("utf-8", "replace") or f"HTTP {status}")
        cls = error_class_for(code)
        e: FedrouterError = cls(msg, status=status, code=code or f"http_{status}", request_id=rid,
                                body=err, retry_after=_retry_after(headers), headers=headers)
        if req.unsupported:
            if (req.unsupported == "endpoint" and (code == "not_found" or status == 405)) or \
                    (req.unsupported.startswith("field:") and isinstance(e, InvalidField)
                     and e.field == req.unsupported[6:]):
                ne = NotSupported(f"this router does not serve {req.method} {req.path} yet "
                                  f"({e.code}: {msg})", status=status, code=e.code, request_id=rid, body=err,
                                  headers=headers)
                ne.__cause__ = e
                return ne
        return e

    def _decode(self, req: _Req, resp: Response, rid: str) -> Any:
        if resp.status >= 400:
            raise self._error(req, resp.status, resp.headers, resp.body, rid)
        ct = resp.headers.get("content-type", "")
        if req.parse is bytes:
            return resp.body
        data: Any = None
        if resp.body and ("json" in ct or resp.body[:1] in (b"{", b"[")):
            try:
                data = json.loads(resp.body)
            except ValueError as e:
                raise APIError(f"the router's answer is not JSON: {resp.body[:200]!r}", status=resp.status,
                               code="bad_response", request_id=resp.headers.get("x-request-id", rid)) from e
        elif resp.body:
            data = resp.body
        return req.parse(data) if req.parse else data

    def _retry_wait(self, req: _Req, e: FedrouterError, deadline: float) -> Optional[float]:
        """Seconds to wait before retrying <req> after <e>, or None."""
        if not req.retry or e.status not in (429, 503) or e.retry_after is None:
            return None
        wait = max(e.retry_after, 0.05)
        if time.monotonic() + wait > deadline:
            return None
        return wait

    def _run(self, req: _Req, budget: Optional[float] = None) -> Any:
        deadline = time.monotonic() + (self.retry_budget_s if budget is None else budget)
        while True:
            path, data, headers, rid, timeout = self._prepare(req)
            resp = self._sync.request(req.method, path, data, headers, timeout, req.idempotent, rid)
            try:
                return self._decode(req, resp, rid)
            except FedrouterError as e:
                wait = self._retry_wait(req, e, deadline)
                if wait is None:
                    raise
                time.sleep(wait)

    async def _arun(self, req: _Req, budget: Optional[float] = None) -> Any:
        deadline = time.monotonic() + (self.retry_budget_s if budget is None else budget)
        while True:
            path, data, headers, rid, timeout = self._prepare(req)
            resp = await self._aio.request(req.method, path, data, headers, timeout, req.idempotent, rid)
            try:
                return self._decode(req, resp, rid)
            except FedrouterError as e:
                wait = self._retry_wait(req, e, deadline)
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    def _stream_lines(self, req: _Req) -> Iterator[bytes]:
        path, data, headers, rid, timeout = self._prepare(req)
        headers["Accept"] = "application/x-ndjson"
        s = self._sync.stream(req.method, path, data, headers, timeout, req.idempotent, rid)
        if s.status >= 400:
            body = s.read()
            raise self._error(req, s.status, s.headers, body, rid)
        return s.lines()

    async def _astream_lines(self, req: _Req) -> AsyncIterator[bytes]:
        path, data, headers, rid, timeout = self._prepare(req)
        headers["Accept"] = "application/x-ndjson"
        s = await self._aio.stream(req.method, path, data, headers, timeout, req.idempotent, rid)
        if s.status >= 400:
            body = await s.read()
            raise self._error(req, s.status, s.headers, body, rid)
        async for line in s.lines():
            yield line

    def close(self) -> None:
        """Closes the blocking pool's idle connections."""
        self._sync.close()

    async def aclose(self) -> None:
        """Closes the running event loop's idle connections (call before the
        loop ends, e.g. at the end of the coroutine given to asyncio.run)."""
        await self._aio.aclose()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # --------------------------------------------------------- create ---

    def _create_body(self, name: Optional[str], num_sandboxes: Optional[int], pool: Optional[str],
                     image: Optional[str], cpus: Optional[float], memory_gb: Optional[float],
                     secrets: Optional[Sequence[str]], env: Optional[Mapping[str, str]],
                     volumes: Optional[Mapping[str, str]], labels: Optional[Mapping[str, str]],
                     region: Optional[str], clusters: Optional[Sequence[str]], timeout_s: Optional[float],
                     partial_ok: Optional[bool], template: Optional[str], timeout: Optional[float], *,
                     runtime_class: Optional[str] = None, node_selector: Optional[Mapping[str, str]] = None,
                     tolerations: Optional[Sequence[Mapping[str, Any]]] = None, gpus: Optional[int] = None
                     ) -> Dict[str, Any]:
        if template is not None:
            if pool is not None and pool != template:
                raise ValueError("give pool or template (its alias), not both")
            pool = template
        if timeout_s is None and timeout is not None:
            timeout_s = timeout
        if pool is None and image is None:
            pool = self.default_pool
        body: Dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if num_sandboxes is not None:
            if isinstance(num_sandboxes, bool) or not isinstance(num_sandboxes, int) or num_sandboxes < 1:
                raise ValueError("num_sandboxes must be an int >= 1")
            body["num_sandboxes"] = num_sandboxes
        for k, v in (("pool", pool), ("image", image), ("cpus", cpus), ("memory_gb", memory_gb),
                     ("region", region), ("partial_ok", partial_ok)):
            if v is not None:
                body[k] = v
        if secrets:
            body["secrets"] = list(secrets)
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if volumes:
            body["volumes"] = dict(volumes)
        body.update(_pod_options(runtime_class, node_selector, tolerations, gpus))
        if labels:
            body["labels"] = {str(k): str(v) for k, v in labels.items()}
        if clusters:
            body["clusters"] = [clusters] if isinstance(clusters, str) else list(clusters)
        if timeout_s is not None:
            body["timeout_s"] = _seconds(timeout_s, "timeout_s")
        return body

    def _create_result(self, body: Dict[str, Any], data: Any) -> Union["Sandbox", "SandboxList"]:
        sbs = [Sandbox(self, s) for s in (data or {}).get("sandboxes", [])]
        placement = Record((data or {}).get("placement") or {})
        if "num_sandboxes" in body:
            out = SandboxList(sbs)
            out.placement = placement
            return out
        if not sbs:
            raise APIError("create answered without a sandbox", code="bad_response")
        sbs[0].placement = placement
        return sbs[0]

    _CREATE_DOC = """Creates one sandbox, or a batch with ``num_sandboxes``.

        Returns a :class:`Sandbox` (or a :class:`SandboxList` when
        ``num_sandboxes`` is given) once every sandbox is exec-ready. Batch
        names are ``<name>-0001``, ``<name>-0002``, ...

        Args:
            name: base name (``sandbox``).
            num_sandboxes: batch size; the answer is then a list.
            pool: warm pool to claim from (``template`` is an alias, as in
                ``sky.sandbox``). Without ``pool`` and ``image`` the client's
                ``default_pool`` is used.
            image, cpus, memory_gb: shape of cold-started sandboxes.
            secrets, env, volumes, labels: as in the API (``volumes`` maps
                mount paths to PersistentVolumeClaims, ``{"/data": "pvc"}``:
                placed only where the claims exist; ``secrets`` needs a
                router that supports them).
            runtime_class: the pods' RuntimeClass (``spec.runtimeClassName``,
                e.g. ``'gvisor'``): placed only where it exists.
            node_selector: ``{label key: value}`` the nodes must have
                (``spec.nodeSelector``).
            tolerations: a list of Kubernetes tolerations,
                ``[{'key': 'gpu', 'operator': 'Exists', 'effect':
                'NoSchedule'}]`` (``spec.tolerations``).
            gpus: GPUs per sandbox (an int; the router's GPU resource,
                ``nvidia.com/gpu`` by default): placed only on nodes with
                that many free. Without these pod options a ``pool`` create
                takes the pool's; with different ones it is a cold start.
                They are checked for type here (``TypeError``) and by the
                router as the API server would (``InvalidField`` with
                ``field`` naming the option).
            region: preferred region (else the client's region hint).
            clusters: restrict placement to these clusters.
            timeout_s: sandbox lifetime in seconds (``timeout`` is an alias).
            partial_ok: keep what could be created instead of rolling back.
            retry_budget_s: seconds to keep retrying 429/503 answers that carry
                ``Retry-After`` (default: the client's).
            progress: ``True`` for a progress bar on stderr (when it is a
                terminal), or a callable ``f(done, total)``.
            request_timeout: seconds to wait for the answer (default: the
                client's ``create_timeout``).

        Raises:
            NoCapacity: 503, nothing created (all-or-nothing), after the retry
                budget is spent.
            TenantLimit: 429, likewise.
            InvalidField, PoolNotFound, ClusterNotFound, ...
        """

    def _create_req(self, body: Dict[str, Any], request_timeout: Optional[float]) -> _Req:
        return _Req("POST", "/v1/sandboxes", body=body, retry=True,
                    timeout=request_timeout if request_timeout is not None else self.create_timeout,
                    parse=lambda d: self._create_result(body, d))

    def _create_sync(self, name: Optional[str] = None, num_sandboxes: Optional[int] = None, *,
                     pool: Optional[str] = None, image: Optional[str] = None, cpus: Optional[float] = None,
                     memory_gb: Optional[float] = None, secrets: Optional[Sequence[str]] = None,
                     env: Optional[Mapping[str, str]] = None, volumes: Optional[Mapping[str, str]] = None,
                     labels: Optional[Mapping[str, str]] = None, region: Optional[str] = None,
                     clusters: Optional[Sequence[str]] = None, timeout_s: Optional[float] = None,
                     partial_ok: Optional[bool] = None, template: Optional[str] = None,
                     timeout: Optional[float] = None, retry_budget_s: Optional[float] = None,
                     progress: ProgressArg = None, request_timeout: Optional[float] = None,
                     runtime_class: Optional[str] = None, node_selector: Optional[Mapping[str, str]] = None,
                     tolerations: Optional[Sequence[Mapping[str, Any]]] = None, gpus: Optional[int] = None
                     ) -> Any:
        body = self._create_body(name, num_sandboxes, pool, image, cpus, memory_gb, secrets, env, volumes,
                                 labels, region, clusters, timeout_s, partial_ok, template, timeout,
                                 runtime_class=runtime_class, node_selector=node_selector,
                                 tolerations=tolerations, gpus=gpus)
        total = body.get("num_sandboxes", 1)
        report = make_reporter(progress, "create " + body.get("name", "sandbox"), total)
        if report is None:
            return self._run(self._create_req(body, request_timeout), retry_budget_s)
        tag = os.urandom(5).hex()
        body.setdefault("labels", {})["fr-sdk-batch"] = tag
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(0.5):
                try:
                    n = sum(1 for s in self.ls(label=f"fr-sdk-batch={tag}") if s.state == "running")
                except FedrouterError:
                    continue
                if not stop.is_set():
                    report(min(n, total), total)
        t = threading.Thread(target=poll, name="fedrouter-progress", daemon=True)
        report(0, total)
        t.start()
        try:
            res = self._run(self._create_req(body, request_timeout), retry_budget_s)
        finally:
            stop.set()
            t.join()
        report(len(res) if isinstance(res, list) else 1, total)
        if hasattr(report, "close"):
            report.close()  # type: ignore[attr-defined]
        return res

    async def _create_async(self, name: Optional[str] = None, num_sandboxes: Optional[int] = None, *,
                            pool: Optional[str] = None, image: Optional[str] = None,
                            cpus: Optional[float] = None, memory_gb: Optional[float] = None,
                            secrets: Optional[Sequence[str]] = None, env: Optional[Mapping[str, str]] = None,
                            volumes: Optional[Mapping[str, str]] = None,
                            labels: Optional[Mapping[str, str]] = None, region: Optional[str] = None,
                            clusters: Optional[Sequence[str]] = None, timeout_s: Optional[float] = None,
                            partial_ok: Optional[bool] = None, template: Optional[str] = None,
                            timeout: Optional[float] = None, retry_budget_s: Optional[float] = None,
                            progress: ProgressArg = None, request_timeout: Optional[float] = None,
                            runtime_class: Optional[str] = None,
                            node_selector: Optional[Mapping[str, str]] = None,
                            tolerations: Optional[Sequence[Mapping[str, Any]]] = None,
                            gpus: Optional[int] = None) -> Any:
        body = self._create_body(name, num_sandboxes, pool, image, cpus, memory_gb, secrets, env, volumes,
                                 labels, region, clusters, timeout_s, partial_ok, template, timeout,
                                 runtime_class=runtime_class, node_selector=node_selector,
                                 tolerations=tolerations, gpus=gpus)
        total = body.get("num_sandboxes", 1)
        report = make_reporter(progress, "create " + body.get("name", "sandbox"), total)
        if report is None:
            return await self._arun(self._create_req(body, request_timeout), retry_budget_s)
        tag = os.urandom(5).hex()
        body.setdefault("labels", {})["fr-sdk-batch"] = tag

        async def poll() -> None:
            while True:
                await asyncio.sleep(0.5)
                try:
                    sbs = await self.ls.aio(label=f"fr-sdk-batch={tag}")
                except FedrouterError:
                    continue
                report(min(sum(1 for s in sbs if s.state == "running"), total), total)
        report(0, total)
        task = asyncio.ensure_future(poll())
        try:
            res = await self._arun(self._create_req(body, request_timeout), retry_budget_s)
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        report(len(res) if isinstance(res, list) else 1, total)
        if hasattr(report, "close"):
            report.close()  # type: ignore[attr-defined]
        return res

    def _create_aio(self, *args: Any, **kwargs: Any) -> "AwaitableContext":
        return AwaitableContext(self._create_async(*args, **kwargs))

    _create_sync.__doc__ = _CREATE_DOC
    _create_sync.__name__ = "create"
    create = dual(_create_sync, _create_aio)

    def _explain_req(self, name: Optional[str] = None, num_sandboxes: Optional[int] = None, *,
                     pool: Optional[str] = None, image: Optional[str] = None, cpus: Optional[float] = None,
                     memory_gb: Optional[float] = None, secrets: Optional[Sequence[str]] = None,
                     env: Optional[Mapping[str, str]] = None, volumes: Optional[Mapping[str, str]] = None,
                     labels: Optional[Mapping[str, str]] = None, region: Optional[str] = None,
                     clusters: Optional[Sequence[str]] = None, timeout_s: Optional[float] = None,
                     partial_ok: Optional[bool] = None, template: Optional[str] = None,
                     timeout: Optional[float] = None, runtime_class: Optional[str] = None,
                     node_selector: Optional[Mapping[str, str]] = None,
                     tolerations: Optional[Sequence[Mapping[str, Any]]] = None, gpus: Optional[int] = None
                     ) -> _Req:
        body = self._create_body(name, num_sandboxes, pool, image, cpus, memory_gb, secrets, env, volumes,
                                 labels, region, clusters, timeout_s, partial_ok, template, timeout,
                                 runtime_class=runtime_class, node_selector=node_selector,
                                 tolerations=tolerations, gpus=gpus)
        return _Req("POST", "/v1/placement/explain", body=body, idempotent=True, parse=_record)

    def _explain(self, *a: Any, **k: Any) -> Record:
        """The placement plan a create with the same arguments would follow
        (``POST /v1/placement/explain``); creates nothing."""
        return self._run(self._explain_req(*a, **k), 0)

    async def _explain_aio(self, *a: Any, **k: Any) -> Record:
        return await self._arun(self._explain_req(*a, **k), 0)

    _explain.__name__ = "explain"
    explain = dual(_explain, _explain_aio)

    # ------------------------------------------------------ sandboxes ---

    def _sid(self, sandbox: Union[str, "Sandbox"]) -> str:
        sid = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        if not isinstance(sid, str) or not sid:
            raise TypeError("a sandbox or a sandbox id is needed")
        return urllib.parse.quote(sid, safe=".")

    def _get_req(self, sandbox: Union[str, "Sandbox"]) -> _Req:
        return _Req("GET", "/v1/sandboxes/" + self._sid(sandbox), parse=lambda d: Sandbox(self, d))

    def _ls_req(self, label: LabelFilter = None, *, pool: Optional[str] = None,
                cluster: Optional[str] = None, name_prefix: Optional[str] = None) -> _Req:
        q = _label_query(label)
        for k, v in (("pool", pool), ("cluster", cluster), ("name_prefix", name_prefix)):
            if v is not None:
                q.append((k, v))
        return _Req("GET", "/v1/sandboxes", query=q,
                    parse=lambda d: [Sandbox(self, s) for s in (d or {}).get("sandboxes", [])])

    def _terminate_req(self, sandbox: Union[str, "Sandbox"], missing_ok: bool = False) -> _Req:
        def parse(d: Any) -> bool:
            return bool((d or {}).get("terminated", True))
        return _Req("DELETE", "/v1/sandboxes/" + self._sid(sandbox), parse=parse)

    def _terminate_many_req(self, label: LabelFilter = None, *, pool: Optional[str] = None,
                            cluster: Optional[str] = None, name_prefix: Optional[str] = None) -> _Req:
        q = self._ls_req(label, pool=pool, cluster=cluster, name_prefix=name_prefix).query
        if not q:
            raise ValueError("terminate_many needs at least one filter (label=, pool=, cluster=, name_prefix=)")
        return _Req("DELETE", "/v1/sandboxes", query=q, timeout=max(self.timeout, 300.0),
                    parse=lambda d: list((d or {}).get("ids", [])))

    def _get(self, sandbox: Union[str, "Sandbox"]) -> "Sandbox":
        """The sandbox with this id (``GET /v1/sandboxes/{id}``); raises
        :class:`SandboxNotFound`."""
        return self._run(self._get_req(sandbox))

    async def _get_aio(self, sandbox: Union[str, "Sandbox"]) -> "Sandbox":
        return await self._arun(self._get_req(sandbox))

    def _ls(self, label: LabelFilter = None, **filters: Any) -> List["Sandbox"]:
        """The tenant's sandboxes, filtered: ``label`` (``"k=v"``, a dict or a
        list of ``"k=v"``), ``pool``, ``cluster``, ``name_prefix``."""
        return self._run(self._ls_req(label, **filters))

    async def _ls_aio(self, label: LabelFilter = None, **filters: Any) -> List["Sandbox"]:
        return await self._arun(self._ls_req(label, **filters))

    def _terminate(self, sandbox: Union[str, "Sandbox"], *, missing_ok: bool = False, wait: Any = None) -> bool:
        """Terminates one sandbox (``DELETE /v1/sandboxes/{id}``). Returns
        True, or False for an unknown id with ``missing_ok`` (else
        :class:`SandboxNotFound`)."""
        try:
            return self._run(self._terminate_req(sandbox))
        except SandboxNotFound:
            if missing_ok:
                return False
            raise

    async def _terminate_aio(self, sandbox: Union[str, "Sandbox"], *, missing_ok: bool = False,
                             wait: Any = None) -> bool:
        try:
            return await self._arun(self._terminate_req(sandbox))
        except SandboxNotFound:
            if missing_ok:
                return False
            raise

    def _terminate_many(self, label: LabelFilter = None, **filters: Any) -> List[str]:
        """Terminates every sandbox of the tenant matching the filters (at
        least one: ``label``, ``pool``, ``cluster``, ``name_prefix``);
        returns the terminated ids."""
        return self._run(self._terminate_many_req(label, **filters))

    async def _terminate_many_aio(self, label: LabelFilter = None, **filters: Any) -> List[str]:
        return await self._arun(self._terminate_many_req(label, **filters))

    for _n in ("get", "ls", "terminate", "terminate_many"):
        locals()["_" + _n].__name__ = _n
    get = dual(_get, _get_aio)
    ls = dual(_ls, _ls_aio)
    terminate = dual(_terminate, _terminate_aio)
    terminate_many = dual(_terminate_many, _terminate_many_aio)

    # ----------------------------------------------------------- exec ---

    def _exec_body(self, argv: Tuple[Any, ...], timeout: Optional[float], stdin: Union[None, str, bytes],
                   env: Optional[Mapping[str, str]], workdir: Optional[str],
                   max_output_bytes: Optional[int]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"argv": _argv(argv)}
        s = _stdin_text(stdin)
        if s is not None:
            body["stdin"] = s
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if workdir is not None:
            body["workdir"] = workdir
        t = _seconds(timeout, "timeout")
        if t is not None:
            body["timeout_s"] = t
        if max_output_bytes is not None:
            body["max_output_bytes"] = int(max_output_bytes)
        return body

    def _exec_req(self, sandbox: Union[str, "Sandbox"], *argv: Any, timeout: Optional[float] = None,
                  stdin: Union[None, str, bytes] = None, env: Optional[Mapping[str, str]] = None,
                  workdir: Optional[str] = None, max_output_bytes: Optional[int] = None,
                  request_timeout: Optional[float] = None) -> _Req:
        body = self._exec_body(argv, timeout, stdin, env, workdir, max_output_bytes)
        rt = request_timeout if request_timeout is not None else (body.get("timeout_s", 60) + self.timeout)
        return _Req("POST", f"/v1/sandboxes/{self._sid(sandbox)}/exec", body=body, idempotent=False,
                    timeout=rt, parse=ExecResult)

    def _exec(self, sandbox: Union[str, "Sandbox"], *argv: Any, **kw: Any) -> ExecResult:
        """Runs ``argv`` in the sandbox (no shell) and returns its
        :class:`ExecResult` (``r['stdout']`` / ``r.stdout``, ``stderr``,
        ``exit_code``, ``timed_out``, truncation flags, ``duration_ms``).

        Keyword args: ``timeout`` (seconds, enforced in the sandbox: the
        command is killed and ``timed_out`` is true), ``stdin`` (str or
        UTF-8 bytes), ``env``, ``workdir``, ``max_output_bytes`` (cap of each
        of stdout and stderr), ``request_timeout`` (client-side wait, default
        ``timeout`` + the client's timeout).

        A non-zero exit is a result, not an exception. Never retried: a
        dropped connection raises :class:`ConnectionLost`.
        """
        return self._run(self._exec_req(sandbox, *argv, **kw), 0)

    async def _exec_aio(self, sandbox: Union[str, "Sandbox"], *argv: Any, **kw: Any) -> ExecResult:
        return await self._arun(self._exec_req(sandbox, *argv, **kw), 0)

    _exec.__name__ = "exec"
    exec = dual(_exec, _exec_aio)

    def _stream_req(self, sandbox: Union[str, "Sandbox"], argv: Tuple[Any, ...], timeout: Optional[float],
                    stdin: Union[None, str, bytes], env: Optional[Mapping[str, str]], workdir: Optional[str],
                    max_output_bytes: Optional[int], request_timeout: Optional[float]) -> _Req:
        body = self._exec_body(argv, timeout, stdin, env, workdir, max_output_bytes)
        body["stream"] = True
        rt = request_timeout if request_timeout is not None else (body.get("timeout_s", 60) + self.timeout)
        return _Req("POST", f"/v1/sandboxes/{self._sid(sandbox)}/exec", body=body, idempotent=False,
                    timeout=rt, unsupported="field:stream")

    @staticmethod
    def _fallback_chunks(r: ExecResult) -> List[ExecChunk]:
        out = []
        if r.stdout_bytes:
            out.append(ExecChunk({"stdout": r.stdout} if "stdout_encoding" not in r else
                                 {"stdout_b64": base64.b64encode(r.stdout_bytes).decode()}))
        if r.stderr_bytes:
            out.append(ExecChunk({"stderr": r.stderr} if "stderr_encoding" not in r else
                                 {"stderr_b64": base64.b64encode(r.stderr_bytes).decode()}))
        out.append(ExecChunk({"exit_code": r.exit_code, "timed_out": r.timed_out,
                              "duration_ms": r.duration_ms}))
        return out

    def _exec_stream(self, sandbox: Union[str, "Sandbox"], *argv: Any, timeout: Optional[float] = None,
                     stdin: Union[None, str, bytes] = None, env: Optional[Mapping[str, str]] = None,
                     workdir: Optional[str] = None, max_output_bytes: Optional[int] = None,
                     request_timeout: Optional[float] = None, fallback: bool = False) -> Iterator[ExecChunk]:
        """Runs ``argv`` and yields :class:`ExecChunk` objects as the output
        arrives (``POST .../exec`` with ``"stream": true``, NDJSON); the last
        chunk has ``exit_code``, ``timed_out`` and ``duration_ms``.

        On a router without streaming exec this raises
        :class:`NotSupported`, unless ``fallback=True``: then the buffered
        exec runs and its output comes as (at most) three chunks."""
        req = self._stream_req(sandbox, argv, timeout, stdin, env, workdir, max_output_bytes, request_timeout)
        try:
            lines = self._stream_lines(req)
        except NotSupported:
            if not fallback:
                raise
            r = self._exec(sandbox, *argv, timeout=timeout, stdin=stdin, env=env, workdir=workdir,
                           max_output_bytes=max_output_bytes, request_timeout=request_timeout)
            yield from self._fallback_chunks(r)
            return
        yield from _checked(lines, req)

    async def _exec_stream_aio(self, sandbox: Union[str, "Sandbox"], *argv: Any,
                               timeout: Optional[float] = None, stdin: Union[None, str, bytes] = None,
                               env: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                               max_output_bytes: Optional[int] = None, request_timeout: Optional[float] = None,
                               fallback: bool = False) -> AsyncIterator[ExecChunk]:
        req = self._stream_req(sandbox, argv, timeout, stdin, env, workdir, max_output_bytes, request_timeout)
        it = self._astream_lines(req).__aiter__()
        try:
            first = await it.__anext__()
        except StopAsyncIteration:
            raise _ended(req) from None
        except NotSupported:
            if not fallback:
                raise
            r = await self._exec_aio(sandbox, *argv, timeout=timeout, stdin=stdin, env=env, workdir=workdir,
                                     max_output_bytes=max_output_bytes, request_timeout=request_timeout)
            for c in self._fallback_chunks(r):
                yield c
            return
        c = ExecChunk(json.loads(first))
        saw_exit = c.kind == "exit"
        yield c
        async for line in it:  # to the end, so the connection can be reused
            if saw_exit:
                continue
            c = ExecChunk(json.loads(line))
            saw_exit = c.kind == "exit"
            yield c
        if not saw_exit:
            raise _ended(req)

    _exec_stream.__name__ = "exec_stream"
    exec_stream = dual(_exec_stream, _exec_stream_aio)

    # ------------------------------------------------------ run_code ---

    def _code_req(self, sandbox: Union[str, "Sandbox"], code: str, context: Optional[str],
                  language: Optional[str], env: Optional[Mapping[str, str]], timeout: Optional[float]) -> _Req:
        if not isinstance(code, str):
            raise TypeError("code must be a str (the cell's source)")
        if context is not None and language is not None:
            raise ValueError("give context or language, not both")
        body: Dict[str, Any] = {"code": code}
        if context is not None:
            body["context_id"] = getattr(context, "id", context)
        if language is not None:
            body["language"] = language
        if env:
            body["env_vars"] = dict(env)
        return _Req("POST", f"/v1/sandboxes/{self._sid(sandbox)}/ports/{CODE_INTERPRETER_PORT}/execute", body=body,
                    idempotent=False, timeout=timeout if timeout is not None else max(self.timeout, 300.0))

    def _run_code(self, sandbox: Union[str, "Sandbox"], code: str, *, context: Any = None,
                  language: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                  on_stdout: Optional[Callable[[str], Any]] = None, on_stderr: Optional[Callable[[str], Any]] = None,
                  on_result: Optional[Callable[[Record], Any]] = None, timeout: Optional[float] = None) -> Execution:
        """Runs ``code`` as one cell of the Code Interpreter in ``sandbox``
        (a sandbox of the code-interpreter image: port 49999, docs/e2b.md),
        in its default context, in ``context`` (a context id) or in the
        default context of ``language``. ``env`` holds for this cell only.
        Output streams to ``on_stdout``/``on_stderr`` (each piece of text)
        and ``on_result`` as it comes; returns the :class:`Execution`. A
        cell that raises is not an exception here: see ``error``."""
        req = self._code_req(sandbox, code, context, language, env, timeout)
        cell = _Cell(on_stdout, on_stderr, on_result)
        for line in self._stream_lines(req):
            cell.feed(line)
        if not cell.ended:
            raise ConnectionLost(f"{req.method} {req.path}: the answer ended before the cell did")
        return cell.ex

    async def _run_code_aio(self, sandbox: Union[str, "Sandbox"], code: str, *, context: Any = None,
                            language: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                            on_stdout: Optional[Callable[[str], Any]] = None,
                            on_stderr: Optional[Callable[[str], Any]] = None,
                            on_result: Optional[Callable[[Record], Any]] = None,
                            timeout: Optional[float] = None) -> Execution:
        req = self._code_req(sandbox, code, context, language, env, timeout)
        cell = _Cell(on_stdout, on_stderr, on_result)
        async for line in self._astream_lines(req):
            cell.feed(line)
        if not cell.ended:
            raise ConnectionLost(f"{req.method} {req.path}: the answer ended before the cell did")
        return cell.ex

    _run_code.__name__ = "run_code"
    run_code = dual(_run_code, _run_code_aio)

    # ---------------------------------------------------------- files ---

    def _files_req(self, method: str, sandbox: Union[str, "Sandbox"], path: str, *,
                   extra: Optional[List[Tuple[str, str]]] = None, raw: Optional[bytes] = None,
                   parse: Optional[Callable[[Any], Any]] = None) -> _Req:
        if not path.startswith("/"):
            raise ValueError("sandbox paths are absolute: " + repr(path))
        return _Req(method, f"/v1/sandboxes/{self._sid(sandbox)}/files", query=[("path", path)] + (extra or []),
                    raw=raw, content_type="application/octet-stream" if raw is not None else JSON,
                    parse=parse, unsupported="endpoint", timeout=max(self.timeout, 300.0))

    @staticmethod
    def _file_bytes(data: Union[bytes, str, Any]) -> bytes:
        if isinstance(data, str):
            return data.encode("utf-8")
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        if hasattr(data, "read"):
            d = data.read()
            return d.encode("utf-8") if isinstance(d, str) else bytes(d)
        raise TypeError("file data must be bytes, str or a readable file object")

    @staticmethod
    def _listing(d: Any) -> List[Record]:
        if isinstance(d, dict):
            for k in ("entries", "files", "items"):
                if isinstance(d.get(k), list):
                    d = d[k]
                    break
        return [Record(x) if isinstance(x, dict) else x for x in (d or [])]

    def _read_file(self, sandbox: Union[str, "Sandbox"], path: str) -> bytes:
        return self._run(self._files_req("GET", sandbox, path, parse=bytes))

    async def _read_file_aio(self, sandbox: Union[str, "Sandbox"], path: str) -> bytes:
        return await self._arun(self._files_req("GET", sandbox, path, parse=bytes))

    def _write_file(self, sandbox: Union[str, "Sandbox"], path: str, data: Union[bytes, str, Any]) -> None:
        self._run(self._files_req("PUT", sandbox, path, raw=self._file_bytes(data)))

    async def _write_file_aio(self, sandbox: Union[str, "Sandbox"], path: str, data: Union[bytes, str, Any]) -> None:
        await self._arun(self._files_req("PUT", sandbox, path, raw=self._file_bytes(data)))

    def _list_files(self, sandbox: Union[str, "Sandbox"], path: str = "/") -> List[Record]:
        return self._run(self._files_req("GET", sandbox, path, extra=[("list", "1")], parse=self._listing))

    async def _list_files_aio(self, sandbox: Union[str, "Sandbox"], path: str = "/") -> List[Record]:
        return await self._arun(self._files_req("GET", sandbox, path, extra=[("list", "1")], parse=self._listing))

    def _remove_file(self, sandbox: Union[str, "Sandbox"], path: str) -> None:
        self._run(self._files_req("DELETE", sandbox, path))

    async def _remove_file_aio(self, sandbox: Union[str, "Sandbox"], path: str) -> None:
        await self._arun(self._files_req("DELETE", sandbox, path))

    read_file = dual(_read_file, _read_file_aio)
    write_file = dual(_write_file, _write_file_aio)
    list_files = dual(_list_files, _list_files_aio)
    remove_file = dual(_remove_file, _remove_file_aio)

    # ------------------------------------------------------ processes ---

    def _proc_start_req(self, sandbox: Union[str, "Sandbox"], argv: Tuple[Any, ...], cmd: Optional[str],
                        env: Optional[Mapping[str, str]], workdir: Optional[str],
                        stdin: Union[None, bool, str, bytes], pty: Any, timeout: Optional[float]) -> _Req:
        body: Dict[str, Any] = {}
        if cmd is not None:
            if argv:
                raise TypeError("give argv or cmd=, not both")
            body["cmd"] = cmd
        else:
            body["argv"] = _argv(argv)
        if env:
            body["env"] = {str(k): str(v) for k, v in env.items()}
        if workdir is not None:
            body["workdir"] = workdir
        if stdin is not None:
            body["stdin"] = stdin if isinstance(stdin, bool) else _stdin_text(stdin)
        if pty:
            body["pty"] = pty
        t = _seconds(timeout, "timeout")
        if t is not None:
            body["timeout_s"] = t
        sid = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        return _Req("POST", f"/v1/sandboxes/{self._sid(sandbox)}/processes", body=body, idempotent=False,
                    unsupported="endpoint", parse=lambda d: Process(self, sid, d))

    def _proc_list_req(self, sandbox: Union[str, "Sandbox"]) -> _Req:
        def parse(d: Any) -> List[Record]:
            items = d.get("processes", []) if isinstance(d, dict) else (d or [])
            return [Record(x) for x in items]
        return _Req("GET", f"/v1/sandboxes/{self._sid(sandbox)}/processes", unsupported="endpoint", parse=parse)

    def _proc_path(self, sandbox: Union[str, "Sandbox"], pid: int, what: str) -> str:
        return f"/v1/sandboxes/{self._sid(sandbox)}/processes/{int(pid)}/{what}"

    def _start_process(self, sandbox: Union[str, "Sandbox"], *argv: Any, cmd: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                       stdin: Union[None, bool, str, bytes] = None, pty: Any = None,
                       timeout: Optional[float] = None) -> "Process":
        return self._run(self._proc_start_req(sandbox, argv, cmd, env, workdir, stdin, pty, timeout), 0)

    async def _start_process_aio(self, sandbox: Union[str, "Sandbox"], *argv: Any, cmd: Optional[str] = None,
                                 env: Optional[Mapping[str, str]] = None, workdir: Optional[str] = None,
                                 stdin: Union[None, bool, str, bytes] = None, pty: Any = None,
                                 timeout: Optional[float] = None) -> "Process":
        return await self._arun(self._proc_start_req(sandbox, argv, cmd, env, workdir, stdin, pty, timeout), 0)

    def _list_processes(self, sandbox: Union[str, "Sandbox"]) -> List[Record]:
        return self._run(self._proc_list_req(sandbox))

    async def _list_processes_aio(self, sandbox: Union[str, "Sandbox"]) -> List[Record]:
        return await self._arun(self._proc_list_req(sandbox))

    def _output_req(self, sandbox: Union[str, "Sandbox"], pid: int, follow: bool,
                    request_timeout: Optional[float]) -> _Req:
        return _Req("GET", self._proc_path(sandbox, pid, "output"), query=[("follow", "1" if follow else "0")],
                    unsupported="endpoint",
                    timeout=request_timeout if request_timeout is not None else max(self.timeout, 3600.0))

    def _process_output(self, sandbox: Union[str, "Sandbox"], pid: int, follow: bool = True,
                        request_timeout: Optional[float] = None) -> Iterator[ExecChunk]:
        req = self._output_req(sandbox, pid, follow, request_timeout)
        lines = self._stream_lines(req)
        if follow:
            yield from _checked(lines, req)
        else:
            for line in lines:
                yield ExecChunk(json.loads(line))

    async def _process_output_aio(self, sandbox: Union[str, "Sandbox"], pid: int, follow: bool = True,
                                  request_timeout: Optional[float] = None) -> AsyncIterator[ExecChunk]:
        req = self._output_req(sandbox, pid, follow, request_timeout)
        saw_exit = False
        async for line in self._astream_lines(req):
            if saw_exit:
                continue
            c = ExecChunk(json.loads(line))
            saw_exit = c.kind == "exit"
            yield c
        if follow and not saw_exit:
            raise _ended(req)

    def _stdin_req(self, sandbox: Union[str, "Sandbox"], pid: int, data: Union[bytes, str], close: bool) -> _Req:
        return _Req("POST", self._proc_path(sandbox, pid, "stdin"), query=[("close", "1")] if close else [],
                    raw=self._file_bytes(data), content_type="application/octet-stream",
                    idempotent=False, unsupported="endpoint")

    def _send_stdin(self, sandbox: Union[str, "Sandbox"], pid: int, data: Union[bytes, str] = b"",
                    close: bool = False) -> None:
        self._run(self._stdin_req(sandbox, pid, data, close), 0)

    async def _send_stdin_aio(self, sandbox: Union[str, "Sandbox"], pid: int, data: Union[bytes, str] = b"",
                              close: bool = False) -> None:
        await self._arun(self._stdin_req(sandbox, pid, data, close), 0)

    def _signal_req(self, sandbox: Union[str, "Sandbox"], pid: int, sig: Union[str, int]) -> _Req:
        if isinstance(sig, int):
            import signal as _signal
            sig = _signal.Signals(sig).name
        return _Req("POST", self._proc_path(sandbox, pid, "signal"), body={"signal": str(sig)},
                    idempotent=False, unsupported="endpoint")

    def _signal_process(self, sandbox: Union[str, "Sandbox"], pid: int, sig: Union[str, int] = "SIGTERM") -> None:
        self._run(self._signal_req(sandbox, pid, sig), 0)

    async def _signal_process_aio(self, sandbox: Union[str, "Sandbox"], pid: int,
                                  sig: Union[str, int] = "SIGTERM") -> None:
        await self._arun(self._signal_req(sandbox, pid, sig), 0)

    start_process = dual(_start_process, _start_process_aio)
    list_processes = dual(_list_processes, _list_processes_aio)
    process_output = dual(_process_output, _process_output_aio)
    send_stdin = dual(_send_stdin, _send_stdin_aio)
    signal_process = dual(_signal_process, _signal_process_aio)

    # ---------------------------------------------------------- pools ---

    def _pool_path(self, name: str) -> str:
        return "/v1/pools/" + urllib.parse.quote(name, safe="")

    def _create_pool_req(self, name: str, image: Optional[str] = None, *, cpus: Optional[float] = None,
                         memory_gb: Optional[float] = None, replicas: Optional[int] = None,
                         clusters: Optional[Sequence[str]] = None, pool_replicas: Optional[int] = None,
                         shared: Optional[bool] = None, runtime_class: Optional[str] = None,
                         node_selector: Optional[Mapping[str, str]] = None,
                         tolerations: Optional[Sequence[Mapping[str, Any]]] = None, gpus: Optional[int] = None,
                         volumes: Optional[Mapping[str, str]] = None, **extra: Any) -> _Req:
        body: Dict[str, Any] = {"name": name}
        if shared is not None:
            body["shared"] = bool(shared)
        if replicas is None:
            replicas = pool_replicas
        for k, v in (("image", image), ("cpus", cpus), ("memory_gb", memory_gb), ("replicas", replicas)):
            if v is not None:
                body[k] = v
        if clusters:
            body["clusters"] = [clusters] if isinstance(clusters, str) else list(clusters)
        body.update(_pod_options(runtime_class, node_selector, tolerations, gpus))
        if volumes is not None:
            if not isinstance(volumes, Mapping):
                raise TypeError("volumes must be a mapping of mount paths to PersistentVolumeClaim names")
            body["volumes"] = dict(volumes)
        body.update(extra)
        return _Req("POST", "/v1/pools", body=body, idempotent=False, parse=_record)

    def _create_pool(self, name: str, image: Optional[str] = None, **kw: Any) -> Record:
        """Creates a warm pool (``POST /v1/pools``): ``name``, ``image``,
        ``cpus``, ``memory_gb``, ``replicas`` per cluster (``pool_replicas``
        is an alias, as in ``sky.sandbox.create_template``), ``clusters``,
        ``shared`` (admin tokens only: every tenant may use the pool), and
        the pod options of :meth:`create` (``runtime_class``,
        ``node_selector``, ``tolerations``, ``gpus``, ``volumes``), which go
        on every pool pod: a create claims from the pool when it asks for
        the same (or none). Clusters that cannot host such pods are left
        out and listed in the answer's ``skipped``; when that is all of
        them, :class:`APIError` ``no_cluster_fits`` (409).
        Raises :class:`PoolExists` for an existing name (any tenant's)."""
        return self._run(self._create_pool_req(name, image, **kw), 0)

    async def _create_pool_aio(self, name: str, image: Optional[str] = None, **kw: Any) -> Record:
        return await self._arun(self._create_pool_req(name, image, **kw), 0)

    def _get_pool(self, name: str) -> Record:
        """One pool with its per-cluster ``target`` and ``ready``; raises
        :class:`PoolNotFound`."""
        return self._run(_Req("GET", self._pool_path(name), parse=_record))

    async def _get_pool_aio(self, name: str) -> Record:
        return await self._arun(_Req("GET", self._pool_path(name), parse=_record))

    def _list_pools(self) -> List[Record]:
        """Every pool with its per-cluster depth (``GET /v1/pools``)."""
        return self._run(_Req("GET", "/v1/pools", parse=lambda d: _records(d, "pools")))

    async def _list_pools_aio(self) -> List[Record]:
        return await self._arun(_Req("GET", "/v1/pools", parse=lambda d: _records(d, "pools")))

    def _set_pool_size(self, name: str, replicas: int) -> Record:
        """Resizes a pool in every cluster that has it (``PATCH``)."""
        return self._run(_Req("PATCH", self._pool_path(name), body={"replicas": int(replicas)},
                              idempotent=True, parse=_record))

    async def _set_pool_size_aio(self, name: str, replicas: int) -> Record:
        return await self._arun(_Req("PATCH", self._pool_path(name), body={"replicas": int(replicas)},
                                     idempotent=True, parse=_record))

    def _delete_pool(self, name: str) -> Any:
        """Deletes a pool and its unclaimed pods; claimed sandboxes stay."""
        return self._run(_Req("DELETE", self._pool_path(name)))

    async def _delete_pool_aio(self, name: str) -> Any:
        return await self._arun(_Req("DELETE", self._pool_path(name)))

    for _n in ("create_pool", "get_pool", "list_pools", "set_pool_size", "delete_pool"):
        locals()["_" + _n].__name__ = _n
    create_pool = dual(_create_pool, _create_pool_aio)
    get_pool = dual(_get_pool, _get_pool_aio)
    list_pools = dual(_list_pools, _list_pools_aio)
    set_pool_size = dual(_set_pool_size, _set_pool_size_aio)
    delete_pool = dual(_delete_pool, _delete_pool_aio)
    # sky.sandbox names
    create_template = create_pool
    delete_template = delete_pool

    # ------------------------------------------------------- clusters ---

    def _clusters(self) -> List[Record]:
        """Per cluster: region, health, API latency, capacity, warm depth,
        sandbox count, cost (``GET /v1/clusters``)."""
        return self._run(_Req("GET", "/v1/clusters", parse=lambda d: _records(d, "clusters")))

    async def _clusters_aio(self) -> List[Record]:
        return await self._arun(_Req("GET", "/v1/clusters", parse=lambda d: _records(d, "clusters")))

    def _policy(self) -> Record:
        """The loaded placement policy (``GET /v1/policy``)."""
        return self._run(_Req("GET", "/v1/policy", parse=_record))

    async def _policy_aio(self) -> Record:
        return await self._arun(_Req("GET", "/v1/policy", parse=_record))

    def _health(self) -> bool:
        """True when ``/readyz`` answers 200."""
        try:
            self._run(_Req("GET", "/readyz"), 0)
            return True
        except APIError:
            return False

    async def _health_aio(self) -> bool:
        try:
            await self._arun(_Req("GET", "/readyz"), 0)
            return True
        except APIError:
            return False

    for _n in ("clusters", "policy", "health"):
        locals()["_" + _n].__name__ = _n
    del _n
    clusters = dual(_clusters, _clusters_aio)
    policy = dual(_policy, _policy_aio)
    health = dual(_health, _health_aio)


def _ended(req: _Req) -> ConnectionLost:
    return ConnectionLost(f"{req.method} {req.path}: the stream ended before the exit status")


def _checked(lines: Iterator[bytes], req: _Req) -> Iterator[ExecChunk]:
    """Chunks from NDJSON lines up to the exit chunk; a stream that ends
    without one was cut off: ConnectionLost."""
    for line in lines:
        c = ExecChunk(json.loads(line))
        yield c
        if c.kind == "exit":
            for _ in lines:  # read to the end so the connection can be reused
                pass
            return
    raise _ended(req)


def _record(d: Any) -> Record:
    return Record(d or {})


def _records(d: Any, key: str) -> List[Record]:
    return [Record(x) for x in ((d or {}).get(key) or [])]


# ------------------------------------------------------------ sandboxes ---

class AwaitableContext:
    """What ``create.aio(...)`` returns: await it for the sandbox(es), or use
    it directly as ``async with sandbox.create.aio(...) as sb:``."""

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self._value: Any = None

    def __await__(self) -> Any:
        return self._coro.__await__()

    async def __aenter__(self) -> Any:
        self._value = await self._coro
        return await self._value.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._value.__aexit__(*exc)


class Sandbox:
    """One sandbox (a pod in one cluster), bound to the :class:`Client` that
    made or listed it.

    Fields: ``id`` (``<cluster>.<pod>``), ``name``, ``cluster``, ``region``,
    ``pool``, ``warm``, ``state``, ``labels``, ``created_at``,
    ``expires_at``, ``secrets`` (the names of its create-time secrets,
    never their values; ``[]`` for none); ``sb['name']`` works too. ``placement`` is the create's
    placement summary (for a sandbox from ``create``).

    ``with sandbox.create(...) as sb:`` (and ``async with``) terminates it on
    exit, exception or not."""

    placement: Optional[Record] = None

    def __init__(self, client: Client, data: Mapping[str, Any]) -> None:
        self._client = client
        self._data = Record(data)
        self.id: str = self._data.get("id", "")

    @property
    def client(self) -> Client:
        return self._client

    @property
    def info(self) -> Record:
        """The sandbox as the API last described it."""
        return self._data

    name = property(lambda self: self._data.get("name"))
    cluster = property(lambda self: self._data.get("cluster"))
    region = property(lambda self: self._data.get("region"))
    pool = property(lambda self: self._data.get("pool"))
    warm = property(lambda self: self._data.get("warm"))
    state = property(lambda self: self._data.get("state"))
    labels = property(lambda self: self._data.get("labels") or {})
    created_at = property(lambda self: self._data.get("created_at"))
    expires_at = property(lambda self: self._data.get("expires_at"))
    secrets = property(lambda self: list(self._data.get("secrets") or []),
                       doc="Names (never values) of the create-time secrets it was given; [] for none.")

    def __getitem__(self, key: str) -> Any:
        if key == "id":
            return self.id
        return self._data[key]

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, name={self.name!r}, state={self.state!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    # exec / terminate / refresh
    def _exec(self, *argv: Any, **kw: Any) -> ExecResult:
        """Runs ``argv`` (no shell); see :meth:`Client.exec`."""
        return self._client.exec(self.id, *argv, **kw)

    async def _exec_aio(self, *argv: Any, **kw: Any) -> ExecResult:
        return await self._client.exec.aio(self.id, *argv, **kw)

    def _exec_stream(self, *argv: Any, **kw: Any) -> Iterator[ExecChunk]:
        """Runs ``argv`` and yields output chunks as they come (NDJSON
        streaming exec); see :meth:`Client.exec_stream`."""
        return self._client.exec_stream(self.id, *argv, **kw)

    def _exec_stream_aio(self, *argv: Any, **kw: Any) -> AsyncIterator[ExecChunk]:
        return self._client.exec_stream.aio(self.id, *argv, **kw)

    def _terminate(self, *, missing_ok: bool = False, wait: Any = None) -> bool:
        """Terminates the sandbox. ``missing_ok``: no error if it is
        already gone."""
        return self._client.terminate(self.id, missing_ok=missing_ok)

    async def _terminate_aio(self, *, missing_ok: bool = False, wait: Any = None) -> bool:
        return await self._client.terminate.aio(self.id, missing_ok=missing_ok)

    def _refresh(self) -> "Sandbox":
        """Re-reads the sandbox from the router; returns self."""
        self._data = self._client.get(self.id)._data
        return self

    async def _refresh_aio(self) -> "Sandbox":
        self._data = (await self._client.get.aio(self.id))._data
        return self

    def _run_code(self, code: str, **kw: Any) -> Execution:
        """Runs ``code`` in the sandbox's Code Interpreter; see
        :meth:`Client.run_code`."""
        return self._client.run_code(self.id, code, **kw)

    async def _run_code_aio(self, code: str, **kw: Any) -> Execution:
        return await self._client.run_code.aio(self.id, code, **kw)

    for _n in ("exec", "exec_stream", "terminate", "refresh", "run_code"):
        locals()["_" + _n].__name__ = _n
    del _n
    exec = dual(_exec, _exec_aio)
    exec_stream = dual(_exec_stream, _exec_stream_aio)
    terminate = dual(_terminate, _terminate_aio)
    refresh = dual(_refresh, _refresh_aio)
    run_code = dual(_run_code, _run_code_aio)

    short_id = property(lambda self: self._data.get("short_id"),
                        doc="Its id as one DNS label (the form E2B shows, and its preview URLs use).")

    @property
    def traffic_token(self) -> Optional[str]:
        """The token that opens its private ports (header
        ``E2B-Traffic-Access-Token``); re-read from the router when this
        object came from a list."""
        if "traffic_token" not in self._data:
            self._refresh()
        return self._data.get("traffic_token")

    def url(self, port: int) -> str:
        """The URL of ``port`` of the sandbox (docs/api.md "Ports"): with
        the router's ports domain ``http(s)://<port>-<short id>.<domain>/``
        (a domain without a port takes the router URL's), else the path
        form ``<router>/v1/sandboxes/<id>/ports/<port>/``. A private port
        takes :attr:`traffic_token` or the owner's bearer token."""
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ValueError(f"port must be an int from 1 to 65535, not {port!r}")
        if "traffic_token" not in self._data:  # a listed sandbox: the detail has the domain
            self._refresh()
        domain, short = self._data.get("domain"), self._data.get("short_id")
        base = urllib.parse.urlsplit(self._client.url)
        if domain and short:
            if ":" not in domain and base.port is not None:
                domain = f"{domain}:{base.port}"
            return f"{base.scheme}://{port}-{short}.{domain}/"
        return f"{self._client.url}/v1/sandboxes/{self.id}/ports/{port}/"

    @property
    def files(self) -> "Files":
        """File access in the sandbox: ``read``, ``write``, ``list``,
        ``remove`` (each with ``.aio``)."""
        return Files(self._client, self.id)

    @property
    def processes(self) -> "Processes":
        """Background processes: ``start``, ``list``, ``output``,
        ``send_stdin``, ``signal`` (each with ``.aio``)."""
        return Processes(self._client, self.id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._client.terminate(self.id, missing_ok=True)

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._client.terminate.aio(self.id, missing_ok=True)


class SandboxList(List[Sandbox]):
    """The sandboxes of a batch create (a ``list``), with ``placement``,
    ``terminate()`` / ``await terminate.aio()`` for all of them (concurrent,
    missing ones ignored), and ``with`` / ``async with`` that terminate them
    all on exit."""

    placement: Optional[Record] = None

    def _terminate(self, *, max_workers: int = 32) -> int:
        """Terminates every sandbox of the list concurrently; returns how
        many were still there."""
        if not self:
            return 0
        with concurrent.futures.ThreadPoolExecutor(min(max_workers, len(self))) as ex:
            return sum(ex.map(lambda sb: bool(sb.terminate(missing_ok=True)), self))

    async def _terminate_aio(self) -> int:
        done = await asyncio.gather(*(sb.terminate.aio(missing_ok=True) for sb in self))
        return sum(1 for d in done if d)

    _terminate.__name__ = "terminate"
    terminate = dual(_terminate, _terminate_aio)

    def __enter__(self) -> "SandboxList":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()

    async def __aenter__(self) -> "SandboxList":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.terminate.aio()


class Files:
    """``sb.files``: the sandbox's files (SPEC §8; needs a router with the
    agent endpoints, else :class:`NotSupported`). Paths are absolute."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._id = sandbox_id

    def _read(self, path: str) -> bytes:
        """The file's bytes."""
        return self._client.read_file(self._id, path)

    async def _read_aio(self, path: str) -> bytes:
        return await self._client.read_file.aio(self._id, path)

    def _read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file decoded as text."""
        return self._read(path).decode(encoding)

    async def _read_text_aio(self, path: str, encoding: str = "utf-8") -> str:
        return (await self._read_aio(path)).decode(encoding)

    def _write(self, path: str, data: Union[bytes, str, Any]) -> None:
        """Writes (creates or replaces) the file: bytes, str (UTF-8) or a
        readable file object."""
        self._client.write_file(self._id, path, data)

    async def _write_aio(self, path: str, data: Union[bytes, str, Any]) -> None:
        await self._client.write_file.aio(self._id, path, data)

    def _list(self, path: str = "/") -> List[Record]:
        """The entries of a directory (as the router lists them)."""
        return self._client.list_files(self._id, path)

    async def _list_aio(self, path: str = "/") -> List[Record]:
        return await self._client.list_files.aio(self._id, path)

    def _remove(self, path: str) -> None:
        """Removes the file."""
        self._client.remove_file(self._id, path)

    async def _remove_aio(self, path: str) -> None:
        await self._client.remove_file.aio(self._id, path)

    for _n in ("read", "read_text", "write", "list", "remove"):
        locals()["_" + _n].__name__ = _n
    del _n
    read = dual(_read, _read_aio)
    read_text = dual(_read_text, _read_text_aio)
    write = dual(_write, _write_aio)
    list = dual(_list, _list_aio)
    remove = dual(_remove, _remove_aio)


class Process(Record):
    """A background process (``{"pid": N, ...}``) with ``output()``,
    ``send_stdin()``, ``signal()``, ``kill()`` and ``wait()`` (each with
    ``.aio``)."""

    def __init__(self, client: Client, sandbox_id: str, data: Mapping[str, Any]) -> None:
        super().__init__(data or {})
        self._client = client
        self._sid = sandbox_id

    @property
    def pid(self) -> int:
        return int(self["pid"])

    def _output(self, follow: bool = True) -> Iterator[ExecChunk]:
        """Its output as chunks (``follow``: until it exits)."""
        return self._client.process_output(self._sid, self.pid, follow)

    def _output_aio(self, follow: bool = True) -> AsyncIterator[ExecChunk]:
        return self._client.process_output.aio(self._sid, self.pid, follow)

    def _send_stdin(self, data: Union[bytes, str] = b"", close: bool = False) -> None:
        """Writes to its stdin (``close=True`` ends it)."""
        self._client.send_stdin(self._sid, self.pid, data, close)

    async def _send_stdin_aio(self, data: Union[bytes, str] = b"", close: bool = False) -> None:
        await self._client.send_stdin.aio(self._sid, self.pid, data, close)

    def _signal(self, sig: Union[str, int] = "SIGTERM") -> None:
        """Sends a signal to its process group."""
        self._client.signal_process(self._sid, self.pid, sig)

    async def _signal_aio(self, sig: Union[str, int] = "SIGTERM") -> None:
        await self._client.signal_process.aio(self._sid, self.pid, sig)

    def _kill(self) -> None:
        """SIGKILL."""
        self._signal("SIGKILL")

    async def _kill_aio(self) -> None:
        await self._signal_aio("SIGKILL")

    def _wait(self) -> ExecResult:
        """Follows the output to the end; returns it as an :class:`ExecResult`."""
        return _collect(self._output(True))

    async def _wait_aio(self) -> ExecResult:
        chunks = [c async for c in self._output_aio(True)]
        return _collect(iter(chunks))

    for _n in ("output", "send_stdin", "signal", "kill", "wait"):
        locals()["_" + _n].__name__ = _n
    del _n
    output = dual(_output, _output_aio)
    send_stdin = dual(_send_stdin, _send_stdin_aio)
    signal = dual(_signal, _signal_aio)
    kill = dual(_kill, _kill_aio)
    wait = dual(_wait, _wait_aio)


def _collect(chunks: Iterator[ExecChunk]) -> ExecResult:
    out, err, last = [], [], ExecChunk()
    for c in chunks:
        k = c.kind
        if k == "stdout":
            out.append(c.data)
        elif k == "stderr":
            err.append(c.data)
        elif k == "exit":
            last = c
    o, e = b"".join(out), b"".join(err)
    d: Dict[str, Any] = {"exit_code": last.get("exit_code"), "timed_out": bool(last.get("timed_out")),
                         "duration_ms": last.get("duration_ms")}
    for name, b in (("stdout", o), ("stderr", e)):
        try:
            d[name] = b.decode("utf-8")
        except UnicodeDecodeError:
            d[name] = base64.b64encode(b).decode()
            d[name + "_encoding"] = "base64"
    return ExecResult(d)


def collect(chunks: Iterable[ExecChunk]) -> ExecResult:
    """Joins the chunks of ``exec_stream`` into one :class:`ExecResult`."""
    return _collect(iter(chunks))


class Processes:
    """``sb.processes``: background processes in the sandbox (SPEC §8)."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._id = sandbox_id

    def _start(self, *argv: Any, **kw: Any) -> Process:
        """Starts ``argv`` (or ``cmd="shell string"``) in the background with
        ``env``, ``workdir``, ``stdin``, ``pty``, ``timeout``; returns the
        :class:`Process` (``pid``)."""
        return self._client.start_process(self._id, *argv, **kw)

    async def _start_aio(self, *argv: Any, **kw: Any) -> Process:
        return await self._client.start_process.aio(self._id, *argv, **kw)

    def _list(self) -> List[Record]:
        """Running processes: ``pid``, ``argv``, ``started_at``."""
        return self._client.list_processes(self._id)

    async def _list_aio(self) -> List[Record]:
        return await self._client.list_processes.aio(self._id)

    def _output(self, pid: int, follow: bool = True) -> Iterator[ExecChunk]:
        """Reattaches to a process's output (any router replica)."""
        return self._client.process_output(self._id, pid, follow)

    def _output_aio(self, pid: int, follow: bool = True) -> AsyncIterator[ExecChunk]:
        return self._client.process_output.aio(self._id, pid, follow)

    def _send_stdin(self, pid: int, data: Union[bytes, str] = b"", close: bool = False) -> None:
        self._client.send_stdin(self._id, pid, data, close)

    async def _send_stdin_aio(self, pid: int, data: Union[bytes, str] = b"", close: bool = False) -> None:
        await self._client.send_stdin.aio(self._id, pid, data, close)

    def _signal(self, pid: int, sig: Union[str, int] = "SIGTERM") -> None:
        self._client.signal_process(self._id, pid, sig)

    async def _signal_aio(self, pid: int, sig: Union[str, int] = "SIGTERM") -> None:
        await self._client.signal_process.aio(self._id, pid, sig)

    for _n in ("start", "list", "output", "send_stdin", "signal"):
        locals()["_" + _n].__name__ = _n
    del _n
    start = dual(_start, _start_aio)
    list = dual(_list, _list_aio)
    output = dual(_output, _output_aio)
    send_stdin = dual(_send_stdin, _send_stdin_aio)
    signal = dual(_signal, _signal_aio)

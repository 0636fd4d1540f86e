#!/usr/bin/python3
"""server.py - the code interpreter of fedrouter's `code-interpreter` image.

Serves, on port 49999 of a sandbox, the HTTP API the official E2B Code
Interpreter SDKs (npm @e2b/code-interpreter 2.x, PyPI e2b-code-interpreter)
call through E2B_SANDBOX_URL, on Jupyter's own libraries: every context is
an IPython kernel (ipykernel, started and driven with jupyter_client), so a
cell behaves as it does in a notebook (state kept, rich display data,
matplotlib figures, tracebacks, interrupts).

  GET    /health                  200 "OK" once the default context is up
                                  (503 before): the readiness probe
  POST   /execute                 {code, context_id?, language?, env_vars?}
                                  -> application/x-ndjson, one line per
                                  output, flushed as the kernel sends it
  POST   /contexts                {language?, cwd?} -> {id, language, cwd}
  GET    /contexts                [{id, language, cwd}, ...]
  POST   /contexts/{id}/restart   204 (a fresh kernel, same id)
  DELETE /contexts/{id}           204

Lines of an /execute answer (what the SDKs parse):
  {"type":"number_of_executions","execution_count":N}
  {"type":"stdout"|"stderr","text":...,"timestamp":"<ISO 8601>"}
  {"type":"result","is_main_result":bool,"text":...,"html":...,"png":...,
   ...,"extra":{<other MIME type>:...}}
  {"type":"error","name":...,"value":...,"traceback":"<one string>"}
  {"type":"keepalive"}            after --keepalive-s without another line
  {"type":"end_of_execution"}     always last

Cells of one context run one at a time, in arrival order. A client that
goes away while its cell runs interrupts the kernel (SIGINT, as Jupyter's
stop button); a kernel that is still busy --interrupt-grace-s later is
restarted. Per-call env_vars hold for that cell only (set before it and
restored after it, in the kernel's os.environ). Languages: python only
(Debian packages no other Jupyter kernel this image could carry); any other
is a 400 `unsupported_language`.

Bounds: --max-contexts kernels, --max-output-bytes of output per cell (the
rest is dropped, with one stderr line saying so), --max-body-bytes per
request, --max-connections. Errors are JSON:
  {"code":404,"message":"...","error":{"code":"context_not_found","message":"..."}}

Standard library plus jupyter_client (Debian python3-jupyter-client,
python3-ipykernel; python3-matplotlib for plots). Run with Debian's
/usr/bin/python3:
  /usr/bin/python3 server.py --listen 0.0.0.0:49999
"""
import argparse
import asyncio
import ctypes
import datetime
import json
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid

try:
    import zmq.asyncio
    from jupyter_client.manager import AsyncKernelManager
except ImportError as exc:  # pragma: no cover - said once, clearly
    sys.stderr.write("code-interpreter: %s: install Debian's python3-jupyter-client and "
                     "python3-ipykernel, and run with /usr/bin/python3\n" % exc)
    sys.exit(3)

log = logging.getLogger("code-interpreter")

LANGUAGES = {"python": "python", "python3": "python"}
SERVED = "python"
MAX_HEAD_BYTES = 16384
MAX_HEADERS = 100
# What a client may send while its /execute answer streams (pipelined
# requests): read on to notice a hang-up, but never held beyond this.
MAX_PIPELINED_BYTES = 65536
# MIME types the SDKs give fields of their own; the others go to "extra".
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 404: "Not Found",
           405: "Method Not Allowed", 408: "Request Timeout", 411: "Length Required",
           413: "Payload Too Large", 415: "Unsupported Media Type", 429: "Too Many Requests",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable", 505: "HTTP Version Not Supported"}

# Code run silently (no history, no output, no execution count) around a
# cell with env_vars. exec() with a fresh namespace leaves the user's
# globals alone; the saved values wait on the os module until the restore.
ENV_SET = ("exec(%r, {'__fr_env': %r})")
ENV_SET_BODY = ("import os, json\n"
                "env = json.loads(__fr_env)\n"
                "os.__dict__.setdefault('_fr_env_saved', []).append({k: os.environ.get(k) for k in env})\n"
                "os.environ.update(env)\n")
ENV_RESTORE = ("exec(%r, {})" % ("import os\n"
                                 "for k, v in (os.__dict__.get('_fr_env_saved') or [{}]).pop().items():\n"
                                 "    if v is None:\n"
                                 "        os.environ.pop(k, None)\n"
                                 "    else:\n"
                                 "        os.environ[k] = v\n"))


class HttpError(Exception):
    """An answer with a JSON error body: <status>, stable <code>, <message>."""

    def __init__(self, status, code, message, headers=None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or []


def error_body(status, code, message):
    """E2B's error shape and fedrouter's side by side (docs/e2b.md)."""
    return {"code": status, "message": message, "error": {"code": code, "message": message}}


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def _die_with_parent():
    """preexec_fn of every kernel: killed when the server dies, however it
    dies (ipykernel's own parent poller only notices a reparenting to PID
    1, which a subreaper such as fedrouter-agent prevents)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# --------------------------------------------------------------------------
# kernels


class Execution:
    """One request run in a context's kernel: what it sends back waits in
    <queue> (bounded by bytes, see push()); <done> is set once the kernel
    said idle and replied, or the context went away under it."""

    def __init__(self, max_bytes, internal=False):
        self.queue = asyncio.Queue()
        self.max_bytes = max_bytes
        self.bytes = 0
        self.truncated = False
        self.internal = internal      # env_vars set/restore: nothing is sent
        self.idle = False
        self.reply = None
        self.errored = False
        self.done = asyncio.Event()
        self.abandoned = False        # the client went away
        self.interrupted_at = None
        self.msg_id = None

    def push(self, item, size=0):
        """Queues <item> for the client unless this cell's output passed
        max_bytes; then one stderr line says so and the rest is dropped."""
        if self.internal or self.done.is_set():
            return
        if size:
            if self.truncated:
                return
            if self.bytes + size > self.max_bytes:
                self.truncated = True
                self.queue.put_nowait({"type": "stderr", "timestamp": now_iso(),
                                       "text": "[code-interpreter: this cell's output passed %d bytes; "
                                               "the rest is not sent]\n" % self.max_bytes})
                return
            self.bytes += size
        self.queue.put_nowait(item)

    def finish(self, error=None):
        """Ends the execution (once), after <error> if given; the None that
        follows the last line tells the writer."""
        if self.done.is_set():
            return
        if error is not None and not self.errored:
            self.errored = True
            self.push(dict({"type": "error", "traceback": ""}, **error))
        self.done.set()
        self.queue.put_nowait(None)


class Context:
    """A kernel and its id. Cells run one at a time (<lock>); the kernel's
    iopub and shell messages are read all the time by two pump tasks and
    handed to the Execution whose request they answer, so a slow HTTP client
    never holds up the kernel's sockets (iopub is PUB/SUB: a subscriber that
    stops reading loses messages)."""

    def __init__(self, server, cid, language, cwd):
        self.server = server
        self.id = cid
        self.language = language
        self.cwd = cwd
        self.lock = asyncio.Lock()
        self.km = None
        self.kc = None
        self.pumps = []
        self.executions = {}
        self.current = None
        self.removed = False

    def describe(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    async def start(self):
        srv = self.server
        env = dict(os.environ)
        env.update(srv.kernel_env)
        try:
            # Unix sockets, not TCP ports: a kernel picks its five TCP ports
            # by binding and closing them, and another kernel (or anything
            # else on the host) can take one before the kernel binds it
            # again ("Address already in use"). A socket path of our own
            # cannot be taken, and it is short enough for sun_path.
            self.km = AsyncKernelManager(kernel_name=srv.kernel_name, context=srv.zmq_ctx,
                                         transport="ipc", ip=srv.next_ipc_path())
            await self.km.start_kernel(cwd=self.cwd, env=env, preexec_fn=_die_with_parent)
            self.kc = self.km.client()
            self.kc.start_channels()
            await self.kc.wait_for_ready(timeout=srv.args.kernel_start_timeout_s)
        except Exception as exc:  # no such kernel spec, a kernel that exits at once, a timeout
            log.error("context %s: the kernel did not start: %s", self.id, exc)
            await self.stop()
            raise HttpError(500, "kernel_start_failed", "the %s kernel did not start: %s"
                            % (self.language, exc)) from exc
        self.pumps = [asyncio.ensure_future(self._pump(self.kc.get_iopub_msg)),
                      asyncio.ensure_future(self._pump(self.kc.get_shell_msg))]
        log.info("context %s: kernel pid %s", self.id, self.pid())

    def pid(self):
        prov = getattr(self.km, "provisioner", None)
        return getattr(prov, "pid", None)

    async def stop(self):
        for t in self.pumps:
            t.cancel()
        self.pumps = []
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km is not None:
            try:
                await self.km.shutdown_kernel(now=True)
            except Exception as exc:  # a kernel already gone
                log.debug("context %s: shutdown: %s", self.id, exc)
            self.km = None
        for ex in list(self.executions.values()):
            ex.finish()
        self.executions.clear()

    async def _pump(self, get):
        while True:
            try:
                msg = await get()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("context %s: reading the kernel: %s", self.id, exc)
                await asyncio.sleep(0.1)
                continue
            try:
                self._dispatch(msg)
            except Exception:
                log.exception("context %s: message %s", self.id, msg.get("msg_type"))

    def _dispatch(self, msg):
        ex = self.executions.get((msg.get("parent_header") or {}).get("msg_id"))
        if ex is None:
            return
        kind, content = msg.get("msg_type"), msg.get("content") or {}
        if kind == "status":
            if content.get("execution_state") == "idle":
                ex.idle = True
        elif kind == "execute_reply":
            ex.reply = content
            if content.get("status") == "error" and not ex.errored:
                ex.errored = True
                ex.push(error_item(content), error_size(content))
            elif content.get("status") == "aborted":
                ex.finish({"name": "ExecutionAborted", "value": "Execution was aborted"})
        elif kind == "execute_input":
            ex.push({"type": "number_of_executions", "execution_count": content.get("execution_count")})
        elif kind == "stream":
            name = content.get("name")
            if name in ("stdout", "stderr"):
                text = content.get("text") or ""
                date = msg.get("header", {}).get("date")
                ts = date.isoformat() if hasattr(date, "isoformat") else (date or now_iso())
                ex.push({"type": name, "text": text, "timestamp": ts}, len(text.encode("utf-8", "replace")) + 1)
        elif kind in ("execute_result", "display_data"):
            item, size = result_item(content.get("data") or {}, kind == "execute_result")
            ex.push(item, size)
        elif kind == "error":
            if not ex.errored:
                ex.errored = True
                ex.push(error_item(content), error_size(content))
        if ex.idle and ex.reply is not None:
            ex.finish()

    async def alive(self):
        try:
            return self.km is not None and await self.km.is_alive()
        except Exception:
            return False

    async def interrupt(self):
        if self.km is not None:
            try:
                await self.km.interrupt_kernel()
            except Exception as exc:
                log.warning("context %s: interrupt: %s", self.id, exc)

    def abandon(self, ex):
        """The client of <ex> went away: its cell, if it runs, is
        interrupted now (and restarted by _wait() if that does not end it)."""
        ex.abandoned = True
        if ex is self.current and ex.msg_id is not None and not ex.done.is_set() and ex.interrupted_at is None:
            ex.interrupted_at = time.monotonic()
            task = asyncio.ensure_future(self.interrupt())
            self.server.tasks.add(task)
            task.add_done_callback(self.server.tasks.discard)

    async def run(self, ex, code, env_vars):
        """Runs <code> as a cell (the caller holds <lock>). Output goes to
        <ex>; returns when the cell is over, however it ended."""
        if self.removed:
            ex.finish({"name": "ContextRemoved", "value": "the context was removed"})
            return
        if self.kc is None:
            ex.finish({"name": "KernelUnavailable", "value": "the context's kernel could not be started; "
                                                            "restart or remove the context"})
            return
        if ex.abandoned:
            ex.finish()
            return
        self.current = ex
        try:
            if env_vars:
                await self._silent(ENV_SET % (ENV_SET_BODY, json.dumps(env_vars)))
                if self.kc is None or ex.abandoned:
                    # The kernel died setting them and did not come back,
                    # or the client left meanwhile.
                    ex.finish({"name": "KernelUnavailable", "value": "the context's kernel could not be "
                                                                    "started; restart or remove the context"}
                              if self.kc is None else None)
            if not ex.done.is_set():
                # Cells reach the kernel one at a time, so stop_on_error
                # (abort what queued behind a failed cell) has nothing to
                # do but race: ipykernel aborts, for a moment after an
                # error, a request that arrives right after it.
                ex.msg_id = self.kc.execute(code, silent=False, store_history=True, allow_stdin=False,
                                            stop_on_error=False)
                self.executions[ex.msg_id] = ex
                await self._wait(ex)
            # Restored only in the kernel that ran the cell to its reply
            # (not one restarted, removed or still busy under a restart).
            if env_vars and ex.reply is not None and self.kc is not None and not self.removed:
                await self._silent(ENV_RESTORE)
        finally:
            self.executions.pop(ex.msg_id, None)
            self.current = None

    async def _silent(self, code):
        ex = Execution(0, internal=True)
        ex.msg_id = self.kc.execute(code, silent=True, store_history=False, allow_stdin=False,
                                    stop_on_error=False)
        self.executions[ex.msg_id] = ex
        try:
            await self._wait(ex)
        finally:
            self.executions.pop(ex.msg_id, None)

    async def _wait(self, ex):
        """Waits for <ex> to end; restarts the kernel if it died, or if it
        is still busy --interrupt-grace-s after the client went away."""
        grace = self.server.args.interrupt_grace_s
        while not ex.done.is_set():
            try:
                await asyncio.wait_for(ex.done.wait(), timeout=0.5)
                return
            except asyncio.TimeoutError:
                pass
            if ex.done.is_set():
                return
            if not await self.alive():
                if self.removed or self.km is None:
                    ex.finish({"name": "ContextRemoved", "value": "the context was removed"})
                    return
                log.warning("context %s: the kernel died; restarting it", self.id)
                ex.finish({"name": "KernelDied",
                           "value": "the kernel died while running this cell; the context was "
                                    "restarted with a fresh kernel (its state is lost)"})
                await self._restart_kernel()
                return
            if ex.abandoned and ex.interrupted_at is None:
                ex.interrupted_at = time.monotonic()
                await self.interrupt()
            elif ex.interrupted_at is not None and time.monotonic() - ex.interrupted_at > grace:
                log.warning("context %s: still busy %.0f s after an interrupt; restarting the kernel",
                            self.id, grace)
                ex.finish()
                await self._restart_kernel()
                return

    async def _restart_kernel(self):
        """A fresh kernel in place of this one, from inside a cell's run; a
        kernel that does not start is logged (the next cells say so)."""
        await self.stop()
        if not self.removed:
            try:
                await self.start()
            except HttpError:
                pass

    async def restart(self):
        """POST /contexts/{id}/restart: the running cell (if any) ends with
        ContextRestarting; then, in turn with the cells already queued, a
        fresh kernel replaces this one."""
        if self.current is not None:
            self.current.finish({"name": "ContextRestarting", "value": "Context was restarted"})
        async with self.lock:
            if not self.removed:
                await self.stop()
                await self.start()

    async def remove(self):
        self.removed = True
        if self.current is not None:
            self.current.finish({"name": "ContextRemoved", "value": "the context was removed"})
        async with self.lock:
            await self.stop()


def result_item(data, main):
    item = {"type": "result", "is_main_result": main}
    extra = {}
    size = 0
    for mime, value in data.items():
        size += len(value) if isinstance(value, str) else len(json.dumps(value))
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            item[field] = value
    text = item.get("text")
    # As E2B's server: a str result's repr loses its quotes ('a' -> a).
    if isinstance(text, str) and len(text) >= 2 and text.startswith("'") and text.endswith("'"):
        item["text"] = text[1:-1]
    if extra:
        item["extra"] = extra
    return item, size + 1


def error_item(content):
    tb = content.get("traceback") or []
    return {"type": "error", "name": content.get("ename", ""), "value": content.get("evalue", ""),
            "traceback": "\n".join(tb) if isinstance(tb, list) else str(tb)}


def error_size(content):
    return sum(len(x) for x in content.get("traceback") or []) + len(content.get("evalue") or "") + 1


# --------------------------------------------------------------------------
# HTTP


class Conn:
    """A client connection: what was read and not yet parsed is <buf>."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.buf = bytearray()
        self.eof = False

    async def fill(self):
        if self.eof:
            return False
        try:
            data = await self.reader.read(65536)
        except (ConnectionError, OSError):
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    async def read_until(self, sep, limit, what):
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                out = bytes(self.buf[:i])
                del self.buf[:i + len(sep)]
                return out
            start = max(0, len(self.buf) - len(sep) + 1)
            if len(self.buf) > limit:
                raise HttpError(431 if what == "head" else 400, "bad_request", "request %s too long" % what)
            if not await self.fill():
                return None

    async def read_exact(self, n):
        while len(self.buf) < n:
            if not await self.fill():
                return None
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def watch_hangup(self):
        """Reads on while an answer streams; returns once the client hung
        up (EOF or error)."""
        while len(self.buf) <= MAX_PIPELINED_BYTES:
            if not await self.fill():
                return
        # A client pipelining this much is not waiting for this answer:
        # nothing more is read, so a hang-up shows only when writing fails.
        await asyncio.Event().wait()


class Request:
    def __init__(self, method, target, version, headers, body):
        self.method, self.version, self.headers, self.body = method, version, headers, body
        self.path = target.split("?", 1)[0]


class Server:
    def __init__(self, args):
        self.args = args
        self.contexts = {}
        self.defaults = {}          # language -> context id
        self.starting = 0           # contexts being created
        self.ready = False
        self.connections = 0
        self.zmq_ctx = zmq.asyncio.Context()
        self.kernel_name = args.kernel
        self.tasks = set()
        self.state_dir = tempfile.mkdtemp(prefix="code-interpreter-")
        self.kernel_env = {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        self.ipc_dir = os.path.join(self.state_dir, "ipc")
        os.mkdir(self.ipc_dir, 0o700)
        self.ipc_seq = 0
        # Connection files, and what IPython and matplotlib write, go to a
        # private directory when HOME is not writable (read-only root).
        os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(self.state_dir, "runtime")
        home = os.environ.get("HOME") or ""
        if not home or not os.access(home, os.W_OK):
            for var, sub in (("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "matplotlib"),
                             ("JUPYTER_DATA_DIR", "data")):
                os.environ.setdefault(var, os.path.join(self.state_dir, sub))
        self.create_lock = asyncio.Lock()

    def next_ipc_path(self):
        """A socket path prefix no other kernel of this server uses."""
        self.ipc_seq += 1
        return os.path.join(self.ipc_dir, "k%d" % self.ipc_seq)

    # ---- contexts

    async def new_context(self, language, cwd):
        if len(self.contexts) + self.starting >= self.args.max_contexts:
            raise HttpError(429, "too_many_contexts",
                            "at most %d contexts (kernels) run at once; remove one with "
                            "DELETE /contexts/{id} first" % self.args.max_contexts)
        ctx = Context(self, str(uuid.uuid4()), language, cwd)
        self.starting += 1
        try:
            await ctx.start()
        finally:
            self.starting -= 1
        self.contexts[ctx.id] = ctx
        return ctx

    async def default_context(self, language):
        """The context /execute uses without a context_id: one per language,
        made again on first use after it was removed."""
        async with self.create_lock:
            cid = self.defaults.get(language)
            if cid in self.contexts:
                return self.contexts[cid]
            ctx = await self.new_context(language, self.args.cwd)
            self.defaults[language] = ctx.id
            return ctx

    # ---- HTTP plumbing

    async def serve_conn(self, reader, writer):
        conn = Conn(reader, writer)
        self.connections += 1
        try:
            if self.connections > self.args.max_connections:
                await self.send_json(conn, None, 503, error_body(503, "too_many_connections",
                                     "at most %d connections" % self.args.max_connections), close=True)
                return
            while True:
                try:
                    req = await asyncio.wait_for(self.read_request(conn), timeout=self.args.idle_timeout_s)
                except asyncio.TimeoutError:
                    return
                except HttpError as e:
                    await self.send_json(conn, None, e.status, error_body(e.status, e.code, e.message), close=True)
                    await self.linger(conn)
                    return
                if req is None:
                    return
                keep = await self.handle(conn, req)
                if not keep:
                    return
        except (ConnectionError, OSError):
            pass
        except Exception:
            log.exception("connection")
        finally:
            self.connections -= 1
            try:
                writer.close()
            except Exception:
                pass

    async def linger(self, conn):
        """After an error answered before the request was read to its end
        (a body over the bound): half-close, then read and drop what the
        client still sends for a moment, so it gets to read the answer
        instead of a reset (a close with unread input sends RST)."""
        try:
            if conn.writer.can_write_eof():
                conn.writer.write_eof()
            deadline = time.monotonic() + 2.0
            dropped = 0
            while dropped < (64 << 20):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                data = await asyncio.wait_for(conn.reader.read(65536), timeout=left)
                if not data:
                    break
                dropped += len(data)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            pass

    async def read_request(self, conn):
        head = await conn.read_until(b"\r\n\r\n", MAX_HEAD_BYTES, "head")
        if head is None:
            if conn.buf.strip():
                raise HttpError(400, "bad_request", "incomplete request")
            return None
        lines = head.decode("latin-1").split("\r\n")
        while lines and lines[0] == "":  # stray CRLF between requests
            lines.pop(0)
        parts = lines[0].split(" ") if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise HttpError(400, "bad_request", "malformed request line")
        method, target, version = parts
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise HttpError(505, "bad_request", "HTTP/1.1 or HTTP/1.0 only")
        if not target.startswith("/"):
            raise HttpError(400, "bad_request", "the request target must be a path")
        headers = {}
        if len(lines) - 1 > MAX_HEADERS:
            raise HttpError(431, "bad_request", "more than %d header fields" % MAX_HEADERS)
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or not re.match(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", name):
                raise HttpError(400, "bad_request", "malformed header field")
            name, value = name.lower(), value.strip()
            if name in headers and name in ("content-length", "transfer-encoding", "host"):
                if headers[name] != value:
                    raise HttpError(400, "bad_request", "conflicting %s fields" % name)
            headers[name] = value
        body = b""
        te, cl = headers.get("transfer-encoding"), headers.get("content-length")
        limit = self.args.max_body_bytes
        if te is not None:
            if cl is not None:
                raise HttpError(400, "bad_request", "both Transfer-Encoding and Content-Length")
            if te.lower() != "chunked":
                raise HttpError(501, "bad_request", "transfer coding %r is not supported" % te)
            body = await self.read_chunked(conn, limit)
        elif cl is not None:
            if not re.match(r"^[0-9]{1,15}$", cl):
                raise HttpError(400, "bad_request", "malformed Content-Length")
            n = int(cl)
            if n > limit:
                raise HttpError(413, "body_too_large", "request body over %d bytes" % limit)
            body = await conn.read_exact(n)
            if body is None:
                raise HttpError(400, "bad_request", "request body cut short")
        return Request(method, target, version, headers, body)

    async def read_chunked(self, conn, limit):
        body = bytearray()
        while True:
            line = await conn.read_until(b"\r\n", 1024, "chunk size")
            if line is None:
                raise HttpError(400, "bad_request", "chunked body cut short")
            size_s = line.split(b";", 1)[0].strip()
            if not re.match(rb"^[0-9A-Fa-f]{1,8}$", size_s):
                raise HttpError(400, "bad_request", "malformed chunk size")
            size = int(size_s, 16)
            if size == 0:
                while True:  # trailers
                    t = await conn.read_until(b"\r\n", MAX_HEAD_BYTES, "trailer")
                    if t is None:
                        raise HttpError(400, "bad_request", "chunked body cut short")
                    if t == b"":
                        return bytes(body)
            if len(body) + size > limit:
                raise HttpError(413, "body_too_large", "request body over %d bytes" % limit)
            data = await conn.read_exact(size + 2)
            if data is None or data[-2:] != b"\r\n":
                raise HttpError(400, "bad_request", "malformed chunk")
            body += data[:-2]

    def wants_close(self, req):
        conn_h = (req.headers.get("connection") or "").lower() if req else "close"
        if req is None or req.version == "HTTP/1.0":
            return "keep-alive" not in conn_h
        return "close" in conn_h

    async def send_json(self, conn, req, status, obj, close=False, extra=()):
        body = b"" if status == 204 else json.dumps(obj).encode() + b"\n"
        close = close or self.wants_close(req)
        head = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Unknown"))]
        if status != 204:
            head += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
        head += ["%s: %s" % h for h in extra]
        if close:
            head.append("Connection: close")
        conn.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
        await conn.writer.drain()
        return not close

    # ---- routes

    async def handle(self, conn, req):
        try:
            return await self.route(conn, req)
        except HttpError as e:
            return await self.send_json(conn, req, e.status, error_body(e.status, e.code, e.message),
                                        extra=e.headers)

    async def route(self, conn, req):
        path, m = req.path, req.method
        if path == "/health":
            self.allow(req, "GET")
            if not self.ready:
                raise HttpError(503, "starting", "the default context is not up yet")
            return await self.send_json(conn, req, 200, "OK")
        if path == "/execute":
            self.allow(req, "POST")
            return await self.execute(conn, req)
        if path == "/contexts":
            self.allow(req, "GET", "POST")
            if m == "GET":
                return await self.send_json(conn, req, 200, [c.describe() for c in self.contexts.values()])
            return await self.create_context(conn, req)
        mo = re.match(r"^/contexts/([^/]+)(/restart)?$", path)
        if mo:
            ctx = self.contexts.get(mo.group(1))
            if mo.group(2):
                self.allow(req, "POST")
            else:
                self.allow(req, "DELETE")
            if ctx is None:
                raise HttpError(404, "context_not_found", "Context %s not found" % mo.group(1)[:128])
            if mo.group(2):
                await ctx.restart()
            else:
                self.contexts.pop(ctx.id, None)
                await ctx.remove()
            return await self.send_json(conn, req, 204, None)
        raise HttpError(404, "not_found", "no route %s %s" % (m, path[:256]))

    def allow(self, req, *methods):
        if req.method not in methods:
            raise HttpError(405, "method_not_allowed", "%s takes %s" % (req.path, ", ".join(methods)),
                            headers=[("Allow", ", ".join(methods))])

    def body_json(self, req):
        if not req.body.strip():
            return {}
        try:
            obj = json.loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HttpError(400, "invalid_json", "the body is not JSON: %s" % exc)
        if not isinstance(obj, dict):
            raise HttpError(400, "invalid_json", "the body must be a JSON object")
        return obj

    def language(self, value, field="language"):
        if value is None or value == "":
            return SERVED
        if not isinstance(value, str):
            raise HttpError(400, "invalid_field", "%s must be a string" % field)
        lang = LANGUAGES.get(value.strip().lower())
        if lang is None:
            raise HttpError(400, "unsupported_language",
                            "language %r is not served here: only python" % value[:64])
        return lang

    async def create_context(self, conn, req):
        body = self.body_json(req)
        lang = self.language(body.get("language"))
        cwd = body.get("cwd")
        if cwd is None or cwd == "":
            cwd = self.args.cwd
        if not isinstance(cwd, str) or len(cwd) > 4096 or "\0" in cwd:
            raise HttpError(400, "invalid_field", "cwd must be a path")
        cwd = os.path.normpath(os.path.join(self.args.cwd, cwd))
        if not os.path.isdir(cwd):
            raise HttpError(400, "invalid_cwd", "cwd %s is not a directory" % cwd[:256])
        ctx = await self.new_context(lang, cwd)
        return await self.send_json(conn, req, 200, ctx.describe())

    async def execute(self, conn, req):
        body = self.body_json(req)
        code = body.get("code")
        if not isinstance(code, str):
            raise HttpError(400, "invalid_field", "code must be a string")
        cid, lang = body.get("context_id"), body.get("language")
        if cid not in (None, "") and lang not in (None, ""):
            raise HttpError(400, "context_and_language", "Only one of context_id or language can be provided")
        env = body.get("env_vars")
        if env is None:
            env = {}
        if not isinstance(env, dict):
            raise HttpError(400, "invalid_field", "env_vars must be an object of strings")
        for k, v in env.items():
            if not isinstance(v, str) or not k or "=" in k or "\0" in k or "\0" in v:
                raise HttpError(400, "invalid_field", "env_vars: %r is not a NAME: \"string\" pair" % k[:64])
        if cid not in (None, ""):
            if not isinstance(cid, str):
                raise HttpError(400, "invalid_field", "context_id must be a string")
            ctx = self.contexts.get(cid)
            if ctx is None:
                raise HttpError(404, "context_not_found", "Context %s not found" % cid[:128])
        else:
            ctx = await self.default_context(self.language(lang))
        return await self.stream_cell(conn, req, ctx, code, env)

    async def stream_cell(self, conn, req, ctx, code, env):
        ex = Execution(self.args.max_output_bytes)
        chunked = req.version == "HTTP/1.1"
        close = self.wants_close(req) or not chunked
        head = ["HTTP/1.1 200 OK", "Content-Type: application/x-ndjson", "Cache-Control: no-store",
                "X-Accel-Buffering: no"]
        head.append("Transfer-Encoding: chunked" if chunked else "Connection: close")
        if chunked and close:
            head.append("Connection: close")

        async def run():
            async with ctx.lock:
                await ctx.run(ex, code, env)
            ex.finish()

        task = asyncio.ensure_future(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        hangup = asyncio.ensure_future(conn.watch_hangup())
        w = conn.writer

        async def send(obj):
            line = json.dumps(obj).encode() + b"\n"
            w.write(b"%x\r\n%s\r\n" % (len(line), line) if chunked else line)
            await w.drain()

        ok = False
        try:
            w.write(("\r\n".join(head) + "\r\n\r\n").encode())
            await w.drain()
            while True:
                get = asyncio.ensure_future(ex.queue.get())
                done, _ = await asyncio.wait({get, hangup}, timeout=self.args.keepalive_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if hangup in done:
                    get.cancel()
                    break
                if get in done:
                    item = get.result()
                    if item is not None:
                        await send(item)
                        continue
                    await send({"type": "end_of_execution"})
                    if chunked:
                        w.write(b"0\r\n\r\n")
                        await w.drain()
                    ok = True
                    break
                get.cancel()
                await send({"type": "keepalive"})
        except (ConnectionError, OSError):
            pass
        finally:
            hangup.cancel()
            if not ok:
                ctx.abandon(ex)
                log.info("context %s: the client left; interrupting the cell", ctx.id)
        return ok and not close

    # ---- life

    async def main(self):
        host, _, port = self.args.listen.rpartition(":")
        srv = await asyncio.start_server(self.serve_conn, host or "0.0.0.0", int(port),
                                         reuse_address=True, limit=65536)
        bound = srv.sockets[0].getsockname()[1]
        log.info("listening on %s:%d", host or "0.0.0.0", bound)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            ctx = await self.default_context(SERVED)
            log.info("default context %s ready (cwd %s)", ctx.id, ctx.cwd)
        except Exception as exc:
            log.error("the default context did not start: %s", exc)
            await self.shutdown(srv)
            return 1
        self.ready = True
        if self.args.port_file:
            tmp = self.args.port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write("%d\n" % bound)
            os.rename(tmp, self.args.port_file)
        await stop.wait()
        log.info("stopping")
        await self.shutdown(srv)
        return 0

    async def shutdown(self, srv):
        srv.close()
        for ctx in list(self.contexts.values()):
            ctx.removed = True
            if ctx.current is not None:
                ctx.current.finish({"name": "ContextRemoved", "value": "the server is stopping"})
            await ctx.stop()
        self.contexts.clear()
        for t in list(self.tasks):
            t.cancel()
        self.zmq_ctx.term()
        shutil.rmtree(self.state_dir, ignore_errors=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description="E2B-compatible code interpreter on Jupyter kernels")
    p.add_argument("--listen", default="0.0.0.0:49999", help="HOST:PORT (port 0: any free port)")
    p.add_argument("--port-file", help="write the port here once the default context is ready")
    p.add_argument("--cwd", default=os.getcwd(), help="working directory of contexts without one")
    p.add_argument("--kernel", default="python3", help="Jupyter kernel spec of python contexts")
    p.add_argument("--max-contexts", type=int, default=16, help="kernels at once, the default included")
    p.add_argument("--max-output-bytes", type=int, default=16 << 20, help="output of one cell sent at most")
    p.add_argument("--max-body-bytes", type=int, default=4 << 20, help="request body at most")
    p.add_argument("--max-connections", type=int, default=256)
    p.add_argument("--keepalive-s", type=float, default=5.0, help="a keepalive line after this long "
                   "without another")
    p.add_argument("--interrupt-grace-s", type=float, default=10.0, help="a kernel still busy this long "
                   "after an interrupt is restarted")
    p.add_argument("--kernel-start-timeout-s", type=float, default=60.0)
    p.add_argument("--idle-timeout-s", type=float, default=300.0, help="an idle keep-alive connection is "
                   "closed after this long")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = p.parse_args(argv)
    if not os.path.isdir(args.cwd):
        p.error("--cwd %s is not a directory" % args.cwd)
    args.cwd = os.path.abspath(args.cwd)
    if not re.match(r"^.*:[0-9]{1,5}$", args.listen) or int(args.listen.rpartition(":")[2]) > 65535:
        p.error("--listen wants HOST:PORT")
    for name in ("max_contexts", "max_output_bytes", "max_body_bytes", "max_connections"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    for name in ("keepalive_s", "interrupt_grace_s", "kernel_start_timeout_s", "idle_timeout_s"):
        if not getattr(args, name) > 0:
            p.error("--%s must be positive" % name.replace("_", "-"))
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s code-interpreter %(levelname)s %(message)s")
    # jupyter_client's own chatter (connection files, ports) is debug.
    logging.getLogger("traitlets").setLevel(logging.WARNING)
    server = Server(args)
    try:
        return asyncio.run(server.main())
    finally:
        shutil.rmtree(server.state_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""``from fedrouter import sandbox`` — the ``sky.sandbox``-shaped API.

Module functions run on a default :class:`~fedrouter.client.Client` made
on first use from ``FEDROUTER_URL``, ``FEDROUTER_TOKEN`` and
``FEDROUTER_REGION`` (or set one with :func:`configure`). Every per-call
function has an asyncio sibling on ``.aio``::

    from fedrouter import sandbox

    sb = sandbox.create(name='dev')
    result = sb.exec('python', '-c', 'print(2 ** 10)')
    print(result['stdout'])  # 1024
    sb.terminate()

    sbs = await sandbox.create.aio(name='rollout', num_sandboxes=100)
    await sandbox.aclose()
"""
from __future__ import annotations

import threading
from typing import Any, Optional

from ._dual import DualFunction
from .client import (Client, ExecChunk, ExecResult, Execution, Files, Process, Processes, Record, Sandbox,
                     SandboxList, collect)
from .errors import *  # noqa: F401,F403  (sandbox.NoCapacity etc.)
from . import errors as _errors

_lock = threading.Lock()
_default: Optional[Client] = None


def configure(url: Optional[str] = None, token: Optional[str] = None, **options: Any) -> Client:
    """Sets the default client used by the module functions (same arguments
    as :class:`Client`) and returns it."""
    global _default
    c = Client(url, token, **options)
    with _lock:
        old, _default = _default, c
    if old is not None:
        old.close()
    return c


def client() -> Client:
    """The default client (made from the environment on first use)."""
    global _default
    c = _default
    if c is None:
        with _lock:
            if _default is None:
                _default = Client()
            c = _default
    return c


def _fn(name: str) -> DualFunction:
    return DualFunction(name, client, getattr(Client, name).__doc__)


create = _fn("create")
get = _fn("get")
ls = _fn("ls")
terminate = _fn("terminate")
terminate_many = _fn("terminate_many")
exec = _fn("exec")  # noqa: A001  (sandbox.exec(id, *argv) mirrors sb.exec)
exec_stream = _fn("exec_stream")
run_code = _fn("run_code")
create_pool = _fn("create_pool")
get_pool = _fn("get_pool")
list_pools = _fn("list_pools")
set_pool_size = _fn("set_pool_size")
delete_pool = _fn("delete_pool")
create_template = _fn("create_template")
delete_template = _fn("delete_template")
clusters = _fn("clusters")
explain = _fn("explain")
policy = _fn("policy")
health = _fn("health")


def close() -> None:
    """Closes the default client's blocking connections."""
    if _default is not None:
        _default.close()


async def aclose() -> None:
    """Releases the default client's connections on the running event loop
    (call it before ``asyncio.run`` returns)."""
    if _default is not None:
        await _default.aclose()


__all__ = ["configure", "client", "create", "get", "ls", "terminate", "terminate_many", "exec",
           "exec_stream", "run_code", "create_pool", "get_pool", "list_pools", "set_pool_size", "delete_pool",
           "create_template", "delete_template", "clusters", "explain", "policy", "health", "close",
           "aclose", "Client", "Sandbox", "SandboxList", "ExecResult", "ExecChunk", "Execution", "Files", "Process",
           "Processes", "Record", "collect"] + list(_errors.__all__)

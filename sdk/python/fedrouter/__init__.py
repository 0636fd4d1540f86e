"""fedrouter: Python SDK for the fedrouter sandbox router (standard library only).

``from fedrouter import sandbox`` gives the ``sky.sandbox``-shaped module
API (``sandbox.create``, ``sb.exec``, ``.aio`` siblings, ...);
:class:`Client` is the same API on an explicit endpoint.
"""
from . import errors, sandbox
from .client import (Client, ExecChunk, ExecResult, Execution, Files, Process, Processes, Record, Sandbox,
                     SandboxList, collect)
from .errors import (AgentRequired, APIError, ConnectError, ConnectionLost, FedrouterError, InvalidField,
                     NoCapacity, NotFound, NotSupported, SandboxNotFound, SecretNotFound, TenantLimit, Timeout,
                     TransportError)

__version__ = "0.1.0"

__all__ = ["sandbox", "errors", "Client", "Sandbox", "SandboxList", "ExecResult", "ExecChunk", "Execution", "Files",
           "Process", "Processes", "Record", "collect", "FedrouterError", "APIError", "TransportError",
           "ConnectError", "ConnectionLost", "Timeout", "NotFound", "SandboxNotFound", "NoCapacity",
           "TenantLimit", "InvalidField", "NotSupported", "SecretNotFound", "AgentRequired", "__version__"]

"""The ``.aio`` pattern: a callable whose ``.aio`` attribute is its asyncio
sibling (``sb.exec(...)`` / ``await sb.exec.aio(...)``)."""
from __future__ import annotations

import functools
from typing import Any, Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class BoundDual:
    """A dual method bound to its object: call it, or call ``.aio``."""
    __slots__ = ("_obj", "_sync", "_aio", "_name")

    def __init__(self, obj: Any, sync: Callable[..., Any], aio: Callable[..., Any], name: str) -> None:
        self._obj = obj
        self._sync = sync
        self._aio = aio
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._sync(self._obj, *args, **kwargs)

    def aio(self, *args: Any, **kwargs: Any) -> Any:
        """The asyncio sibling: same arguments, returns an awaitable."""
        return self._aio(self._obj, *args, **kwargs)

    @property
    def __doc__(self) -> Optional[str]:  # type: ignore[override]
        return self._sync.__doc__

    def __repr__(self) -> str:
        return f"<dual method {self._name} of {self._obj!r}>"


class dual(Generic[T]):
    """Descriptor: ``dual(sync_fn, aio_fn)`` on a class gives instances a
    method ``m`` with ``m(...)`` (blocking) and ``m.aio(...)`` (asyncio)."""

    def __init__(self, sync: Callable[..., T], aio: Callable[..., Any]) -> None:
        self.sync = sync
        self.aio_fn = aio
        self.name = sync.__name__
        self.__doc__ = sync.__doc__
        functools.update_wrapper(self, sync)  # type: ignore[arg-type]

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, objtype: Optional[type] = None) -> Any:
        if obj is None:
            return self
        return BoundDual(obj, self.sync, self.aio_fn, self.name)


class DualFunction:
    """A module-level function with an ``.aio`` sibling; both call the
    method ``name`` of the object ``target()`` returns (the default client)."""

    def __init__(self, name: str, target: Callable[[], Any], doc: Optional[str]) -> None:
        self._name = name
        self._target = target
        self.__name__ = name
        self.__qualname__ = name
        self.__doc__ = doc

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._target(), self._name)(*args, **kwargs)

    def aio(self, *args: Any, **kwargs: Any) -> Any:
        """The asyncio sibling: same arguments, returns an awaitable."""
        return getattr(self._target(), self._name).aio(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<fedrouter.sandbox.{self._name}>"

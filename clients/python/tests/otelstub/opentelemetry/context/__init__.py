"""opentelemetry.context: the current context, in a contextvar."""
import contextvars
from typing import Any, Dict, Optional

_current: contextvars.ContextVar = contextvars.ContextVar("otel-stub-context", default={})


class Context(dict):
    pass


def get_current() -> Dict[str, Any]:
    return _current.get()


def attach(ctx: Dict[str, Any]) -> Any:
    return _current.set(ctx)


def detach(token: Any) -> None:
    _current.reset(token)


def get_value(key: str, context: Optional[Dict[str, Any]] = None) -> Any:
    return (context if context is not None else get_current()).get(key)


def set_value(key: str, value: Any, context: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    d = Context(context if context is not None else get_current())
    d[key] = value
    return d

"""tenure: the Python client and worker library of tenure, a durable task
scheduler (https://github.com/tenurehq/tenure).

    import tenure

    client = tenure.Client("http://127.0.0.1:7070")
    client.submit(queue="emails", kind="send_email", args={"to": "ada@example.com"})

    worker = tenure.Worker(client, queues=["emails"], concurrency=8)

    @worker.task("send_email")
    def send_email(task: tenure.Task) -> None:
        mailer.send(task.args["to"])

    worker.run()   # until SIGTERM or SIGINT, then a graceful shutdown

Client and AsyncClient make every call of the API (tenure.messages holds
its messages); Worker (threads) and AsyncWorker (asyncio) run tasks with
the commit boundary, heartbeats and graceful shutdown. Standard library
only; OpenTelemetry is used when opentelemetry-api is installed.
"""
from . import messages
from ._base import CallInfo, __version__, kind, tls_context
from .aio import AsyncClient
from .client import Client, Interrupted
from .errors import (
    AlreadyCommitted,
    AlreadyExists,
    CursorExpired,
    Full,
    InvalidArgument,
    LeaseLost,
    NotFound,
    PermissionDenied,
    TenureError,
    TLSRefused,
    TooLarge,
    Unauthenticated,
    Unavailable,
    WrongState,
)
from .messages import *  # noqa: F401,F403  (the API's messages and enums)
from .messages import __all__ as _messages_all
# tenure.Task is what a handler gets (below); the API's Task message, which
# get_task answers, is tenure.messages.Task.
from .aworker import AsyncWorker
from .worker import Finish, Outcome, Permanent, Snooze, Task, Worker

__all__ = [
    "AlreadyCommitted", "AlreadyExists", "AsyncClient", "AsyncWorker", "CallInfo", "Client", "CursorExpired", "Finish", "Full",
    "Interrupted", "InvalidArgument", "LeaseLost", "NotFound", "Outcome", "Permanent", "PermissionDenied",
    "Snooze", "TLSRefused", "Task", "TenureError", "TooLarge", "Unauthenticated", "Unavailable", "Worker",
    "WrongState", "__version__", "kind", "messages", "tls_context",
] + [n for n in _messages_all if n != "Task"]

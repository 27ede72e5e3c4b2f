"""The exceptions of a failed call, one class per case a program branches on.

Every error a tenure server answers carries a tenure.v1.ErrorDetail
(proto/tenure/v1/errors.proto) whose reason, not the message, says which
case it is; the class of the exception raised follows that reason:

    NotFound          no such task, queue or schedule
    LeaseLost         the lease is not the task's current one: stop, apply no effects
    AlreadyCommitted  another attempt committed first (committed_by): apply no effects
    WrongState        the task's state (state) does not allow the call
    InvalidArgument   a field (field) is invalid
    TooLarge          a value (field) is over its limit (size, limit)
    Full              the server's memory budget is full; retry after retry_after
    Unavailable       the server cannot serve now (after the client's retries)
    AlreadyExists     a create names something that exists with another definition
    Unauthenticated   no token, or one the server does not know
    PermissionDenied  the token's role or scope does not allow the call
    TLSRefused        the TLS handshake failed for good (not retried)
    CursorExpired     a watch's cursor is older than the log (oldest_cursor)

An answer without a reason (a proxy's, an older server's) is classified
by its code as the API documents each code. Everything else is a
TenureError with its code. Messages are for people and may change.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Dict, Optional, Type

from .messages import CompleteResult, ErrorDetail, ErrorReason, TaskState


class TenureError(Exception):
    """A call the server (or the client, checking a request) refused.

    op is the call ("Commit"), code the Connect code ("failed_precondition",
    "not_found", ...), reason the server's ErrorReason (or the one its code
    implies), message the server's explanation, and detail the whole
    ErrorDetail; its fields are also attributes of the exception.
    """

    def __init__(self, op: str, code: str, message: str, detail: Optional[ErrorDetail] = None,
                 reason: Optional[ErrorReason] = None):
        self.op = op
        self.code = code
        self.message = message
        self.detail = detail if detail is not None else ErrorDetail()
        self.reason = reason if reason is not None else self.detail.reason
        super().__init__(self.__str__())

    def __str__(self) -> str:
        code = self.code
        if code.replace("_", " ") in self.message or code in self.message:
            return f"{self.op}: {self.message}"
        return f"{self.op}: {code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op!r}, {self.code!r}, {self.message!r})"

    @property
    def task_id(self) -> str:
        """The task the error is about, if any."""
        return self.detail.task_id

    @property
    def lease_id(self) -> str:
        """LeaseLost, AlreadyCommitted: the lease the call named."""
        return self.detail.lease_id

    @property
    def committed_by(self) -> str:
        """AlreadyCommitted: the lease whose commit won."""
        return self.detail.committed_by

    @property
    def state(self) -> TaskState:
        """WrongState: the task's state when the call was refused."""
        return self.detail.state

    @property
    def field(self) -> str:
        """InvalidArgument, TooLarge: the field, as the request names it."""
        return self.detail.field

    @property
    def size(self) -> int:
        """TooLarge: the field's size; Full: what the server holds, in bytes."""
        return self.detail.size

    @property
    def limit(self) -> int:
        """TooLarge: the field's limit; Full: the server's memory budget, in bytes."""
        return self.detail.limit

    @property
    def retry_after(self) -> Optional[timedelta]:
        """Full: how long to wait before trying again."""
        return self.detail.retry_after

    @property
    def oldest_cursor(self) -> str:
        """CursorExpired: the cursor of the oldest position still available."""
        return self.detail.oldest_cursor


class NotFound(TenureError):
    """No task has the id (or it left after the retention period), or the
    queue or schedule named does not exist."""


class LeaseLost(TenureError):
    """The lease named is not the task's current lease any more (it expired,
    or the task was leased again, killed or finished): stop working on the
    task and apply no effects."""


class AlreadyCommitted(TenureError):
    """Another attempt committed the task first (committed_by names its
    lease): apply no effects from this attempt."""


class WrongState(TenureError):
    """The task's state (state) does not allow the call: killing a finished
    task, failing a committed one, snoozing one snoozed too often."""


class InvalidArgument(TenureError):
    """A field of the request (field) is invalid: fix the request; retrying
    it as it is fails again."""


class TooLarge(TenureError):
    """A value is over a size limit (field, size and limit say which): send
    less."""


class Full(TenureError):
    """The server holds as much as its memory budget allows and refused to
    create a task or schedule (nothing was created): retry after
    retry_after."""


class Unavailable(TenureError):
    """The server could not serve the call (down, restarting, moving the
    partition), even after the client's retries: try again later. Nothing
    was changed that was not also made durable."""


class AlreadyExists(TenureError):
    """What a create names exists already with another definition: update
    it, or delete it first."""


class Unauthenticated(TenureError):
    """The server authenticates callers and the call carried no token, or
    one it does not know: pass token= to the client."""


class PermissionDenied(TenureError):
    """The token's role or scope does not allow the call; the message names
    what it lacks."""


class TLSRefused(TenureError):
    """The TLS handshake failed for good: the server's certificate is not
    trusted (the CA given), or the server refused this client's. The call
    was not sent, nor retried: fix the TLS configuration."""


class CursorExpired(TenureError):
    """A watch's cursor names a position the server's log no longer holds
    (a snapshot replaced the records): oldest_cursor is the oldest one still
    available. Watch from it only if skipping what came before is
    acceptable."""


_BY_REASON: Dict[int, Type[TenureError]] = {
    ErrorReason.NOT_FOUND: NotFound,
    ErrorReason.LEASE_LOST: LeaseLost,
    ErrorReason.ALREADY_COMMITTED: AlreadyCommitted,
    ErrorReason.WRONG_STATE: WrongState,
    ErrorReason.INVALID_ARGUMENT: InvalidArgument,
    ErrorReason.TOO_LARGE: TooLarge,
    ErrorReason.UNAVAILABLE: Unavailable,
    ErrorReason.ALREADY_EXISTS: AlreadyExists,
    ErrorReason.FULL: Full,
    ErrorReason.CURSOR_EXPIRED: CursorExpired,
}

# The reason an answer without one has, by its code, as the API documents
# each code: failed_precondition is "lease lost" (it cannot be told apart
# from wrong state without the reason), already_exists "already committed".
_REASON_OF_CODE: Dict[str, ErrorReason] = {
    "not_found": ErrorReason.NOT_FOUND,
    "failed_precondition": ErrorReason.LEASE_LOST,
    "already_exists": ErrorReason.ALREADY_COMMITTED,
    "invalid_argument": ErrorReason.INVALID_ARGUMENT,
    "resource_exhausted": ErrorReason.TOO_LARGE,
    "unavailable": ErrorReason.UNAVAILABLE,
    "out_of_range": ErrorReason.CURSOR_EXPIRED,
}


def error_of(op: str, code: str, message: str, detail: Optional[ErrorDetail] = None) -> TenureError:
    """The exception of a refused call: its class follows the detail's
    reason, or without one the code."""
    if code == "unauthenticated":
        return Unauthenticated(op, code, message, detail)
    if code == "permission_denied":
        return PermissionDenied(op, code, message, detail)
    reason = detail.reason if detail is not None else ErrorReason.UNSPECIFIED
    if not isinstance(reason, ErrorReason) or reason == ErrorReason.UNSPECIFIED:
        # No detail, or a reason this client does not know (a newer
        # server): the code still says what class of failure it is.
        reason = _REASON_OF_CODE.get(code, ErrorReason.UNSPECIFIED)
    cls = _BY_REASON.get(reason, TenureError)
    return cls(op, code, message, detail, reason)


def from_complete_result(r: CompleteResult) -> TenureError:
    """The exception of one failed item of a CompleteBatch answer, as the
    Complete of that item would have raised it."""
    detail = r.detail if r.detail is not None else ErrorDetail()
    if not detail.task_id:
        detail.task_id = r.task_id
    return error_of("CompleteBatch", r.code or "unknown", r.message, detail)


def lease_gone(e: BaseException) -> bool:
    """Whether e means the lease has no authority any more: it is not the
    task's current lease, another attempt committed, the task is gone, or
    its state allows nothing more from this attempt."""
    return isinstance(e, (LeaseLost, AlreadyCommitted, NotFound, WrongState))


def _invalid(op: str, field: str, message: str) -> InvalidArgument:
    """The error of a request the client refuses before sending it."""
    return InvalidArgument(op, "invalid_argument", message, ErrorDetail(reason=ErrorReason.INVALID_ARGUMENT, field=field))


__all__ = [
    "AlreadyCommitted", "AlreadyExists", "CursorExpired", "Full", "InvalidArgument", "LeaseLost", "NotFound", "PermissionDenied",
    "TLSRefused", "TenureError", "TooLarge", "Unauthenticated", "Unavailable", "WrongState", "error_of",
    "from_complete_result", "lease_gone",
]


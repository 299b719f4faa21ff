"""fabkv's exceptions: one class per status of the client library.

Every error a fabkv call raises is a fabkv.Error, whose .status is a fabkv.Status (the C API's
numbers, src/client/fabkv.h). Where a standard exception means the same, the class derives
from it too: TimeoutError from the built-in TimeoutError, ServerGone from ConnectionError,
TooLarge and InvalidKey from ValueError. A miss is not an error: get() returns None and
delete() returns False.
"""
import builtins
import enum
from typing import Dict, Type, Union


class Status(enum.IntEnum):
    """The client library's statuses (src/client/fabkv.h, fabkv_status)."""

    OK = 0
    NOT_FOUND = 1
    TOO_LARGE = 2
    NO_SPACE = 3
    VERSION_MISMATCH = 4
    INVALID_KEY = 5
    SERVER_GONE = 6
    TIMEOUT = 7
    MALFORMED = 8
    ERROR = 9
    CONTENDED = 12


class Error(Exception):
    """A fabkv call failed; .status says how."""

    def __init__(self, message: str, status: Union[int, Status] = Status.ERROR) -> None:
        super().__init__(message)
        self.status = Status(status)


class TooLarge(Error, ValueError):
    """The key is over 250 bytes or the value over the server's max_value (nothing was sent)."""


class InvalidKey(Error, ValueError):
    """An empty key (nothing was sent)."""


class NoSpace(Error):
    """The server's store is full (the store engine does not evict)."""


class VersionMismatch(Error):
    """A conditional put lost the race."""


class ServerGone(Error, ConnectionError):
    """The server is unreachable, refused the connection, or went away: reconnect."""


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - fabkv.TimeoutError on purpose
    """No answer within the client's timeout_ms."""


class Malformed(Error):
    """The server could not parse a request, or the client its layout (a bug on one side)."""


class Contended(Error):
    """A pilaf or farm GET saw the key change under 64 READs in a row: retry later."""


_BY_STATUS: Dict[Status, Type[Error]] = {
    Status.TOO_LARGE: TooLarge,
    Status.INVALID_KEY: InvalidKey,
    Status.NO_SPACE: NoSpace,
    Status.VERSION_MISMATCH: VersionMismatch,
    Status.SERVER_GONE: ServerGone,
    Status.TIMEOUT: TimeoutError,
    Status.MALFORMED: Malformed,
    Status.CONTENDED: Contended,
}


def error_for(status: int, message: str) -> Error:
    """The exception for a status (the extension raises what this returns)."""
    try:
        known = Status(status)
    except ValueError:  # a status newer than this file: still a fabkv.Error
        known = Status.ERROR
    return _BY_STATUS.get(known, Error)(message, known)

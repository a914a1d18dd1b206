"""Errors: what the daemon refused (APIError, with its stable code) and a
daemon that could not be reached (ConnectionError)."""

from typing import Optional

from .types import Health

# Stable error codes of the API (api.Code* in the Go package api).
BAD_REQUEST = "bad_request"
INVALID_FIELD = "invalid_field"
INVALID_PATH = "invalid_path"
NOT_FOUND = "not_found"
FORBIDDEN = "forbidden"
CONFLICT = "conflict"
TOO_LARGE = "too_large"
LIMIT_EXCEEDED = "limit_exceeded"
UNPROCESSABLE = "unprocessable"
UNAVAILABLE = "unavailable"
INTERNAL = "internal"

_CODE_OF_STATUS = {
    400: BAD_REQUEST,
    401: FORBIDDEN,
    403: FORBIDDEN,
    404: NOT_FOUND,
    409: CONFLICT,
    413: TOO_LARGE,
    422: UNPROCESSABLE,
    429: LIMIT_EXCEEDED,
    503: UNAVAILABLE,
}


class AirlockError(Exception):
    """Base of every error this package raises."""


class APIError(AirlockError):
    """The daemon refused a call: code is one of the stable codes above,
    message says why, field names the request field at fault (or "")."""

    def __init__(self, code: str, message: str, field: str = "", status: Optional[int] = None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.field = field
        self.status = status

    @classmethod
    def from_body(cls, status: Optional[int], body: object, text: str = "") -> "APIError":
        if isinstance(body, dict) and isinstance(body.get("code"), str) and body["code"]:
            return cls(body["code"], str(body.get("message", "")), str(body.get("field", "") or ""), status)
        msg = text.strip() or f"HTTP {status}"
        if isinstance(body, dict) and isinstance(body.get("error"), str):
            msg = body["error"]
        return cls(_CODE_OF_STATUS.get(status or 0, INTERNAL), msg, "", status)


class NotFound(APIError):
    """No such sandbox or exec visible to the caller (code not_found)."""


class Unhealthy(APIError):
    """GET /v1/health answered 503: a part of the daemon is failing (code
    unavailable). health holds every part's state (a types.Health)."""

    def __init__(self, health: object, message: str):
        super().__init__(UNAVAILABLE, message, "", 503)
        self.health = health


class ConnectionError(AirlockError):  # noqa: A001 - named for what it is
    """The daemon's socket could not be reached."""

    def __init__(self, socket: str, err: BaseException):
        hint = ""
        if isinstance(err, PermissionError):
            hint = (" (the socket is for root and the daemon's group, api.group, default airlock:"
                    " ask for your user to be added to it)")
        elif isinstance(err, (FileNotFoundError, ConnectionRefusedError)):
            hint = " (is `airlock serve` running? AIRLOCK_SOCKET or Client(socket=...) name another socket)"
        super().__init__(f"airlock daemon at {socket}: {err}{hint}")
        self.socket = socket
        self.__cause__ = err


class StreamError(AirlockError):
    """A response stream broke or held something that is not the API's."""


def api_error(status: Optional[int], body: object, text: str = "") -> APIError:
    """The APIError for a response; not_found is a NotFound, a health
    answer of 503 (a body with its parts) an Unhealthy."""
    if status == 503 and isinstance(body, dict) and isinstance(body.get("parts"), list) and body["parts"]:
        h = Health.from_json(body)
        return Unhealthy(h, "the daemon is not healthy: " +
                         "; ".join(f"{p.name}: {p.problem}" for p in h.failing()))
    e = APIError.from_body(status, body, text)
    if e.code == NOT_FOUND:
        return NotFound(e.code, e.message, e.field, e.status)
    return e

"""Python client of airlock's daemon API (`airlock serve` on its unix
socket): sandboxes, streaming exec, files as tar streams, the events stream
and one-shot run. Standard library only, Python 3.9+.

    from airlock_client import Client
    with Client().sandbox(labels={"agent": "demo"}) as sb:
        print(sb.run(["echo", "hello"]).stdout)
"""

from .client import (DEFAULT_SOCKET, SOCKET_ENV, ApprovalStream, Client, EventStream, ExecStream, FilesStream,
                     SandboxSession, default_socket, user_socket)
from .errors import AirlockError, APIError, ConnectionError, NotFound, StreamError, Unhealthy
from .files import UnsafeTarError, extract_tar, write_tar
from .types import (Approval, Completed, Egress, Event, ExecInfo, ExecResult, FilesResult, Health, HealthPart, Limits,
                    Output, RunResult, Sandbox, Started, SummaryRow, Usage)

__all__ = [
    "DEFAULT_SOCKET", "SOCKET_ENV", "Approval", "ApprovalStream", "Client", "EventStream", "ExecStream", "FilesStream", "SandboxSession",
    "AirlockError", "APIError", "ConnectionError", "NotFound", "StreamError", "Unhealthy", "UnsafeTarError",
    "default_socket", "user_socket", "extract_tar", "write_tar", "Completed", "Egress", "Event", "ExecInfo", "ExecResult", "FilesResult",
    "Health", "HealthPart", "Limits", "Output", "RunResult", "Sandbox", "Started", "SummaryRow", "Usage",
]

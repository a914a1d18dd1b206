"""The client of airlock's daemon API over its unix socket (the routes of
`airlock serve`; wire types in the Go package api)."""

import base64
import http.client
import json
import os
import socket
import stat
import threading
import urllib.parse
from typing import IO, Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from . import errors
from .errors import APIError, StreamError, Unhealthy, api_error
from .files import extract_tar, write_tar
from .types import (Approval, Completed, Event, ExecInfo, ExecResult, FilesResult, Health, Output, RunResult, Sandbox,
                    Started, decode_data)

#: The environment variable that names the daemon's socket.
SOCKET_ENV = "AIRLOCK_SOCKET"
#: The system daemon's socket (`airlock serve`).
DEFAULT_SOCKET = "/run/airlock/airlock.sock"
#: Timeout, in seconds, of a call that is not a stream.
DEFAULT_TIMEOUT = 60.0
#: Read timeout of an events stream: the daemon sends a comment every 15 s,
#: so four missed ones mean a dead stream.
EVENTS_TIMEOUT = 60.0

_MAX_ERROR_BODY = 64 << 10
_MAX_JSON_BODY = 64 << 20
_MAX_LINE = 16 << 20
_PREFIX = "/v1"

Duration = Union[str, int, float]  # "30s", "10m" or seconds
Size = Union[str, int]  # "512M" or bytes
Stdin = Union[bytes, str, IO[bytes], Iterable[bytes], None]


class _UnixConnection(http.client.HTTPConnection):
    """An HTTP connection to a unix socket (the Host header is never used)."""

    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("airlock", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError as e:
            s.close()
            raise errors.ConnectionError(self._path, e) from e
        self.sock = s


def _duration(v: Optional[Duration]) -> Optional[str]:
    if v is None or isinstance(v, str):
        return v
    return f"{float(v)!r}s"


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != [] and v != {}}


def user_socket(uid: Optional[int] = None) -> str:
    """The socket of a user's own daemon (`airlock serve --user`):
    $XDG_RUNTIME_DIR/airlock/airlock.sock, else /run/user/UID/airlock/."""
    uid = os.geteuid() if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not os.path.isabs(runtime):
        runtime = f"/run/user/{uid}"
    return os.path.join(os.path.normpath(runtime), "airlock", "airlock.sock")


def default_socket() -> str:
    """The socket a Client dials when given none, by the Go client's rule:
    $AIRLOCK_SOCKET; else, for a user other than root, that user's own
    daemon's when its socket exists; else DEFAULT_SOCKET."""
    env = os.environ.get(SOCKET_ENV)
    if env:
        return env
    if os.geteuid() != 0:
        mine = user_socket()
        try:
            if stat.S_ISSOCK(os.stat(mine).st_mode):
                return mine
        except OSError:
            pass
    return DEFAULT_SOCKET


def _quote(s: str) -> str:
    return urllib.parse.quote(s, safe="")


class Client:
    """A client of one daemon. socket: the daemon's unix socket (default
    default_socket(): $AIRLOCK_SOCKET, else your own daemon's when it runs,
    else /run/airlock/airlock.sock). timeout bounds each
    call that is not a stream (seconds). Each call uses its own connection,
    so a Client may be shared between threads."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = DEFAULT_TIMEOUT):
        self.socket = socket or default_socket()
        self.timeout = timeout

    # -- transport --------------------------------------------------------

    def _open(self, method: str, path: str, query: Optional[Sequence] = None, body: Any = None,
              content_type: Optional[str] = None, timeout: Any = "default"):
        """Sends a request and returns (connection, response) with a 2xx
        status; anything else raises its APIError."""
        url = _PREFIX + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        conn = _UnixConnection(self.socket, self.timeout if timeout == "default" else timeout)
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            conn.request(method, url, body=body, headers=headers)
            resp = conn.getresponse()
        except errors.AirlockError:
            conn.close()
            raise
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise StreamError(f"{method} {path}: {e}") from e
        if resp.status // 100 != 2:
            try:
                text = resp.read(_MAX_ERROR_BODY).decode("utf-8", "replace")
            finally:
                conn.close()
            try:
                parsed: object = json.loads(text)
            except ValueError:
                parsed = None
            raise api_error(resp.status, parsed, text)
        return conn, resp

    def _json(self, method: str, path: str, body: Any = None, query: Optional[Sequence] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        conn, resp = self._open(method, path, query, data, "application/json" if data is not None else None)
        try:
            raw = resp.read(_MAX_JSON_BODY + 1)
        except (OSError, http.client.HTTPException) as e:
            raise StreamError(f"{method} {path}: response: {e}") from e
        finally:
            conn.close()
        if len(raw) > _MAX_JSON_BODY:
            raise StreamError(f"{method} {path}: response larger than {_MAX_JSON_BODY} bytes")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise StreamError(f"{method} {path}: response is not JSON: {e}") from e

    # -- sandboxes --------------------------------------------------------

    def create_sandbox(self, *, labels: Optional[Mapping[str, str]] = None, memory: Optional[Size] = None,
                       cpus: Optional[float] = None, pids: Optional[int] = None, tmp_size: Optional[Size] = None,
                       exec_timeout: Optional[Duration] = None, workspace: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, mode: Optional[str] = None,
                       allow: Optional[Sequence[str]] = None, idle_timeout: Optional[Duration] = None,
                       max_lifetime: Optional[Duration] = None,
                       secret_bindings: Optional[Sequence[str]] = None) -> Sandbox:
        """Creates a sandbox (POST /v1/sandboxes); it can run commands when
        this returns. Limits not given are the daemon's defaults; without a
        workspace (a host directory the caller owns) the sandbox gets an
        empty one at /workspace. secret_bindings names bindings of the
        daemon's secrets file to attach (root: any with an attach block;
        another caller: those granted to its uid); the sandbox shows them with
        fingerprints, never values."""
        limits = _drop_none({"memory": memory, "cpus": cpus, "pids": pids, "tmp_size": tmp_size,
                             "exec_timeout": _duration(exec_timeout)})
        body = _drop_none({
            "labels": dict(labels or {}), "limits": limits, "workspace": workspace,
            "env": [f"{k}={v}" for k, v in (env or {}).items()], "mode": mode, "allow": list(allow or []),
            "idle_timeout": _duration(idle_timeout), "max_lifetime": _duration(max_lifetime),
            "secret_bindings": list(secret_bindings) if secret_bindings else None,
        })
        return Sandbox.from_json(self._json("POST", "/sandboxes", body))

    def sandbox(self, **kwargs: Any) -> "SandboxSession":
        """Creates a sandbox (create_sandbox's arguments) and returns a
        session on it; used as a context manager it deletes the sandbox at
        the end."""
        return SandboxSession(self, self.create_sandbox(**kwargs))

    def list_sandboxes(self, labels: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """The sandboxes the caller may see (its own; root: all) carrying
        every label in labels."""
        query = [("label", f"{k}={v}") for k, v in sorted((labels or {}).items())]
        return [Sandbox.from_json(d) for d in self._json("GET", "/sandboxes", query=query) or []]

    def get_sandbox(self, sandbox_id: str) -> Sandbox:
        """One sandbox: state, limits, usage now, egress counters."""
        return Sandbox.from_json(self._json("GET", f"/sandboxes/{_quote(sandbox_id)}"))

    def update_sandbox(self, sandbox_id: str, *, allow: Optional[Sequence[str]] = None,
                       allow_add: Optional[Sequence[str]] = None, allow_remove: Optional[Sequence[str]] = None,
                       labels: Optional[Mapping[str, Optional[str]]] = None, mode: Optional[str] = None) -> Sandbox:
        """Changes a running sandbox's own rules (PATCH /v1/sandboxes/{id})
        and returns it as it is after the change. allow replaces the allow
        list ([] empties it), then allow_remove removes entries and
        allow_add adds them; labels sets each key, a None value removes it;
        mode (root only) is "enforce" or "report". Requests the sandbox
        makes from then on are decided under the new rules; its open
        tunnels and websockets that they refuse are closed."""
        body = _drop_none({
            "allow_add": list(allow_add or []), "allow_remove": list(allow_remove or []),
            "labels": dict(labels or {}), "mode": mode,
        })
        if allow is not None:
            body["allow"] = list(allow)  # [] empties the list: kept
        return Sandbox.from_json(self._json("PATCH", f"/sandboxes/{_quote(sandbox_id)}", body))

    def delete_sandbox(self, sandbox_id: str) -> Sandbox:
        """Kills every process of the sandbox, removes it, and returns its
        final state and usage."""
        return Sandbox.from_json(self._json("DELETE", f"/sandboxes/{_quote(sandbox_id)}"))

    # -- exec -------------------------------------------------------------

    def exec(self, sandbox_id: str, argv: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
             cwd: Optional[str] = None, stdin: Stdin = None, timeout: Optional[Duration] = None,
             read_timeout: Optional[float] = None) -> "ExecStream":
        """Starts argv in the sandbox and returns its stream, once the
        daemon has answered: iterate it for Started, then Output pieces as
        they are produced, and last the ExecResult. stdin: bytes or str
        (sent whole), a binary file or an iterable of bytes (streamed; its
        end closes the command's stdin), or None (empty). timeout ends the
        command (its process group); read_timeout bounds the wait for each
        piece of output (None: no bound). Closing the stream before the end
        kills the command."""
        req: Dict[str, Any] = {"argv": list(argv)}
        if env:
            req["env"] = [f"{k}={v}" for k, v in env.items()]
        if cwd:
            req["cwd"] = cwd
        if timeout is not None:
            req["timeout"] = _duration(timeout)
        streamed = None
        if isinstance(stdin, str):
            stdin = stdin.encode()
        if isinstance(stdin, (bytes, bytearray)):
            if stdin:
                req["stdin"] = base64.b64encode(bytes(stdin)).decode("ascii")
        elif stdin is not None:
            req["stdin_stream"] = True
            streamed = stdin
        conn, resp = self._open("POST", f"/sandboxes/{_quote(sandbox_id)}/exec", None, json.dumps(req).encode(),
                                "application/json", timeout=read_timeout)
        s = ExecStream(self, sandbox_id, conn, resp)
        if streamed is not None and s.exec_id and s.result is None:
            s._send_stdin(streamed)
        return s

    def run_command(self, sandbox_id: str, argv: Sequence[str], **kwargs: Any) -> Completed:
        """exec's arguments; waits for the command and returns its whole
        output and result."""
        with self.exec(sandbox_id, argv, **kwargs) as s:
            return s.wait()

    def send_stdin(self, sandbox_id: str, exec_id: str, data: Union[bytes, IO[bytes], Iterable[bytes]]) -> None:
        """Streams data to the standard input of exec exec_id (started with
        a streamed stdin) until its end, which closes it."""
        if isinstance(data, (bytes, bytearray)):
            data = [bytes(data)]
        conn, resp = self._open("PUT", f"/sandboxes/{_quote(sandbox_id)}/execs/{_quote(exec_id)}/stdin", None,
                                data, "application/octet-stream", timeout=None)
        try:
            resp.read(_MAX_ERROR_BODY)
        finally:
            conn.close()

    def signal(self, sandbox_id: str, exec_id: str, sig: str) -> None:
        """Sends sig ("TERM", "KILL", "INT", ...) to the exec's process group."""
        self._json("POST", f"/sandboxes/{_quote(sandbox_id)}/execs/{_quote(exec_id)}/signal", {"signal": sig})

    def execs(self, sandbox_id: str) -> List[ExecInfo]:
        """The sandbox's execs: the running ones and the last finished."""
        return [ExecInfo.from_json(d) for d in self._json("GET", f"/sandboxes/{_quote(sandbox_id)}/execs") or []]

    # -- files ------------------------------------------------------------

    def put_files(self, sandbox_id: str, directory: str, tar: Union[bytes, IO[bytes]]) -> FilesResult:
        """Extracts the tar stream tar into directory (absolute, in the
        workspace or $HOME; created if missing) of the sandbox."""
        d = self._json_body("PUT", f"/sandboxes/{_quote(sandbox_id)}/files", [("path", directory)], tar,
                            "application/x-tar")
        return FilesResult(files=int(d.get("files", 0)), bytes=int(d.get("bytes", 0)))

    def _json_body(self, method: str, path: str, query: Sequence, body: Any, content_type: str) -> Dict[str, Any]:
        conn, resp = self._open(method, path, query, body, content_type)
        try:
            return json.loads(resp.read(_MAX_ERROR_BODY) or b"{}")
        except ValueError as e:
            raise StreamError(f"{method} {path}: response is not JSON: {e}") from e
        finally:
            conn.close()

    def get_files(self, sandbox_id: str, path: str) -> "FilesStream":
        """A tar stream of path (a file, a symlink or a directory with
        everything below it) in the sandbox, its entries named from path's
        last component. Read it like a binary file; close it when done."""
        conn, resp = self._open("GET", f"/sandboxes/{_quote(sandbox_id)}/files", [("path", path)])
        return FilesStream(conn, resp)

    def upload(self, sandbox_id: str, src: str, directory: str) -> FilesResult:
        """Copies the local file or directory src into directory of the
        sandbox: src "./build" and directory "/workspace" make
        /workspace/build. Symlinks are copied as links; other special files
        are refused before anything is sent."""
        with write_tar(src) as f:
            return self.put_files(sandbox_id, directory, f)

    def download(self, sandbox_id: str, path: str, directory: str) -> FilesResult:
        """Copies path of the sandbox into the local directory (created if
        missing): nothing is written outside it, symlinks come back as links,
        setuid and setgid bits are dropped, special files are refused."""
        with self.get_files(sandbox_id, path) as f:
            return extract_tar(f, directory)

    # -- events, run, the rest ---------------------------------------------

    def events(self, sandbox_id: str, read_timeout: Optional[float] = EVENTS_TIMEOUT, *, history: bool = False,
               since: Optional[str] = None, follow: bool = True) -> "EventStream":
        """The sandbox's live events: first its state now ("sandbox"), then
        each audited decision ("decision") and lifecycle change as they
        happen; it ends after the sandbox has stopped. With history (or
        since, an RFC 3339 time) the records the daemon kept of the sandbox
        (its last 500) come after the first state, marked history; with
        follow=False the stream ends after them."""
        query = []
        if history:
            query.append(("history", "true"))
        if since:
            query.append(("since", since))
        if not follow:
            query.append(("follow", "false"))
        conn, resp = self._open("GET", f"/sandboxes/{_quote(sandbox_id)}/events", query=query, timeout=read_timeout)
        ctype = resp.getheader("Content-Type", "")
        if not ctype.startswith("text/event-stream"):
            conn.close()
            raise StreamError(f"events {sandbox_id}: content type {ctype!r}, want text/event-stream")
        return EventStream(sandbox_id, conn, resp)

    def run(self, argv: Sequence[str], *, labels: Optional[Mapping[str, str]] = None,
            env: Optional[Mapping[str, str]] = None, workspace: Optional[str] = None, stdin: Optional[str] = None,
            memory: Optional[Size] = None, cpus: Optional[float] = None, pids: Optional[int] = None,
            tmp_size: Optional[Size] = None, timeout: Optional[Duration] = None, mode: Optional[str] = None,
            allow: Optional[Sequence[str]] = None,
            secret_bindings: Optional[Sequence[str]] = None) -> RunResult:
        """Creates a sandbox, runs argv in it with its output captured, and
        deletes it (POST /v1/run). This call has no timeout of its own; give
        the command one with timeout. secret_bindings attaches bindings of
        the daemon's secrets file by id, as create_sandbox does; the result
        names them, never a value."""
        limits = _drop_none({"memory": memory, "cpus": cpus, "pids": pids, "tmp_size": tmp_size,
                             "exec_timeout": _duration(timeout)})
        body = _drop_none({"argv": list(argv), "labels": dict(labels or {}),
                           "env": [f"{k}={v}" for k, v in (env or {}).items()], "workspace": workspace,
                           "stdin": stdin, "limits": limits, "mode": mode, "allow": list(allow or []),
                           "secret_bindings": list(secret_bindings) if secret_bindings else None})
        data = json.dumps(body).encode()
        conn, resp = self._open("POST", "/run", None, data, "application/json", timeout=None)
        try:
            return RunResult.from_json(json.loads(resp.read(_MAX_JSON_BODY)))
        finally:
            conn.close()

    def health(self, check: bool = True) -> Health:
        """The state of each of the daemon's parts (GET /v1/health). A daemon
        with a failing part answers 503: health raises Unhealthy (its health
        attribute holds the parts), or with check=False returns them with
        ok False."""
        try:
            d = self._json("GET", "/health") or {}
        except Unhealthy as e:
            if check:
                raise
            return e.health
        return Health.from_json(d)

    def openapi(self) -> Dict[str, Any]:
        """The daemon's OpenAPI 3 description of its API."""
        return self._json("GET", "/openapi.json")

    def summary(self) -> List[Dict[str, Any]]:
        """Decisions by destination since the daemon started (root: all
        sandboxes; others: their own)."""
        return self._json("GET", "/summary") or []

    def reload_policy(self) -> str:
        """Recompiles the daemon's policy (root only); returns the revision."""
        return (self._json("POST", "/policy/reload") or {}).get("policy_rev", "")

    def attach(self, sandbox_id: str, netns: str, labels: Optional[Mapping[str, str]] = None,
               pod: Optional[Mapping[str, str]] = None, inbound: Optional[str] = None,
               inbound_ports: Optional[Sequence[int]] = None) -> None:
        """Gives an existing network namespace the sandbox listeners and
        rules (root only). pod is a Kubernetes pod's identity (namespace,
        name, uid, service_account): policy sees it as input.sandbox.pod and
        every audit record of the sandbox carries it. inbound is what becomes
        of traffic arriving on the namespace's interfaces: "capture" (the
        default: a VM's egress, sent to airlock's listeners) or "accept" (a
        pod's: new TCP connections on inbound_ports, every TCP port when
        None, are let in and only their replies out)."""
        body: Dict[str, Any] = {"id": sandbox_id, "netns": netns, "labels": dict(labels or {}),
                                "pod": dict(pod) if pod is not None else None}
        if inbound is not None or inbound_ports is not None:
            # The daemon checks both and names the field at fault.
            body["inbound"] = {k: v for k, v in (("mode", inbound), ("ports", inbound_ports)) if v is not None}
        self._json("POST", "/attach", _drop_none(body))

    def check_attach(self, sandbox_id: str) -> Dict[str, Any]:
        """Whether an attached namespace's rules are still as attach left
        them (root only): {"id", "path", "pod", "inbound", "inbound_accepted",
        "in_force", "problem"}."""
        return self._json("GET", f"/attach/{_quote(sandbox_id)}") or {}

    # -- approvals ----------------------------------------------------------

    def approvals(self) -> List[Approval]:
        """The requests held for an answer that the caller may give (root:
        all; others: their sandboxes'), oldest first."""
        return [Approval.from_json(d) for d in self._json("GET", "/approvals") or []]

    def follow_approvals(self, read_timeout: Optional[float] = EVENTS_TIMEOUT) -> "ApprovalStream":
        """The pending approvals, then each new question and each answer as
        it happens."""
        conn, resp = self._open("GET", "/approvals", query=[("follow", "true")], timeout=read_timeout)
        ctype = resp.getheader("Content-Type", "")
        if not ctype.startswith("application/x-ndjson"):
            conn.close()
            raise StreamError(f"approvals: content type {ctype!r}, want application/x-ndjson")
        return ApprovalStream(conn, resp)

    def answer_approval(self, approval_id: str, answer: str) -> Approval:
        """Answers a held request: "once", "sandbox" (this host and port for
        the sandbox's life), "policy" (added to its allow list) or "deny"."""
        return Approval.from_json(self._json("POST", f"/approvals/{_quote(approval_id)}", {"answer": answer}))

    def detach(self, sandbox_id: str) -> None:
        """Restores an attached namespace as it was (root only)."""
        self._json("DELETE", f"/attach/{_quote(sandbox_id)}")


class ApprovalStream:
    """GET /v1/approvals?follow=true as an iterator of Approval: the pending
    ones, then each new question and each answer or time-out. Close it when
    done."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self._conn = conn
        self._lines = _Lines("approvals", resp)

    def __iter__(self) -> Iterator[Approval]:
        while True:
            line = self._lines.next()
            if line is None:
                self.close()
                return
            if not line.strip():
                continue  # the keep-alive
            try:
                yield Approval.from_json(json.loads(line))
            except ValueError as e:
                self.close()
                raise StreamError(f"approvals: a line is not JSON: {e}") from e

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ApprovalStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Lines:
    """Reads '\\n'-terminated lines of a response, each at most _MAX_LINE."""

    def __init__(self, what: str, resp: http.client.HTTPResponse):
        self._what = what
        self._resp = resp

    def next(self) -> Optional[bytes]:
        """The next line without its end; None at the end of the stream."""
        try:
            line = self._resp.readline(_MAX_LINE + 1)
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise StreamError(f"{self._what}: {e}") from e
        if not line:
            return None
        if len(line) > _MAX_LINE:
            raise StreamError(f"{self._what}: a line longer than {_MAX_LINE} bytes")
        return line.rstrip(b"\r\n")


class ExecStream:
    """A running exec's frames: iterate for Started, Output pieces and, last,
    the ExecResult (also in .result). An error frame raises its APIError, a
    stream that ends early StreamError. Close it (or use it as a context
    manager) when done; closing before the end kills the command."""

    def __init__(self, client: Client, sandbox_id: str, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse):
        self._client = client
        self.sandbox_id = sandbox_id
        self._conn = conn
        self._lines = _Lines(f"exec in {sandbox_id}", resp)
        self.exec_id = ""
        self.pid = 0
        self.result: Optional[ExecResult] = None
        self.stdin_error: Optional[BaseException] = None
        self._stdin_thread: Optional[threading.Thread] = None
        self._done = False
        try:
            first = self._read()
        except BaseException:
            self.close()
            raise
        if isinstance(first, Started):
            self.exec_id, self.pid = first.exec_id, first.pid
        elif isinstance(first, ExecResult):
            self.exec_id = first.exec_id
        else:
            self.close()
            raise StreamError(f"exec in {sandbox_id}: first frame is {first!r}, want started")
        self._pending: List[Union[Started, Output, ExecResult]] = [first]

    def _read(self) -> Union[Started, Output, ExecResult]:
        line = self._lines.next()
        while line is not None and not line.strip():
            line = self._lines.next()
        if line is None:
            raise StreamError(f"exec {self.exec_id} in {self.sandbox_id}: stream ended before its exit frame")
        try:
            f = json.loads(line)
        except ValueError as e:
            raise StreamError(f"exec {self.exec_id}: bad frame {line[:80]!r}: {e}") from e
        typ = f.get("type")
        if typ == "started":
            return Started(exec_id=f.get("exec_id", ""), pid=int(f.get("pid", 0)))
        if typ in ("stdout", "stderr"):
            try:
                return Output(stream=typ, data=decode_data(f.get("data", "")))
            except ValueError as e:
                raise StreamError(f"exec {self.exec_id}: {typ} frame: {e}") from e
        if typ == "exit":
            if not isinstance(f.get("result"), dict):
                raise StreamError(f"exec {self.exec_id}: exit frame without a result")
            self.result = ExecResult.from_json(f["result"])
            self._done = True
            return self.result
        if typ == "error":
            raise api_error(None, f.get("error"), "error frame without an error")
        raise StreamError(f"exec {self.exec_id}: unknown frame type {typ!r}")

    def __iter__(self) -> Iterator[Union[Started, Output, ExecResult]]:
        while self._pending:
            item = self._pending.pop(0)
            yield item
            if isinstance(item, ExecResult):
                return
        while not self._done:
            yield self._read()
        self._finish()

    def wait(self) -> Completed:
        """Reads the rest of the stream; returns the output and the result."""
        out, err = bytearray(), bytearray()
        for f in self:
            if isinstance(f, Output):
                (out if f.stream == "stdout" else err).extend(f.data)
        assert self.result is not None
        self._finish()
        return Completed(result=self.result, stdout=bytes(out), stderr=bytes(err))

    def signal(self, sig: str) -> None:
        """Sends sig ("TERM", "KILL", "INT", ...) to the command's process group."""
        self._client.signal(self.sandbox_id, self.exec_id, sig)

    def _send_stdin(self, source: Any) -> None:
        def pump() -> None:
            try:
                body = iter(lambda: source.read(64 << 10), b"") if hasattr(source, "read") else source
                self._client.send_stdin(self.sandbox_id, self.exec_id, body)
            except APIError as e:
                if e.code not in (errors.NOT_FOUND, errors.CONFLICT):  # the exec had ended
                    self.stdin_error = e
            except Exception as e:  # noqa: BLE001 - reported in stdin_error
                self.stdin_error = e

        self._stdin_thread = threading.Thread(target=pump, name=f"airlock-stdin-{self.exec_id}", daemon=True)
        self._stdin_thread.start()

    def _finish(self) -> None:
        if self._stdin_thread is not None:
            self._stdin_thread.join(timeout=1.0)
        self.close()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class EventStream:
    """A sandbox's server-sent events as an iterator of Event; it ends when
    the daemon ends it (after the sandbox stopped). Close it when done."""

    def __init__(self, sandbox_id: str, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self.sandbox_id = sandbox_id
        self._conn = conn
        self._lines = _Lines(f"events of {sandbox_id}", resp)

    def __iter__(self) -> Iterator[Event]:
        typ, data = "", []
        while True:
            try:
                line = self._lines.next()
            except StreamError:
                self.close()
                raise
            if line is None:
                self.close()
                return
            if not line:
                if data:
                    yield self._event(typ or "message", "\n".join(data))
                typ, data = "", []
                continue
            field, _, value = line.decode("utf-8", "replace").partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                typ = value
            elif field == "data":
                data.append(value)

    def _event(self, typ: str, data: str) -> Event:
        try:
            return Event.from_json(typ, json.loads(data))
        except (ValueError, AttributeError) as e:
            raise StreamError(f"events of {self.sandbox_id}: {typ} event: {e}") from e

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FilesStream:
    """A tar stream from the daemon, read like a binary file."""

    def __init__(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse):
        self._conn = conn
        self._resp = resp

    def read(self, n: int = -1) -> bytes:
        try:
            return self._resp.read() if n is None or n < 0 else self._resp.read(n)
        except (OSError, http.client.HTTPException) as e:
            raise StreamError(f"files: {e}") from e

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "FilesStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SandboxSession:
    """One sandbox and the client it lives on: the client's sandbox calls
    without the id. As a context manager it deletes the sandbox at the end."""

    def __init__(self, client: Client, sandbox: Sandbox):
        self.client = client
        self.info = sandbox
        self.id = sandbox.id

    def exec(self, argv: Sequence[str], **kwargs: Any) -> ExecStream:
        return self.client.exec(self.id, argv, **kwargs)

    def run(self, argv: Sequence[str], **kwargs: Any) -> Completed:
        return self.client.run_command(self.id, argv, **kwargs)

    def upload(self, src: str, directory: Optional[str] = None) -> FilesResult:
        return self.client.upload(self.id, src, directory or self.info.workdir)

    def download(self, path: str, directory: str) -> FilesResult:
        return self.client.download(self.id, path, directory)

    def events(self, **kwargs: Any) -> EventStream:
        return self.client.events(self.id, **kwargs)

    def inspect(self) -> Sandbox:
        return self.client.get_sandbox(self.id)

    def delete(self) -> Sandbox:
        return self.client.delete_sandbox(self.id)

    def __enter__(self) -> "SandboxSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except errors.NotFound:
            pass

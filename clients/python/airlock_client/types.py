"""Typed results: dataclasses for the API's JSON objects (package api in Go).
Unknown fields a newer daemon sends are ignored."""

import base64
import dataclasses
import datetime
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def _build(cls: Type[T], data: Optional[Dict[str, Any]]) -> T:
    """cls from a JSON object, keeping only cls's fields."""
    data = data or {}
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})  # type: ignore[call-arg]


def _time(s: Optional[str]) -> Optional[datetime.datetime]:
    if not s:
        return None
    # Go writes RFC 3339 with up to nine fractional digits; fromisoformat
    # (3.9) takes six and no "Z".
    s = s.replace("Z", "+00:00")
    head, sep, rest = s.partition(".")
    if sep:
        digits = ""
        while rest and rest[0].isdigit():
            digits, rest = digits + rest[0], rest[1:]
        s = head + "." + digits[:6].ljust(6, "0") + rest
    return datetime.datetime.fromisoformat(s)


@dataclass
class Limits:
    """Limits in force: bytes, cores, tasks, milliseconds."""
    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0
    tmp_size_bytes: int = 0
    exec_timeout_ms: int = 0


@dataclass
class Usage:
    """A sandbox's resource use now (or at its end)."""
    cpu_ms: float = 0.0
    memory_bytes: int = 0
    memory_peak_bytes: int = 0
    pids: int = 0
    oom_kills: int = 0


@dataclass
class SummaryRow:
    """Decisions of one kind about one destination. decision is allow, deny,
    error, or would_deny (report mode let it through; enforce would not)."""
    decision: str = ""
    kind: str = ""
    host: str = ""
    port: int = 0
    count: int = 0


@dataclass
class Egress:
    """A sandbox's audited decisions; denied_by_kind by record kind;
    would_deny the requests report mode let through that enforce mode would
    have refused (not in denied); destinations the decisions by destination,
    denials first (at most 50, destinations_omitted more)."""
    allowed: int = 0
    denied: int = 0
    would_deny: int = 0
    denied_by_kind: Dict[str, int] = field(default_factory=dict)
    destinations: List[SummaryRow] = field(default_factory=list)
    destinations_omitted: int = 0

    @classmethod
    def from_json(cls, d: Optional[Dict[str, Any]]) -> "Egress":
        e = _build(cls, d)
        e.denied_by_kind = dict(e.denied_by_kind or {})
        e.destinations = [_build(SummaryRow, r) for r in (d or {}).get("destinations") or []]
        return e


@dataclass
class SecretBinding:
    """A secret binding attached to a sandbox: its id, the secret's id, the
    destination, the mode and the value's keyed fingerprint; never a value."""
    id: str = ""
    secret: str = ""
    host: str = ""
    port: int = 0
    mode: str = ""
    fingerprint: str = ""
    version: str = ""


@dataclass
class Sandbox:
    """A sandbox as GET /v1/sandboxes/{id} describes it."""
    id: str
    state: str = ""
    owner: int = 0
    labels: Dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    workspace: str = ""
    workdir: str = ""
    mode: str = ""
    allow: List[str] = field(default_factory=list)
    secret_bindings: List[SecretBinding] = field(default_factory=list)
    created_at: Optional[datetime.datetime] = None
    age_ms: int = 0
    idle_ms: int = 0
    idle_timeout_ms: int = 0
    max_lifetime_ms: int = 0
    end_reason: str = ""
    execs_running: int = 0
    execs_total: int = 0
    usage: Usage = field(default_factory=Usage)
    egress: Egress = field(default_factory=Egress)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Sandbox":
        sb = _build(cls, d)
        sb.labels = dict(sb.labels or {})
        sb.allow = list(sb.allow or [])
        sb.secret_bindings = [_build(SecretBinding, b) for b in d.get("secret_bindings") or []]
        sb.limits = _build(Limits, d.get("limits"))
        sb.usage = _build(Usage, d.get("usage"))
        sb.egress = Egress.from_json(d.get("egress"))
        sb.created_at = _time(d.get("created_at"))
        return sb


@dataclass
class ExecResult:
    """How an exec ended. exit_status is shell-style: 124 timed out, 137
    OOM-killed, 128+n killed by signal n, 127 not found, 126 not executable
    (error then says why), else the exit code."""
    exec_id: str = ""
    exit_status: int = 0
    exit_code: int = 0
    signal: int = 0
    signal_name: str = ""
    timed_out: bool = False
    oom_killed: bool = False
    error: str = ""
    wall_ms: float = 0.0
    cpu_ms: float = 0.0
    peak_memory_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExecResult":
        return _build(cls, d)


@dataclass
class Started:
    """The first frame of an exec: its id and the command's pid in the sandbox."""
    exec_id: str
    pid: int = 0


@dataclass
class Output:
    """A piece of the command's output, as produced; stream is "stdout" or
    "stderr"."""
    stream: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class Completed:
    """An exec's whole output and result (Client.run_command)."""
    result: ExecResult
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def exit_status(self) -> int:
        return self.result.exit_status

    @property
    def timed_out(self) -> bool:
        """The exec's timeout killed the command (exit_status 124)."""
        return self.result.timed_out

    @property
    def oom_killed(self) -> bool:
        """The sandbox ran out of memory and the command was killed."""
        return self.result.oom_killed


@dataclass
class ExecInfo:
    """One entry of GET /v1/sandboxes/{id}/execs."""
    exec_id: str
    argv: List[str] = field(default_factory=list)
    pid: int = 0
    started_at: Optional[datetime.datetime] = None
    running: bool = False
    result: Optional[ExecResult] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExecInfo":
        x = _build(cls, d)
        x.started_at = _time(d.get("started_at"))
        x.result = ExecResult.from_json(d["result"]) if d.get("result") else None
        return x


@dataclass
class FilesResult:
    """What an upload wrote: entries (files, directories, links) and bytes."""
    files: int = 0
    bytes: int = 0


@dataclass
class Event:
    """One server-sent event of a sandbox: type "decision" (record is the
    audit record, as written to the log) or "sandbox" (a lifecycle change:
    sandbox holds the state). dropped counts events missed by reading too
    slowly. history marks a past record (events(history=True));
    history_omitted, on the first event, counts older ones not kept."""
    type: str
    record: Optional[Dict[str, Any]] = None
    sandbox: Optional[Sandbox] = None
    dropped: int = 0
    history: bool = False
    history_omitted: int = 0

    @classmethod
    def from_json(cls, typ: str, d: Dict[str, Any]) -> "Event":
        sb = d.get("sandbox")
        return cls(type=typ, record=d.get("record"), sandbox=Sandbox.from_json(sb) if sb else None,
                   dropped=int(d.get("dropped") or 0), history=bool(d.get("history")),
                   history_omitted=int(d.get("history_omitted") or 0))


@dataclass
class RunResult:
    """POST /v1/run: the result, whole output and egress counters."""
    id: str
    result: ExecResult
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    pids_limit_hit: bool = False
    egress: Egress = field(default_factory=Egress)
    secret_bindings: List[SecretBinding] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "RunResult":
        return cls(id=d.get("id", ""), result=ExecResult.from_json(d), stdout=d.get("stdout", ""),
                   stderr=d.get("stderr", ""), truncated=bool(d.get("truncated")),
                   pids_limit_hit=bool(d.get("pids_limit_hit")), egress=Egress.from_json(d.get("egress")),
                   secret_bindings=[_build(SecretBinding, b) for b in d.get("secret_bindings") or []])


@dataclass
class HealthPart:
    """One part of the daemon in Health: name is state_dir, audit, policy,
    policy_bundle or pool; status is "ok" or "failing"; problem says what
    is wrong when it is failing."""
    name: str = ""
    status: str = ""
    problem: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "HealthPart":
        return cls(name=d.get("name", ""), status=d.get("status", ""), problem=d.get("problem", ""))


@dataclass
class Health:
    """GET /v1/health. ok is False when any part is failing."""
    ok: bool = False
    parts: List[HealthPart] = field(default_factory=list)
    policy_rev: str = ""
    sandboxes: List[str] = field(default_factory=list)
    pool_depth: int = 0
    audit: str = ""
    # The policy bundle source's state (url, active, revision, etag, from_disk,
    # last_request, last_download, last_activation, error, error_stage,
    # error_at) when the policy comes from an OPA bundle; None otherwise.
    policy_bundle: Optional[Dict[str, Any]] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Health":
        return cls(ok=bool(d.get("ok")), parts=[HealthPart.from_json(p) for p in d.get("parts") or []],
                   policy_rev=d.get("policy_rev", ""), sandboxes=list(d.get("sandboxes") or []),
                   pool_depth=int(d.get("pool_depth", 0)), audit=d.get("audit", ""),
                   policy_bundle=d.get("policy_bundle"))

    def failing(self) -> List[HealthPart]:
        """The parts that are not ok."""
        return [p for p in self.parts if p.status != "ok"]


def decode_data(s: str) -> bytes:
    return base64.b64decode(s.encode("ascii"), validate=True) if s else b""


@dataclass
class Approval:
    """A request the policy asked a person about (GET /v1/approvals); state
    is pending, approved, denied or timed_out."""
    id: str
    sandbox: str = ""
    request_id: str = ""
    kind: str = ""
    host: str = ""
    port: int = 0
    method: str = ""
    path: str = ""
    msg: str = ""
    asked_at: Optional[datetime.datetime] = None
    expires_at: Optional[datetime.datetime] = None
    state: str = ""
    answer: str = ""
    by: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Approval":
        a = _build(cls, d)
        a.asked_at = _time(d.get("asked_at"))
        a.expires_at = _time(d.get("expires_at"))
        return a

"""The client against a real daemon (root): lifecycle, streaming exec, stdin,
concurrent execs, files and their escape attempts, events, run, errors."""

import io
import os
import tarfile
import threading
import time

import pytest

from airlock_client import (APIError, Client, ConnectionError, ExecResult, NotFound, Output, Started)


def wait_until(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def test_health_and_openapi(client):
    h = client.health()
    assert h.ok and h.policy_rev and h.audit == "ok" and h.policy_bundle is None
    assert {p.name for p in h.parts} >= {"state_dir", "audit", "policy", "pool"} and not h.failing()
    doc = client.openapi()
    assert doc["openapi"].startswith("3.")
    assert "/v1/sandboxes/{id}/exec" in doc["paths"]


def test_lifecycle(client):
    sb = client.create_sandbox(labels={"agent": "py-lifecycle"}, memory="64M", pids=64, exec_timeout=30,
                               env={"GREETING": "hi"}, idle_timeout="10m")
    try:
        assert sb.id and sb.state == "running"
        assert sb.limits.memory_bytes == 64 << 20 and sb.limits.pids == 64
        assert sb.limits.exec_timeout_ms == 30000 and sb.idle_timeout_ms == 600000
        assert sb.labels == {"agent": "py-lifecycle"} and sb.workdir == "/workspace"
        assert sb.created_at is not None and sb.created_at.tzinfo is not None
        other = client.create_sandbox(labels={"agent": "py-other"})
        try:
            ids = [s.id for s in client.list_sandboxes({"agent": "py-lifecycle"})]
            assert ids == [sb.id]
            assert {sb.id, other.id} <= {s.id for s in client.list_sandboxes()}
        finally:
            client.delete_sandbox(other.id)
        got = client.get_sandbox(sb.id)
        assert got.id == sb.id and got.usage.pids >= 1
        assert client.run_command(sb.id, ["sh", "-c", "echo $GREETING"]).stdout == b"hi\n"
    finally:
        final = client.delete_sandbox(sb.id)
    assert final.state == "stopped" and final.end_reason == "deleted"
    with pytest.raises(NotFound) as e:
        client.get_sandbox(sb.id)
    assert e.value.code == "not_found" and sb.id in e.value.message


def test_exec_frames(sandbox):
    frames = list(sandbox.exec(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert isinstance(frames[0], Started) and frames[0].exec_id and frames[0].pid > 0
    assert isinstance(frames[-1], ExecResult)
    res = frames[-1]
    assert res.exit_status == 3 and res.exit_code == 3 and not res.timed_out and res.wall_ms > 0
    out = b"".join(f.data for f in frames if isinstance(f, Output) and f.stream == "stdout")
    err = b"".join(f.data for f in frames if isinstance(f, Output) and f.stream == "stderr")
    assert (out, err) == (b"out\n", b"err\n")
    assert res.stdout_bytes == 4 and res.stderr_bytes == 4


def test_exec_streams_before_the_end(client, sandbox):
    """Output arrives while the command still runs; closing the stream
    kills the command."""
    s = sandbox.exec(["sh", "-c", "echo first; exec sleep 60"])
    it = iter(s)
    assert isinstance(next(it), Started)
    f = next(it)
    assert isinstance(f, Output) and f.data == b"first\n"
    running = [x for x in client.execs(sandbox.id) if x.exec_id == s.exec_id]
    assert running and running[0].running
    s.close()
    wait_until("the exec to be killed after the disconnect",
               lambda: not [x for x in client.execs(sandbox.id) if x.exec_id == s.exec_id and x.running])


def test_exec_stdin(sandbox):
    assert sandbox.run(["wc", "-l"], stdin=b"a\nb\nc\n").stdout.strip() == b"3"
    chunks = (f"line {i}\n".encode() for i in range(100))
    done = sandbox.run(["sh", "-c", "wc -l; cat >/dev/null"], stdin=chunks)
    assert done.stdout.strip() == b"100" and done.exit_status == 0
    assert sandbox.run(["cat"], stdin=io.BytesIO(b"x" * 300000)).stdout == b"x" * 300000


def test_exec_results(sandbox):
    missing = sandbox.run(["/no/such/command"])
    assert missing.exit_status == 127 and missing.result.error
    timed = sandbox.run(["sleep", "30"], timeout=0.5)
    assert timed.exit_status == 124 and timed.result.timed_out


def test_completed_timed_out(sandbox):
    # Completed says timed_out itself, as the Go client's result does.
    timed = sandbox.run(["sleep", "30"], timeout=0.5)
    assert timed.timed_out and not timed.oom_killed and timed.exit_status == 124
    done = sandbox.run(["true"])
    assert not done.timed_out and done.exit_status == 0


def test_exec_signal(sandbox):
    s = sandbox.exec(["sh", "-c", "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done"])
    it = iter(s)
    next(it)
    assert next(it).data == b"ready\n"
    s.signal("TERM")
    rest = list(it)
    assert b"".join(f.data for f in rest if isinstance(f, Output) and f.stream == "stdout") == b"got TERM\n"
    assert s.result.exit_status == 7


def test_exec_concurrent(sandbox):
    n = 4
    outs = [None] * n

    def one(i):
        outs[i] = sandbox.run(["sh", "-c", f"touch /tmp/s.{i}; while [ $(ls /tmp/s.* | wc -l) -lt {n} ]; "
                                           f"do sleep 0.02; done; echo {i}"], timeout=30).stdout
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outs == [f"{i}\n".encode() for i in range(n)]


def test_exec_errors(client, sandbox):
    with pytest.raises(NotFound) as e:
        client.exec("sb-does-not-exist", ["true"])
    assert e.value.code == "not_found"
    with pytest.raises(APIError) as e:
        sandbox.exec([])
    assert e.value.code == "invalid_field" and e.value.field == "argv"
    with pytest.raises(APIError) as e:
        sandbox.exec(["true"], cwd="relative/dir")
    assert e.value.code in ("invalid_field", "invalid_path") and "cwd" in (e.value.field + e.value.message)


def test_files_round_trip(tmp_path, sandbox):
    src = tmp_path / "proj"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f.txt").write_text("content")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    os.chmod(src / "run.sh", 0o755)
    os.symlink("sub/f.txt", src / "link")
    res = sandbox.upload(str(src), "/workspace")
    assert res.files >= 4 and res.bytes == len("content") + len("#!/bin/sh\necho ran\n")
    assert sandbox.run(["cat", "/workspace/proj/link"]).stdout == b"content"
    assert sandbox.run(["/workspace/proj/run.sh"]).stdout == b"ran\n"
    sandbox.run(["sh", "-c", "mkdir -p out && echo result > out/r.txt"], cwd="/workspace")
    dst = tmp_path / "back"
    sandbox.download("/workspace/out", str(dst))
    assert (dst / "out" / "r.txt").read_text() == "result\n"
    sandbox.download("/workspace/proj", str(dst))
    assert os.readlink(dst / "proj" / "link") == "sub/f.txt"
    assert os.stat(dst / "proj" / "run.sh").st_mode & 0o777 == 0o755


@pytest.mark.parametrize("path", ["/workspace/../etc", "/etc", "relative", "/workspace/a/../../etc"])
def test_files_path_escapes_refused(client, sandbox, path):
    with pytest.raises(APIError) as e:
        client.get_files(sandbox.id, path).read()
    assert e.value.code in ("invalid_path", "not_found"), e.value
    with pytest.raises(APIError) as e:
        client.put_files(sandbox.id, path, _tar({"x.txt": b"x"}))
    assert e.value.code in ("invalid_path", "not_found"), e.value


def test_files_tar_escapes_refused(client, sandbox):
    for name in ["../escape.txt", "/abs.txt"]:
        with pytest.raises(APIError) as e:
            client.put_files(sandbox.id, "/workspace", _tar({name: b"x"}))
        assert e.value.status is not None and 400 <= e.value.status < 500, e.value
    # A symlink planted in the workspace is never followed by a later entry.
    client.put_files(sandbox.id, "/workspace", _tar({}, links={"etc": "/etc"}))
    with pytest.raises(APIError):
        client.put_files(sandbox.id, "/workspace", _tar({"etc/airlock-pwned": b"x"}))
    with pytest.raises(APIError):
        client.get_files(sandbox.id, "/workspace/etc/passwd").read()
    assert not os.path.exists("/etc/airlock-pwned")


def _tar(files, links=None):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for name, target in (links or {}).items():
            ti = tarfile.TarInfo(name)
            ti.type, ti.linkname = tarfile.SYMTYPE, target
            tf.addfile(ti)
    return b.getvalue()


def test_events(client):
    sb = client.create_sandbox(labels={"agent": "py-events"})
    events = client.events(sb.id)
    it = iter(events)
    first = next(it)
    assert first.type == "sandbox" and first.sandbox.id == sb.id and first.sandbox.state == "running"
    # A lookup the policy refuses is audited as a decision of this sandbox.
    client.run_command(sb.id, ["python3", "-c",
                                "import socket\ntry: socket.getaddrinfo('evil.example', 443)\nexcept Exception: pass"],
                       timeout=30)
    got = []

    def read():
        for ev in it:
            got.append(ev)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until("a decision event", lambda: any(e.type == "decision" for e in got))
    client.delete_sandbox(sb.id)
    reader.join(30)
    assert not reader.is_alive(), "the events stream did not end after the delete"
    decisions = [e.record for e in got if e.type == "decision"]
    assert any("evil.example" in str(r.get("qname", "")) + str(r.get("host", "")) for r in decisions), decisions
    assert got[-1].type == "sandbox" and got[-1].sandbox.state == "stopped"


def test_events_history(client):
    sb = client.create_sandbox(labels={"agent": "py-history"})
    try:
        client.run_command(sb.id, ["python3", "-c",
                                    "import socket\ntry: socket.getaddrinfo('evil.example', 443)\nexcept Exception: pass"],
                           timeout=30)
        # The decision is in the sandbox's kept records: read back without
        # following, they end the stream.
        got = list(client.events(sb.id, history=True, follow=False))
        assert got[0].type == "sandbox" and got[0].sandbox.id == sb.id
        past = [e for e in got[1:] if e.type == "decision"]
        assert past and all(e.history for e in past), got
        assert any("evil.example" in str(e.record.get("qname", "")) + str(e.record.get("host", "")) for e in past), past
    finally:
        client.delete_sandbox(sb.id)


def test_run(client):
    r = client.run(["sh", "-c", "cat; echo err >&2; exit 2"], stdin="from stdin", labels={"agent": "py-run"},
                   timeout="30s")
    assert r.result.exit_status == 2 and r.stdout == "from stdin" and r.stderr == "err\n" and r.id
    with pytest.raises(NotFound):
        client.get_sandbox(r.id)


def test_update_sandbox(client):
    """PATCH through the client: the allow list and labels change for this
    sandbox alone, a refused change names its field and changes nothing."""
    sb = client.create_sandbox(labels={"agent": "py-update", "stage": "dev"}, allow=["a.example.com"])
    other = client.create_sandbox(labels={"agent": "py-update-other"}, allow=["a.example.com"])
    try:
        got = client.update_sandbox(sb.id, allow_add=["b.example.com"], allow_remove=["a.example.com"],
                                    labels={"stage": "review", "agent": None})
        assert got.allow == ["b.example.com"] and got.labels == {"stage": "review"}
        assert client.get_sandbox(sb.id).allow == ["b.example.com"]
        assert client.get_sandbox(other.id).allow == ["a.example.com"]
        assert client.update_sandbox(sb.id, allow=[]).allow == []
        with pytest.raises(APIError) as e:
            client.update_sandbox(sb.id, allow_remove=["nope.example.com"])
        assert e.value.code == "invalid_field" and e.value.field == "allow_remove[0]"
        with pytest.raises(APIError) as e:
            client.update_sandbox(sb.id)
        assert e.value.code == "invalid_field" and "nothing to change" in e.value.message
    finally:
        client.delete_sandbox(other.id)
        client.delete_sandbox(sb.id)


def test_approvals(client, sandbox):
    """A request the policy asks about is held; the client lists it,
    follows it and answers it (deny: the sandbox gets 403 approval_denied
    and nothing is dialed); a bad answer names the field."""
    script = ("import urllib.request, urllib.error\n"
              "try:\n"
              "    urllib.request.urlopen('http://ask.airlock.test/held', timeout=60)\n"
              "except urllib.error.HTTPError as e:\n"
              "    print(e.code, e.headers.get('X-Airlock-Reason'))\n")
    result = {}
    t = threading.Thread(target=lambda: result.update(c=client.run_command(sandbox.id, ["python3", "-c", script])))
    t.start()
    with client.follow_approvals() as stream:
        it = iter(stream)
        a = next(it)
        assert a.state == "pending" and a.sandbox == sandbox.id and a.host == "ask.airlock.test"
        assert a.method == "GET" and a.path == "/held" and a.msg == "a test host" and a.expires_at is not None
        assert [p.id for p in client.approvals()] == [a.id]
        with pytest.raises(APIError) as e:
            client.answer_approval(a.id, "maybe")
        assert e.value.code == "invalid_field" and e.value.field == "answer"
        got = client.answer_approval(a.id, "deny")
        assert got.state == "denied" and got.answer == "deny" and got.by == "root"
        b = next(it)
        assert b.id == a.id and b.state == "denied"
    t.join(90)
    assert result["c"].stdout.decode().split() == ["403", "approval_denied"]
    assert client.approvals() == []


def test_bad_requests_name_the_field(client):
    cases = [({"mode": "audit"}, "mode"), ({"memory": "1K"}, "limits.memory"), ({"env": {"": "x"}}, "env")]
    for kwargs, field in cases:
        with pytest.raises(APIError) as e:
            client.create_sandbox(**kwargs)
        assert e.value.code in ("invalid_field", "bad_request") and field in (e.value.field + e.value.message), \
            (kwargs, e.value)


def test_daemon_not_running(tmp_path):
    sock = str(tmp_path / "none.sock")
    with pytest.raises(ConnectionError) as e:
        Client(sock).health()
    assert sock in str(e.value) and "airlock serve" in str(e.value)


def test_attach_with_pod_check_detach(client):
    """A namespace the test made, attached with a pod identity: the check
    reports it in force with the pod, then detach; both answer not_found
    afterwards (what airlock-cni's DEL and CHECK rely on)."""
    import subprocess
    import uuid

    name = "alk-py-" + uuid.uuid4().hex[:8]
    sid = "alk-py-" + uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        pod = {"namespace": "ci", "name": "agent-0", "uid": "u-1"}
        for inbound, ports, field in (("open", None, "inbound.mode"), ("capture", [80], "inbound.ports"),
                                      ("accept", [80, 80], "inbound.ports[1]"), ("accept", [0], "inbound.ports[0]")):
            with pytest.raises(APIError) as e:
                client.attach(sid, f"/run/netns/{name}", pod=pod, inbound=inbound, inbound_ports=ports)
            assert e.value.code == "invalid_field" and e.value.field == field, (inbound, ports, e.value)
        client.attach(sid, f"/run/netns/{name}", labels={"team": "ml"}, pod=pod, inbound="accept", inbound_ports=[8443, 8080])
        st = client.check_attach(sid)
        assert st["in_force"] is True and st["pod"] == pod and st["id"] == sid
        assert st["inbound"] == {"mode": "accept", "ports": [8080, 8443]} and st["inbound_accepted"] == 0, st
        client.detach(sid)
        with pytest.raises(NotFound):
            client.check_attach(sid)
        with pytest.raises(NotFound):
            client.detach(sid)
    finally:
        try:
            client.detach(sid)
        except NotFound:
            pass
        subprocess.run(["ip", "netns", "delete", name], check=False)


def test_health_reports_run_dir_gone(daemon, client):
    """The daemon's run directory moved away from outside: health fails
    (Unhealthy, naming state_dir) until it is put back."""
    from airlock_client import Unhealthy
    run_dir = os.path.join(daemon.dir, "run")
    os.rename(run_dir, run_dir + ".moved")
    try:
        with pytest.raises(Unhealthy) as e:
            client.health()
        assert [p.name for p in e.value.health.failing()] == ["state_dir"], e.value
    finally:
        os.rename(run_dir + ".moved", run_dir)
    assert client.health().ok


def test_secret_bindings(client):
    from conftest import SECRET_VALUE
    sb = client.create_sandbox(labels={"agent": "py-bind"}, secret_bindings=["py-api"])
    try:
        assert [b.id for b in sb.secret_bindings] == ["py-api"]
        b = client.get_sandbox(sb.id).secret_bindings[0]
        assert (b.secret, b.host, b.port, b.mode) == ("py-token", "api.airlock.test", 443, "placeholder")
        assert b.fingerprint.startswith("hmac-sha256:") and b.version
        out = client.run_command(sb.id, ["sh", "-c", "echo $PY_API_TOKEN"]).stdout.decode()
        assert out.startswith("airlock-ph-") and SECRET_VALUE not in out
        assert SECRET_VALUE not in repr(client.get_sandbox(sb.id))
    finally:
        client.delete_sandbox(sb.id)
    with pytest.raises(APIError) as e:
        client.create_sandbox(secret_bindings=["py-token"])  # a secret id, not a binding id
    assert e.value.code == "invalid_field" and "py-token" in e.value.message


def test_run_secret_bindings(client):
    """POST /v1/run attaches bindings as create does: the command sees the
    placeholder, the result names the binding, never the value."""
    from conftest import SECRET_VALUE
    res = client.run(["sh", "-c", "echo $PY_API_TOKEN"], labels={"agent": "py-bind"}, secret_bindings=["py-api"])
    assert res.stdout.startswith("airlock-ph-") and SECRET_VALUE not in res.stdout, res
    assert [b.id for b in res.secret_bindings] == ["py-api"] and res.secret_bindings[0].fingerprint.startswith("hmac-sha256:")
    assert SECRET_VALUE not in repr(res)
    with pytest.raises(APIError) as e:
        client.run(["true"], secret_bindings=["py-token"])
    assert e.value.code == "invalid_field" and "py-token" in e.value.message

"""What needs no daemon: safe extraction of downloaded tar streams, packing
uploads, error decoding."""

import io
import os
import stat
import tarfile

import pytest

from airlock_client import APIError, Egress, Event, NotFound, UnsafeTarError, extract_tar, write_tar
from airlock_client.errors import api_error


def tar_of(entries):
    """entries: (name, kind, payload, mode); kind file, dir, sym, fifo, hard."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as tf:
        for name, kind, payload, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.mode = mode
            if kind == "file":
                ti.size = len(payload)
                tf.addfile(ti, io.BytesIO(payload))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "fifo": tarfile.FIFOTYPE,
                       "hard": tarfile.LNKTYPE}[kind]
            if kind in ("sym", "hard"):
                ti.linkname = payload
            tf.addfile(ti)
    b.seek(0)
    return b


@pytest.mark.parametrize("name,entries", [
    ("dotdot", [("../outside.txt", "file", b"x", 0o644)]),
    ("dotdot inside", [("a/../../outside.txt", "file", b"x", 0o644)]),
    ("absolute", [("/tmp/alk-py-outside.txt", "file", b"x", 0o644)]),
    ("through a symlink in the stream", [("link", "sym", "..", 0o777), ("link/outside.txt", "file", b"x", 0o644)]),
    ("fifo", [("fifo", "fifo", None, 0o644)]),
    ("hard link", [("hard", "hard", "/etc/passwd", 0o644)]),
])
def test_extract_refuses(tmp_path, name, entries):
    dst = tmp_path / "dst"
    with pytest.raises(UnsafeTarError):
        extract_tar(tar_of(entries), str(dst))
    assert not (tmp_path / "outside.txt").exists()
    assert not os.path.exists("/tmp/alk-py-outside.txt")


def test_extract_never_follows_an_existing_symlink(tmp_path):
    dst, outside = tmp_path / "dst", tmp_path / "outside"
    dst.mkdir()
    outside.mkdir()
    os.symlink(str(outside), dst / "d")
    os.symlink(str(outside / "f"), dst / "f")
    with pytest.raises(UnsafeTarError):
        extract_tar(tar_of([("d/x", "file", b"x", 0o644)]), str(dst))
    # A file entry replaces a symlink of its name; it never writes through it.
    extract_tar(tar_of([("f", "file", b"new", 0o644)]), str(dst))
    assert os.listdir(outside) == []
    assert (dst / "f").read_bytes() == b"new" and not os.path.islink(dst / "f")


def test_extract_drops_setuid_and_keeps_links(tmp_path):
    dst = tmp_path / "dst"
    res = extract_tar(tar_of([("d", "dir", None, 0o755), ("d/run", "file", b"#!", 0o6755),
                              ("d/link", "sym", "/etc/passwd", 0o777)]), str(dst))
    assert res.files == 3 and res.bytes == 2
    assert stat.S_IMODE(os.stat(dst / "d" / "run").st_mode) == 0o755
    assert os.readlink(dst / "d" / "link") == "/etc/passwd"


def test_write_tar(tmp_path):
    src = tmp_path / "proj"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_bytes(b"data")
    os.symlink("/etc/passwd", src / "link")
    with write_tar(str(src)) as f:
        with tarfile.open(fileobj=f) as tf:
            got = {m.name: m for m in tf.getmembers()}
    assert set(got) == {"proj", "proj/sub", "proj/sub/f", "proj/link"}
    assert got["proj/link"].issym() and got["proj/link"].linkname == "/etc/passwd"
    os.mkfifo(src / "fifo")
    with pytest.raises(UnsafeTarError, match="fifo"):
        write_tar(str(src))
    with pytest.raises(FileNotFoundError):
        write_tar(str(tmp_path / "missing"))


def test_api_error_decoding():
    e = api_error(400, {"code": "invalid_field", "message": "mode: bad", "field": "mode"})
    assert isinstance(e, APIError) and (e.code, e.field, e.status) == ("invalid_field", "mode", 400)
    assert isinstance(api_error(404, {"code": "not_found", "message": "no sandbox"}), NotFound)
    legacy = api_error(503, {"error": "shutting down"})
    assert (legacy.code, legacy.message) == ("unavailable", "shutting down")
    assert api_error(502, None, "bad gateway").code == "internal"


def test_health_503_is_unhealthy_with_its_parts(tmp_path):
    """A daemon with a failing part answers /v1/health with 503 and its
    parts: health() raises Unhealthy carrying them (a caller that only
    catches errors fails closed), health(check=False) returns them."""
    import json
    import socket
    import threading

    from airlock_client import Client, Unhealthy

    body = json.dumps({"ok": False, "policy_rev": "r", "sandboxes": [], "pool_depth": 0, "audit": "ok", "parts": [
        {"name": "state_dir", "status": "failing", "problem": "run dir /run/airlock/serve is gone"},
        {"name": "audit", "status": "ok"}]}).encode()
    sock_path = str(tmp_path / "d.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(4)

    def serve():
        for _ in range(2):
            conn, _ = srv.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                             b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with pytest.raises(Unhealthy) as e:
            Client(sock_path, timeout=5).health()
        assert e.value.code == "unavailable" and "state_dir: run dir /run/airlock/serve is gone" in str(e.value)
        assert not e.value.health.ok and [p.name for p in e.value.health.failing()] == ["state_dir"]
        h = Client(sock_path, timeout=5).health(check=False)
        assert not h.ok and [(p.name, p.status) for p in h.parts] == [("state_dir", "failing"), ("audit", "ok")]
    finally:
        t.join(5)
        srv.close()


def test_egress_destinations():
    e = Egress.from_json({"allowed": 5, "denied": 3, "would_deny": 2, "denied_by_kind": {"http": 3},
                          "destinations": [{"decision": "would_deny", "kind": "connect", "host": "reported.example",
                                            "port": 443, "count": 2, "newer_field": 1}],
                          "destinations_omitted": 4})
    assert (e.allowed, e.denied, e.would_deny, e.destinations_omitted) == (5, 3, 2, 4)
    row = e.destinations[0]
    assert (row.decision, row.kind, row.host, row.port, row.count) == ("would_deny", "connect", "reported.example", 443, 2)
    assert Egress.from_json(None).destinations == []


def test_event_history():
    e = Event.from_json("decision", {"record": {"host": "evil.example"}, "history": True})
    assert e.history and e.record == {"host": "evil.example"} and e.history_omitted == 0
    first = Event.from_json("sandbox", {"sandbox": {"id": "sb-1"}, "history_omitted": 7})
    assert first.history_omitted == 7 and not first.history and first.sandbox.id == "sb-1"


def test_default_socket_rule(tmp_path, monkeypatch):
    """$AIRLOCK_SOCKET, else (not root) the user's own daemon's socket when it
    exists, else the system daemon's: the Go client's rule."""
    import socket as pysocket

    import airlock_client as a
    monkeypatch.delenv("AIRLOCK_SOCKET", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    mine = tmp_path / "airlock" / "airlock.sock"
    assert a.user_socket() == str(mine)
    assert a.default_socket() == a.DEFAULT_SOCKET  # no user daemon
    mine.parent.mkdir()
    s = pysocket.socket(pysocket.AF_UNIX)
    try:
        s.bind(str(mine))
        assert a.default_socket() == str(mine)
        assert a.Client().socket == str(mine)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        assert a.default_socket() == a.DEFAULT_SOCKET  # root never takes a user's socket
        monkeypatch.setenv("AIRLOCK_SOCKET", "/x.sock")
        assert a.default_socket() == "/x.sock"
    finally:
        s.close()
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert a.user_socket(1000) == "/run/user/1000/airlock/airlock.sock"

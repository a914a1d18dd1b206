"""A real daemon for the tests: `$AIRLOCK_BIN serve` as root with a config,
socket, audit log and run directory of its own in a temporary directory,
stopped (SIGTERM, then SIGKILL) when the session ends. Without root or
$AIRLOCK_BIN the daemon tests skip; with AIRLOCK_REQUIRE_ROOT_TESTS=1 they
fail instead."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from airlock_client import AirlockError, Client  # noqa: E402

START_TIMEOUT = 60.0
# The value behind the py-api binding (test_secret_bindings).
SECRET_VALUE = "alk-py-real-secret-3d9f0a7c51"
STOP_TIMEOUT = 60.0


def _unavailable(why: str) -> None:
    if os.environ.get("AIRLOCK_REQUIRE_ROOT_TESTS") == "1":
        pytest.fail(f"{why} (AIRLOCK_REQUIRE_ROOT_TESTS=1)")
    pytest.skip(why)


class Daemon:
    def __init__(self, bin_path: str):
        # A short path: a unix socket's name has at most 107 bytes.
        self.dir = tempfile.mkdtemp(prefix="alk-py-")
        self.socket = os.path.join(self.dir, "airlock.sock")
        self.audit = os.path.join(self.dir, "audit.jsonl")
        self.log_path = os.path.join(self.dir, "serve.log")
        self.config = os.path.join(self.dir, "airlock.yaml")
        # One rule beyond the defaults: requests to ask.airlock.test are
        # held for a person's answer (test_approvals).
        policy_dir = os.path.join(self.dir, "policy")
        os.mkdir(policy_dir)
        with open(os.path.join(policy_dir, "ask.rego"), "w") as f:
            f.write('package airlock.egress\n\n'
                    'ask contains {"id": "test_ask", "msg": "a test host"} if input.destination.host == "ask.airlock.test"\n')
        # One attachable secret binding, root only (test_secret_bindings);
        # the value is in the daemon's environment and must never come back.
        secrets_file = os.path.join(self.dir, "secrets.yaml")
        with open(os.open(secrets_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write("secrets:\n  - id: py-token\n    env: ALK_PY_SECRET\n"
                    "bindings:\n  - id: py-api\n    secret: py-token\n    host: api.airlock.test\n"
                    "    template: \"Bearer {{value}}\"\n    mode: placeholder\n    placeholder_env: PY_API_TOKEN\n"
                    "    attach: {uids: []}\n")
        with open(self.config, "w") as f:
            f.write(f"""secrets:
  file: {secrets_file}
policy:
  dir: {policy_dir}
approval:
  timeout: 30s
api:
  socket: {self.socket}
  group: ""
audit:
  file: {self.audit}
metrics:
  listen: 127.0.0.1:0
sandbox:
  pool_size: 1
""")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--config", self.config, "--run-dir", os.path.join(self.dir, "run"),
             "--drain-timeout", "5s"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(os.environ, ALK_PY_SECRET=SECRET_VALUE))

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        c = Client(self.socket, timeout=5)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"airlock serve exited {self.proc.returncode}:\n{self.log()}")
            try:
                c.health()
                return
            except AirlockError:
                time.sleep(0.1)
        raise RuntimeError(f"airlock serve did not answer on {self.socket} in {START_TIMEOUT}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    if os.geteuid() != 0:
        _unavailable("the daemon tests need root (airlock serve)")
    bin_path = os.environ.get("AIRLOCK_BIN")
    if not bin_path or not os.access(bin_path, os.X_OK):
        _unavailable("AIRLOCK_BIN must name an airlock binary (make build; AIRLOCK_BIN=$PWD/bin/airlock)")
    d = Daemon(bin_path)
    try:
        d.wait_ready()
        yield d
    finally:
        d.stop()


@pytest.fixture
def client(daemon):
    return Client(daemon.socket, timeout=60)


@pytest.fixture
def sandbox(client):
    """A fresh sandbox, deleted after the test."""
    with client.sandbox(labels={"test": "pytest"}) as sb:
        yield sb

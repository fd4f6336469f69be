"""Starts, waits for and stops `saltblob serve` on a free loopback port; reads its peak resident memory.

Used by the S3 client tests (conftest.py) and by scripts/s3-bench.py. Every wait is bounded; a server that does
not answer in time, or dies, raises ServerError with the tail of its log.
"""

import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


class ServerError(RuntimeError):
    """The server did not start, answer or stop in time."""


def free_port():
    """A TCP port that was free on 127.0.0.1 a moment ago (the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sibling_store(store_url, suffix):
    """A fresh store of the same kind as STORE_URL: the embedded store's directory with "-SUFFIX" appended, or the
    CQL keyspace with "_SUFFIX" appended (same hosts and options)."""
    scheme, sep, rest = store_url.partition("://")
    if not sep or scheme not in ("rocksdb", "cql"):
        raise ValueError(f"cannot derive a second store from {store_url!r}: give a rocksdb:// or cql:// URL")
    location, qmark, query = rest.partition("?")
    joiner = "-" if scheme == "rocksdb" else "_"
    return f"{scheme}://{location.rstrip('/')}{joiner}{suffix}{qmark}{query}"


def new_credentials():
    """A fresh access key id and secret, in the shape AWS uses (20 and 40 characters)."""
    return "SB" + secrets.token_hex(9).upper(), secrets.token_urlsafe(30)


class Server:
    """One `saltblob serve` process on STORE_URL, with fresh credentials, logging to LOG_PATH.

    Its pid is also written to PID_DIR (if given) so that the calling script can stop it should the tests be
    killed before they stop it themselves.
    """

    def __init__(self, binary, store_url, log_path, pid_dir=None, extra_args=()):
        self.binary = str(binary)
        self.store_url = store_url
        self.log_path = Path(log_path)
        self.pid_dir = Path(pid_dir) if pid_dir else None
        self.extra_args = list(extra_args)
        self.access_key, self.secret_key = new_credentials()
        self.process = None
        self.endpoint = None

    def start(self):
        """Starts the server and returns once it answers HTTP (any status), within START_TIMEOUT_S."""
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        env = dict(os.environ)
        env["SALTBLOB_ACCESS_KEY_ID"] = self.access_key
        env["SALTBLOB_SECRET_ACCESS_KEY"] = self.secret_key
        env["NO_COLOR"] = "1"  # a plain log file
        command = [self.binary, "serve", "--listen", f"127.0.0.1:{port}", "--store", self.store_url]
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} {' '.join(command + self.extra_args)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                command + self.extra_args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
            )
        if self.pid_dir:
            (self.pid_dir / f"{self.process.pid}.pid").write_text(str(self.process.pid))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None:
                raise ServerError(f"saltblob serve exited with {self.process.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"saltblob serve did not answer within {START_TIMEOUT_S} s:\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def _answers(self):
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=2).close()
        except urllib.error.HTTPError:
            return True  # an S3 error (403 for an unsigned request) is an answer
        except OSError:
            return False
        return True

    def peak_rss_kib(self):
        """The process's peak resident memory so far (VmHWM of /proc/PID/status), in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise ServerError(f"no VmHWM in /proc/{self.process.pid}/status")

    def stop(self):
        """SIGTERM (graceful shutdown), SIGKILL after STOP_TIMEOUT_S; returns the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.pid_dir:
            (self.pid_dir / f"{self.process.pid}.pid").unlink(missing_ok=True)
        return self.process.returncode

    def log_tail(self, lines=40):
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

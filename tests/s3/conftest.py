"""Fixtures of the S3 client tests: one `saltblob serve` for the whole session, boto3 clients, the `aws` CLI, and a
fresh bucket per test. scripts/s3-clients.sh sets the environment:

  SALTBLOB_BIN         the saltblob binary
  S3_TEST_STORE        the store URL the session's server serves (rocksdb:///… or cql://…/keyspace)
  S3_TEST_WORK         a scratch directory: server logs, pid files (the script stops what they name), results
  S3_BIG_FILE_MIB      size of the `aws s3 cp` round trip file (default 1024)
  S3_RSS_LIMIT_MIB     bound on the server's peak resident memory after that upload (default 256)
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from s3util import REGION, empty_and_delete, ignore_aws_configuration, make_client, new_bucket_name, required_env
from saltblob_server import Server

ignore_aws_configuration()


@pytest.fixture(scope="session")
def work_dir():
    path = Path(required_env("S3_TEST_WORK"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def saltblob_bin():
    return required_env("SALTBLOB_BIN")


@pytest.fixture(scope="session")
def server(work_dir, saltblob_bin):
    """The session's server; on teardown its peak RSS goes to S3_TEST_WORK/peak-rss-kib for the script to print."""
    srv = Server(saltblob_bin, required_env("S3_TEST_STORE"), work_dir / "server.log", pid_dir=work_dir).start()
    yield srv
    (work_dir / "peak-rss-kib").write_text(str(srv.peak_rss_kib()))
    srv.stop()


@pytest.fixture(scope="session")
def s3(server):
    return make_client(server.endpoint, server.access_key, server.secret_key)


@pytest.fixture
def bucket(s3):
    """A fresh, empty bucket, emptied and deleted after the test."""
    name = new_bucket_name()
    s3.create_bucket(Bucket=name)
    yield name
    empty_and_delete(s3, name)


class AwsCli:
    """Runs awscli (v1, from the virtual environment) against the server, with no ~/.aws configuration read."""

    def __init__(self, server, config_dir):
        config = config_dir / "config"
        # No retries, as for the boto3 clients: an error shows as it is, at once.
        config.write_text(
            f"[default]\nregion = {REGION}\nretry_mode = standard\nmax_attempts = 1\ns3 =\n    addressing_style = path\n"
        )
        credentials = config_dir / "credentials"
        credentials.write_text("[default]\n")
        self.endpoint = server.endpoint
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
            "AWS_CONFIG_FILE": str(config),
            "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
            "AWS_ACCESS_KEY_ID": server.access_key,
            "AWS_SECRET_ACCESS_KEY": server.secret_key,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_PAGER": "",
        }
        self.executable = str(Path(sys.executable).parent / "aws")

    def run(self, *args, timeout=900):
        """Runs `aws --endpoint-url URL ARGS…`; returns the finished process."""
        return subprocess.run(
            [self.executable, "--endpoint-url", self.endpoint, *args],
            env=self.env,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def __call__(self, *args, timeout=900):
        """Runs `aws --endpoint-url URL ARGS…`; returns its output; fails the test with its stderr on error."""
        done = self.run(*args, timeout=timeout)
        if done.returncode != 0:
            pytest.fail(f"aws {' '.join(args)} exited with {done.returncode}:\n{done.stderr[-3000:]}")
        return done.stdout

    def fails(self, *args, timeout=900):
        """Runs a command that must fail; returns its stderr; fails the test if it succeeds."""
        done = self.run(*args, timeout=timeout)
        if done.returncode == 0:
            pytest.fail(f"aws {' '.join(args)} succeeded:\n{done.stdout[-3000:]}")
        return done.stderr


@pytest.fixture(scope="session")
def aws(server, tmp_path_factory):
    return AwsCli(server, tmp_path_factory.mktemp("aws-config"))


@pytest.fixture(scope="session")
def big_file_mib():
    return int(os.environ.get("S3_BIG_FILE_MIB", "1024"))


@pytest.fixture(scope="session")
def rss_limit_mib():
    return int(os.environ.get("S3_RSS_LIMIT_MIB", "256"))

"""The credentials file of `saltblob serve --credentials`: refused when group or others may read it, read again on
SIGHUP (a removed key, and the URLs it presigned, stop working at once; a broken file keeps the keys in use).
The server's store is irrelevant here: each test runs its own server on a fresh embedded store, once (skipped on
the Cassandra run)."""

import os
import signal
import subprocess
import time

import pytest
from s3util import make_client, s3_error
from saltblob_server import Server, new_credentials


@pytest.fixture
def embedded_only():
    if os.environ.get("S3_TEST_STORE", "").startswith("cql"):
        pytest.skip("store-independent: runs on the embedded store only")


def write_keys(path, *keys, mode=0o600):
    path.write_text("".join(f"{key} {secret}\n" for key, secret in keys))
    path.chmod(mode)


def test_a_credentials_file_readable_by_others_is_refused(embedded_only, saltblob_bin, tmp_path):
    creds = tmp_path / "keys"
    write_keys(creds, new_credentials(), mode=0o644)
    done = subprocess.run(
        [saltblob_bin, "serve", "--listen", "127.0.0.1:0", "--store", f"rocksdb://{tmp_path}/store",
         "--credentials", str(creds)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "chmod 600" in done.stderr and "accessible by group or others" in done.stderr, done.stderr


def test_sighup_reloads_the_credentials_file(embedded_only, saltblob_bin, tmp_path):
    creds = tmp_path / "keys"
    old = new_credentials()
    write_keys(creds, old)
    srv = Server(saltblob_bin, f"rocksdb://{tmp_path}/store", tmp_path / "server.log",
                 extra_args=["--credentials", str(creds)])
    srv.access_key, srv.secret_key = old
    srv.start()
    try:
        s3_old = make_client(srv.endpoint, *old)
        s3_old.create_bucket(Bucket="reload")
        url = s3_old.generate_presigned_url("list_objects_v2", Params={"Bucket": "reload"}, ExpiresIn=300)

        new = new_credentials()
        write_keys(creds, new)
        srv.process.send_signal(signal.SIGHUP)
        s3_new = make_client(srv.endpoint, *new)
        deadline = time.monotonic() + 10
        while True:
            try:
                s3_new.head_bucket(Bucket="reload")
                break
            except Exception:  # noqa: BLE001 - until the reload is done
                if time.monotonic() > deadline:
                    pytest.fail(f"the new key is not accepted after SIGHUP:\n{srv.log_tail()}")
                time.sleep(0.1)
        assert s3_error(s3_old.head_bucket, Bucket="reload")[1] == 403
        assert s3_error(s3_old.list_objects_v2, Bucket="reload") == ("InvalidAccessKeyId", 403)
        done = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", url],
                              capture_output=True, text=True, check=True, timeout=60)
        assert done.stdout == "403", "the removed key's presigned URL still works"

        # A file that became readable by others is not taken: the keys in use stay.
        write_keys(creds, old, mode=0o644)
        srv.process.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        s3_new.head_bucket(Bucket="reload")
        assert "keeping the 1 key(s) in use" in srv.log_tail()
    finally:
        srv.stop()

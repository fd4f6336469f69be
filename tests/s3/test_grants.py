"""Access keys kept in the store and their grants per bucket (docs/s3.md, "Access keys and grants"), through boto3
and awscli: keys made, granted, refused and deleted with `saltblob key` while the server runs (on the embedded
store through its admin socket, on Cassandra on the store itself), each change seen by the server within a second.

The server runs on a store of its own (the session store's kind), sealed with a local keyring: a key's secret is
kept sealed under the store's key."""

import json
import os
import subprocess
import sys
import time

import pytest
from s3util import empty_and_delete, make_client, new_bucket_name, s3_error
from saltblob_server import Server, sibling_store
from test_encryption import make_keyring

# How long a server keeps a key record it read (saltblob_server::GRANTS_CACHED_FOR), and a margin.
CACHED_S = 1.2


@pytest.fixture(scope="module")
def granted(saltblob_bin, work_dir, tmp_path_factory):
    keyring = make_keyring(saltblob_bin, tmp_path_factory.mktemp("grants-keyring") / "ring")
    store = sibling_store(os.environ["S3_TEST_STORE"], f"grants{os.getpid()}")
    joiner = "&" if "?" in store else "?"
    srv = Server(
        saltblob_bin,
        f"{store}{joiner}encryption=local&keyring={keyring}&encryption_key=s3key",
        work_dir / "server-grants.log",
        pid_dir=work_dir,
    ).start()
    yield srv
    srv.stop()


def key(saltblob_bin, server, *args):
    """Runs `saltblob key ARGS --json` on the server's store; its JSON outcome."""
    done = subprocess.run(
        [saltblob_bin, "--quiet", "--store", server.store_url, "key", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"saltblob key {' '.join(args)} failed:\n{done.stderr}"
    return json.loads(done.stdout)


def test_a_stored_key_does_only_what_its_grants_allow(saltblob_bin, granted):
    root = make_client(granted.endpoint, granted.access_key, granted.secret_key)
    victim = new_bucket_name()
    root.create_bucket(Bucket=victim)
    root.put_object(Bucket=victim, Key="secret.txt", Body=b"the secret")
    made = key(saltblob_bin, granted, "create", "app", "--create-buckets")
    app_id, secret = made["id"], made["secret"]
    assert app_id.startswith("SBK") and len(secret) == 40
    listed = key(saltblob_bin, granted, "list")
    assert [k["id"] for k in listed["keys"]] == [app_id]
    assert secret not in json.dumps(listed), "a listing shows no secret"
    app = make_client(granted.endpoint, app_id, secret)
    own = new_bucket_name()
    try:
        # No grant on the victim: every call refused, nothing changed.
        assert app.list_buckets()["Buckets"] == []
        assert s3_error(app.get_object, Bucket=victim, Key="secret.txt") == ("AccessDenied", 403)
        assert s3_error(app.put_object, Bucket=victim, Key="planted", Body=b"x") == ("AccessDenied", 403)
        assert s3_error(app.delete_object, Bucket=victim, Key="secret.txt") == ("AccessDenied", 403)
        assert s3_error(app.list_objects_v2, Bucket=victim) == ("AccessDenied", 403)
        assert s3_error(app.delete_bucket, Bucket=victim) == ("AccessDenied", 403)
        # Its own bucket: it may create buckets, and owns what it creates.
        app.create_bucket(Bucket=own)
        app.put_object(Bucket=own, Key="mine", Body=b"mine")
        assert app.get_object(Bucket=own, Key="mine")["Body"].read() == b"mine"
        assert [b["Name"] for b in app.list_buckets()["Buckets"]] == [own]
        copy = {"Bucket": victim, "Key": "secret.txt"}
        assert s3_error(app.copy_object, Bucket=own, Key="stolen", CopySource=copy) == ("AccessDenied", 403)
        # Read on the victim: reads, lists and copies out; writes stay refused.
        key(saltblob_bin, granted, "allow", app_id, victim, "read")
        time.sleep(CACHED_S)
        assert app.get_object(Bucket=victim, Key="secret.txt")["Body"].read() == b"the secret"
        assert [o["Key"] for o in app.list_objects_v2(Bucket=victim)["Contents"]] == ["secret.txt"]
        app.copy_object(Bucket=own, Key="copied", CopySource=copy)
        assert s3_error(app.put_object, Bucket=victim, Key="planted", Body=b"x") == ("AccessDenied", 403)
        assert sorted(b["Name"] for b in app.list_buckets()["Buckets"]) == sorted([own, victim])
        # Taken away: refused again.
        key(saltblob_bin, granted, "deny", app_id, victim)
        time.sleep(CACHED_S)
        assert s3_error(app.get_object, Bucket=victim, Key="secret.txt") == ("AccessDenied", 403)
        assert [o["Key"] for o in root.list_objects_v2(Bucket=victim)["Contents"]] == ["secret.txt"]
    finally:
        empty_and_delete(root, own)
        empty_and_delete(root, victim)
    # Deleted: its signatures no longer check; the root key is untouched.
    key(saltblob_bin, granted, "delete", app_id)
    time.sleep(CACHED_S)
    assert s3_error(app.list_buckets) == ("InvalidAccessKeyId", 403)
    assert key(saltblob_bin, granted, "list") == {"keys": []}
    root.list_buckets()


def test_awscli_works_with_a_stored_key(saltblob_bin, granted, tmp_path):
    root = make_client(granted.endpoint, granted.access_key, granted.secret_key)
    bucket = new_bucket_name()
    root.create_bucket(Bucket=bucket)
    made = key(saltblob_bin, granted, "create", "cli")
    key(saltblob_bin, granted, "allow", made["id"], bucket, "write")
    config = tmp_path / "config"
    config.write_text("[default]\nregion = us-east-1\nmax_attempts = 1\ns3 =\n    addressing_style = path\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "AWS_ACCESS_KEY_ID": made["id"],
        "AWS_SECRET_ACCESS_KEY": made["secret"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_PAGER": "",
    }
    aws = [os.path.join(os.path.dirname(sys.executable), "aws"), "--endpoint-url", granted.endpoint]
    src = tmp_path / "f.txt"
    src.write_bytes(b"through awscli")
    try:
        done = subprocess.run(
            [*aws, "s3", "cp", str(src), f"s3://{bucket}/f.txt"], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert root.get_object(Bucket=bucket, Key="f.txt")["Body"].read() == b"through awscli"
        # `owner` is needed to delete the bucket: awscli reports the refusal.
        done = subprocess.run([*aws, "s3", "rb", f"s3://{bucket}"], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "AccessDenied" in done.stderr, done.stderr
    finally:
        empty_and_delete(root, bucket)
        key(saltblob_bin, granted, "delete", made["id"])

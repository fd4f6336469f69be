"""Helpers of the S3 client tests: boto3 clients, bucket names, test files made quickly and hashed in bounded memory, S3 ETags computed locally,
and the S3 error a boto3 call raised."""

import hashlib
import os
import random
import struct
import subprocess
import uuid

import boto3
import botocore.config
import botocore.exceptions
import pytest

MIB = 1024 * 1024
BLOCK = MIB
REGION = "us-east-1"


def required_env(name, script="scripts/s3-clients.sh"):
    """Environment variable NAME, or the end of the session saying which script sets it."""
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests with {script}", returncode=2)
    return value


def write_pattern_file(path, size, seed):
    """Writes SIZE bytes to PATH, returns their sha256 (hex). Each 1 MiB block is one seeded random block with the
    block's index in its first 8 bytes, so every block differs (a misplaced part changes the digest) and 1 GiB
    takes seconds, not minutes."""
    base = random.Random(seed).randbytes(BLOCK)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for index in range((size + BLOCK - 1) // BLOCK):
            block = (struct.pack("<Q", index) + base[8:])[: min(BLOCK, size - index * BLOCK)]
            f.write(block)
            digest.update(block)
    return digest.hexdigest()


def pattern_bytes(size, seed):
    """SIZE bytes in memory, seeded (for objects small enough to hold)."""
    return random.Random(seed).randbytes(size)


def file_sha256(path):
    """sha256 (hex) of a file, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


# A small tree of every size class a client treats differently: empty, inline, chunked, and (12 MiB) above the
# 5 MiB multipart cutoff the client tests set; with nested directories and keys a URL or an XML listing must
# escape (a space, "+", "&", "=", non-ASCII).
CLIENT_FILES = {
    "empty.bin": 0,
    "one.bin": 1,
    "ten-k.bin": 10 * 1024,
    "dir/hundred-k.bin": 100 * 1024,
    "dir/sub/twelve-m.bin": 12 * MIB,
    "names/a file with spaces.txt": 5,
    "names/ünïcödé+plus&amp=.txt": 6,
}


def run_tool(argv, env, timeout_s):
    """(exit code, stdout, stderr) of the command ARGV run with ENV, killed after TIMEOUT_S seconds."""
    done = subprocess.run(argv, env=env, check=False, capture_output=True, text=True, timeout=timeout_s)
    return done.returncode, done.stdout, done.stderr


def write_files(root, files, seed):
    """Writes FILES ({relative path: size}) under ROOT as write_pattern_file does, the i-th in name order with seed
    SEED + i; returns {relative path: sha256}."""
    hashes = {}
    for index, (rel, size) in enumerate(sorted(files.items())):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        hashes[rel] = write_pattern_file(path, size, seed=seed + index)
    return hashes


def tree_hashes(root):
    """{relative path: sha256} of every file under ROOT."""
    return {str(p.relative_to(root)): file_sha256(p) for p in root.rglob("*") if p.is_file()}


def md5_etag(data):
    """The ETag S3 gives a single-part object: the MD5 of its bytes, in quotes."""
    return f'"{hashlib.md5(data).hexdigest()}"'


def multipart_etag(part_md5_digests):
    """The ETag S3 gives a multipart object: MD5 of the parts' binary MD5s, then "-" and the part count."""
    return f'"{hashlib.md5(b"".join(part_md5_digests)).hexdigest()}-{len(part_md5_digests)}"'


def file_multipart_etag(path, part_size):
    """multipart_etag of a file uploaded in parts of PART_SIZE bytes (as awscli does), read part by part."""
    digests = []
    with open(path, "rb") as f:
        while part := f.read(part_size):
            digests.append(hashlib.md5(part).digest())
    return multipart_etag(digests)


def s3_error(call, *args, **kwargs):
    """Runs a boto3 call that must fail; returns (S3 error code, HTTP status)."""
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        call(*args, **kwargs)
    response = caught.value.response
    return response["Error"].get("Code"), response["ResponseMetadata"].get("HTTPStatusCode")


def ignore_aws_configuration():
    """Makes boto3 in this process read no ~/.aws files and no AWS_* variables of the caller's: every client
    setting the tests and the bench depend on is passed explicitly."""
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        del os.environ[name]
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull


def make_client(endpoint, access_key, secret_key, session=None):
    """A boto3 S3 client for ENDPOINT: path-style addressing, SigV4, no retries (a failure shows as it is). Clients
    made from one SESSION share its loaded service models (made one by one: a session is not thread-safe), which
    makes many clients fast to make; by default each client gets a session of its own."""
    config = botocore.config.Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        retries={"total_max_attempts": 1},
        max_pool_connections=32,
    )
    return (session or boto3.session.Session()).client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=REGION,
        config=config,
    )


def new_bucket_name():
    return f"t-{uuid.uuid4().hex[:16]}"


def empty_and_delete(client, name):
    """Best effort, step by step: aborts the bucket's uploads, deletes its objects, then the bucket (the failure
    a test reports stays its own)."""
    try:
        for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
            client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    except Exception as e:  # noqa: BLE001 - cleanup only
        print(f"cleanup of bucket {name}: {e}")
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=name)
    except Exception as e:  # noqa: BLE001 - cleanup only
        print(f"cleanup of bucket {name}: {e}")

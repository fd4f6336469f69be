"""Server-side encryption, the S3 way (docs/s3.md, "Server-side encryption"), through boto3 and awscli: SSE-S3
(AES256) and SSE-KMS (aws:kms, keys of a local keyring) on PutObject, CopyObject and multipart uploads, bucket
default encryption, the errors AWS gives (unknown key, headers that do not go together, encryption context and
customer keys refused), a store without a key provider refusing every SSE request, and — with the server stopped —
`saltblob head` showing each object sealed under the key asked for (and, on the embedded store, the plaintext
found nowhere in its files). SSE-C (a key sent with each request) through boto3's calls, its managed transfers and
awscli's --sse-c: puts, reads, ranges, parts, copies and multipart uploads, and the errors AWS gives.

The sealed server runs on a store of its own (the session store's kind) opened with encryption=local and a keyring
of three keys (s3key, tenant-a, tenant-b); `--sse-s3-key s3key --sse-kms-key tenant-a`, no store default key: a put
that asks for nothing is plaintext."""

import base64
import hashlib
import os
import subprocess
import json
from pathlib import Path

import pytest
from s3util import MIB, empty_and_delete, make_client, new_bucket_name, pattern_bytes, s3_error
from saltblob_server import Server, sibling_store

KEYS = ("s3key", "tenant-a", "tenant-b")
CUSTOMER_KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def sse_c(key, copy_source=False):
    """boto3's SSE-C arguments for `key` (it computes the key's MD5 and base64 itself)."""
    prefix = "CopySource" if copy_source else ""
    return {f"{prefix}SSECustomerAlgorithm": "AES256", f"{prefix}SSECustomerKey": key}


def key_md5(key):
    return base64.b64encode(hashlib.md5(key).digest()).decode()


def saltblob(saltblob_bin, *args):
    done = subprocess.run([saltblob_bin, "--quiet", *args], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"saltblob {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def make_keyring(saltblob_bin, path):
    saltblob(saltblob_bin, "keyring", "new", str(path))
    for name in KEYS:
        saltblob(saltblob_bin, "keyring", "add", str(path), name)
    os.chmod(path, 0o600)
    return path


def sealed_store(suffix, keyring):
    store = sibling_store(os.environ["S3_TEST_STORE"], suffix)
    joiner = "&" if "?" in store else "?"
    return f"{store}{joiner}encryption=local&keyring={keyring}"


def start_sealed(saltblob_bin, work_dir, suffix, keyring):
    return Server(
        saltblob_bin,
        sealed_store(suffix, keyring),
        work_dir / f"server-{suffix}.log",
        pid_dir=work_dir,
        # No TLS here: SSE-C is taken over HTTP on loopback (test_front_refusals: refused without the flag).
        extra_args=["--sse-s3-key", "s3key", "--sse-kms-key", "tenant-a", "--sse-c-over-http"],
    ).start()


@pytest.fixture(scope="module")
def keyring(saltblob_bin, tmp_path_factory):
    return make_keyring(saltblob_bin, tmp_path_factory.mktemp("keyring") / "ring")


@pytest.fixture(scope="module")
def sealed(saltblob_bin, work_dir, keyring):
    srv = start_sealed(saltblob_bin, work_dir, f"sse{os.getpid()}", keyring)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def ss3(sealed):
    return make_client(sealed.endpoint, sealed.access_key, sealed.secret_key)


@pytest.fixture
def sbucket(ss3):
    name = new_bucket_name()
    ss3.create_bucket(Bucket=name)
    yield name
    empty_and_delete(ss3, name)


def sse_of(response):
    return response.get("ServerSideEncryption"), response.get("SSEKMSKeyId")


def test_sse_s3_put_get_head_and_copy(ss3, sbucket):
    body = pattern_bytes(3 * MIB + 11, seed=1)
    put = ss3.put_object(Bucket=sbucket, Key="s3", Body=body, ServerSideEncryption="AES256")
    assert sse_of(put) == ("AES256", None)
    got = ss3.get_object(Bucket=sbucket, Key="s3")
    assert got["Body"].read() == body
    assert sse_of(got) == ("AES256", None)
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="s3")) == ("AES256", None)
    # A range reads back byte-exact from the middle of the sealed chunks.
    ranged = ss3.get_object(Bucket=sbucket, Key="s3", Range="bytes=1000000-2100000")["Body"].read()
    assert ranged == body[1000000:2100001]

    # A small (inline) object too.
    ss3.put_object(Bucket=sbucket, Key="tiny", Body=b"tiny secret", ServerSideEncryption="AES256")
    tiny = ss3.get_object(Bucket=sbucket, Key="tiny")
    assert (tiny["Body"].read(), sse_of(tiny)) == (b"tiny secret", ("AES256", None))

    # The copy's encryption is its own request's: aws:kms under tenant-b, or none (plaintext: no header).
    copied = ss3.copy_object(
        Bucket=sbucket,
        Key="copy-kms",
        CopySource={"Bucket": sbucket, "Key": "s3"},
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId="tenant-b",
    )
    assert sse_of(copied) == ("aws:kms", "tenant-b")
    head = ss3.head_object(Bucket=sbucket, Key="copy-kms")
    assert sse_of(head) == ("aws:kms", "tenant-b")
    assert ss3.get_object(Bucket=sbucket, Key="copy-kms")["Body"].read() == body
    plain = ss3.copy_object(Bucket=sbucket, Key="copy-plain", CopySource={"Bucket": sbucket, "Key": "s3"})
    assert sse_of(plain) == (None, None)
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="copy-plain")) == (None, None)
    # Copying an object onto itself is allowed when it changes the encryption.
    ss3.copy_object(
        Bucket=sbucket, Key="s3", CopySource={"Bucket": sbucket, "Key": "s3"}, ServerSideEncryption="aws:kms"
    )
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="s3")) == ("aws:kms", "tenant-a")
    assert ss3.get_object(Bucket=sbucket, Key="s3")["Body"].read() == body


def test_sse_kms_named_default_and_bucket_key(ss3, sbucket):
    put = ss3.put_object(
        Bucket=sbucket, Key="b", Body=b"for tenant b" * 1000, ServerSideEncryption="aws:kms", SSEKMSKeyId="tenant-b"
    )
    assert sse_of(put) == ("aws:kms", "tenant-b")
    got = ss3.get_object(Bucket=sbucket, Key="b")
    assert (got["Body"].read(), sse_of(got)) == (b"for tenant b" * 1000, ("aws:kms", "tenant-b"))

    # No key id: the server's default KMS key. BucketKeyEnabled is echoed on the put and on reads.
    put = ss3.put_object(Bucket=sbucket, Key="a", Body=b"a" * 5000, ServerSideEncryption="aws:kms", BucketKeyEnabled=True)
    assert sse_of(put) == ("aws:kms", "tenant-a")
    assert put.get("BucketKeyEnabled") is True
    head = ss3.head_object(Bucket=sbucket, Key="a")
    assert sse_of(head) == ("aws:kms", "tenant-a")
    assert head.get("BucketKeyEnabled") is True

    # A put that asks for nothing (no bucket default, no store key) is plaintext, and says nothing.
    put = ss3.put_object(Bucket=sbucket, Key="plain", Body=b"plain")
    assert sse_of(put) == (None, None)
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="plain")) == (None, None)


def test_sse_errors_as_aws_and_nothing_stored(ss3, sbucket):
    def refused(**kwargs):
        code = s3_error(ss3.put_object, Bucket=sbucket, Key="refused", Body=b"secret" * 100, **kwargs)
        assert s3_error(ss3.head_object, Bucket=sbucket, Key="refused") == ("404", 404), kwargs
        return code

    assert refused(ServerSideEncryption="aws:kms", SSEKMSKeyId="no-such-key") == ("KMS.NotFoundException", 400)
    assert refused(SSEKMSKeyId="tenant-b") == ("InvalidArgument", 400)
    assert refused(ServerSideEncryption="AES256", SSEKMSKeyId="tenant-b") == ("InvalidArgument", 400)
    assert refused(ServerSideEncryption="aws:kms:dsse") == ("NotImplemented", 501)
    assert refused(ServerSideEncryption="aws:kms", SSEKMSEncryptionContext="eyJhIjoiYiJ9") == ("NotImplemented", 501)
    assert refused(SSECustomerAlgorithm="AES256", SSECustomerKey="k" * 32, ServerSideEncryption="AES256") == (
        "InvalidArgument",
        400,
    )
    assert refused(SSECustomerAlgorithm="AES128", SSECustomerKey="k" * 32) == ("InvalidEncryptionAlgorithmError", 400)
    assert refused(SSECustomerAlgorithm="AES256", SSECustomerKey="k" * 16) == ("InvalidArgument", 400)
    # Multipart: an unknown key is refused at CreateMultipartUpload, before any part.
    assert s3_error(
        ss3.create_multipart_upload, Bucket=sbucket, Key="mp", ServerSideEncryption="aws:kms", SSEKMSKeyId="nope"
    ) == ("KMS.NotFoundException", 400)
    assert ss3.list_multipart_uploads(Bucket=sbucket).get("Uploads", []) == []
    # Copy under an unknown key: nothing at the destination.
    ss3.put_object(Bucket=sbucket, Key="src", Body=b"source")
    assert s3_error(
        ss3.copy_object,
        Bucket=sbucket,
        Key="dst",
        CopySource={"Bucket": sbucket, "Key": "src"},
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId="nope",
    ) == ("KMS.NotFoundException", 400)
    assert s3_error(ss3.head_object, Bucket=sbucket, Key="dst") == ("404", 404)


def test_bucket_default_encryption(ss3, sbucket):
    assert s3_error(ss3.get_bucket_encryption, Bucket=sbucket) == (
        "ServerSideEncryptionConfigurationNotFoundError",
        404,
    )
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    ss3.put_bucket_encryption(Bucket=sbucket, ServerSideEncryptionConfiguration={"Rules": [rule]})
    got = ss3.get_bucket_encryption(Bucket=sbucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert got[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    put = ss3.put_object(Bucket=sbucket, Key="d1", Body=b"default one")
    assert sse_of(put) == ("AES256", None)
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="d1")) == ("AES256", None)
    # A put's own headers win over the default.
    put = ss3.put_object(Bucket=sbucket, Key="d2", Body=b"own", ServerSideEncryption="aws:kms", SSEKMSKeyId="tenant-b")
    assert sse_of(put) == ("aws:kms", "tenant-b")

    kms_rule = {
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "tenant-b"},
        "BucketKeyEnabled": True,
    }
    ss3.put_bucket_encryption(Bucket=sbucket, ServerSideEncryptionConfiguration={"Rules": [kms_rule]})
    got = ss3.get_bucket_encryption(Bucket=sbucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert got["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "tenant-b"}
    assert got["BucketKeyEnabled"] is True
    put = ss3.put_object(Bucket=sbucket, Key="d3", Body=b"tenant b by default")
    assert sse_of(put) == ("aws:kms", "tenant-b")
    assert put.get("BucketKeyEnabled") is True
    # CopyObject and multipart uploads without headers take the default too.
    copied = ss3.copy_object(Bucket=sbucket, Key="d4", CopySource={"Bucket": sbucket, "Key": "d1"})
    assert sse_of(copied) == ("aws:kms", "tenant-b")
    upload = ss3.create_multipart_upload(Bucket=sbucket, Key="d5")
    assert sse_of(upload) == ("aws:kms", "tenant-b")
    ss3.abort_multipart_upload(Bucket=sbucket, Key="d5", UploadId=upload["UploadId"])

    bad = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "nope"}}
    assert s3_error(ss3.put_bucket_encryption, Bucket=sbucket, ServerSideEncryptionConfiguration={"Rules": [bad]}) == (
        "KMS.NotFoundException",
        400,
    )
    mixed = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256", "KMSMasterKeyID": "tenant-b"}}
    assert s3_error(
        ss3.put_bucket_encryption, Bucket=sbucket, ServerSideEncryptionConfiguration={"Rules": [mixed]}
    ) == ("InvalidArgument", 400)
    # The refused configurations changed nothing.
    got = ss3.get_bucket_encryption(Bucket=sbucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert got["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"] == "tenant-b"

    ss3.delete_bucket_encryption(Bucket=sbucket)
    assert s3_error(ss3.get_bucket_encryption, Bucket=sbucket)[0] == "ServerSideEncryptionConfigurationNotFoundError"
    assert sse_of(ss3.put_object(Bucket=sbucket, Key="d6", Body=b"plain again")) == (None, None)
    for key in ("d1", "d3", "d4"):
        assert ss3.get_object(Bucket=sbucket, Key=key)["Body"].read() in (b"default one", b"tenant b by default")


def test_bucket_default_does_not_outlive_its_bucket(ss3):
    name = new_bucket_name()
    ss3.create_bucket(Bucket=name)
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    ss3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [rule]})
    ss3.delete_bucket(Bucket=name)
    ss3.create_bucket(Bucket=name)
    try:
        assert s3_error(ss3.get_bucket_encryption, Bucket=name)[0] == "ServerSideEncryptionConfigurationNotFoundError"
        assert sse_of(ss3.put_object(Bucket=name, Key="k", Body=b"x")) == (None, None)
    finally:
        empty_and_delete(ss3, name)


def test_multipart_upload_sealed_per_part(ss3, sbucket):
    parts = [pattern_bytes(5 * MIB, seed=7), pattern_bytes(5 * MIB, seed=8), pattern_bytes(MIB + 3, seed=9)]
    upload = ss3.create_multipart_upload(
        Bucket=sbucket, Key="mp", ServerSideEncryption="aws:kms", SSEKMSKeyId="tenant-b"
    )
    assert sse_of(upload) == ("aws:kms", "tenant-b")
    listed = []

    def upload_part(number, part):
        response = ss3.upload_part(
            Bucket=sbucket, Key="mp", UploadId=upload["UploadId"], PartNumber=number, Body=part
        )
        assert sse_of(response) == ("aws:kms", "tenant-b")
        listed.append({"PartNumber": number, "ETag": response["ETag"]})

    upload_part(1, parts[0])
    upload_part(2, parts[1])
    # UploadPartCopy seals its part as the upload chose, whatever the source's encryption (here none).
    ss3.put_object(Bucket=sbucket, Key="plain-src", Body=parts[0])
    copied = ss3.upload_part_copy(
        Bucket=sbucket,
        Key="mp",
        UploadId=upload["UploadId"],
        PartNumber=3,
        CopySource={"Bucket": sbucket, "Key": "plain-src"},
    )
    assert sse_of(copied) == ("aws:kms", "tenant-b")
    listed.append({"PartNumber": 3, "ETag": copied["CopyPartResult"]["ETag"]})
    upload_part(4, parts[2])
    done = ss3.complete_multipart_upload(
        Bucket=sbucket, Key="mp", UploadId=upload["UploadId"], MultipartUpload={"Parts": listed}
    )
    assert sse_of(done) == ("aws:kms", "tenant-b")
    whole = parts[0] + parts[1] + parts[0] + parts[2]
    got = ss3.get_object(Bucket=sbucket, Key="mp")
    assert sse_of(got) == ("aws:kms", "tenant-b")
    assert hashlib.sha256(got["Body"].read()).digest() == hashlib.sha256(whole).digest()
    part2 = ss3.get_object(Bucket=sbucket, Key="mp", PartNumber=2)
    assert part2["Body"].read() == parts[1]


@pytest.fixture(scope="module")
def saws(sealed, tmp_path_factory):
    from conftest import AwsCli

    return AwsCli(sealed, tmp_path_factory.mktemp("aws-sse-config"))


def test_awscli_sse_and_multipart(saws, ss3, sbucket, tmp_path):
    small = tmp_path / "small"
    small.write_bytes(pattern_bytes(100_000, seed=3))
    big = tmp_path / "big"  # over awscli's 8 MiB multipart threshold: a multipart upload
    big.write_bytes(pattern_bytes(20 * MIB + 5, seed=4))
    saws("s3", "cp", str(small), f"s3://{sbucket}/small", "--sse", "AES256")
    saws("s3", "cp", str(big), f"s3://{sbucket}/big", "--sse", "aws:kms", "--sse-kms-key-id", "tenant-b")
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="small")) == ("AES256", None)
    head = ss3.head_object(Bucket=sbucket, Key="big")
    assert sse_of(head) == ("aws:kms", "tenant-b")
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # 8 MiB parts: it was a multipart upload
    back = tmp_path / "back"
    saws("s3", "cp", f"s3://{sbucket}/big", str(back))
    assert back.read_bytes() == big.read_bytes()
    shown = json.loads(saws("s3api", "head-object", "--bucket", sbucket, "--key", "small"))
    assert shown["ServerSideEncryption"] == "AES256"
    saws(
        "s3api",
        "put-bucket-encryption",
        "--bucket",
        sbucket,
        "--server-side-encryption-configuration",
        '{"Rules":[{"ApplyServerSideEncryptionByDefault":{"SSEAlgorithm":"aws:kms","KMSMasterKeyID":"tenant-a"}}]}',
    )
    config = json.loads(saws("s3api", "get-bucket-encryption", "--bucket", sbucket))
    rule = config["ServerSideEncryptionConfiguration"]["Rules"][0]["ApplyServerSideEncryptionByDefault"]
    assert rule == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "tenant-a"}
    saws("s3", "cp", str(small), f"s3://{sbucket}/defaulted")
    assert sse_of(ss3.head_object(Bucket=sbucket, Key="defaulted")) == ("aws:kms", "tenant-a")
    err = saws.fails("s3", "cp", str(small), f"s3://{sbucket}/bad", "--sse", "aws:kms", "--sse-kms-key-id", "nope")
    assert "KMS.NotFoundException" in err


def test_store_without_key_provider_refuses_sse(s3, bucket):
    """The session's store has no encryption: every SSE request is refused, nothing stored in plaintext."""
    for kwargs in ({"ServerSideEncryption": "AES256"}, {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "k"}):
        assert s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"secret", **kwargs) == ("NotImplemented", 501)
        assert s3_error(s3.create_multipart_upload, Bucket=bucket, Key="k", **kwargs) == ("NotImplemented", 501)
    assert s3_error(s3.head_object, Bucket=bucket, Key="k") == ("404", 404)
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    assert s3_error(s3.put_bucket_encryption, Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [rule]}) == (
        "NotImplemented",
        501,
    )
    assert s3_error(s3.get_bucket_encryption, Bucket=bucket)[0] == "ServerSideEncryptionConfigurationNotFoundError"
    # A plaintext object says nothing about encryption.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain")
    assert sse_of(s3.head_object(Bucket=bucket, Key="plain")) == (None, None)


def test_get_with_sse_header_is_invalid(ss3, sbucket):
    ss3.put_object(Bucket=sbucket, Key="k", Body=b"x", ServerSideEncryption="AES256")

    def add_header(request, **_):
        request.headers["x-amz-server-side-encryption"] = "AES256"

    ss3.meta.events.register_first("before-sign.s3.GetObject", add_header)
    try:
        assert s3_error(ss3.get_object, Bucket=sbucket, Key="k") == ("InvalidArgument", 400)
    finally:
        ss3.meta.events.unregister("before-sign.s3.GetObject", add_header)


def test_objects_are_sealed_in_the_store(saltblob_bin, work_dir, keyring, tmp_path):
    """With the server stopped, `saltblob head` names the key each object is sealed under; on the embedded store
    the objects' plaintext is in none of its files (a plaintext object's is: the scan can find it)."""
    suffix = f"sserest{os.getpid()}"  # a CQL keyspace name too: letters, digits, _
    srv = start_sealed(saltblob_bin, work_dir, suffix, keyring)
    try:
        client = make_client(srv.endpoint, srv.access_key, srv.secret_key)
        client.create_bucket(Bucket="sse-b")
        marker = b"SALTBLOB-SSE-MARKER-0123456789:"
        control = b"SALTBLOB-PLAIN-CONTROL-98765432:"

        def body(text, size):
            # Random bytes between the texts: no codec compresses the first one away.
            unit = len(text) + 64
            return b"".join(text + os.urandom(64) for _ in range(size // unit + 1))

        client.put_object(Bucket="sse-b", Key="s3", Body=body(marker, MIB + 5), ServerSideEncryption="AES256")
        client.put_object(Bucket="sse-b", Key="inline", Body=marker, ServerSideEncryption="AES256")
        client.put_object(
            Bucket="sse-b", Key="kms", Body=body(marker, MIB + 5), ServerSideEncryption="aws:kms", SSEKMSKeyId="tenant-b"
        )
        upload = client.create_multipart_upload(Bucket="sse-b", Key="mp", ServerSideEncryption="aws:kms")
        part = body(marker, 5 * MIB)
        etags = [
            client.upload_part(Bucket="sse-b", Key="mp", UploadId=upload["UploadId"], PartNumber=n, Body=part)["ETag"]
            for n in (1, 2)
        ]
        client.complete_multipart_upload(
            Bucket="sse-b",
            Key="mp",
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags)]},
        )
        rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        client.create_bucket(Bucket="sse-d")
        client.put_bucket_encryption(Bucket="sse-d", ServerSideEncryptionConfiguration={"Rules": [rule]})
        client.put_object(Bucket="sse-d", Key="defaulted", Body=body(marker, MIB + 5))
        client.put_object(Bucket="sse-b", Key="ssec", Body=body(marker, MIB + 5), **sse_c(CUSTOMER_KEY))
        client.put_object(Bucket="sse-b", Key="ssec-inline", Body=marker, **sse_c(CUSTOMER_KEY))
        client.create_bucket(Bucket="sse-p")
        client.put_object(Bucket="sse-p", Key="plain", Body=body(control, MIB + 5))
    finally:
        assert srv.stop() == 0

    def sealed_under(key):
        m = json.loads(saltblob(saltblob_bin, "--store", srv.store_url, "head", key, "--json").splitlines()[-1])
        return (m["encryption"] or {}).get("key")

    assert sealed_under("s3/o/sse-b/s3") == "s3key"
    assert sealed_under("s3/o/sse-b/inline") == "s3key"
    assert sealed_under("s3/o/sse-b/kms") == "tenant-b"
    assert sealed_under("s3/o/sse-b/mp") == "tenant-a"
    assert sealed_under("s3/o/sse-d/defaulted") == "s3key"
    assert sealed_under("s3/o/sse-p/plain") is None
    for key in ("s3/o/sse-b/ssec", "s3/o/sse-b/ssec-inline"):
        m = json.loads(saltblob(saltblob_bin, "--store", srv.store_url, "head", key, "--json").splitlines()[-1])
        assert m["encryption"]["provider"] == "customer", m
        assert len(m["encryption"]["key"]) == 32, "the key's fingerprint, never the key"
        assert base64.b64encode(CUSTOMER_KEY).decode() not in json.dumps(m)

    if srv.store_url.startswith("rocksdb://"):
        directory = Path(srv.store_url.removeprefix("rocksdb://").split("?")[0])
        blobs = b"".join(p.read_bytes() for p in directory.rglob("*") if p.is_file())
        assert control in blobs, "the scan finds a plaintext object's bytes"
        assert marker not in blobs, "a sealed object's plaintext is in the store's files"


def test_sse_c_put_get_head_range_and_copy(ss3, sbucket):
    data = pattern_bytes(MIB + 5, seed=7)
    for key, body in (("small", b"customer secret"), ("large", data)):
        put = ss3.put_object(Bucket=sbucket, Key=key, Body=body, **sse_c(CUSTOMER_KEY))
        assert (put["SSECustomerAlgorithm"], put["SSECustomerKeyMD5"]) == ("AES256", key_md5(CUSTOMER_KEY))
        assert "ServerSideEncryption" not in put
        got = ss3.get_object(Bucket=sbucket, Key=key, **sse_c(CUSTOMER_KEY))
        assert got["Body"].read() == body
        assert got["SSECustomerKeyMD5"] == key_md5(CUSTOMER_KEY)
        head = ss3.head_object(Bucket=sbucket, Key=key, **sse_c(CUSTOMER_KEY))
        assert (head["SSECustomerAlgorithm"], head["ContentLength"]) == ("AES256", len(body))
        part = ss3.get_object(Bucket=sbucket, Key=key, Range="bytes=3-9", **sse_c(CUSTOMER_KEY))
        assert part["Body"].read() == body[3:10]
        # Without the key 400 InvalidRequest, with another 403 AccessDenied (as AWS); HEAD the same statuses.
        assert s3_error(ss3.get_object, Bucket=sbucket, Key=key) == ("InvalidRequest", 400)
        assert s3_error(ss3.get_object, Bucket=sbucket, Key=key, Range="bytes=0-1") == ("InvalidRequest", 400)
        assert s3_error(ss3.get_object, Bucket=sbucket, Key=key, **sse_c(OTHER_KEY)) == ("AccessDenied", 403)
        assert s3_error(ss3.head_object, Bucket=sbucket, Key=key)[1] == 400
        assert s3_error(ss3.head_object, Bucket=sbucket, Key=key, **sse_c(OTHER_KEY))[1] == 403
    # A key for an object that is not SSE-C is not applicable.
    ss3.put_object(Bucket=sbucket, Key="s3", Body=b"x", ServerSideEncryption="AES256")
    assert s3_error(ss3.get_object, Bucket=sbucket, Key="s3", **sse_c(CUSTOMER_KEY)) == ("InvalidRequest", 400)
    # Copies: the source's key reads it; the destination is sealed under its own key, or as it asks.
    ss3.copy_object(
        Bucket=sbucket,
        Key="rekeyed",
        CopySource={"Bucket": sbucket, "Key": "large"},
        **sse_c(CUSTOMER_KEY, copy_source=True),
        **sse_c(OTHER_KEY),
    )
    assert ss3.get_object(Bucket=sbucket, Key="rekeyed", **sse_c(OTHER_KEY))["Body"].read() == data
    assert s3_error(ss3.get_object, Bucket=sbucket, Key="rekeyed", **sse_c(CUSTOMER_KEY)) == ("AccessDenied", 403)
    copied = ss3.copy_object(
        Bucket=sbucket,
        Key="to-kms",
        CopySource={"Bucket": sbucket, "Key": "large"},
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId="tenant-b",
        **sse_c(CUSTOMER_KEY, copy_source=True),
    )
    assert copied["ServerSideEncryption"] == "aws:kms"
    assert ss3.get_object(Bucket=sbucket, Key="to-kms")["Body"].read() == data
    assert s3_error(
        ss3.copy_object, Bucket=sbucket, Key="nope", CopySource={"Bucket": sbucket, "Key": "large"}
    ) == ("InvalidRequest", 400)
    assert s3_error(ss3.head_object, Bucket=sbucket, Key="nope") == ("404", 404)


def test_sse_c_multipart_and_managed_transfers(ss3, sbucket, tmp_path):
    upload = ss3.create_multipart_upload(Bucket=sbucket, Key="mp", **sse_c(CUSTOMER_KEY))
    assert upload["SSECustomerKeyMD5"] == key_md5(CUSTOMER_KEY)
    parts = [pattern_bytes(5 * MIB, seed=8), pattern_bytes(70_000, seed=9)]
    args = {"Bucket": sbucket, "Key": "mp", "UploadId": upload["UploadId"]}
    # Each part must carry the upload's key.
    assert s3_error(ss3.upload_part, PartNumber=1, Body=parts[0], **args) == ("InvalidRequest", 400)
    assert s3_error(ss3.upload_part, PartNumber=1, Body=parts[0], **args, **sse_c(OTHER_KEY)) == ("InvalidRequest", 400)
    etags = [
        ss3.upload_part(PartNumber=n, Body=body, **args, **sse_c(CUSTOMER_KEY))["ETag"]
        for n, body in enumerate(parts, start=1)
    ]
    ss3.complete_multipart_upload(
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]}, **args
    )
    got = ss3.get_object(Bucket=sbucket, Key="mp", **sse_c(CUSTOMER_KEY))
    assert got["Body"].read() == b"".join(parts)
    assert ss3.get_object(Bucket=sbucket, Key="mp", PartNumber=2, **sse_c(CUSTOMER_KEY))["Body"].read() == parts[1]
    assert s3_error(ss3.get_object, Bucket=sbucket, Key="mp") == ("InvalidRequest", 400)

    # boto3's managed transfers: a multipart upload (over its 8 MiB threshold) and a ranged download, SSE-C.
    import boto3.s3.transfer

    big = tmp_path / "big"
    big.write_bytes(pattern_bytes(20 * MIB + 3, seed=10))
    config = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MIB, multipart_chunksize=8 * MIB)
    ss3.upload_file(str(big), sbucket, "transfer", ExtraArgs=sse_c(CUSTOMER_KEY), Config=config)
    head = ss3.head_object(Bucket=sbucket, Key="transfer", **sse_c(CUSTOMER_KEY))
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]
    back = tmp_path / "back"
    ss3.download_file(sbucket, "transfer", str(back), ExtraArgs=sse_c(CUSTOMER_KEY), Config=config)
    assert back.read_bytes() == big.read_bytes()


def test_awscli_sse_c(saws, ss3, sbucket, tmp_path):
    key_file = tmp_path / "customer.key"
    key_file.write_bytes(CUSTOMER_KEY)
    small = tmp_path / "small"
    small.write_bytes(pattern_bytes(100_000, seed=11))
    big = tmp_path / "big"  # over awscli's 8 MiB multipart threshold
    big.write_bytes(pattern_bytes(20 * MIB + 1, seed=12))
    for path in (small, big):
        saws("s3", "cp", str(path), f"s3://{sbucket}/{path.name}", "--sse-c", "AES256", "--sse-c-key", f"fileb://{key_file}")
        back = tmp_path / f"{path.name}.back"
        saws("s3", "cp", f"s3://{sbucket}/{path.name}", str(back), "--sse-c", "AES256", "--sse-c-key", f"fileb://{key_file}")
        assert back.read_bytes() == path.read_bytes()
    shown = json.loads(
        saws(
            "s3api", "head-object", "--bucket", sbucket, "--key", "big",
            "--sse-customer-algorithm", "AES256", "--sse-customer-key", f"fileb://{key_file}",
        )
    )
    assert shown["SSECustomerAlgorithm"] == "AES256" and shown["ETag"].strip('"').endswith("-3")
    err = saws.fails("s3", "cp", f"s3://{sbucket}/small", str(tmp_path / "nokey"))
    assert "400" in err or "Bad Request" in err, err

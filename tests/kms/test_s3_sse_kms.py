"""SSE-KMS through `saltblob serve` on a store whose keys live in KMS (`encryption=aws-kms`): boto3 puts with
`aws:kms` and a KMS key id, reads back, and sees the key disabled and enabled again in KMS.

Run by scripts/kms-tests.sh, which serves KMS with moto on loopback and sets:

  SALTBLOB_BIN          the saltblob binary
  TEST_KMS_ENDPOINT     the emulator's endpoint (http://127.0.0.1:PORT)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   the credentials the server signs its KMS requests with
"""

import os
import sys
import time
from pathlib import Path

import boto3
import botocore.exceptions
import pytest
from boto3.s3.transfer import TransferConfig

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "s3"))
import s3util  # noqa: E402
from s3util import make_client  # noqa: E402
from saltblob_server import Server  # noqa: E402

KEY_CACHE_S = 1


def required_env(name):
    return s3util.required_env(name, "scripts/kms-tests.sh")


@pytest.fixture(scope="module")
def kms():
    return boto3.client("kms", endpoint_url=required_env("TEST_KMS_ENDPOINT"), region_name="us-east-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("sse-kms")
    store = (
        f"rocksdb://{work}/store?encryption=aws-kms&kms_endpoint={required_env('TEST_KMS_ENDPOINT')}"
        f"&key_cache={KEY_CACHE_S}s"
    )
    srv = Server(required_env("SALTBLOB_BIN"), store, work / "server.log").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def s3(server):
    client = make_client(server.endpoint, server.access_key, server.secret_key)
    client.create_bucket(Bucket="sse-kms")
    return client


def code_of(error):
    return error.value.response["Error"]["Code"], error.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_objects_are_sealed_under_the_kms_key_named_and_stop_reading_while_it_is_disabled(kms, s3):
    key = kms.create_key(Description="saltblob SSE-KMS test")["KeyMetadata"]
    body = os.urandom(300_000)
    put = s3.put_object(Bucket="sse-kms", Key="small", Body=body, ServerSideEncryption="aws:kms",
                        SSEKMSKeyId=key["KeyId"])
    assert put["ServerSideEncryption"] == "aws:kms"
    assert key["KeyId"] in put["SSEKMSKeyId"], put
    head = s3.head_object(Bucket="sse-kms", Key="small")
    assert head["ServerSideEncryption"] == "aws:kms" and key["KeyId"] in head["SSEKMSKeyId"], head
    assert s3.get_object(Bucket="sse-kms", Key="small")["Body"].read() == body

    # A multipart upload (20 MiB in 8 MiB parts), each part sealed under the key.
    big = os.urandom(20 << 20)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"sse-kms-{os.getpid()}"
    path.write_bytes(big)
    try:
        s3.upload_file(str(path), "sse-kms", "big",
                       ExtraArgs={"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key["KeyId"]},
                       Config=TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20))
    finally:
        path.unlink()
    head = s3.head_object(Bucket="sse-kms", Key="big")
    assert key["KeyId"] in head["SSEKMSKeyId"], head
    assert s3.get_object(Bucket="sse-kms", Key="big")["Body"].read() == big

    kms.disable_key(KeyId=key["KeyId"])
    time.sleep(KEY_CACHE_S + 0.5)
    for name in ("small", "big"):
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            s3.get_object(Bucket="sse-kms", Key=name)["Body"].read()
        assert code_of(refused) == ("KMS.DisabledException", 400), refused.value.response
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.put_object(Bucket="sse-kms", Key="new", Body=b"x" * 5000, ServerSideEncryption="aws:kms",
                      SSEKMSKeyId=key["KeyId"])
    assert code_of(refused)[1] == 400 and code_of(refused)[0].startswith("KMS."), refused.value.response
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        s3.head_object(Bucket="sse-kms", Key="new")
    assert code_of(missing)[1] == 404, "nothing was stored"

    kms.enable_key(KeyId=key["KeyId"])
    assert s3.get_object(Bucket="sse-kms", Key="small")["Body"].read() == body
    assert s3.get_object(Bucket="sse-kms", Key="big")["Body"].read() == big


def test_an_unknown_kms_key_is_refused_and_nothing_stored(s3):
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        s3.put_object(Bucket="sse-kms", Key="unknown", Body=b"y" * 100, ServerSideEncryption="aws:kms",
                      SSEKMSKeyId="00000000-0000-4000-8000-000000000000")
    assert code_of(refused) == ("KMS.NotFoundException", 400), refused.value.response
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        s3.head_object(Bucket="sse-kms", Key="unknown")
    assert code_of(missing)[1] == 404

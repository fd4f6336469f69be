"""What the server does not do, refused as AWS refuses it, through boto3 as applications call it: server-side
encryption on a store without a key provider (SSE-KMS, SSE-S3, also on copies and multipart uploads), SSE-C over
plain HTTP, object lock, ACLs other than the canned ones kept,
version ids, presigned URLs valid for more than 7 days; and in every case nothing is stored (before, the
server answered 200 and dropped the header: an "encrypted" object was stored in plaintext, a "locked" one could
be deleted)."""

import datetime
import os
import subprocess

import pytest
from s3util import s3_error

SSE_C_KEY = os.urandom(32)
SSE_C = {
    "SSECustomerAlgorithm": "AES256",
    "SSECustomerKey": SSE_C_KEY,
}


def assert_absent(s3, bucket, key):
    assert s3_error(s3.head_object, Bucket=bucket, Key=key) == ("404", 404), f"{key} was stored"


@pytest.mark.parametrize(
    "extra",
    [
        {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/backups"},
        {"ServerSideEncryption": "aws:kms", "BucketKeyEnabled": True},
        {"ServerSideEncryption": "AES256"},
        {
            "ObjectLockMode": "COMPLIANCE",
            "ObjectLockRetainUntilDate": datetime.datetime(2099, 1, 1, tzinfo=datetime.timezone.utc),
        },
        {"ObjectLockLegalHoldStatus": "ON"},
    ],
    ids=["sse-kms", "sse-kms-bucket-key", "sse-s3", "object-lock", "legal-hold"],
)
def test_put_with_an_unsupported_feature_is_not_implemented_and_stores_nothing(s3, bucket, extra):
    assert s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"believed protected", **extra) == (
        "NotImplemented",
        501,
    )
    assert_absent(s3, bucket, "k")


def test_multipart_upload_and_copy_with_encryption_are_refused(s3, bucket):
    assert s3_error(s3.create_multipart_upload, Bucket=bucket, Key="mp", ServerSideEncryption="aws:kms") == (
        "NotImplemented",
        501,
    )
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain")
    assert s3_error(
        s3.copy_object,
        Bucket=bucket,
        Key="copy",
        CopySource={"Bucket": bucket, "Key": "plain"},
        ServerSideEncryption="aws:kms",
    ) == ("NotImplemented", 501)
    assert_absent(s3, bucket, "copy")


def test_customer_keys_need_a_secure_connection(s3, bucket):
    """SSE-C sends the key in a header: a server without TLS (and without --sse-c-over-http) refuses it as AWS
    does over plain HTTP, on every request that carries one, and stores nothing."""
    assert s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"believed protected", **SSE_C) == (
        "InvalidRequest",
        400,
    )
    assert_absent(s3, bucket, "k")
    assert s3_error(s3.create_multipart_upload, Bucket=bucket, Key="mp", **SSE_C) == ("InvalidRequest", 400)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain")
    copy_source_sse_c = {
        "CopySourceSSECustomerAlgorithm": "AES256",
        "CopySourceSSECustomerKey": SSE_C_KEY,
    }
    for extra in (SSE_C, copy_source_sse_c):
        assert s3_error(
            s3.copy_object, Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "plain"}, **extra
        ) == ("InvalidRequest", 400)
    assert_absent(s3, bucket, "copy")
    assert s3_error(s3.get_object, Bucket=bucket, Key="plain", **SSE_C) == ("InvalidRequest", 400)


def test_acls_that_are_not_canned_ones_kept_are_refused(s3, bucket):
    for acl in ("aws-exec-read", "log-delivery-write"):
        assert s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"v", ACL=acl) == (
            "AccessControlListNotSupported",
            400,
        )
    assert s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"v", GrantRead='uri="http://acs.amazonaws.com/groups/global/AllUsers"') == (
        "AccessControlListNotSupported",
        400,
    )
    assert_absent(s3, bucket, "k")
    for acl in ("private", "bucket-owner-full-control"):
        s3.put_object(Bucket=bucket, Key=f"ok-{acl}", Body=b"v", ACL=acl)
    assert s3_error(s3.put_object_acl, Bucket=bucket, Key="ok-private", ACL="aws-exec-read") == (
        "AccessControlListNotSupported",
        400,
    )


def test_a_bucket_with_object_lock_is_not_created(s3, bucket):
    name = bucket + "-locked"
    assert s3_error(s3.create_bucket, Bucket=name, ObjectLockEnabledForBucket=True) == ("NotImplemented", 501)
    assert s3_error(s3.head_bucket, Bucket=name) == ("404", 404)


def test_version_ids_other_than_null_are_refused(s3, bucket):
    s3.put_object(Bucket=bucket, Key="live", Body=b"live data")
    for call in (s3.get_object, s3.delete_object):
        assert s3_error(call, Bucket=bucket, Key="live", VersionId="3HL4kqtJlcpXroDTDmJ") == ("InvalidArgument", 400)
    assert s3.get_object(Bucket=bucket, Key="live", VersionId="null")["Body"].read() == b"live data"


def test_presigned_urls_valid_for_more_than_a_week_are_refused(s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="shared", Body=b"shared")
    for expires, status in ((604800, 200), (604801, 403), (10 * 365 * 86400, 403)):
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared"}, ExpiresIn=expires)
        out = tmp_path / "out"
        done = subprocess.run(
            ["curl", "-sS", "--max-time", "30", "-o", str(out), "-w", "%{http_code}", url],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert int(done.stdout) == status, out.read_bytes()
        if status == 403:
            assert b"AuthorizationQueryParametersError" in out.read_bytes()


def test_error_documents_carry_the_request_id(s3, bucket):
    try:
        s3.get_object(Bucket=bucket, Key="missing")
    except s3.exceptions.NoSuchKey as e:
        metadata = e.response["ResponseMetadata"]
        assert len(metadata["RequestId"]) == 16
        assert metadata["HTTPHeaders"]["x-amz-request-id"] == metadata["RequestId"]
    else:
        pytest.fail("the GET of a missing key succeeded")

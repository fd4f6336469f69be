"""Authentication: presigned GETs fetched with curl (valid, ranged, tampered, expired), a wrong secret, an unknown
access key, an anonymous request."""

import subprocess
import time

import boto3
import botocore
import botocore.config
from s3util import REGION, make_client, pattern_bytes, s3_error


def curl(url, tmp_path, *headers):
    """(HTTP status, body) of a GET of URL by curl."""
    out = tmp_path / "curl.out"
    args = ["curl", "-sS", "--max-time", "60", "-o", str(out), "-w", "%{http_code}", url]
    for header in headers:
        args += ["-H", header]
    done = subprocess.run(args, capture_output=True, text=True, check=True, timeout=90)
    return int(done.stdout), out.read_bytes()


def test_presigned_get_with_curl(s3, bucket, tmp_path):
    data = pattern_bytes(300_000, seed=3)
    s3.put_object(Bucket=bucket, Key="shared/file.bin", Body=data)
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared/file.bin"}, ExpiresIn=300)
    assert curl(url, tmp_path) == (200, data)
    assert curl(url, tmp_path, "Range: bytes=1000-1999") == (206, data[1000:2000])


def test_tampered_presigned_url_is_refused(s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="a", Body=b"secret a")
    s3.put_object(Bucket=bucket, Key="b", Body=b"secret b")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "a"}, ExpiresIn=300)
    status, body = curl(url.replace(f"/{bucket}/a?", f"/{bucket}/b?"), tmp_path)
    assert status == 403 and b"SignatureDoesNotMatch" in body


def test_expired_presigned_url_is_refused(s3, bucket, tmp_path):
    s3.put_object(Bucket=bucket, Key="short-lived", Body=b"gone soon")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "short-lived"}, ExpiresIn=1)
    time.sleep(2)
    status, body = curl(url, tmp_path)
    assert status == 403 and b"AccessDenied" in body and b"gone soon" not in body


def test_wrong_secret_is_signature_does_not_match(server, s3, bucket):
    wrong = make_client(server.endpoint, server.access_key, server.secret_key + "x")
    assert s3_error(wrong.list_buckets) == ("SignatureDoesNotMatch", 403)
    assert s3_error(wrong.put_object, Bucket=bucket, Key="k", Body=b"v") == ("SignatureDoesNotMatch", 403)
    assert s3_error(s3.head_object, Bucket=bucket, Key="k") == ("404", 404)


def test_unknown_access_key_is_refused(server):
    stranger = make_client(server.endpoint, "AKIDNOTKNOWNTOSERVER", server.secret_key)
    assert s3_error(stranger.list_buckets) == ("InvalidAccessKeyId", 403)


def test_anonymous_request_is_access_denied(server, s3, bucket):
    s3.put_object(Bucket=bucket, Key="private", Body=b"private")
    anonymous = boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=REGION,
        config=botocore.config.Config(signature_version=botocore.UNSIGNED, s3={"addressing_style": "path"}),
    )
    assert s3_error(anonymous.get_object, Bucket=bucket, Key="private") == ("AccessDenied", 403)

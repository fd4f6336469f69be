"""Objects through boto3: ranges, conditional GETs, metadata, ETags, DeleteObjects, CopyObject, Content-MD5 and
checksums verified, ListObjectsV2 paging. Sizes cover saltblob's layouts: inline (<= 16 KiB), chunked in one
partition, and salted (> 8 MiB)."""

import base64
import datetime
import hashlib

import pytest
from s3util import MIB, md5_etag, pattern_bytes, s3_error

SIZES = {"inline": 1_000, "chunked": 300_000, "salted": 9 * MIB + 123}


@pytest.fixture(params=sorted(SIZES), ids=sorted(SIZES))
def stored(request, s3, bucket):
    """(bucket, key, data) of one object of each layout."""
    data = pattern_bytes(SIZES[request.param], seed=len(request.param))
    s3.put_object(Bucket=bucket, Key="obj", Body=data)
    return bucket, "obj", data


def get_range(s3, bucket, key, spec):
    response = s3.get_object(Bucket=bucket, Key=key, Range=f"bytes={spec}")
    return response["ResponseMetadata"]["HTTPStatusCode"], response["ContentRange"], response["Body"].read()


def test_ranged_gets(s3, stored):
    bucket, key, data = stored
    n = len(data)
    assert get_range(s3, bucket, key, "100-199") == (206, f"bytes 100-199/{n}", data[100:200])
    assert get_range(s3, bucket, key, "-500") == (206, f"bytes {n - 500}-{n - 1}/{n}", data[-500:])
    assert get_range(s3, bucket, key, f"{n - 1000}-") == (206, f"bytes {n - 1000}-{n - 1}/{n}", data[-1000:])
    assert get_range(s3, bucket, key, f"{n - 1}-{n - 1}") == (206, f"bytes {n - 1}-{n - 1}/{n}", data[-1:])
    # A range running past the end is cut at the end.
    assert get_range(s3, bucket, key, f"{n - 10}-{n + 1000}") == (206, f"bytes {n - 10}-{n - 1}/{n}", data[-10:])
    if n > 65_546:  # across the boundary of the first two 64 KiB chunks
        assert get_range(s3, bucket, key, "65530-65545")[2] == data[65530:65546]


def test_range_past_the_end_is_invalid_range(s3, stored):
    bucket, key, data = stored
    n = len(data)
    assert s3_error(s3.get_object, Bucket=bucket, Key=key, Range=f"bytes={n}-{n + 10}") == ("InvalidRange", 416)


def test_conditional_gets(s3, bucket):
    s3.put_object(Bucket=bucket, Key="c", Body=b"conditional")
    head = s3.head_object(Bucket=bucket, Key="c")
    etag, modified = head["ETag"], head["LastModified"]
    day = datetime.timedelta(days=1)

    assert s3.get_object(Bucket=bucket, Key="c", IfMatch=etag)["Body"].read() == b"conditional"
    assert s3_error(s3.get_object, Bucket=bucket, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"') == (
        "PreconditionFailed",
        412,
    )
    assert s3_error(s3.get_object, Bucket=bucket, Key="c", IfNoneMatch=etag) == ("304", 304)
    assert s3.get_object(Bucket=bucket, Key="c", IfNoneMatch='"other"')["Body"].read() == b"conditional"
    assert s3_error(s3.get_object, Bucket=bucket, Key="c", IfModifiedSince=modified) == ("304", 304)
    assert s3.get_object(Bucket=bucket, Key="c", IfModifiedSince=modified - day)["Body"].read() == b"conditional"
    assert s3_error(s3.get_object, Bucket=bucket, Key="c", IfUnmodifiedSince=modified - day) == (
        "PreconditionFailed",
        412,
    )
    assert s3_error(s3.head_object, Bucket=bucket, Key="c", IfNoneMatch=etag) == ("304", 304)


def test_missing_key_is_no_such_key(s3, bucket):
    assert s3_error(s3.get_object, Bucket=bucket, Key="absent") == ("NoSuchKey", 404)
    assert s3_error(s3.head_object, Bucket=bucket, Key="absent") == ("404", 404)


def test_user_metadata_and_content_type_round_trip(s3, stored):
    bucket, key, data = stored
    metadata = {"colour": "blue", "answer": "42", "with-dash": "a value with spaces"}
    s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="application/x-saltblob-test", Metadata=metadata)
    head = s3.head_object(Bucket=bucket, Key=key)
    assert (head["ContentType"], head["Metadata"], head["ContentLength"]) == (
        "application/x-saltblob-test",
        metadata,
        len(data),
    )
    got = s3.get_object(Bucket=bucket, Key=key)
    assert (got["ContentType"], got["Metadata"], got["Body"].read()) == ("application/x-saltblob-test", metadata, data)


def test_single_part_etag_is_md5(s3, stored):
    bucket, key, data = stored
    assert s3.head_object(Bucket=bucket, Key=key)["ETag"] == md5_etag(data)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["ETag"], o["Size"]) for o in listed] == [(key, md5_etag(data), len(data))]


def test_delete_objects_several_keys_and_a_missing_one(s3, bucket):
    for key in ("a", "b", "c"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    response = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}, {"Key": "never-there"}]}
    )
    assert sorted(d["Key"] for d in response["Deleted"]) == ["a", "b", "never-there"]
    assert response.get("Errors", []) == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["c"]
    assert s3_error(s3.get_object, Bucket=bucket, Key="a") == ("NoSuchKey", 404)


def test_copy_object(s3, stored):
    bucket, key, data = stored
    s3.put_object(Bucket=bucket, Key=key, Body=data, ContentType="text/x-source", Metadata={"m": "1"})
    other = f"{bucket}-copy"
    s3.create_bucket(Bucket=other)
    try:
        s3.copy_object(Bucket=other, Key="copied", CopySource={"Bucket": bucket, "Key": key})
        copied = s3.get_object(Bucket=other, Key="copied")
        assert (copied["Body"].read(), copied["ETag"], copied["ContentType"], copied["Metadata"]) == (
            data,
            md5_etag(data),
            "text/x-source",
            {"m": "1"},
        )
        s3.copy_object(
            Bucket=bucket,
            Key="replaced",
            CopySource={"Bucket": bucket, "Key": key},
            MetadataDirective="REPLACE",
            ContentType="text/x-replaced",
            Metadata={"m": "2"},
        )
        replaced = s3.head_object(Bucket=bucket, Key="replaced")
        assert (replaced["ContentType"], replaced["Metadata"], replaced["ContentLength"]) == (
            "text/x-replaced",
            {"m": "2"},
            len(data),
        )
        # The source is untouched.
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data
        assert s3_error(s3.copy_object, Bucket=other, Key="x", CopySource={"Bucket": bucket, "Key": "absent"}) == (
            "NoSuchKey",
            404,
        )
    finally:
        for k in ("copied", "x"):
            s3.delete_object(Bucket=other, Key=k)
        s3.delete_bucket(Bucket=other)


def b64md5(data):
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_bad_content_md5_is_bad_digest_and_stores_nothing(s3, bucket):
    assert s3_error(s3.put_object, Bucket=bucket, Key="new", Body=b"the body", ContentMD5=b64md5(b"another body")) == (
        "BadDigest",
        400,
    )
    assert s3_error(s3.head_object, Bucket=bucket, Key="new") == ("404", 404)
    # Over an existing object: the old version stays.
    s3.put_object(Bucket=bucket, Key="old", Body=b"old body", ContentMD5=b64md5(b"old body"))
    assert s3_error(s3.put_object, Bucket=bucket, Key="old", Body=b"new body", ContentMD5=b64md5(b"not it")) == (
        "BadDigest",
        400,
    )
    assert s3.get_object(Bucket=bucket, Key="old")["Body"].read() == b"old body"


def test_bad_checksum_crc32_is_refused_and_stores_nothing(s3, bucket):
    assert s3_error(s3.put_object, Bucket=bucket, Key="crc", Body=b"checked body", ChecksumCRC32="AAAAAA==") == (
        "BadDigest",
        400,
    )
    assert s3_error(s3.head_object, Bucket=bucket, Key="crc") == ("404", 404)


def list_all(s3, **kwargs):
    """Every page of ListObjectsV2 with KWARGS: a list of (keys, common prefixes, truncated) per page."""
    pages, token = [], None
    while True:
        response = s3.list_objects_v2(**kwargs, **({"ContinuationToken": token} if token else {}))
        keys = [o["Key"] for o in response.get("Contents", [])]
        prefixes = [p["Prefix"] for p in response.get("CommonPrefixes", [])]
        assert response["KeyCount"] == len(keys) + len(prefixes)
        pages.append((keys, prefixes, response["IsTruncated"]))
        if not response["IsTruncated"]:
            return pages
        token = response["NextContinuationToken"]
        assert len(pages) < 100, "ListObjectsV2 does not end"


def test_list_objects_v2_pagination(s3, bucket):
    keys = [f"a/{i:03}" for i in range(20)] + [f"b/{i:03}" for i in range(3)] + ["c.txt", "d.txt"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())

    pages = list_all(s3, Bucket=bucket, MaxKeys=10)
    assert [len(k) for k, _, _ in pages] == [10, 10, 5]
    assert [t for _, _, t in pages] == [True, True, False]
    assert [k for page, _, _ in pages for k in page] == keys

    after = [k for page, _, _ in list_all(s3, Bucket=bucket, StartAfter="a/010") for k in page]
    assert after == keys[11:]

    assert list_all(s3, Bucket=bucket, Delimiter="/") == [(["c.txt", "d.txt"], ["a/", "b/"], False)]
    # Common prefixes count toward MaxKeys, and paging goes on after them.
    assert list_all(s3, Bucket=bucket, Delimiter="/", MaxKeys=1) == [
        ([], ["a/"], True),
        ([], ["b/"], True),
        (["c.txt"], [], True),
        (["d.txt"], [], False),
    ]
    in_a = list_all(s3, Bucket=bucket, Prefix="a/", Delimiter="/", MaxKeys=7)
    assert [k for page, _, _ in in_a for k in page] == keys[:20]
    assert [len(k) for k, _, _ in in_a] == [7, 7, 6]
    assert list_all(s3, Bucket=bucket, Prefix="zzz") == [([], [], False)]

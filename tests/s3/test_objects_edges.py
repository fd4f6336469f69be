"""Object semantics at their edges, through boto3 as a real client sends them: conditional deletes and puts, parts
of multipart objects by number, ranges of empty objects and ranges that do not parse, response header overrides
on presigned links, GetObjectAttributes, the calls tools make around the data (GetBucketLocation,
GetBucketVersioning, CreateBucket of an owned bucket), and CopyObject's fresh ETag of a multipart source."""

import urllib.request

from s3util import MIB, md5_etag, pattern_bytes, s3_error


def test_conditional_delete_object(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"value")
    head = s3.head_object(Bucket=bucket, Key="k")
    wrong = '"0123456789abcdef0123456789abcdef"'
    assert s3_error(s3.delete_object, Bucket=bucket, Key="k", IfMatch=wrong) == ("PreconditionFailed", 412)
    assert s3_error(s3.delete_object, Bucket=bucket, Key="k", IfMatchSize=6) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"value"
    deleted = s3.delete_object(
        Bucket=bucket, Key="k", IfMatch=put["ETag"], IfMatchSize=5, IfMatchLastModifiedTime=head["LastModified"]
    )
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3_error(s3.head_object, Bucket=bucket, Key="k") == ("404", 404)
    # A key that holds nothing: nothing to delete, 204 under any condition (AWS's API reference, RGW).
    gone = s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert gone["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_conditional_delete_objects_and_version_ids(s3, bucket):
    etags = {key: s3.put_object(Bucket=bucket, Key=key, Body=key.encode())["ETag"] for key in ("a", "b", "c", "d")}
    response = s3.delete_objects(
        Bucket=bucket,
        Delete={
            "Objects": [
                {"Key": "a", "ETag": etags["a"]},
                {"Key": "b", "ETag": etags["a"]},
                {"Key": "c", "VersionId": "null", "Size": 1},
                {"Key": "d", "VersionId": "3HL4kqtJlcpXroDTDmJ"},
            ]
        },
    )
    assert sorted(d["Key"] for d in response["Deleted"]) == ["a", "c"]
    assert sorted((e["Key"], e["Code"]) for e in response["Errors"]) == [
        ("b", "PreconditionFailed"),
        ("d", "InvalidArgument"),
    ]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["b", "d"]


def test_put_if_match_on_a_missing_key_is_no_such_key(s3, bucket):
    assert s3_error(s3.put_object, Bucket=bucket, Key="absent", Body=b"x", IfMatch="*") == ("NoSuchKey", 404)
    first = s3.put_object(Bucket=bucket, Key="k", Body=b"one")
    # Both conditions are evaluated: on a key that exists If-None-Match: * fails whatever If-Match says.
    assert s3_error(
        s3.put_object, Bucket=bucket, Key="k", Body=b"two", IfMatch=first["ETag"], IfNoneMatch="*"
    ) == ("PreconditionFailed", 412)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"


def multipart(s3, bucket, key, parts):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = [
        {"PartNumber": n, "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=p)["ETag"]}
        for n, p in enumerate(parts, start=1)
    ]
    return s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done})


def test_get_and_head_by_part_number(s3, bucket):
    one, two = pattern_bytes(5 * MIB, seed=1), pattern_bytes(1000, seed=2)
    multipart(s3, bucket, "mp", [one, two])
    total = len(one) + len(two)
    got = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert (got["PartsCount"], got["ContentRange"], got["Body"].read()) == (
        2,
        f"bytes {len(one)}-{total - 1}/{total}",
        two,
    )
    head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert (head["PartsCount"], head["ContentLength"]) == (2, len(one))
    assert s3_error(s3.get_object, Bucket=bucket, Key="mp", PartNumber=3) == ("InvalidPart", 400)


def test_get_object_attributes(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="one", Body=b"foo", ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(
        Bucket=bucket, Key="one", ObjectAttributes=["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]
    )
    assert got["ETag"] == put["ETag"].strip('"')
    assert (got["ObjectSize"], got["StorageClass"]) == (3, "STANDARD")
    assert got["Checksum"]["ChecksumSHA256"] == put["ChecksumSHA256"]
    assert "ObjectParts" not in got
    one, two = pattern_bytes(5 * MIB, seed=4), pattern_bytes(10, seed=5)
    done = multipart(s3, bucket, "mp", [one, one, two])
    page = s3.get_object_attributes(
        Bucket=bucket, Key="mp", ObjectAttributes=["ETag", "ObjectParts"], MaxParts=1, PartNumberMarker=1
    )
    assert page["ETag"] == done["ETag"].strip('"')
    parts = page["ObjectParts"]
    assert (parts["TotalPartsCount"], parts["IsTruncated"], parts["NextPartNumberMarker"]) == (3, True, 2)
    assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(2, len(one))]
    assert s3_error(s3.get_object_attributes, Bucket=bucket, Key="none", ObjectAttributes=["ETag"]) == (
        "NoSuchKey",
        404,
    )


def test_copy_of_a_multipart_object_gets_the_md5_of_its_bytes(s3, bucket):
    one, two = pattern_bytes(5 * MIB, seed=3), b"tail"
    completed = multipart(s3, bucket, "mp", [one, two])
    assert completed["ETag"].endswith('-2"')
    copied = s3.copy_object(Bucket=bucket, Key="flat", CopySource={"Bucket": bucket, "Key": "mp"})
    assert copied["CopyObjectResult"]["ETag"] == md5_etag(one + two)
    assert s3.head_object(Bucket=bucket, Key="flat")["ETag"] == md5_etag(one + two)


def test_ranges_of_an_empty_object(s3, bucket):
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    got = s3.get_object(Bucket=bucket, Key="empty", Range="bytes=-10")
    assert (got["ResponseMetadata"]["HTTPStatusCode"], got["Body"].read()) == (200, b"")
    assert s3_error(s3.get_object, Bucket=bucket, Key="empty", Range="bytes=0-") == ("InvalidRange", 416)


def fetch(url, headers=None):
    """GET URL (a presigned link) with HEADERS: (status, headers, body)."""
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as response:
        return response.status, response.headers, response.read()


def test_presigned_links_with_unparsable_ranges_and_response_overrides(s3, bucket):
    data = b"0123456789"
    s3.put_object(Bucket=bucket, Key="doc", Body=data, ContentType="text/plain")
    plain = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "doc"}, ExpiresIn=300)
    for value in ("bytes=5-2", "bytes=0-1,4-5", "items=0-1"):
        status, headers, body = fetch(plain, {"Range": value})
        assert (status, body, headers.get("Content-Range")) == (200, data, None), value
    assert fetch(plain, {"Range": "bytes=2-4"})[2] == data[2:5]

    overridden = s3.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": bucket,
            "Key": "doc",
            "ResponseContentType": "application/pdf",
            "ResponseContentDisposition": 'attachment; filename="report.pdf"',
            "ResponseCacheControl": "max-age=60",
        },
        ExpiresIn=300,
    )
    status, headers, body = fetch(overridden)
    assert (status, body) == (200, data)
    assert headers["Content-Type"] == "application/pdf"
    assert headers["Content-Disposition"] == 'attachment; filename="report.pdf"'
    assert headers["Cache-Control"] == "max-age=60"
    signed = s3.get_object(Bucket=bucket, Key="doc", ResponseContentLanguage="fr")
    assert signed["ContentLanguage"] == "fr"


def test_bucket_location_versioning_and_creating_an_owned_bucket(s3, bucket):
    assert s3.get_bucket_location(Bucket=bucket).get("LocationConstraint") is None
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    # us-east-1: creating a bucket you already own succeeds, as on AWS.
    s3.create_bucket(Bucket=bucket)
    assert s3.head_bucket(Bucket=bucket)["ResponseMetadata"]["HTTPStatusCode"] == 200

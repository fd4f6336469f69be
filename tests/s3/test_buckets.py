"""Buckets: create, list, head, delete; a missing bucket is NoSuchBucket to every operation; a bucket with objects
is not deleted."""

from s3util import new_bucket_name, s3_error


def test_create_list_head_delete_bucket(s3):
    name = new_bucket_name()
    s3.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    s3.delete_bucket(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert s3_error(s3.head_bucket, Bucket=name) == ("404", 404)


def test_list_buckets_pages_with_boto3s_paginator(s3):
    """boto3's ListBuckets paginator (MaxBuckets, ContinuationToken) with a Prefix lists every bucket once, in
    order; a BucketRegion other than the server's lists none."""
    base = new_bucket_name()
    names = [f"{base}-{i}" for i in range(5)]
    for name in names:
        s3.create_bucket(Bucket=name)
    try:
        pages = list(
            s3.get_paginator("list_buckets").paginate(Prefix=base, PaginationConfig={"PageSize": 2})
        )
        assert [len(p["Buckets"]) for p in pages] == [2, 2, 1]
        assert [b["Name"] for p in pages for b in p["Buckets"]] == names
        assert all(p["Prefix"] == base for p in pages)
        assert "ContinuationToken" not in pages[-1]
        elsewhere = s3.list_buckets(Prefix=base, BucketRegion="ap-south-2")
        assert elsewhere.get("Buckets", []) == []
        assert s3_error(s3.list_buckets, MaxBuckets=10001) == ("InvalidArgument", 400)
    finally:
        for name in names:
            s3.delete_bucket(Bucket=name)


def test_missing_bucket_is_no_such_bucket(s3):
    name = new_bucket_name()
    assert s3_error(s3.get_object, Bucket=name, Key="k") == ("NoSuchBucket", 404)
    assert s3_error(s3.put_object, Bucket=name, Key="k", Body=b"v") == ("NoSuchBucket", 404)
    assert s3_error(s3.list_objects_v2, Bucket=name) == ("NoSuchBucket", 404)
    assert s3_error(s3.delete_bucket, Bucket=name) == ("NoSuchBucket", 404)
    # The failed put created neither the bucket nor the object.
    assert s3_error(s3.head_bucket, Bucket=name) == ("404", 404)


def test_delete_non_empty_bucket_is_bucket_not_empty(s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep/me", Body=b"still here")
    assert s3_error(s3.delete_bucket, Bucket=bucket) == ("BucketNotEmpty", 409)
    assert s3.get_object(Bucket=bucket, Key="keep/me")["Body"].read() == b"still here"
    s3.delete_object(Bucket=bucket, Key="keep/me")
    s3.delete_bucket(Bucket=bucket)
    assert s3_error(s3.head_bucket, Bucket=bucket) == ("404", 404)


def test_invalid_bucket_name_is_refused(s3):
    assert s3_error(s3.create_bucket, Bucket="Not_A_Valid_Name") == ("InvalidBucketName", 400)

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

"""Tags through boto3 (listed in key order): an object's (set with the object, by a copy as directed, by a multipart upload; changed in
place by put/delete_object_tagging; TagCount on GET) and a bucket's."""

from s3util import s3_error


def tag_list(response):
    return [(t["Key"], t["Value"]) for t in response["TagSet"]]


def test_object_tags_round_trip_and_change_in_place(s3, bucket):
    put = s3.put_object(Bucket=bucket, Key="k", Body=b"tagged", Tagging="team=web&cost center=a/b")
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="k")) == [("cost center", "a/b"), ("team", "web")]
    assert s3.get_object(Bucket=bucket, Key="k")["TagCount"] == 2
    before = s3.head_object(Bucket=bucket, Key="k")
    s3.put_object_tagging(Bucket=bucket, Key="k", Tagging={"TagSet": [{"Key": "a", "Value": "1"}]})
    after = s3.head_object(Bucket=bucket, Key="k")
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="k")) == [("a", "1")]
    # In place: the same ETag and Last-Modified, as AWS keeps them.
    assert (after["ETag"], after["LastModified"]) == (put["ETag"], before["LastModified"])
    too_many = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
    assert s3_error(s3.put_object_tagging, Bucket=bucket, Key="k", Tagging=too_many) == ("InvalidTag", 400)
    s3.delete_object_tagging(Bucket=bucket, Key="k")
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="k")) == []
    assert "TagCount" not in s3.get_object(Bucket=bucket, Key="k")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"tagged"


def test_copies_and_multipart_uploads_carry_tags(s3, bucket):
    s3.put_object(Bucket=bucket, Key="src", Body=b"source", Tagging="a=1")
    s3.copy_object(Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "src"})
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="copied")) == [("a", "1")]
    s3.copy_object(Bucket=bucket, Key="replaced", CopySource={"Bucket": bucket, "Key": "src"},
                   TaggingDirective="REPLACE", Tagging="b=2")
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="replaced")) == [("b", "2")]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big", Tagging="Hello=World&foo=bar")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="big", UploadId=upload, PartNumber=1, Body=b"part")
    s3.complete_multipart_upload(Bucket=bucket, Key="big", UploadId=upload,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert tag_list(s3.get_object_tagging(Bucket=bucket, Key="big")) == [("Hello", "World"), ("foo", "bar")]


def test_bucket_tags_round_trip(s3, bucket):
    assert s3_error(s3.get_bucket_tagging, Bucket=bucket) == ("NoSuchTagSet", 404)
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "team", "Value": "web"}]})
    assert tag_list(s3.get_bucket_tagging(Bucket=bucket)) == [("team", "web")]
    s3.delete_bucket_tagging(Bucket=bucket)
    assert s3_error(s3.get_bucket_tagging, Bucket=bucket) == ("NoSuchTagSet", 404)

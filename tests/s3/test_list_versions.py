"""Listings as tools use them: ListObjectVersions (every object as version null; what bucket clean-up tools call
first), its paginator, the clean-up pattern that deletes what it lists with VersionId null, awscli's
list-object-versions, max-keys 0, and a v1 listing under a folder-marker object."""

import json


def test_list_object_versions_lists_every_object_as_version_null(s3, bucket):
    keys = ["a", "dir/1", "dir/2", "z"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"xy")
    response = s3.list_object_versions(Bucket=bucket)
    versions = response["Versions"]
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in versions] == [
        (k, "null", True, 2) for k in keys
    ]
    assert "DeleteMarkers" not in response
    assert response["IsTruncated"] is False
    grouped = s3.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [v["Key"] for v in grouped["Versions"]] == ["a", "z"]
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["dir/"]


def test_clean_up_by_versions_empties_the_bucket(s3, bucket):
    for i in range(7):
        s3.put_object(Bucket=bucket, Key=f"k{i}", Body=b"v")
    pages = list(s3.get_paginator("list_object_versions").paginate(Bucket=bucket, PaginationConfig={"PageSize": 3}))
    assert [len(p.get("Versions", [])) for p in pages] == [3, 3, 1]
    listed = [{"Key": v["Key"], "VersionId": v["VersionId"]} for p in pages for v in p.get("Versions", [])]
    deleted = s3.delete_objects(Bucket=bucket, Delete={"Objects": listed})
    assert len(deleted["Deleted"]) == 7 and deleted.get("Errors", []) == []
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_awscli_list_object_versions(aws, s3, bucket):
    s3.put_object(Bucket=bucket, Key="one", Body=b"1")
    out = json.loads(aws("s3api", "list-object-versions", "--bucket", bucket, "--output", "json"))
    assert [(v["Key"], v["VersionId"]) for v in out["Versions"]] == [("one", "null")]
    location = json.loads(aws("s3api", "get-bucket-location", "--bucket", bucket, "--output", "json"))
    assert location.get("LocationConstraint") is None


def test_max_keys_zero_is_empty_and_not_truncated(s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    v2 = s3.list_objects_v2(Bucket=bucket, MaxKeys=0)
    assert (v2["KeyCount"], v2["IsTruncated"], "Contents" in v2) == (0, False, False)
    v1 = s3.list_objects(Bucket=bucket, MaxKeys=0)
    assert (v1["IsTruncated"], "Contents" in v1) == (False, False)


def test_v1_paging_under_a_folder_marker_lists_every_key(s3, bucket):
    for key in ("dir/", "dir/a", "dir/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"")
    paginator = s3.get_paginator("list_objects")
    pages = paginator.paginate(Bucket=bucket, Prefix="dir/", Delimiter="/", PaginationConfig={"PageSize": 1})
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == ["dir/", "dir/a", "dir/b"]

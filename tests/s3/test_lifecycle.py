"""Bucket lifecycle through boto3 and awscli: expiration rules by prefix and days are kept, shown, removed, and
announced in `x-amz-expiration` (boto3's `Expiration`) on PUT, GET and HEAD; what the server does not apply is
refused by name. That the server's gc loop deletes expired objects is tested in-process with a clock the test moves
(crates/saltblob-server/tests/integration/lifecycle.rs): this server runs on the real clock."""

import datetime
import json
import re

from s3util import s3_error

RULES = {
    "Rules": [
        {"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 7}},
        {"ID": "old logs", "Filter": {"Prefix": "logs/"}, "Status": "Disabled", "Expiration": {"Days": 30}},
    ]
}

EXPIRATION = re.compile(r'^expiry-date="([^"]+)", rule-id="([^"]+)"$')


def expected_expiry(last_modified, days):
    """S3's rule: the creation time plus the days, rounded up to the next midnight UTC."""
    due = last_modified + datetime.timedelta(days=days)
    return datetime.datetime(due.year, due.month, due.day, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=1)


def test_boto3_puts_gets_and_deletes_rules(s3, bucket):
    assert s3_error(s3.get_bucket_lifecycle_configuration, Bucket=bucket) == ("NoSuchLifecycleConfiguration", 404)
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=RULES)
    rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [(r["ID"], r["Filter"]["Prefix"], r["Status"], r["Expiration"]["Days"]) for r in rules] == [
        ("tmp", "tmp/", "Enabled", 7),
        ("old logs", "logs/", "Disabled", 30),
    ]
    s3.delete_bucket_lifecycle(Bucket=bucket)
    assert s3_error(s3.get_bucket_lifecycle_configuration, Bucket=bucket) == ("NoSuchLifecycleConfiguration", 404)


def test_objects_under_an_enabled_rule_say_when_they_expire(s3, bucket):
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=RULES)
    put = s3.put_object(Bucket=bucket, Key="tmp/a.bin", Body=b"short-lived")
    head = s3.head_object(Bucket=bucket, Key="tmp/a.bin")
    get = s3.get_object(Bucket=bucket, Key="tmp/a.bin")
    assert get["Body"].read() == b"short-lived"
    for answer in (put, head, get):
        match = EXPIRATION.match(answer["Expiration"])
        assert match, answer["Expiration"]
        when = datetime.datetime.strptime(match.group(1), "%a, %d %b %Y %H:%M:%S GMT").replace(
            tzinfo=datetime.timezone.utc
        )
        assert when == expected_expiry(head["LastModified"], 7)
        assert match.group(2) == "tmp"
    # The disabled rule and keys outside every rule: no expiry.
    for key in ("logs/x", "other/y"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"kept")
        assert "Expiration" not in s3.head_object(Bucket=bucket, Key=key)


def test_what_is_not_applied_is_refused_and_the_rest_is_kept(s3, bucket):
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration=RULES)
    refused = [
        (
            {"ID": "t", "Filter": {"Prefix": "a/"}, "Status": "Enabled", "Transitions": [{"Days": 30, "StorageClass": "GLACIER"}]},
            ("NotImplemented", 501),
        ),
        ({"ID": "t", "Filter": {}, "Status": "Enabled", "Expiration": {"Days": 0}}, ("InvalidArgument", 400)),
        (
            {"ID": "t", "Filter": {}, "Status": "Enabled", "Expiration": {"Date": datetime.datetime(2030, 1, 1, 12)}},
            ("InvalidArgument", 400),
        ),
        (
            {"ID": "t", "Filter": {"Tag": {"Key": "k", "Value": "v"}}, "Status": "Enabled",
             "Expiration": {"ExpiredObjectDeleteMarker": True}},
            ("InvalidRequest", 400),
        ),
    ]
    for rule, answer in refused:
        assert s3_error(
            s3.put_bucket_lifecycle_configuration, Bucket=bucket, LifecycleConfiguration={"Rules": [rule]}
        ) == answer, rule
    # The rules in force stay.
    assert [r["ID"] for r in s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]] == ["tmp", "old logs"]
    # Tags, dates, noncurrent versions and multipart aborts are applied, and shown as given.
    applied = [
        {"ID": "tag", "Filter": {"Tag": {"Key": "k", "Value": "v"}}, "Status": "Enabled", "Expiration": {"Days": 1}},
        {"ID": "date", "Filter": {}, "Status": "Enabled", "Expiration": {"Date": datetime.datetime(2030, 1, 1)}},
        {"ID": "abort", "Filter": {}, "Status": "Enabled", "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 3}},
        {"ID": "nc", "Filter": {"Prefix": "v/"}, "Status": "Enabled", "NoncurrentVersionExpiration": {"NoncurrentDays": 2}},
    ]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": applied})
    shown = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    assert [r["ID"] for r in shown] == ["tag", "date", "abort", "nc"]
    assert shown[0]["Filter"] == {"Tag": {"Key": "k", "Value": "v"}}
    assert shown[2]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}
    assert shown[3]["NoncurrentVersionExpiration"]["NoncurrentDays"] == 2


def test_awscli_puts_gets_and_deletes_rules(aws, bucket, tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    aws("s3api", "put-bucket-lifecycle-configuration", "--bucket", bucket, "--lifecycle-configuration", f"file://{rules}")
    shown = json.loads(aws("s3api", "get-bucket-lifecycle-configuration", "--bucket", bucket))
    assert [(r["ID"], r["Filter"]["Prefix"], r["Expiration"]["Days"]) for r in shown["Rules"]] == [
        ("tmp", "tmp/", 7),
        ("old logs", "logs/", 30),
    ]
    aws("s3api", "delete-bucket-lifecycle", "--bucket", bucket)
    assert "NoSuchLifecycleConfiguration" in aws.fails("s3api", "get-bucket-lifecycle-configuration", "--bucket", bucket)

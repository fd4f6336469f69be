"""Multipart uploads through boto3's low-level calls: parts sent out of order, listed, completed (ETag
`MD5-of-part-MD5s-N`); completion with a missing part, a wrong part ETag, parts out of order; an aborted upload
leaves nothing once `saltblob gc` has run."""

import hashlib
import json
import os
import subprocess

import pytest
from s3util import MIB, make_client, multipart_etag, new_bucket_name, pattern_bytes, s3_error
from saltblob_server import Server, sibling_store

PART = 5 * MIB  # S3's smallest part but the last


def upload_parts(s3, bucket, key, upload_id, parts, order):
    """Uploads PARTS (a list of bytes; part number = index + 1) in ORDER (part numbers); returns
    [{"PartNumber", "ETag"}] by part number."""
    etags = {}
    for number in order:
        response = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=parts[number - 1])
        etags[number] = response["ETag"]
    return [{"PartNumber": n, "ETag": etags[n]} for n in sorted(etags)]


def three_parts(seed):
    return [pattern_bytes(PART, seed), pattern_bytes(PART, seed + 1), pattern_bytes(MIB + 7, seed + 2)]


def test_multipart_upload_out_of_order_listed_and_completed(s3, bucket):
    parts = three_parts(seed=10)
    created = s3.create_multipart_upload(
        Bucket=bucket, Key="mp/object", ContentType="application/x-parts", Metadata={"origin": "multipart"}
    )
    upload_id = created["UploadId"]
    assert [(u["Key"], u["UploadId"]) for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [
        ("mp/object", upload_id)
    ]
    completed_parts = upload_parts(s3, bucket, "mp/object", upload_id, parts, order=[3, 1, 2])
    assert [p["ETag"] for p in completed_parts] == [f'"{hashlib.md5(p).hexdigest()}"' for p in parts]

    listed = s3.list_parts(Bucket=bucket, Key="mp/object", UploadId=upload_id)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in listed] == [
        (c["PartNumber"], len(parts[c["PartNumber"] - 1]), c["ETag"]) for c in completed_parts
    ]
    # Not visible before completion.
    assert s3_error(s3.head_object, Bucket=bucket, Key="mp/object") == ("404", 404)

    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp/object", UploadId=upload_id, MultipartUpload={"Parts": completed_parts}
    )
    want_etag = multipart_etag([hashlib.md5(p).digest() for p in parts])
    assert done["ETag"] == want_etag
    got = s3.get_object(Bucket=bucket, Key="mp/object")
    assert (got["ETag"], got["ContentType"], got["Metadata"], got["ContentLength"]) == (
        want_etag,
        "application/x-parts",
        {"origin": "multipart"},
        sum(map(len, parts)),
    )
    assert got["Body"].read() == b"".join(parts)
    # A range across the boundary of parts 1 and 2.
    ranged = s3.get_object(Bucket=bucket, Key="mp/object", Range=f"bytes={PART - 10}-{PART + 9}")
    assert ranged["Body"].read() == parts[0][-10:] + parts[1][:10]
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_bad_completions_are_refused_and_keep_the_upload(s3, bucket):
    parts = three_parts(seed=20)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp/bad")["UploadId"]
    good = upload_parts(s3, bucket, "mp/bad", upload_id, parts, order=[1, 2, 3])

    def complete(part_list):
        return s3.complete_multipart_upload(
            Bucket=bucket, Key="mp/bad", UploadId=upload_id, MultipartUpload={"Parts": part_list}
        )

    missing = good[:2] + [{"PartNumber": 4, "ETag": good[2]["ETag"]}]
    assert s3_error(complete, missing) == ("InvalidPart", 400)
    wrong_etag = good[:2] + [{"PartNumber": 3, "ETag": '"0123456789abcdef0123456789abcdef"'}]
    assert s3_error(complete, wrong_etag) == ("InvalidPart", 400)
    assert s3_error(complete, [good[1], good[0], good[2]]) == ("InvalidPartOrder", 400)
    assert s3_error(s3.head_object, Bucket=bucket, Key="mp/bad") == ("404", 404)
    # The upload is still there, whole, and completes.
    assert len(s3.list_parts(Bucket=bucket, Key="mp/bad", UploadId=upload_id)["Parts"]) == 3
    complete(good)
    assert s3.get_object(Bucket=bucket, Key="mp/bad")["Body"].read() == b"".join(parts)


def test_unknown_upload_is_no_such_upload_missing_bucket_no_such_bucket(s3, bucket):
    assert s3_error(s3.create_multipart_upload, Bucket=new_bucket_name(), Key="k") == ("NoSuchBucket", 404)
    assert s3_error(s3.upload_part, Bucket=bucket, Key="k", UploadId="no-such-upload", PartNumber=1, Body=b"x") == (
        "NoSuchUpload",
        404,
    )
    assert s3_error(s3.list_parts, Bucket=bucket, Key="k", UploadId="no-such-upload") == ("NoSuchUpload", 404)


def saltblob_json(saltblob_bin, store_url, *args):
    """Runs `saltblob --store URL ARGS… --json` (with the server stopped: the embedded store has one owner)."""
    done = subprocess.run(
        [saltblob_bin, "--quiet", "--store", store_url, *args, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"saltblob {' '.join(args)} failed:\n{done.stderr}"
    assert done.stdout.strip(), f"saltblob {' '.join(args)} printed no JSON:\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture
def private_server(saltblob_bin, work_dir):
    """A server of its own on a fresh store of the session store's kind (stopped and restarted by the test)."""
    store = sibling_store(os.environ["S3_TEST_STORE"], f"gc{os.getpid()}")
    srv = Server(saltblob_bin, store, work_dir / "server-gc.log", pid_dir=work_dir)
    yield srv
    srv.stop()


def test_aborted_upload_leaves_nothing_after_gc(private_server, saltblob_bin):
    def client():
        return make_client(private_server.endpoint, private_server.access_key, private_server.secret_key)

    private_server.start()
    s3 = client()
    s3.create_bucket(Bucket="gc-test")
    upload_id = s3.create_multipart_upload(Bucket="gc-test", Key="abandoned")["UploadId"]
    upload_parts(s3, "gc-test", "abandoned", upload_id, three_parts(seed=30), order=[2, 1, 3])
    s3.abort_multipart_upload(Bucket="gc-test", Key="abandoned", UploadId=upload_id)
    assert s3.list_multipart_uploads(Bucket="gc-test").get("Uploads", []) == []
    assert s3_error(s3.list_parts, Bucket="gc-test", Key="abandoned", UploadId=upload_id) == ("NoSuchUpload", 404)

    # gc with the server stopped: the embedded store allows one process (the CQL store would not need this).
    assert private_server.stop() == 0
    saltblob_json(saltblob_bin, private_server.store_url, "gc", "--grace", "0s")
    fsck = saltblob_json(saltblob_bin, private_server.store_url, "fsck")
    # The parts' 11 MiB were chunked: no chunk of them may be left, referenced or not.
    assert (fsck["chunks"], fsck["orphans"], fsck["damaged"], fsck["awaiting_reclaim"]) == (0, [], [], 0), fsck

    private_server.start()
    s3 = client()
    assert s3.list_multipart_uploads(Bucket="gc-test").get("Uploads", []) == []
    assert s3.list_objects_v2(Bucket="gc-test")["KeyCount"] == 0

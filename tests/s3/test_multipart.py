"""Multipart uploads through boto3's low-level calls: parts sent out of order, listed, completed (ETag
`MD5-of-part-MD5s-N`); completion with a missing part, a wrong part ETag, parts out of order; a repeated
completion; full-object and composite checksums; UploadPartCopy; ListMultipartUploads by key with markers and
prefixes; DeleteBucket aborting pending uploads; s3transfer's managed upload with its default checksums; an
aborted upload leaves nothing once `saltblob gc` has run."""

import base64
import hashlib
import io
import json
import os
import subprocess
import time

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


# The intent lease of the gc test's server: a part given up is reclaimable one lease after (docs/s3.md).
LEASE_S = 2


@pytest.fixture
def private_server(saltblob_bin, work_dir):
    """A server of its own on a fresh store of the session store's kind (stopped and restarted by the test),
    with a short intent lease."""
    store = sibling_store(os.environ["S3_TEST_STORE"], f"gc{os.getpid()}")
    srv = Server(
        saltblob_bin, store, work_dir / "server-gc.log", pid_dir=work_dir, extra_args=["--intent-lease", f"{LEASE_S}s"]
    )
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

    # gc with the server stopped: the embedded store allows one process (the CQL store would not need this). The
    # parts given up are reclaimable once their lease, ended one lease after the abort, is over (on Cassandra, and
    # the commit window after that: the test then only checks that nothing is damaged).
    assert private_server.stop() == 0
    time.sleep(LEASE_S + 1)
    if private_server.store_url.startswith("cql://"):
        fsck = saltblob_json(saltblob_bin, private_server.store_url, "fsck")
        assert fsck["damaged"] == [], fsck
        return
    saltblob_json(saltblob_bin, private_server.store_url, "gc", "--grace", "0s")
    fsck = saltblob_json(saltblob_bin, private_server.store_url, "fsck")
    # The parts' 11 MiB were chunked: no chunk of them may be left, referenced or not.
    assert (fsck["chunks"], fsck["orphans"], fsck["damaged"], fsck["awaiting_reclaim"]) == (0, [], [], 0), fsck

    private_server.start()
    s3 = client()
    assert s3.list_multipart_uploads(Bucket="gc-test").get("Uploads", []) == []
    assert s3.list_objects_v2(Bucket="gc-test")["KeyCount"] == 0


def test_repeated_complete_answers_200_with_the_same_etag(s3, bucket):
    parts = three_parts(seed=40)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mp/again")["UploadId"]
    listed = upload_parts(s3, bucket, "mp/again", upload_id, parts, order=[1, 2, 3])
    first = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp/again", UploadId=upload_id, MultipartUpload={"Parts": listed}
    )
    again = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp/again", UploadId=upload_id, MultipartUpload={"Parts": listed}
    )
    assert (again["ETag"], again["Key"], again["Location"]) == (first["ETag"], first["Key"], first["Location"])
    assert s3_error(s3.abort_multipart_upload, Bucket=bucket, Key="mp/again", UploadId=upload_id) == (
        "NoSuchUpload",
        404,
    )
    assert s3_error(
        s3.complete_multipart_upload,
        Bucket=bucket,
        Key="mp/again",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1}]},
    ) == ("MalformedXML", 400)


def b64(digest):
    return base64.b64encode(digest).decode()


def test_full_object_and_composite_checksums(s3, bucket):
    """CRC32 full-object and SHA256 composite uploads through botocore's own checksum support (CRC32C and
    CRC64NVME need botocore's optional CRT; the Rust tests cover them): the parts carry the checksum (a trailer
    botocore computes), the object's checksum comes back from Complete, HeadObject and ListParts, and GetObject
    with checksum mode is validated by botocore against the body."""
    parts = three_parts(seed=50)
    whole = b"".join(parts)

    key = "mp/crc32"
    created = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT")
    assert (created["ChecksumAlgorithm"], created["ChecksumType"]) == ("CRC32", "FULL_OBJECT")
    upload_id = created["UploadId"]
    listed = []
    for number, data in enumerate(parts, 1):
        r = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data, ChecksumAlgorithm="CRC32"
        )
        listed.append({"PartNumber": number, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    part_list = s3.list_parts(Bucket=bucket, Key=key, UploadId=upload_id)
    assert (part_list["ChecksumAlgorithm"], part_list["ChecksumType"]) == ("CRC32", "FULL_OBJECT")
    assert [p["ChecksumCRC32"] for p in part_list["Parts"]] == [p["ChecksumCRC32"] for p in listed]
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}, ChecksumType="FULL_OBJECT"
    )
    assert done["ChecksumType"] == "FULL_OBJECT"
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert (head["ChecksumCRC32"], head["ChecksumType"]) == (done["ChecksumCRC32"], "FULL_OBJECT")
    # botocore checks the full-object CRC32 against the body it reads.
    assert s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")["Body"].read() == whole

    key = "mp/sha256"
    created = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256")
    assert created["ChecksumType"] == "COMPOSITE"
    upload_id = created["UploadId"]
    assert s3_error(
        s3.upload_part,
        Bucket=bucket,
        Key=key,
        UploadId=upload_id,
        PartNumber=1,
        Body=parts[0],
        ChecksumAlgorithm="CRC32",
    ) == ("InvalidRequest", 400)
    listed = []
    for number, data in enumerate(parts, 1):
        r = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data, ChecksumAlgorithm="SHA256"
        )
        assert r["ChecksumSHA256"] == b64(hashlib.sha256(data).digest())
        listed.append({"PartNumber": number, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]})
    without = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]} for p in listed]
    assert s3_error(
        s3.complete_multipart_upload, Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": without}
    ) == ("InvalidRequest", 400)
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed})
    composite = b64(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()) + "-3"
    assert (done["ChecksumSHA256"], done["ChecksumType"]) == (composite, "COMPOSITE")
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert (head["ChecksumSHA256"], head["ChecksumType"]) == (composite, "COMPOSITE")
    assert s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")["Body"].read() == whole


def test_managed_upload_with_default_checksums(s3, bucket):
    """s3transfer's managed upload (what `upload_file` and `aws s3 cp` use), with botocore's default checksums,
    in 5 MiB parts sent by several threads."""
    from boto3.s3.transfer import TransferConfig

    data = pattern_bytes(17 * MIB + 3, seed=60)
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=4)
    s3.upload_fileobj(io.BytesIO(data), bucket, "mp/managed", Config=config)
    head = s3.head_object(Bucket=bucket, Key="mp/managed", ChecksumMode="ENABLED")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-4"'), head
    got = io.BytesIO()
    s3.download_fileobj(bucket, "mp/managed", got)
    assert got.getvalue() == data


def test_upload_part_copy(s3, bucket):
    source = pattern_bytes(6 * MIB + 5, seed=70)
    put = s3.put_object(Bucket=bucket, Key="copy/source", Body=source)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="copy/target")["UploadId"]

    def copy(number, **kwargs):
        return s3.upload_part_copy(
            Bucket=bucket,
            Key="copy/target",
            UploadId=upload_id,
            PartNumber=number,
            CopySource={"Bucket": bucket, "Key": "copy/source"},
            **kwargs,
        )

    first = copy(1, CopySourceRange=f"bytes=0-{PART - 1}")["CopyPartResult"]
    assert first["ETag"] == f'"{hashlib.md5(source[:PART]).hexdigest()}"'
    assert s3_error(copy, 2, CopySourceRange=f"bytes={PART}-{len(source) - 1}", CopySourceIfMatch='"0"') == (
        "PreconditionFailed",
        412,
    )
    assert s3_error(copy, 2, CopySourceRange=f"bytes={PART}-{len(source)}") == ("InvalidRange", 416)
    second = copy(2, CopySourceRange=f"bytes={PART}-{len(source) - 1}", CopySourceIfMatch=put["ETag"])["CopyPartResult"]
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="copy/target",
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": second["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="copy/target")["Body"].read() == source


def test_list_multipart_uploads_by_key_with_markers_and_prefixes(s3, bucket):
    ids = {}
    for key in ["b/2", "a", "c", "b/1", "a"]:
        ids.setdefault(key, []).append(s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"])
    order = [("a", ids["a"][0]), ("a", ids["a"][1]), ("b/1", ids["b/1"][0]), ("b/2", ids["b/2"][0]), ("c", ids["c"][0])]

    def uploads(page):
        return [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]

    assert uploads(s3.list_multipart_uploads(Bucket=bucket)) == order
    seen = []
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, PaginationConfig={"PageSize": 2}):
        seen += uploads(page)
    assert seen == order
    rolled = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert uploads(rolled) == [order[0], order[1], order[4]]
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["b/"]
    assert uploads(s3.list_multipart_uploads(Bucket=bucket, Prefix="b/")) == order[2:4]


def test_delete_bucket_aborts_pending_uploads(s3):
    name = new_bucket_name()
    s3.create_bucket(Bucket=name)
    upload_id = s3.create_multipart_upload(Bucket=name, Key="pending")["UploadId"]
    s3.upload_part(Bucket=name, Key="pending", UploadId=upload_id, PartNumber=1, Body=b"part")
    s3.put_object(Bucket=name, Key="object", Body=b"x")
    assert s3_error(s3.delete_bucket, Bucket=name) == ("BucketNotEmpty", 409)
    s3.delete_object(Bucket=name, Key="object")
    s3.delete_bucket(Bucket=name)
    assert s3_error(s3.head_bucket, Bucket=name)[1] == 404

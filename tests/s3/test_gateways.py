"""Many gateways, one store: three `saltblob serve` processes on one Cassandra keyspace (loopback, different ports,
the same access key) behave as one S3 endpoint. Parts go through different servers and the completion through a
third; listings, a repeated completion, racing completions and an abort go through any of them; one server runs
its gc pass (with the sweep of uploads) every second throughout, and `saltblob gc` runs from outside, and nothing
committed is lost.

On the embedded store a second process cannot open the same RocksDB directory (it is locked by the first), so
these tests are skipped there; scripts/test.sh runs them in its Cassandra step (`s3-clients-cassandra`)."""

import hashlib
import os
import threading

import pytest
from s3util import MIB, make_client, multipart_etag, new_bucket_name, pattern_bytes, s3_error
from saltblob_server import Server
from test_multipart import saltblob_json

PART = 5 * MIB

pytestmark = pytest.mark.skipif(
    not os.environ.get("S3_TEST_STORE", "").startswith("cql://"),
    reason="a second `saltblob serve` cannot open the same RocksDB directory (one process owns an embedded store): "
    "the gateway tests run against Cassandra (scripts/test.sh, step s3-clients-cassandra)",
)


@pytest.fixture(scope="module")
def gateways(server, saltblob_bin, work_dir):
    """Clients of the session's server and of two more on the same store and key; the third runs gc every second."""
    others = []
    for n, extra in [(1, []), (2, ["--gc-every", "1s"])]:
        srv = Server(
            saltblob_bin,
            server.store_url,
            work_dir / f"server-gateway{n}.log",
            pid_dir=work_dir,
            extra_args=extra,
        )
        srv.access_key, srv.secret_key = server.access_key, server.secret_key
        others.append(srv.start())
    yield [make_client(s.endpoint, s.access_key, s.secret_key) for s in [server, *others]]
    for srv in others:
        srv.stop()


@pytest.fixture
def shared_bucket(gateways):
    name = new_bucket_name()
    gateways[0].create_bucket(Bucket=name)
    yield name
    g = gateways[1]
    for upload in g.list_multipart_uploads(Bucket=name).get("Uploads", []):
        g.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    for page in g.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            g.delete_object(Bucket=name, Key=o["Key"])
    g.delete_bucket(Bucket=name)


def parts_of(seed):
    return [pattern_bytes(PART, seed), pattern_bytes(PART, seed + 1), pattern_bytes(MIB + 3, seed + 2)]


def test_parts_through_different_gateways_complete_through_a_third(gateways, shared_bucket):
    g0, g1, g2 = gateways
    key = "gw/object"
    parts = parts_of(seed=1)
    upload_id = g0.create_multipart_upload(Bucket=shared_bucket, Key=key)["UploadId"]
    listed = []
    for number, (data, gateway) in enumerate(zip(parts, [g1, g2, g0]), 1):
        r = gateway.upload_part(Bucket=shared_bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        listed.append({"PartNumber": number, "ETag": r["ETag"]})
    for gateway in gateways:
        got = gateway.list_parts(Bucket=shared_bucket, Key=key, UploadId=upload_id)["Parts"]
        assert [(p["PartNumber"], p["ETag"]) for p in got] == [(p["PartNumber"], p["ETag"]) for p in listed]
        uploads = gateway.list_multipart_uploads(Bucket=shared_bucket)["Uploads"]
        assert [(u["Key"], u["UploadId"]) for u in uploads] == [(key, upload_id)]

    done = g2.complete_multipart_upload(
        Bucket=shared_bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}
    )
    want = multipart_etag([hashlib.md5(p).digest() for p in parts])
    assert done["ETag"] == want
    for gateway in gateways:
        assert gateway.get_object(Bucket=shared_bucket, Key=key)["Body"].read() == b"".join(parts)
        assert [o["Key"] for o in gateway.list_objects_v2(Bucket=shared_bucket)["Contents"]] == [key]
        assert gateway.list_multipart_uploads(Bucket=shared_bucket).get("Uploads", []) == []
    # A repeated completion, through another server, answers as the first.
    again = g0.complete_multipart_upload(
        Bucket=shared_bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}
    )
    assert again["ETag"] == want


def test_abort_through_another_gateway(gateways, shared_bucket):
    g0, g1, g2 = gateways
    upload_id = g0.create_multipart_upload(Bucket=shared_bucket, Key="gw/aborted")["UploadId"]
    g1.upload_part(Bucket=shared_bucket, Key="gw/aborted", UploadId=upload_id, PartNumber=1, Body=b"part")
    g2.abort_multipart_upload(Bucket=shared_bucket, Key="gw/aborted", UploadId=upload_id)
    for gateway in gateways:
        assert gateway.list_multipart_uploads(Bucket=shared_bucket).get("Uploads", []) == []
        assert s3_error(gateway.list_parts, Bucket=shared_bucket, Key="gw/aborted", UploadId=upload_id) == (
            "NoSuchUpload",
            404,
        )
    assert s3_error(
        g1.upload_part, Bucket=shared_bucket, Key="gw/aborted", UploadId=upload_id, PartNumber=2, Body=b"late"
    ) == ("NoSuchUpload", 404)


def test_racing_completions_through_two_gateways(gateways, shared_bucket, saltblob_bin, server):
    g0, g1, g2 = gateways
    key = "gw/raced"
    parts = parts_of(seed=20)
    upload_id = g0.create_multipart_upload(Bucket=shared_bucket, Key=key)["UploadId"]
    listed = []
    for number, data in enumerate(parts, 1):
        r = g0.upload_part(Bucket=shared_bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data)
        listed.append({"PartNumber": number, "ETag": r["ETag"]})
    answers = []

    def complete(gateway):
        try:
            answers.append(
                gateway.complete_multipart_upload(
                    Bucket=shared_bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed}
                )["ETag"]
            )
        except Exception as e:  # noqa: BLE001 - reported below
            answers.append(e)

    threads = [threading.Thread(target=complete, args=(g,)) for g in (g1, g2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    want = multipart_etag([hashlib.md5(p).digest() for p in parts])
    # Each answers 200 with the object's ETag (the second either resolves the first or composes the same parts).
    assert answers == [want, want], answers

    # gc from outside (a fourth client of the store), with no grace: nothing of the object goes.
    saltblob_json(saltblob_bin, server.store_url, "gc", "--grace", "0s")
    fsck = saltblob_json(saltblob_bin, server.store_url, "fsck", "--prefix", f"s3/o/{shared_bucket}/")
    assert fsck["damaged"] == [], fsck
    for gateway in gateways:
        assert gateway.get_object(Bucket=shared_bucket, Key=key)["Body"].read() == b"".join(parts)

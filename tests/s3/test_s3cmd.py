"""s3cmd (from PyPI, tests/s3/requirements.txt) against the server: put and get of small files and of a file
above its multipart chunk size (lowered to 5 MiB, so 12 MiB is three parts), each verified byte for byte and by
s3cmd's own MD5 check; ls, la and du; cp and mv (CopyObject); sync up with --delete-removed and back; del and rb;
public ACLs (`--acl-public`, `setacl`) read back by unsigned requests; and the refusals a user of its options
meets: server-side encryption (501 NotImplemented), with nothing stored.

s3cmd signs with SigV4 and a SHA-256 of every body (no aws-chunked), sends `x-amz-meta-s3cmd-attrs`, and asks a
bucket's location before most calls. Its configuration file is written here (path style, plain HTTP, one retry);
no ~/.s3cfg is read. A retry would show as "Retrying" or "Waiting" in its stderr: the tests require none."""

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from s3util import CLIENT_FILES, MIB, REGION, file_sha256, run_tool, tree_hashes, write_files, write_pattern_file

KIB = 1024
S3CMD_TIMEOUT_S = 300


class S3cmd:
    """Runs s3cmd (the virtual environment's) with a configuration for the session's server."""

    def __init__(self, server, config_dir):
        host = server.endpoint.removeprefix("http://")
        self.config = config_dir / "s3cfg"
        self.config.write_text(
            "[default]\n"
            f"access_key = {server.access_key}\n"
            f"secret_key = {server.secret_key}\n"
            f"host_base = {host}\n"
            f"host_bucket = {host}\n"
            f"bucket_location = {REGION}\n"
            "use_https = False\n"
            "signature_v2 = False\n"
            "progress_meter = False\n"
            "max_retries = 1\n"
        )
        self.executable = str(Path(sys.executable).parent / "s3cmd")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}

    def run(self, *args):
        """(exit code, stdout, stderr) of `s3cmd -c CONFIG ARGS…`."""
        return run_tool([sys.executable, self.executable, "-c", str(self.config), *args], self.env, S3CMD_TIMEOUT_S)

    def __call__(self, *args):
        """Runs s3cmd ARGS…; returns its output; fails the test on an error, a warning of a retry, or an MD5
        mismatch it reports."""
        code, out, err = self.run(*args)
        if code != 0 or any(word in err for word in ("Retrying", "Waiting", "MD5 signatures do not match")):
            pytest.fail(f"s3cmd {' '.join(args)} exited with {code}:\n{err[-3000:]}")
        return out


@pytest.fixture(scope="module")
def s3cmd(server, tmp_path_factory):
    return S3cmd(server, tmp_path_factory.mktemp("s3cmd-config"))


MULTIPART = ["--multipart-chunk-size-mb=5"]

FILES = CLIENT_FILES


def make_files(root, files=FILES):
    return write_files(root, files, seed=500)


def ls_objects(output):
    """{url: size} of `s3cmd ls` lines "DATE TIME SIZE s3://…" (directories, "DIR s3://…", left out)."""
    objects = {}
    for line in output.splitlines():
        fields = line.split(None, 3)
        if len(fields) == 4 and fields[3].startswith("s3://"):
            objects[fields[3]] = int(fields[2])
    return objects


def test_put_and_get_small_and_multipart_files(s3cmd, s3, bucket, tmp_path):
    src = tmp_path / "src"
    want = make_files(src, {"small.bin": 70 * KIB, "big.bin": 12 * MIB, "empty.bin": 0})
    for name in want:
        s3cmd("put", *MULTIPART, str(src / name), f"s3://{bucket}/p/{name}")
    # 12 MiB in 5 MiB parts: a multipart upload of three.
    assert s3.head_object(Bucket=bucket, Key="p/big.bin")["ETag"].endswith('-3"')
    assert s3.head_object(Bucket=bucket, Key="p/small.bin")["ContentLength"] == 70 * KIB
    down = tmp_path / "down"
    down.mkdir()
    for name in want:
        s3cmd("get", f"s3://{bucket}/p/{name}", str(down / name))
    assert tree_hashes(down) == want
    # The attributes s3cmd stores with each object came back (its MD5 among them).
    meta = s3.head_object(Bucket=bucket, Key="p/big.bin")["Metadata"]
    assert "s3cmd-attrs" in meta and "md5:" in meta["s3cmd-attrs"], meta


def info_fields(output):
    """{field: value} of `s3cmd info` lines "   Field: value"."""
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in output.splitlines()[1:]) if v}


def test_ls_la_du_and_info(s3cmd, s3, bucket):
    for key, size in {"docs/a.txt": 1, "docs/sub/c.txt": 333, "top.txt": 5}.items():
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * size)
    top = s3cmd("ls", f"s3://{bucket}/")
    assert f"DIR  s3://{bucket}/docs/" in top
    assert ls_objects(top) == {f"s3://{bucket}/top.txt": 5}
    assert ls_objects(s3cmd("ls", "--recursive", f"s3://{bucket}/")) == {
        f"s3://{bucket}/docs/a.txt": 1,
        f"s3://{bucket}/docs/sub/c.txt": 333,
        f"s3://{bucket}/top.txt": 5,
    }
    assert f"s3://{bucket}" in s3cmd("ls")
    assert f"s3://{bucket}/top.txt" in s3cmd("la")
    assert s3cmd("du", f"s3://{bucket}/").split()[0] == "339"
    # info reads the object's ACL, and the bucket's settings: each answered as AWS answers for a bucket with
    # ACLs disabled and nothing else configured (s3cmd shows "none" for what it could not read).
    info = info_fields(s3cmd("info", f"s3://{bucket}/top.txt"))
    assert info["File size"] == "5" and info["ACL"] == "saltblob: FULL_CONTROL", info
    info = info_fields(s3cmd("info", f"s3://{bucket}"))
    assert info["Location"] == REGION, info
    assert info["Payer"] == "BucketOwner" and info["Ownership"] == "BucketOwnerPreferred", info
    assert info["ACL"] == "saltblob: FULL_CONTROL", info
    assert info["Policy"] == "none" and info["CORS"] == "none" and info["Versioning"] == "none", info


def test_cp_and_mv_on_the_server(s3cmd, s3, bucket, tmp_path):
    src = tmp_path / "src.bin"
    sha = write_pattern_file(src, 6 * MIB, seed=21)
    s3cmd("put", *MULTIPART, str(src), f"s3://{bucket}/a/src.bin")
    s3cmd("cp", f"s3://{bucket}/a/src.bin", f"s3://{bucket}/b/copy.bin")
    s3cmd("mv", f"s3://{bucket}/b/copy.bin", f"s3://{bucket}/c/moved.bin")
    keys = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"a/src.bin": 6 * MIB, "c/moved.bin": 6 * MIB}
    back = tmp_path / "back.bin"
    s3cmd("get", f"s3://{bucket}/c/moved.bin", str(back))
    assert file_sha256(back) == sha


def test_sync_up_with_delete_and_back_then_rb(s3cmd, s3, tmp_path):
    bucket = f"s3cmd-{os.getpid()}"
    up, down = tmp_path / "up", tmp_path / "down"
    want = make_files(up)
    s3cmd("mb", f"s3://{bucket}")
    s3cmd("sync", *MULTIPART, f"{up}/", f"s3://{bucket}/tree/")
    listed = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {f"tree/{k}": v for k, v in FILES.items()}

    (up / "one.bin").unlink()
    want.pop("one.bin")
    want["ten-k.bin"] = write_pattern_file(up / "ten-k.bin", 11 * KIB, seed=31)
    out = s3cmd("sync", *MULTIPART, "--delete-removed", f"{up}/", f"s3://{bucket}/tree/")
    assert f"delete: 's3://{bucket}/tree/one.bin'" in out, out
    s3cmd("sync", f"s3://{bucket}/tree/", f"{down}/")
    assert tree_hashes(down) == want
    # Nothing left to do: s3cmd compares sizes and MD5s (ETags, or the MD5 in its attributes for multipart).
    again = s3cmd("sync", *MULTIPART, "--delete-removed", f"{up}/", f"s3://{bucket}/tree/")
    assert "upload:" not in again and "delete:" not in again, again

    s3cmd("del", f"s3://{bucket}/tree/empty.bin")
    s3cmd("del", "--recursive", "--force", f"s3://{bucket}/tree/")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3cmd("rb", f"s3://{bucket}")
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@pytest.mark.parametrize(
    "option, code, status",
    [
        (["--server-side-encryption"], "NotImplemented", "501"),
        (["--server-side-encryption", "--server-side-encryption-kms-id=alias/backups"], "NotImplemented", "501"),
    ],
    ids=["sse-s3", "sse-kms"],
)
@pytest.mark.parametrize("size", [10 * KIB, 6 * MIB], ids=["single", "multipart"])
def test_refused_options_store_nothing(s3cmd, s3, bucket, tmp_path, option, code, status, size):
    src = tmp_path / "secret.bin"
    write_pattern_file(src, size, seed=41)
    exit_code, _, err = s3cmd.run("put", *MULTIPART, *option, str(src), f"s3://{bucket}/secret.bin")
    assert exit_code != 0
    assert code in err and status in err, err[-2000:]
    assert "Retrying" not in err, err[-2000:]
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def anonymous_status(server, path):
    """The status of an unsigned GET of `path` on the server."""
    try:
        with urllib.request.urlopen(server.endpoint + path, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_acl_public_opens_to_unsigned_reads_and_acl_private_closes(s3cmd, s3, server, bucket, tmp_path):
    src = tmp_path / "open.bin"
    write_pattern_file(src, 10 * KIB, seed=43)
    s3cmd("put", "--acl-public", str(src), f"s3://{bucket}/open.bin")
    s3.put_object(Bucket=bucket, Key="closed", Body=b"private")
    assert anonymous_status(server, f"/{bucket}/open.bin") == 200
    assert anonymous_status(server, f"/{bucket}/closed") == 403
    assert anonymous_status(server, f"/{bucket}?list-type=2") == 403
    # setacl reads the ACL, adds or drops everyone's READ and puts the policy back.
    s3cmd("setacl", "--acl-private", f"s3://{bucket}/open.bin")
    assert anonymous_status(server, f"/{bucket}/open.bin") == 403
    s3cmd("setacl", "--acl-public", f"s3://{bucket}/closed")
    assert anonymous_status(server, f"/{bucket}/closed") == 200
    info = s3cmd("info", f"s3://{bucket}/closed")
    assert "*anon*: READ" in info and "saltblob: FULL_CONTROL" in info, info
    s3cmd("setacl", "--acl-public", f"s3://{bucket}")
    assert anonymous_status(server, f"/{bucket}?list-type=2") == 200
    s3cmd("setacl", "--acl-private", f"s3://{bucket}")
    assert anonymous_status(server, f"/{bucket}?list-type=2") == 403



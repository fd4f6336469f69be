"""rclone (Debian's package, scripts/prereqs.sh) against the server: copy up and down of small files and of files
above its multipart cutoff (lowered to 5 MiB, so a 12 MiB file is three parts), `rclone check` of every byte, both
listing versions with awkward key names, server-side copy (CopyObject, and UploadPartCopy above the copy cutoff),
sync that deletes, delete and purge; and the refusal a user of its server-side encryption options meets (SSE-C
rclone itself refuses to send over plain HTTP, before any request).

rclone is given its remote through the environment (RCLONE_CONFIG_SB_*, provider "Other", path style), with an
empty configuration file of its own, so nothing of the machine's rclone set-up is read."""

import json
import os

import pytest
from s3util import CLIENT_FILES, MIB, REGION, run_tool, tree_hashes, write_files, write_pattern_file

KIB = 1024
RCLONE_TIMEOUT_S = 300

# Above the lowered 5 MiB multipart cutoff, twelve-m.bin is three parts (5, 5 and 2 MiB).
FILES = CLIENT_FILES


class Rclone:
    """Runs `rclone` with the remote `sb:` set to the session's server."""

    def __init__(self, server, config_dir):
        config = config_dir / "rclone.conf"
        config.write_text("")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RCLONE_", "AWS_"))} | {
            "RCLONE_CONFIG": str(config),
            "RCLONE_CONFIG_SB_TYPE": "s3",
            "RCLONE_CONFIG_SB_PROVIDER": "Other",
            "RCLONE_CONFIG_SB_ENV_AUTH": "false",
            "RCLONE_CONFIG_SB_ACCESS_KEY_ID": server.access_key,
            "RCLONE_CONFIG_SB_SECRET_ACCESS_KEY": server.secret_key,
            "RCLONE_CONFIG_SB_ENDPOINT": server.endpoint,
            "RCLONE_CONFIG_SB_REGION": REGION,
            "RCLONE_CONFIG_SB_FORCE_PATH_STYLE": "true",
        }

    def run(self, *args):
        """(exit code, stdout, stderr) of `rclone ARGS…` with no retries: an error shows as it is."""
        retries = ["--retries", "1", "--low-level-retries", "1"]
        return run_tool(
            ["rclone", *retries, "--contimeout", "10s", "--timeout", "60s", *args], self.env, RCLONE_TIMEOUT_S
        )

    def __call__(self, *args):
        """Runs `rclone ARGS…`; returns its output; fails the test with its stderr on error."""
        code, out, err = self.run(*args)
        if code != 0:
            pytest.fail(f"rclone {' '.join(args)} exited with {code}:\n{err[-3000:]}")
        return out


@pytest.fixture(scope="module")
def rclone(server, tmp_path_factory):
    return Rclone(server, tmp_path_factory.mktemp("rclone-config"))


# Multipart above 5 MiB, in 5 MiB parts (S3's smallest), and multipart copy above 5 MiB too.
MULTIPART = ["--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "--s3-copy-cutoff", "5M"]


def make_files(root, files=FILES):
    return write_files(root, files, seed=300)


def listing(rclone, path, *extra):
    """{path: size} of the objects under PATH, as `rclone lsjson -R` lists them."""
    return {e["Path"]: e["Size"] for e in json.loads(rclone("lsjson", "-R", "--files-only", *extra, path))}


def test_copy_up_and_down_small_and_multipart_files_identical(rclone, s3, bucket, tmp_path):
    up, down = tmp_path / "up", tmp_path / "down"
    want = make_files(up)
    rclone("copy", *MULTIPART, str(up), f"sb:{bucket}/tree")

    # The 12 MiB file went up as a multipart upload of three parts (its ETag says so).
    head = s3.head_object(Bucket=bucket, Key="tree/dir/sub/twelve-m.bin")
    assert head["ContentLength"] == 12 * MIB
    assert head["ETag"].endswith('-3"'), head["ETag"]

    # Every byte, compared by rclone itself (MD5s: the ETag of single-part objects, the metadata rclone stores for
    # multipart ones) and by downloading.
    rclone("check", "--one-way", str(up), f"sb:{bucket}/tree")
    rclone("copy", f"sb:{bucket}/tree", str(down))
    assert tree_hashes(down) == want


@pytest.mark.parametrize("list_version", ["1", "2"])
def test_listing_both_versions_with_awkward_names(rclone, s3, bucket, list_version):
    for rel, size in FILES.items():
        if size <= 100 * KIB:
            s3.put_object(Bucket=bucket, Key=f"l/{rel}", Body=b"x" * size)
    want = {rel: size for rel, size in FILES.items() if size <= 100 * KIB}
    # Two keys a page: rclone follows the markers (v1) or continuation tokens (v2), keys URL-encoded.
    args = ["--s3-list-version", list_version, "--s3-list-chunk", "2"]
    assert listing(rclone, f"sb:{bucket}/l", *args) == want
    top = json.loads(rclone("lsjson", *args, f"sb:{bucket}/l"))
    assert sorted((e["Path"], e["IsDir"]) for e in top) == [
        ("dir", True),
        ("empty.bin", False),
        ("names", True),
        ("one.bin", False),
        ("ten-k.bin", False),
    ]
    assert bucket in rclone("lsd", "sb:").split()


def test_server_side_copy_and_multipart_copy(rclone, s3, bucket, tmp_path):
    src = tmp_path / "src"
    want = make_files(src, {"small.bin": 70 * KIB, "big.bin": 12 * MIB})
    rclone("copy", *MULTIPART, str(src), f"sb:{bucket}/a")
    # Server-side copies: CopyObject for the small file, UploadPartCopy (three 5 MiB ranges) for the big one.
    rclone("copy", *MULTIPART, f"sb:{bucket}/a", f"sb:{bucket}/b")
    assert listing(rclone, f"sb:{bucket}/b") == {"small.bin": 70 * KIB, "big.bin": 12 * MIB}
    assert s3.head_object(Bucket=bucket, Key="b/big.bin")["ETag"].endswith('-3"')
    rclone("check", str(src), f"sb:{bucket}/b")
    down = tmp_path / "down"
    rclone("copy", f"sb:{bucket}/b", str(down))
    assert tree_hashes(down) == want
    # A move is a copy and a delete.
    rclone("moveto", f"sb:{bucket}/b/small.bin", f"sb:{bucket}/c/moved.bin")
    assert listing(rclone, f"sb:{bucket}") == {
        "a/small.bin": 70 * KIB,
        "a/big.bin": 12 * MIB,
        "b/big.bin": 12 * MIB,
        "c/moved.bin": 70 * KIB,
    }


def test_sync_deletes_and_purge_removes_the_bucket(rclone, s3, tmp_path):
    bucket = f"rclone-{os.getpid()}"
    up = tmp_path / "up"
    want = make_files(up)
    rclone("mkdir", f"sb:{bucket}")
    rclone("sync", *MULTIPART, str(up), f"sb:{bucket}")
    assert listing(rclone, f"sb:{bucket}") == FILES

    # Changed, removed and new files: sync uploads the two and deletes the removed one.
    (up / "one.bin").unlink()
    write_pattern_file(up / "ten-k.bin", 11 * KIB, seed=9)
    write_pattern_file(up / "new.bin", 3 * KIB, seed=10)
    rclone("sync", *MULTIPART, str(up), f"sb:{bucket}")
    want = {k: v for k, v in FILES.items() if k != "one.bin"} | {"ten-k.bin": 11 * KIB, "new.bin": 3 * KIB}
    assert listing(rclone, f"sb:{bucket}") == want
    rclone("check", str(up), f"sb:{bucket}")

    rclone("delete", "--include", "names/**", f"sb:{bucket}")
    assert not any(k.startswith("names/") for k in listing(rclone, f"sb:{bucket}"))
    rclone("purge", f"sb:{bucket}")
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@pytest.mark.parametrize(
    "option",
    [
        ["--s3-server-side-encryption", "AES256"],
        ["--s3-server-side-encryption", "aws:kms", "--s3-sse-kms-key-id", "alias/backups"],
    ],
    ids=["sse-s3", "sse-kms"],
)
@pytest.mark.parametrize("size", [10 * KIB, 6 * MIB], ids=["single", "multipart"])
def test_server_side_encryption_is_refused_and_nothing_stored(rclone, s3, bucket, tmp_path, option, size):
    src = tmp_path / "secret.bin"
    write_pattern_file(src, size, seed=11)
    code, _, err = rclone.run("copyto", *MULTIPART, *option, str(src), f"sb:{bucket}/secret.bin")
    assert code != 0
    assert "NotImplemented" in err and "501" in err, err[-2000:]
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

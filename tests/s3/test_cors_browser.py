"""CORS with the client it exists for: a page in headless Chromium (Debian's, installed by scripts/prereqs.sh),
served from another origin, reads and writes objects of a bucket with CORS rules through presigned URLs (a PUT
with a Content-Type that is not CORS-safelisted, so the browser sends a preflight first), reads the ETag the rules
expose, and is kept by the browser from reading a bucket without rules (which the server still answers)."""

import http.server
import json
import os
import re
import subprocess
import tempfile
import threading

import pytest
from s3util import empty_and_delete, new_bucket_name

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
# As the machine's notes say: without the background-networking flags Chromium tries Google's hosts, which this
# machine's closed network refuses.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BROWSER_TIMEOUT_S = 60

PAGE = """<!doctype html><html><body><pre id="out">running</pre><script>
const urls = %s;
async function attempt(url, init, read) {
  try {
    const r = await fetch(url, init);
    return read ? await read(r) : r.status;
  } catch (e) {
    return "blocked";
  }
}
(async () => {
  const out = {};
  out.get = await attempt(urls.get, {}, async r => r.status + " " + await r.text());
  out.etag = await attempt(urls.get, {}, async r => r.headers.get("ETag"));
  out.put = await attempt(urls.put, {method: "PUT", headers: {"Content-Type": "application/octet-stream"},
                                     body: "written by a page"});
  out.other = await attempt(urls.other, {}, null);
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script></body></html>"""


class _Page(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def page_server():
    """An HTTP server on a port of its own (so another origin than the S3 server's) serving `_Page.body`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_page(page_server, urls):
    """Loads the page with `urls` in headless Chromium; returns what it wrote into #out."""
    _Page.body = (PAGE % json.dumps(urls)).encode()
    origin = f"http://127.0.0.1:{page_server.server_address[1]}"
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000",
             "--dump-dom", origin + "/"],
            capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False,
        )
    found = re.search(r'<pre id="out">(.*?)</pre>', done.stdout, re.S)
    assert done.returncode == 0 and found, f"chromium exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    text = found.group(1).replace("&quot;", '"').replace("&amp;", "&")
    assert text != "running", "the page's script did not finish"
    return json.loads(text), origin


def test_a_page_of_another_origin_reads_and_writes_through_cors(s3, bucket, page_server):
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} missing: scripts/prereqs.sh installs Debian's chromium"
    origin = f"http://127.0.0.1:{page_server.server_address[1]}"
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [{
        "AllowedOrigins": [origin], "AllowedMethods": ["GET", "PUT"], "AllowedHeaders": ["content-type"],
        "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 60,
    }]})
    etag = s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello, page")["ETag"]
    other = new_bucket_name()
    s3.create_bucket(Bucket=other)
    try:
        s3.put_object(Bucket=other, Key="private.txt", Body=b"not for pages")
        urls = {
            "get": s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "hello.txt"}),
            "put": s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "from-page.txt"}),
            "other": s3.generate_presigned_url("get_object", Params={"Bucket": other, "Key": "private.txt"}),
        }
        out, _ = run_page(page_server, urls)
    finally:
        empty_and_delete(s3, other)
    assert out["get"] == "200 hello, page", out
    assert out["etag"] == etag, out
    assert out["put"] == 200, out
    assert s3.get_object(Bucket=bucket, Key="from-page.txt")["Body"].read() == b"written by a page"
    # The server answered the other bucket's presigned GET, but without rules the browser keeps it from the page.
    assert out["other"] == "blocked", out

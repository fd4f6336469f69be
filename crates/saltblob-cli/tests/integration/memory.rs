//! Streaming a 1 GiB blob through `put -` and `get -` stays within a bounded amount of memory: the put within
//! 64 MiB (issue 22's goal: its chunks go to an extent file through a few I/O buffers, not through RocksDB's
//! memtables), the get within 256 MiB.

use std::io::{Read, Write};
use std::process::Stdio;

use crate::common::*;

const SIZE: u64 = 1 << 30;
const LIMIT_MIB: f64 = 256.0;
const PUT_LIMIT_MIB: f64 = 64.0;

#[test]
fn streaming_a_gib_put_stays_within_64_mib_and_get_within_256_mib() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");

    let mut put = saltblob(&store)
        .args(["put", "gib", "-"])
        .env("SALTBLOB_REPORT_PEAK_RSS", "1")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn put");
    let mut stdin = put.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let mut noise = Noise::new(99);
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..SIZE / (1 << 20) {
            noise.fill(&mut buf);
            hasher.update(&buf);
            stdin.write_all(&buf).expect("feed stdin");
        }
        hasher.finalize()
    });
    let written = writer.join().expect("writer thread");
    let out = put.wait_with_output().expect("put finished");
    assert!(
        out.status.success(),
        "put: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let put_peak = peak_rss_mib(&out.stderr);

    let mut get = saltblob(&store)
        .args(["get", "gib", "-o", "-"])
        .env("SALTBLOB_REPORT_PEAK_RSS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn get");
    let mut stdout = get.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut hasher = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = stdout.read(&mut buf).expect("read stdout");
            if n == 0 {
                return (hasher.finalize(), total);
            }
            total += n as u64;
            hasher.update(&buf[..n]);
        }
    });
    let (read, total) = reader.join().expect("reader thread");
    let out = get.wait_with_output().expect("get finished");
    assert!(
        out.status.success(),
        "get: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let get_peak = peak_rss_mib(&out.stderr);

    println!(
        "1 GiB streamed: put peak {put_peak:.1} MiB (limit {PUT_LIMIT_MIB} MiB), get peak {get_peak:.1} MiB \
         resident (limit {LIMIT_MIB} MiB)"
    );
    assert_eq!(
        (total, read),
        (SIZE, written),
        "the GiB read back is the GiB written"
    );
    assert!(put_peak < PUT_LIMIT_MIB, "put peaked at {put_peak:.1} MiB");
    assert!(get_peak < LIMIT_MIB, "get peaked at {get_peak:.1} MiB");
}

//! Helpers: running the binary, making random files, hashing.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Command, Output};

/// A `saltblob` command on the embedded store in `store`, without progress bars.
pub fn saltblob(store: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
    c.arg("--store").arg(store_url(store)).arg("--quiet");
    c.env_remove("SALTBLOB_STORE");
    c
}

/// The URL of the embedded store in `dir`, with the defaults; sealing every put under key `k` of the keyring
/// beside `dir` when there is one ([`make_sealing_keyring`]: the sealed variants of the fault tests).
pub fn store_url(dir: &Path) -> String {
    let keyring = dir.with_file_name(SEALING_KEYRING);
    if keyring.exists() {
        format!(
            "rocksdb://{}?encryption=local&keyring={}&encryption_key=k",
            dir.display(),
            keyring.display()
        )
    } else {
        format!("rocksdb://{}", dir.display())
    }
}

/// The name of the keyring file that makes the store beside it sealed ([`store_url`]).
const SEALING_KEYRING: &str = "keyring";

/// Makes the keyring (key `k`) that seals every put to the store `spec/store` through [`store_url`] and
/// [`saltblob`], child processes included.
pub fn make_sealing_keyring(spec: &Path) {
    let keyring = spec.join(SEALING_KEYRING);
    for args in [&["new"][..], &["add"][..]] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.arg("keyring").args(args).arg(&keyring);
        if args == ["add"] {
            c.arg("k");
        }
        ok(&mut c);
    }
}

/// Runs `cmd` and returns its output, failing the test with its stderr if it did not succeed.
pub fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run saltblob");
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd`, which must exit with `code` and say `says` on stderr.
pub fn fails(cmd: &mut Command, code: i32, says: &str) {
    let out = cmd.output().expect("run saltblob");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{cmd:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{cmd:?} should say {says:?}: {stderr}"
    );
}

/// A deterministic pseudo-random byte generator (xorshift64*), fast enough for gigabytes.
pub struct Noise(u64);

impl Noise {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Writes `size` pseudo-random bytes to `path`; returns their BLAKE3 digest.
pub fn random_file(path: &Path, size: u64, seed: u64) -> blake3::Hash {
    let mut w = BufWriter::new(File::create(path).expect("create file"));
    let mut noise = Noise::new(seed);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        noise.fill(&mut buf[..n]);
        hasher.update(&buf[..n]);
        w.write_all(&buf[..n]).expect("write file");
        left -= n as u64;
    }
    w.flush().expect("flush");
    hasher.finalize()
}

/// BLAKE3 of a file.
pub fn hash_file(path: &Path) -> blake3::Hash {
    let mut f = File::open(path).expect("open file");
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).expect("read file");
        if n == 0 {
            return hasher.finalize();
        }
        hasher.update(&buf[..n]);
    }
}

/// Bytes `range` of a file.
pub fn file_range(path: &Path, range: std::ops::Range<usize>) -> Vec<u8> {
    let data = std::fs::read(path).expect("read file");
    data[range].to_vec()
}

/// Parses the JSON that `head --json` / `describe --json` print.
pub fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

/// The peak resident memory a command reported with `SALTBLOB_REPORT_PEAK_RSS`, in MiB.
pub fn peak_rss_mib(stderr: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stderr);
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_kib="))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak_rss_kib line in: {text}"));
    kib as f64 / 1024.0
}

/// Bytes of the files under `dir` and its subdirectories (an embedded store's directory holds RocksDB's files
/// and `extents/`, the extent files of large blobs).
pub fn disk_usage(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read store dir")
        .map(|e| e.expect("dir entry"))
        .map(|e| {
            let meta = e.metadata().expect("metadata");
            if meta.is_dir() {
                disk_usage(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// The end of a crash test: `fsck` finds no damage; once the killed puts' intent leases (`lease`) are over,
/// and the commit hold of a put killed during its commit (one more lease on the embedded backend), `gc --grace
/// 0s` reclaims what they left, and `fsck` then finds no damage, no orphan and nothing queued.
/// Returns gc's report on one line and the last fsck's JSON.
pub fn fsck_gc_fsck(store: &Path, lease: std::time::Duration) -> (String, serde_json::Value) {
    fsck_gc_fsck_url(&store_url(store), lease)
}

/// [`fsck_gc_fsck`] of the store at `url` (with the parameters it needs: keys to read sealed blobs).
pub fn fsck_gc_fsck_url(url: &str, lease: std::time::Duration) -> (String, serde_json::Value) {
    let cli = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_saltblob"));
        c.args(["--store", url, "--quiet"])
            .env_remove("SALTBLOB_STORE");
        c
    };
    let fsck = json(&ok(cli().args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    std::thread::sleep(lease * 2 + std::time::Duration::from_millis(300));
    let gc = ok(cli().args(["gc", "--grace", "0s"]));
    let fsck = json(&ok(cli().args(["fsck", "--json"])));
    assert_eq!(fsck["damaged"], serde_json::json!([]), "{fsck}");
    assert_eq!(
        fsck["orphans"],
        serde_json::json!([]),
        "no orphan after gc: {fsck}"
    );
    assert_eq!(fsck["awaiting_reclaim"], 0, "{fsck}");
    let report = String::from_utf8_lossy(&gc.stdout)
        .trim_end()
        .replace('\n', "; ");
    (report, fsck)
}

/// The ignored test `name` of this binary as a child process under libfiu's `fiu-run -x` (faults off until
/// `fiu-ctrl` enables them), with environment variable `env` set to `dir`; stdout discarded, stderr piped.
pub fn fiu_child(name: &str, env: &str, dir: &Path) -> Command {
    let mut c = Command::new("fiu-run");
    c.arg("-x")
        .arg(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--ignored", "--test-threads=1"])
        .env(env, dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    c
}

/// Runs `fiu-ctrl` with `commands` (each one `-c` argument, e.g. `enable name=posix/io/sync/fdatasync`) on the
/// process `pid`, which runs under `fiu-run`; fails the test if it fails.
pub fn fiu_ctrl(pid: u32, commands: impl IntoIterator<Item = String>) {
    let mut cmd = Command::new("fiu-ctrl");
    for c in commands {
        cmd.arg("-c").arg(c);
    }
    let status = cmd.arg(pid.to_string()).status().expect("run fiu-ctrl");
    assert!(status.success(), "fiu-ctrl failed: {status}");
}

/// Waits for `child` and fails the test, with its stderr, unless it exited successfully.
pub fn child_succeeded(child: std::process::Child) {
    let out = child.wait_with_output().expect("wait for the child");
    assert!(
        out.status.success(),
        "the child died: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The body of a child process run under libfiu's `fiu-run -x` by the test that sets environment variable `env`
/// to its working directory: opens the embedded store in `<dir>/store` with the defaults and runs `body` with the
/// directory and the store, on a runtime without an I/O driver (its wake-ups are writes to an eventfd, which
/// injected write faults would break). Returns at once when `env` is not set (the child run as a plain test).
pub fn fault_child<F, Fut>(env: &str, body: F)
where
    F: FnOnce(std::path::PathBuf, saltblob::BlobStore) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some(dir) = std::env::var_os(env) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let store = saltblob::open(
            &store_url(&dir.join("store")),
            saltblob::StoreConfig::default(),
        )
        .await
        .expect("open store");
        body(dir, store).await;
    });
}

/// In a child process of a fault test: writes the signal file `say` in `dir`, then waits for the parent's file
/// `next` there.
pub async fn signal_and_wait(dir: &Path, say: &str, next: &str) {
    std::fs::write(dir.join(say), b"").expect("write a signal file");
    while !dir.join(next).exists() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// In a fault test: waits up to 60 s for `child` to write the signal file `name` in `dir`; fails the test if the
/// child exits first or the time runs out.
pub fn wait_for_signal(dir: &Path, name: &str, child: &mut std::process::Child) {
    let started = std::time::Instant::now();
    while !dir.join(name).exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60)
                && child.try_wait().expect("poll").is_none(),
            "the child did not say {name}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

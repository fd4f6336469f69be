//! Disk faults of the S3 server on the embedded store (rows of the fault matrix in `docs/guarantees.md`): a put
//! whose client goes away releases its extent file and fd at once, and clients that declare much and send little
//! hold no more of the disk than they sent, on a small ext4 file system the test makes on a loop device (root
//! only: skipped, with the reason printed, elsewhere). Run in the fault-test step of `scripts/test.sh`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use saltblob::{BlobStore, StoreConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{Client, Reply, try_send_raw};
use crate::{StoreKind, TestServer};

const MIB: u64 = 1 << 20;

/// The files under the store's `extents/` directory.
fn extent_files(store: &Path) -> usize {
    std::fs::read_dir(store.join("extents"))
        .map(|d| d.flatten().count())
        .unwrap_or(0)
}

/// This process's open file descriptors that point into the store's `extents/` directory.
fn extent_fds(store: &Path) -> usize {
    let extents = store.join("extents");
    std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|target| target.starts_with(&extents) && target != &extents)
                .count()
        })
        .unwrap_or(0)
}

/// Polls `done` every 20 ms for at most `within`; returns how long it took, or `None`.
async fn within(within: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if done() {
            return Some(started.elapsed());
        }
        if started.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server on the embedded store in `dir`.
async fn server_on(dir: &Path) -> TestServer {
    let store: BlobStore = saltblob::open(
        &format!("rocksdb://{}", dir.display()),
        StoreConfig::default(),
    )
    .await
    .expect("open store");
    let server = TestServer::start_with(StoreKind::Store(store), |c| c).await;
    let reply = server.client.call("PUT", "/bkt").send().await;
    assert_eq!(reply.status, 200, "create bucket: {}", reply.text());
    server
}

/// Sends `sent` bytes of a body on `tx`, in 64 KiB pieces; returns whether the request took them all (it stops
/// taking them once the server has answered and closed the body).
async fn try_feed(tx: &mpsc::Sender<Bytes>, sent: usize) -> bool {
    for _ in 0..sent.div_ceil(64 << 10) {
        if tx.send(Bytes::from(vec![7u8; 64 << 10])).await.is_err() {
            return false;
        }
    }
    true
}

/// [`try_feed`], for a body the server must read.
async fn feed(tx: &mpsc::Sender<Bytes>, sent: usize) {
    assert!(try_feed(tx, sent).await, "the body is read");
}

/// A PUT of `path` that declares `declared` bytes, started with nothing sent: its task (aborting it closes the
/// connection) and the sender of its body.
fn start_put(
    client: &Client,
    path: &str,
    declared: u64,
) -> (JoinHandle<Result<Reply, String>>, mpsc::Sender<Bytes>) {
    let (tx, rx) = mpsc::channel(4);
    let request = client.call("PUT", path).stream(rx, declared).into_request();
    (tokio::spawn(try_send_raw(client.addr, request)), tx)
}

/// [`start_put`], then `sent` bytes of its body sent and read: the put stalls there.
async fn stalled_put(
    client: &Client,
    path: &str,
    declared: u64,
    sent: usize,
) -> (JoinHandle<Result<Reply, String>>, mpsc::Sender<Bytes>) {
    let (task, tx) = start_put(client, path, declared);
    feed(&tx, sent).await;
    (task, tx)
}

/// Aborts the task of a client connection when dropped (with the task that holds it).
struct Connection(JoinHandle<Result<(), hyper::Error>>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// [`stalled_put`] over HTTP/2 (prior knowledge), where the server drops a stream's request (its handler's
/// future) when the connection goes: the put must not be dropped with it.
async fn stalled_put_h2(
    client: &Client,
    path: &str,
    declared: u64,
    sent: usize,
) -> (JoinHandle<Result<u16, String>>, mpsc::Sender<Bytes>) {
    let (tx, rx) = mpsc::channel(4);
    let request = client.call("PUT", path).stream(rx, declared).into_request();
    let (mut parts, body) = request.into_parts();
    parts.version = http::Version::HTTP_2;
    parts.uri = format!("http://{}{path}", client.addr)
        .parse()
        .expect("uri");
    parts.headers.remove("host");
    let addr = client.addr;
    let task = tokio::spawn(async move {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .map_err(|e| e.to_string())?;
        let _conn = Connection(tokio::spawn(conn));
        let response = sender
            .send_request(http::Request::from_parts(parts, body))
            .await
            .map_err(|e| e.to_string())?;
        Ok(response.status().as_u16())
    });
    feed(&tx, sent).await;
    (task, tx)
}

/// Waits for `store`'s one extent file, then lets `go_away` close the client's connection: the extent file
/// and its descriptor must be gone within 3 s.
async fn released_at_once(store: &Path, go_away: impl FnOnce()) {
    let made = within(Duration::from_secs(10), || extent_files(store) == 1).await;
    assert!(made.is_some(), "the put made its extent file");
    assert_eq!(extent_fds(store), 1, "the writer holds its file open");
    go_away();
    let gone = within(Duration::from_secs(3), || {
        extent_files(store) == 0 && extent_fds(store) == 0
    })
    .await;
    assert!(
        gone.is_some(),
        "the extent file and fd of a put whose client went away are released within 3 s: {} files, {} fds",
        extent_files(store),
        extent_fds(store)
    );
    println!("released in {:?}", gone.unwrap_or_default());
}

/// A put whose client declares 1 GiB, sends 1 MiB and then drops the connection releases its writer, its
/// extent file and the file's descriptor within 3 s, over HTTP/1.1 and over HTTP/2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_client_goes_away_releases_its_extent_file_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let server = server_on(dir.path()).await;
    let (task, tx) = stalled_put(&server.client, "/bkt/gone", 1 << 30, MIB as usize).await;
    released_at_once(dir.path(), || {
        task.abort();
        drop(tx);
    })
    .await;
    let (task, tx) = stalled_put_h2(&server.client, "/bkt/gone", 1 << 30, MIB as usize).await;
    released_at_once(dir.path(), || {
        task.abort();
        drop(tx);
    })
    .await;
    // The store goes on: a put of the same key succeeds.
    let reply = server.client.put("/bkt/gone", vec![1u8; 9 << 20]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// Runs `program args` with a bounded wait; its stdout, or why it failed.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() < Duration::from_secs(60) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} {args:?}: no answer within 60 s"));
            }
        }
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{program}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{program} {args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A file system of `size` bytes on a loop device, mounted on `mount`; unmounted and detached when dropped
/// (lazily if something still holds it).
pub(crate) struct LoopFs {
    device: String,
    pub(crate) mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopFs {
    /// An ext4 file system of `size` bytes on a loop device over a sparse file, or why it cannot be made here
    /// (not root, no loop device, no `mkfs.ext4`).
    pub(crate) fn make(size: u64) -> Result<Self, String> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let root = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0");
        if !root {
            return Err("not root (losetup and mount need it)".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no /dev/loop-control".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = dir.path().join("fs.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size))
            .map_err(|e| e.to_string())?;
        let image_arg = image.to_string_lossy().into_owned();
        let device = run("losetup", &["--find", "--show", &image_arg])?;
        let fs = Self {
            device,
            mount,
            _dir: dir,
        };
        let mount_arg = fs.mount.to_string_lossy().into_owned();
        run("mkfs.ext4", &["-q", "-F", &fs.device])?;
        run("mount", &[&fs.device, &mount_arg])?;
        Ok(fs)
    }

    /// Bytes used on the file system (`df`).
    fn used(&self) -> u64 {
        let mount = self.mount.to_string_lossy().into_owned();
        run("df", &["-B1", "--output=used", &mount])
            .ok()
            .and_then(|out| out.lines().last().and_then(|l| l.trim().parse().ok()))
            .unwrap_or(u64::MAX)
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let mount = self.mount.to_string_lossy().into_owned();
        if run("umount", &[&mount]).is_err() {
            let _ = run("umount", &["-l", &mount]);
        }
        let _ = run("losetup", &["-d", &self.device]);
    }
}

/// On a 4 GiB ext4 file system: 8 clients that declare 1 GiB, send 1 MiB and stall hold no more of the disk
/// than they sent plus one allocation step each (64 MiB, the first step of an extent file); a 1 KiB and a
/// 100 MiB put beside them succeed; once they disconnect, use is back to what it was within 3 s. A put that
/// declares more than the free-space floor leaves room for is refused with 503 SlowDown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_clients_that_declare_much_hold_only_what_they_sent() {
    let fs = match LoopFs::make(4 << 30) {
        Ok(fs) => fs,
        Err(why) => {
            println!("skipped: cannot make a loop-device file system here: {why}");
            return;
        }
    };
    let store = fs.mount.join("store");
    let server = server_on(&store).await;
    // One large put first, so that the store's own files (its log, its first flush) are in the baseline.
    let reply = server.client.put("/bkt/warm", vec![3u8; 9 << 20]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let baseline = fs.used();
    let mut stalled = Vec::new();
    for i in 0..8 {
        let path = format!("/bkt/stalled-{i}");
        stalled.push(stalled_put(&server.client, &path, 1 << 30, MIB as usize).await);
    }
    let made = within(Duration::from_secs(10), || extent_files(&store) == 9).await;
    assert!(made.is_some(), "{} extent files", extent_files(&store));
    let held = fs.used().saturating_sub(baseline);
    // What they sent, one first allocation step (64 MiB) each, and 8 MiB of slack for the store's own writes.
    let bound = 8 * (MIB + (64 << 20)) + (8 << 20);
    println!(
        "8 stalled puts of 1 GiB declared, 1 MiB sent: {} MiB held (bound {} MiB)",
        held / MIB,
        bound / MIB
    );
    assert!(held <= bound, "{held} bytes held, over {bound}");

    let small = server.client.put("/bkt/small", vec![5u8; 1024]).await;
    assert_eq!(small.status, 200, "{}", small.text());
    let large = server.client.put("/bkt/large", vec![6u8; 100 << 20]).await;
    assert_eq!(large.status, 200, "{}", large.text());
    let got = server.client.get("/bkt/large").await;
    assert_eq!((got.status, got.body.len()), (200, 100 << 20));
    assert_eq!(
        extent_files(&store),
        10,
        "the large put's file beside the stalled ones"
    );

    for (task, tx) in stalled {
        task.abort();
        drop(tx);
    }
    // The baseline and the 100 MiB put's file (its records: 100 MiB and a 12-byte header per 1 MiB chunk), with
    // 8 MiB of slack for the store's own writes.
    let expected = baseline + (101 << 20) + (8 << 20);
    let back = within(Duration::from_secs(3), || {
        extent_files(&store) == 2 && fs.used() <= expected
    })
    .await;
    println!(
        "after the disconnects: {} extent files, {} MiB used over the baseline (the 100 MiB put's file included), \
         back in {back:?}",
        extent_files(&store),
        fs.used().saturating_sub(baseline) / MIB,
    );
    assert!(
        back.is_some(),
        "use back to the baseline (and the 100 MiB put) within 3 s: {} MiB over it, {} extent files",
        fs.used().saturating_sub(baseline) / MIB,
        extent_files(&store)
    );

    // A put that declares more than the file system can give while keeping its free-space floor is refused at
    // once, with 503 SlowDown, and leaves nothing.
    // The refusal may come before the first MiB of the body is read (the server then stops reading it).
    let (task, tx) = start_put(&server.client, "/bkt/huge", 4 << 30);
    try_feed(&tx, MIB as usize).await;
    let reply = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("answered at once")
        .expect("client task");
    drop(tx);
    let reply = reply.expect("an answer");
    assert_eq!(
        (reply.status, reply.code()),
        (503, "SlowDown".to_owned()),
        "{}",
        reply.text()
    );
    assert_eq!(extent_files(&store), 2, "the refused put left nothing");
    drop(server);
}

//! `saltblob serve`: refuses to start without access keys or with SSE keys its store cannot seal under, serves,
//! answers health probes, writes JSON logs on request, and stops cleanly on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{fails, ok, saltblob};

/// A free local port (bound, then released for the server).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn serve_refuses_sse_keys_its_store_cannot_seal_under() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ring = dir.path().join("ring");
    let r = ring.to_str().expect("utf-8 path");
    let plain = dir.path().join("plain");
    // Bounded: a server that started in spite of the key fails the test (exit 124) instead of hanging it.
    let serve = |store: &str, args: &[&str]| {
        let mut c = Command::new("timeout");
        c.args(["60", env!("CARGO_BIN_EXE_saltblob")])
            .args([
                "--quiet",
                "--store",
                store,
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .env("SALTBLOB_ACCESS_KEY_ID", "AKID")
            .env("SALTBLOB_SECRET_ACCESS_KEY", "s3cret")
            .env_remove("SALTBLOB_STORE");
        c
    };
    let no_provider = format!("rocksdb://{}", plain.display());
    fails(
        &mut serve(&no_provider, &["--sse-s3-key", "orders"]),
        2,
        "--sse-s3-key names a key of the store's key provider, and this store has none",
    );
    ok(saltblob(&plain).args(["keyring", "new", r]));
    ok(saltblob(&plain).args(["keyring", "add", r, "orders"]));
    let sealed = format!(
        "rocksdb://{}?encryption=local&keyring={r}",
        dir.path().join("sealed").display()
    );
    fails(
        &mut serve(
            &sealed,
            &["--sse-s3-key", "orders", "--sse-kms-key", "nope"],
        ),
        2,
        "--sse-kms-key nope: key unavailable: local key \"nope\": no such key",
    );
}

#[test]
fn serve_refuses_to_start_without_access_keys_and_creates_no_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let out = saltblob(&store)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("SALTBLOB_ACCESS_KEY_ID")
        .env_remove("SALTBLOB_SECRET_ACCESS_KEY")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no access key"), "{stderr}");
    assert!(!store.exists());

    let creds = dir.path().join("creds");
    std::fs::write(&creds, "AKID s3cret extra\n").expect("write");
    // A credentials file must be private (checked first, see the unit tests of commands/serve.rs).
    #[cfg(unix)]
    std::fs::set_permissions(&creds, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let out = saltblob(&store)
        .args(["serve", "--credentials"])
        .arg(&creds)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("line 1") && !stderr.contains("s3cret"),
        "{stderr}"
    );
}

#[test]
fn serve_refuses_a_bucket_name_s3_does_not_allow_and_creates_no_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let out = saltblob(&store)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--create-bucket",
            "ok-name,Bad_Name",
        ])
        .env("SALTBLOB_ACCESS_KEY_ID", "AKID")
        .env("SALTBLOB_SECRET_ACCESS_KEY", "s3cret")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--create-bucket") && stderr.contains("\"Bad_Name\" is not a bucket name"),
        "{stderr}"
    );
    assert!(!store.exists());
}

/// Sends SIGTERM to the server `child` and returns the rest of its stderr once it closed it (the server stopped),
/// failing after 30 s.
fn stop_with_sigterm(
    child: &mut std::process::Child,
    mut stderr: BufReader<std::process::ChildStderr>,
) -> String {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
        let _ = tx.send(rest);
    });
    let Ok(rest) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = child.kill();
        panic!("the server did not stop within 30 s of SIGTERM");
    };
    rest
}

/// One request on a fresh connection; the whole reply.
fn request(port: u16, head: &str) -> String {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    tcp.write_all(head.as_bytes()).expect("write");
    let mut reply = String::new();
    tcp.read_to_string(&mut reply).expect("read");
    reply
}

#[test]
fn serve_answers_s3_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let mut child = saltblob(&dir.path().join("store"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        // Created before serving (listable without signing, to see it), the empty name ignored.
        .args(["--create-bucket", "made,", "--anonymous-list", "made"])
        .env("SALTBLOB_ACCESS_KEY_ID", "AKID")
        .env("SALTBLOB_SECRET_ACCESS_KEY", "s3cret")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read");
    assert!(line.contains("created bucket made"), "{line}");
    line.clear();
    stderr.read_line(&mut line).expect("read");
    assert!(line.contains("serving S3 on"), "{line}");

    // An unsigned request is refused with S3's error.
    let reply = request(
        port,
        "GET /bkt/k HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("<Code>AccessDenied</Code>"), "{reply}");
    // The bucket --create-bucket made exists (and is empty).
    let reply = request(
        port,
        "GET /made?list-type=2 HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains("<Name>made</Name>") && reply.contains("<KeyCount>0</KeyCount>"),
        "{reply}"
    );

    let rest = stop_with_sigterm(&mut child, stderr);
    let exit = child.wait().expect("wait");
    assert!(exit.success(), "{exit}: {rest}");
    assert!(rest.contains("server stopped"), "{rest}");
    assert!(!rest.contains("s3cret"), "{rest}");
}

/// `--log-format json` writes each log event as one JSON object per line (the lines saltblob prints for people,
/// `saltblob: …`, stay text); the metrics listener answers `/healthz` and `/readyz`.
#[test]
fn serve_writes_json_logs_and_answers_health_probes() {
    let help = ok(Command::new(env!("CARGO_BIN_EXE_saltblob")).arg("--help"));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--log-format") && help.contains("SALTBLOB_LOG_FORMAT"),
        "{help}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let (port, metrics) = (free_port(), free_port());
    let mut child = saltblob(&dir.path().join("store"))
        .args(["serve", "--log-format", "json"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
        .env("SALTBLOB_LOG", "info")
        .env_remove("SALTBLOB_LOG_FORMAT")
        .env("SALTBLOB_ACCESS_KEY_ID", "AKID")
        .env("SALTBLOB_SECRET_ACCESS_KEY", "s3cret")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read");
    assert!(line.contains("serving S3 on"), "{line}");

    for (path, answer) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let reply = request(
            metrics,
            &format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"),
        );
        assert!(reply.starts_with("HTTP/1.1 200"), "{path}: {reply}");
        assert!(reply.ends_with(answer), "{path}: {reply}");
    }
    // An S3 request, for an access-log line.
    let reply = request(
        port,
        "GET /bkt/k HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    );
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");

    let rest = stop_with_sigterm(&mut child, stderr);
    assert!(child.wait().expect("wait").success(), "{rest}");
    let mut messages = Vec::new();
    for line in rest.lines() {
        if !line.starts_with('{') {
            assert!(
                line.starts_with("saltblob: "),
                "not a JSON log line: {line}\n{rest}"
            );
            continue;
        }
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(event["level"].is_string(), "{line}");
        let fields = &event["fields"];
        assert!(fields.is_object(), "{line}");
        messages.push(fields["message"].as_str().unwrap_or_default().to_owned());
    }
    assert!(
        messages.iter().any(|m| m.contains("shutting down")),
        "{messages:?}\n{rest}"
    );
    assert!(messages.len() >= 2, "{messages:?}\n{rest}");
}

/// While `serve` holds the store, `saltblob backup` asks it through its admin socket (in the store's directory,
/// owner-only): the copy holds every blob; the socket file goes when the server stops. With `--admin-socket
/// none` there is no socket, and `backup` fails on the store's lock, saying so.
#[test]
fn backup_while_serving_goes_through_the_admin_socket() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");
    let small = dir.path().join("small");
    std::fs::write(&small, b"hello, backup").expect("write");
    ok(saltblob(&store).args(["put", "a"]).arg(&small));
    let big = dir.path().join("big");
    std::fs::write(&big, vec![42u8; 20 << 20]).expect("write");
    ok(saltblob(&store).args(["put", "big"]).arg(&big));

    let serve = |extra: &[&str]| {
        let mut child = saltblob(&store)
            .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
            .args(extra)
            .env("SALTBLOB_ACCESS_KEY_ID", "AKID")
            .env("SALTBLOB_SECRET_ACCESS_KEY", "s3cret")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("read");
        assert!(line.contains("serving S3 on"), "{line}");
        (child, stderr)
    };

    let (mut child, mut stderr) = serve(&[]);
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read");
    let socket = store.join("admin.sock");
    assert!(line.contains(&socket.display().to_string()), "{line}");
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&socket)
            .expect("socket")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "owner-only");
    }
    let dest = dir.path().join("backup");
    let report = crate::common::json(&ok(saltblob(&store).args(["backup", "--json"]).arg(&dest)));
    assert_eq!(report["extent_files"], 1, "{report}");
    // A second one to the same place is refused by the server, and the answer says why.
    fails(saltblob(&store).arg("backup").arg(&dest), 1, "it exists");
    let rest = stop_with_sigterm(&mut child, stderr);
    assert!(child.wait().expect("wait").success(), "{rest}");
    assert!(!socket.exists(), "the socket file goes with the server");

    let out = dir.path().join("big.out");
    ok(saltblob(&dest).args(["get", "big", "-o"]).arg(&out));
    assert_eq!(
        std::fs::read(&out).expect("read"),
        std::fs::read(&big).expect("read")
    );
    assert_eq!(
        ok(saltblob(&dest).args(["get", "a"])).stdout,
        b"hello, backup"
    );

    let (mut child, stderr) = serve(&["--admin-socket", "none"]);
    assert!(!socket.exists());
    fails(
        saltblob(&store)
            .arg("backup")
            .arg(dir.path().join("second")),
        1,
        "another process has this store open",
    );
    let rest = stop_with_sigterm(&mut child, stderr);
    assert!(child.wait().expect("wait").success(), "{rest}");
}

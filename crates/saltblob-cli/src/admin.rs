//! The admin socket of `saltblob serve`: a Unix socket through which a command asks the serving process to do
//! what needs the store open, while that process holds the embedded store's lock (`saltblob backup`, `saltblob
//! key`).
//!
//! - **Where**: `<store dir>/admin.sock` by default for an embedded store (`--admin-socket PATH` elsewhere,
//!   `--admin-socket none` for none); a cluster store has none by default. The server removes it at exit.
//! - **Who**: the socket is made readable and writable by its owner only, and the server answers only a peer
//!   of its own user id (or root), checked with `SO_PEERCRED`.
//! - **Protocol**: one request per connection, a line of JSON, answered by a line of JSON. A request is
//!   `{"v":1,"op":"backup","dest":"/abs/dir","copy":false}` or `{"v":1,"op":"key","action":{...}}`
//!   (`crate::access_keys`); an answer `{"ok":{...}}` (a backup's report, as `saltblob backup --json` prints it;
//!   a key action's outcome, as `saltblob key --json` prints it) or `{"error":"message"}`. A request of another version or operation is
//!   answered with an error naming what this build takes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use saltblob::{BackupOptions, BackupReport, BlobStore};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::access_keys::KeyAction;
use crate::failure::{Failure, one_line};

/// The name of the socket in an embedded store's directory.
pub const SOCKET_NAME: &str = "admin.sock";
/// The protocol's version.
const VERSION: u64 = 1;
/// The longest request line read.
const MAX_REQUEST: u64 = 64 << 10;
/// How long a connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest path a Unix socket address holds (`sun_path`, less its terminating zero).
const MAX_SOCKET_PATH: usize = 107;

/// The default socket of the store at `url`: in the directory of an embedded store, none for others.
pub fn default_socket(url: &str) -> Option<PathBuf> {
    saltblob::local_store_path(url).map(|dir| dir.join(SOCKET_NAME))
}

/// A bound admin socket; dropping it removes its file.
#[derive(Debug)]
pub struct AdminSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl AdminSocket {
    /// Binds the socket at `path`, replacing a socket file that a process which held the store before left
    /// (the caller holds the store, so no live server answers there); anything else at `path` is refused.
    pub fn bind(path: &Path) -> Result<Self, Failure> {
        let fail = |why: String| {
            Failure::new(
                Failure::FAILED,
                format!("cannot make the admin socket {}: {why}", path.display()),
            )
        };
        if path.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(fail(format!(
                "its path is longer than the {MAX_SOCKET_PATH} bytes a socket address holds (give a shorter \
                 --admin-socket PATH, or --admin-socket none)"
            )));
        }
        if let Ok(meta) = path.symlink_metadata() {
            use std::os::unix::fs::FileTypeExt as _;
            if !meta.file_type().is_socket() {
                return Err(fail(
                    "something other than a socket is there (left alone)".into(),
                ));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(fail(
                    "another process answers on it (is another server running?)".into(),
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| fail(format!("cannot remove the old one: {e}")))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| fail(e.to_string()))?;
        let socket = Self {
            listener,
            path: path.to_path_buf(),
        };
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| fail(format!("cannot make it private: {e}")))?;
        }
        Ok(socket)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Answers requests on the socket with `store`, until the future is dropped.
    pub async fn serve(self, store: BlobStore) {
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("admin socket {}: accept failed: {e}", self.path.display());
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let store = store.clone();
            tokio::spawn(async move {
                if let Err(e) = answer(stream, &store).await {
                    tracing::warn!("admin socket: {e}");
                }
            });
        }
    }
}

impl Drop for AdminSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Reads one request from `stream`, does it and writes the answer.
async fn answer(stream: UnixStream, store: &BlobStore) -> std::io::Result<()> {
    let peer = stream.peer_cred()?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let me = unsafe { libc::geteuid() };
    let (read, mut write) = stream.into_split();
    let answer = if peer.uid() != me && peer.uid() != 0 {
        json!({"error": format!("user id {} may not use this socket (only {me} and root)", peer.uid())})
    } else {
        let mut line = String::new();
        let mut reader = BufReader::new(read).take(MAX_REQUEST);
        match tokio::time::timeout(REQUEST_TIMEOUT, reader.read_line(&mut line)).await {
            Ok(Ok(_)) => match serde_json::from_str::<Value>(&line) {
                Ok(request) => match request_op(&request) {
                    Ok(Op::Backup { dest, options }) => {
                        tracing::info!("admin socket: backup into {}", dest.display());
                        match store.backend().backup(&dest, &options).await {
                            Ok(Some(report)) => json!({"ok": report_json(&dest, &report)}),
                            Ok(None) => json!({"error": no_backup_of_its_own()}),
                            Err(e) => json!({"error": one_line(&e)}),
                        }
                    }
                    Ok(Op::Key(action)) => {
                        tracing::info!("admin socket: key {}", action.to_json()["do"]);
                        match action.run(store).await {
                            Ok(outcome) => json!({ "ok": outcome }),
                            Err(e) => json!({"error": one_line(&e)}),
                        }
                    }
                    Err(why) => json!({"error": why}),
                },
                Err(e) => json!({"error": format!("the request is not JSON: {e}")}),
            },
            Ok(Err(e)) => return Err(e),
            Err(_) => json!({"error": "no request within 10 s"}),
        }
    };
    write.write_all(format!("{answer}\n").as_bytes()).await?;
    write.shutdown().await
}

/// An operation the socket takes.
enum Op {
    /// A backup into `dest`.
    Backup {
        dest: PathBuf,
        options: BackupOptions,
    },
    /// A change to (or look at) the access keys kept in the store.
    Key(KeyAction),
}

/// The operation `request` asks for, or why it is refused.
fn request_op(request: &Value) -> Result<Op, String> {
    let version = request.get("v").and_then(Value::as_u64);
    if version != Some(VERSION) {
        return Err(format!(
            "this server takes version {VERSION} of the admin protocol, the request says {}",
            request
                .get("v")
                .map_or_else(|| "none".into(), Value::to_string)
        ));
    }
    match request.get("op").and_then(Value::as_str) {
        Some("backup") => {
            let dest = request
                .get("dest")
                .and_then(Value::as_str)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .ok_or("a backup request needs \"dest\", an absolute path")?;
            let copy = request
                .get("copy")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            Ok(Op::Backup {
                dest,
                options: BackupOptions::new().with_copy(copy),
            })
        }
        Some("key") => {
            let action = request
                .get("action")
                .ok_or("a key request needs \"action\"")?;
            Ok(Op::Key(KeyAction::from_json(action)?))
        }
        other => Err(format!(
            "unknown operation {}: this server takes \"backup\" and \"key\"",
            other.unwrap_or("(none)")
        )),
    }
}

/// The failure of a command sent to admin socket `socket` (named by the user) where no server answers.
pub fn no_server_at(socket: &Path) -> Failure {
    Failure::new(
        Failure::FAILED,
        format!(
            "no server answers on the admin socket {} (is `saltblob serve` running?)",
            socket.display()
        ),
    )
}

/// What to say when the store has no backup of its own.
pub fn no_backup_of_its_own() -> String {
    "this store's backend takes no backup of its own (a cql:// store: use `saltblob export`, or the cluster's \
     snapshots; see docs/operations.md)"
        .to_owned()
}

/// A backup's report as JSON (what `saltblob backup --json` prints).
pub fn report_json(dest: &Path, r: &BackupReport) -> Value {
    json!({
        "path": dest.display().to_string(),
        "engine_files": r.engine_files,
        "engine_bytes": r.engine_bytes,
        "extent_files": r.extent_files,
        "extent_bytes": r.extent_bytes,
        "copied": r.copied,
        "held_ms": r.held.as_secs_f64() * 1e3,
    })
}

/// Asks the server answering on `socket` for a backup into `dest` (absolute); returns its report as JSON.
/// `Ok(None)` when nothing answers there (no server holds the store).
pub async fn request_backup(
    socket: &Path,
    dest: &Path,
    copy: bool,
) -> Result<Option<Value>, Failure> {
    let request =
        json!({"v": VERSION, "op": "backup", "dest": dest.display().to_string(), "copy": copy});
    send(socket, &request).await
}

/// Asks the server answering on `socket` to run `action`; returns its outcome as JSON. `Ok(None)` when nothing
/// answers there (no server holds the store).
pub async fn request_key(socket: &Path, action: &KeyAction) -> Result<Option<Value>, Failure> {
    let request = json!({"v": VERSION, "op": "key", "action": action.to_json()});
    send(socket, &request).await
}

/// Sends `request` to the server answering on `socket`; its `ok` answer, `Ok(None)` when nothing answers there.
async fn send(socket: &Path, request: &Value) -> Result<Option<Value>, Failure> {
    let Ok(mut stream) = UnixStream::connect(socket).await else {
        return Ok(None);
    };
    let fail = |why: String| {
        Failure::new(
            Failure::FAILED,
            format!("the server's admin socket {}: {why}", socket.display()),
        )
    };
    stream
        .write_all(format!("{request}\n").as_bytes())
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .await
        .map_err(|e| fail(e.to_string()))?;
    let answer: Value = serde_json::from_str(&line)
        .map_err(|e| fail(format!("an answer that is not JSON: {e}")))?;
    if let Some(report) = answer.get("ok") {
        return Ok(Some(report.clone()));
    }
    let why = answer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("an answer with neither ok nor error");
    Err(Failure::new(Failure::FAILED, format!("the server: {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests of another version, operation or with a relative destination are refused, saying why.
    #[test]
    fn requests_are_checked() {
        let refused = |v: Value| match request_op(&v) {
            Err(why) => why,
            Ok(_) => panic!("{v} taken"),
        };
        assert!(refused(json!({"v": 2, "op": "backup", "dest": "/x"})).contains("version 1"));
        assert!(refused(json!({"op": "backup", "dest": "/x"})).contains("says none"));
        assert!(
            refused(json!({"v": 1, "op": "drop", "dest": "/x"})).contains("unknown operation drop")
        );
        assert!(refused(json!({"v": 1, "op": "backup", "dest": "rel"})).contains("absolute"));
        match request_op(&json!({"v": 1, "op": "backup", "dest": "/x", "copy": true})) {
            Ok(Op::Backup { dest, options }) => {
                assert_eq!(dest, PathBuf::from("/x"));
                assert!(options.copy);
            }
            Ok(Op::Key(_)) => panic!("a backup taken for a key action"),
            Err(why) => panic!("refused: {why}"),
        }
        match request_op(&json!({"v": 1, "op": "key", "action": {"do": "list"}})) {
            Ok(Op::Key(action)) => assert_eq!(action, KeyAction::List),
            Ok(Op::Backup { .. }) => panic!("a key action taken for a backup"),
            Err(why) => panic!("refused: {why}"),
        }
        assert!(refused(json!({"v": 1, "op": "key"})).contains("needs \"action\""));
        assert!(
            refused(json!({"v": 1, "op": "key", "action": {"do": "grant"}}))
                .contains("unknown key action")
        );
    }

    /// A socket left by a dead server is replaced, a live one or a file of another kind is not, and the file
    /// goes when the socket is dropped; a path too long for a socket address is refused by name.
    #[tokio::test]
    async fn binding_replaces_only_dead_sockets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SOCKET_NAME);
        let dead = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        drop(dead);
        let live = AdminSocket::bind(&path).expect("a dead socket is replaced");
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let e = AdminSocket::bind(&path).expect_err("a live one stays");
        assert!(
            e.message.contains("another process answers"),
            "{}",
            e.message
        );
        drop(live);
        assert!(!path.exists(), "removed when dropped");

        let file = dir.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        let e = AdminSocket::bind(&file).expect_err("a file stays");
        assert!(e.message.contains("other than a socket"), "{}", e.message);
        let long = dir.path().join("x".repeat(120));
        let e = AdminSocket::bind(&long).expect_err("too long");
        assert!(e.message.contains("--admin-socket"), "{}", e.message);
    }
}

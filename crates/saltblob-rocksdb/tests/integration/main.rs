//! Integration tests of the embedded backend on real directories (one test binary, topic modules).

mod backup;
mod conformance;
mod descriptors;
mod extents;
mod fixtures;
mod history;
mod space;
mod unlogged;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs the ignored test `name` of this binary as a child process, with environment variable `env` set to
/// `dir`, and waits until it creates the file `dir/signal`; returns the child, still running. Fails the test if
/// the child exits first or `wait` passes.
pub fn child_until(name: &str, env: &str, dir: &Path, signal: &str, wait: Duration) -> Child {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--ignored", "--test-threads=1"])
        .env(env, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let started = Instant::now();
    while !dir.join(signal).exists() {
        if started.elapsed() > wait || child.try_wait().expect("wait").is_some() {
            let _ = child.kill();
            panic!("the child {name} did not reach `{signal}` within {wait:?} (or it exited)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

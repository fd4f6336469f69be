//! SIGKILL in the middle of overwriting a large blob: after reopening, the key holds exactly the old version or
//! the new one, whole, with its digest.

use std::time::Instant;

use crate::common::*;

const SIZE: u64 = 64 << 20;
const CYCLES: usize = 12;

#[test]
fn a_killed_overwrite_leaves_the_old_or_the_new_version_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let files: Vec<_> = (0..2)
        .map(|i| {
            let path = dir.path().join(format!("v{i}.bin"));
            let digest = random_file(&path, SIZE, 1000 + i);
            (path, digest)
        })
        .collect();

    // An overwrite that runs to the end tells how long one takes here (the first put into an empty store is
    // faster than the overwrites that follow, which open a store with data and a log to recover).
    ok(saltblob(&store).args(["put", "blob"]).arg(&files[0].0));
    let t = Instant::now();
    ok(saltblob(&store).args(["put", "blob"]).arg(&files[1].0));
    let full = t.elapsed();
    let mut current = 1usize;
    let (mut kept_old, mut got_new) = (0, 0);
    for cycle in 0..CYCLES {
        let next = 1 - current;
        let mut child = saltblob(&store)
            .args(["put", "blob"])
            .arg(&files[next].0)
            .spawn()
            .expect("spawn put");
        // Kill at a moment spread over the whole put, from the start to just past its usual end.
        let at = full.mul_f64((cycle as f64 + 0.5) / CYCLES as f64 * 1.1);
        std::thread::sleep(at);
        let finished = child.try_wait().expect("poll").is_some();
        child.kill().ok(); // SIGKILL
        child.wait().expect("reap");

        let out = ok(saltblob(&store).args(["get", "blob"]));
        let digest = blake3::hash(&out.stdout);
        let head = json(&ok(saltblob(&store).args(["head", "blob", "--json"])));
        assert_eq!(
            head["digest"],
            format!("blake3:{}", digest.to_hex()),
            "cycle {cycle}: manifest digest matches data"
        );
        if digest == files[next].1 {
            got_new += 1;
            current = next;
        } else {
            assert_eq!(
                digest, files[current].1,
                "cycle {cycle}: after kill at {at:?}: neither old nor new version"
            );
            assert!(
                !finished,
                "cycle {cycle}: a put that finished must be visible"
            );
            kept_old += 1;
        }
    }
    println!(
        "{CYCLES} kills during a {} MiB overwrite (full put {full:?}): {kept_old} kept the old version, {got_new} committed the new one; 0 torn",
        SIZE >> 20
    );
    assert!(kept_old > 0, "some kills landed before the commit");
    assert!(got_new > 0, "some puts committed before the kill");
}

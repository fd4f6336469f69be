//! SIGKILL in the middle of overwriting a large blob: after reopening, the key holds exactly the old version or
//! the new one, whole, with its digest. Afterwards `fsck` finds no damage, and `gc` reclaims what the killed
//! puts left behind: no orphan remains and the disk holds little more than the live blob.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::common::*;

const SIZE: u64 = 200 << 20;
const CYCLES: usize = 20;
/// Intent lease of the puts: short, so that gc may take over the killed puts' intents soon after.
const LEASE: Duration = Duration::from_secs(1);

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
    let mut rng = rand::rng();
    let mut cycle = 0;
    // The planned kills, then (bounded) extra ones if the machine's load shifted every kill to one side of the
    // commit: one very early, or one well after the usual end.
    while cycle < CYCLES || (cycle < CYCLES + 5 && (kept_old == 0 || got_new == 0)) {
        let next = 1 - current;
        let mut child = saltblob(&store)
            .args([
                "--intent-lease",
                &format!("{}s", LEASE.as_secs()),
                "put",
                "blob",
            ])
            .arg(&files[next].0)
            .spawn()
            .expect("spawn put");
        // Kill at a random moment of the cycle's slot: the slots spread over the whole put, from the start to
        // just past its usual end.
        let at = if cycle < CYCLES {
            let slot = rng.random_range(cycle as f64..cycle as f64 + 1.0);
            full.mul_f64(slot / CYCLES as f64 * 1.1)
        } else if got_new == 0 {
            full.mul_f64(3.0)
        } else {
            full.mul_f64(0.1)
        };
        std::thread::sleep(at);
        // Finished and acknowledged: a put that exited with an error (a full disk) committed nothing either.
        let finished = child
            .try_wait()
            .expect("poll")
            .is_some_and(|status| status.success());
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
                "cycle {cycle}: a put that finished successfully must be visible"
            );
            kept_old += 1;
        }
        cycle += 1;
    }
    println!(
        "{cycle} kills during a {} MiB overwrite (full put {full:?}): {kept_old} kept the old version, {got_new} committed the new one; 0 torn",
        SIZE >> 20
    );
    assert!(kept_old > 0, "some kills landed before the commit");
    assert!(got_new > 0, "some puts committed before the kill");

    let before = disk_usage(&store);
    let (gc, fsck) = fsck_gc_fsck(&store, LEASE);
    assert_eq!(fsck["blobs"], 1, "{fsck}");
    assert_eq!(
        fsck["chunks"],
        SIZE / (64 << 10),
        "only the live version's chunks remain: {fsck}"
    );
    let after = disk_usage(&store);
    println!(
        "{gc}; disk {:.1} MiB before, {:.1} MiB after, live data {} MiB",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        SIZE >> 20
    );
    // Within 10% of the live data, plus the engine's own files (logs, manifest, options): at most 4 MiB.
    assert!(
        after <= SIZE + SIZE / 10 + (4 << 20),
        "disk usage {after} after gc, live data {SIZE}"
    );
}

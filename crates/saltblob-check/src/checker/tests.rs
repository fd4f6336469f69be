//! Unit tests of the checker: one history per violation kind, and the histories it must accept.
use super::*;
use crate::history::Event;
use crate::value::{Identified, to_hex, verify};

/// Builds histories by hand: each op given as (invoke, complete or None) times.
#[derive(Default)]
struct H {
    events: Vec<Event>,
    next: u64,
}

const W: u64 = 77;
const K: &str = "k";

impl H {
    fn op(&mut self, kind: OpKind, at: u64, done: Option<(u64, Outcome)>) -> OpId {
        let op = OpId {
            client: W,
            seq: self.next,
        };
        self.next += 1;
        self.events.push(Event::Invoke { op, at, kind });
        if let Some((at, outcome)) = done {
            self.events.push(Event::Complete { op, at, outcome });
        }
        op
    }

    /// A put of a whole value (len 100); returns its value id.
    fn put(&mut self, at: u64, done: Option<(u64, bool)>) -> ValueId {
        self.put_len(at, done, 100)
    }

    fn put_len(&mut self, at: u64, done: Option<(u64, bool)>, len: u64) -> ValueId {
        let id = ValueId {
            writer: W,
            seq: self.next,
        };
        let done = done.map(|(t, ok)| {
            (
                t,
                if ok {
                    Outcome::Ok(OpResult::Put)
                } else {
                    failed()
                },
            )
        });
        self.op(
            OpKind::Put {
                key: K.into(),
                id,
                len,
            },
            at,
            done,
        );
        id
    }

    /// A conditional put refused at `done`, of a whole value (len 100) or a small one.
    fn refused_put(&mut self, at: u64, done: u64, len: u64) -> ValueId {
        let id = ValueId {
            writer: W,
            seq: self.next,
        };
        let refused = Outcome::Refused {
            error: "precondition failed".into(),
        };
        let kind = OpKind::Put {
            key: K.into(),
            id,
            len,
        };
        self.op(kind, at, Some((done, refused)));
        id
    }

    fn delete(&mut self, at: u64, done: Option<(u64, bool)>) {
        let done = done.map(|(t, ok)| {
            (
                t,
                if ok {
                    Outcome::Ok(OpResult::Delete { found: true })
                } else {
                    failed()
                },
            )
        });
        self.op(OpKind::Delete { key: K.into() }, at, done);
    }

    fn get(&mut self, at: u64, done: u64, result: GetResult) {
        self.op(
            OpKind::Get { key: K.into() },
            at,
            Some((done, Outcome::Ok(OpResult::Get(result)))),
        );
    }

    fn get_value(&mut self, at: u64, done: u64, id: ValueId) {
        self.get(
            at,
            done,
            GetResult::Value {
                id: Some(id),
                len: 100,
                small_bytes_hex: None,
            },
        );
    }

    fn report(&self) -> Report {
        let r = check(&History::from_events(self.events.clone()));
        println!("{}", r.summary());
        for v in &r.violations {
            println!("  {v}");
        }
        r
    }

    fn kinds(&self) -> Vec<ViolationKind> {
        self.report().violations.iter().map(|v| v.kind).collect()
    }
}

fn failed() -> Outcome {
    Outcome::Failed {
        error: "timeout".into(),
        corrupt: false,
    }
}

#[test]
fn sequential_reads_of_the_last_write_are_fine() {
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    h.get_value(20, 30, a);
    let b = h.put(40, Some((50, true)));
    h.get_value(60, 70, b);
    h.delete(80, Some((90, true)));
    h.get(100, 110, GetResult::NotFound);
    h.get(0, 5, GetResult::NotFound);
    let r = h.report();
    assert!(r.is_clean());
    assert_eq!((r.ops, r.puts, r.gets, r.deletes), (7, 2, 4, 1));
    assert_eq!((r.ok, r.gets_with_value, r.gets_not_found), (7, 2, 2));
}

#[test]
fn concurrent_puts_may_each_win() {
    let mut h = H::default();
    let a = h.put(0, Some((50, true)));
    let b = h.put(10, Some((40, true)));
    h.get_value(60, 70, a);
    h.get_value(80, 90, b); // may not flip back in a linearizable store, but each alone is fine
    assert!(h.kinds().is_empty());
    // A read overlapping a later put may return either.
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    let b = h.put(20, Some((40, true)));
    h.get_value(30, 35, a);
    h.get_value(30, 36, b);
    assert!(h.kinds().is_empty());
}

#[test]
fn stale_reads_of_overwritten_values_are_flagged() {
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    h.put(20, Some((30, true)));
    h.get_value(40, 50, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    let r = h.report();
    assert!(r.violations[0].detail.contains("replaced it"), "{r:?}");
}

#[test]
fn deletes_are_not_undone() {
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    h.delete(20, Some((30, true)));
    h.get_value(40, 50, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
}

#[test]
fn failed_and_indeterminate_writes_may_or_may_not_take_effect() {
    // A failed overwrite does not make the old value stale; an unacknowledged put may be read.
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    let b = h.put(20, Some((30, false)));
    let c = h.put(25, None);
    h.delete(26, Some((27, false)));
    h.get_value(40, 50, a);
    h.get_value(60, 70, b);
    h.get_value(80, 90, c);
    h.get_value(100, 110, a);
    assert!(h.kinds().is_empty());
    // A value read after an acknowledged write that followed an indeterminate put is still fine:
    // the indeterminate put may take effect later.
    let mut h = H::default();
    let c = h.put(0, None);
    h.put(20, Some((30, true)));
    h.get_value(40, 50, c);
    assert!(h.kinds().is_empty());
}

#[test]
fn barriers_end_indeterminate_puts() {
    let mut h = H::default();
    let c = h.put(0, None);
    h.events.push(Event::Barrier { at: 10 });
    h.put(20, Some((30, true)));
    h.get_value(40, 50, c);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
}

#[test]
fn values_from_the_future_are_flagged() {
    let mut h = H::default();
    let id = ValueId { writer: W, seq: 1 };
    h.get_value(0, 10, id);
    assert_eq!(h.put(20, Some((30, true))), id);
    assert_eq!(h.kinds(), vec![ViolationKind::Future]);
}

#[test]
fn unknown_values_are_flagged() {
    let mut h = H::default();
    h.put(0, Some((10, true)));
    h.get_value(20, 30, ValueId { writer: 1, seq: 1 });
    // Known id, wrong length.
    let b = h.put(40, Some((50, true)));
    h.get(
        60,
        70,
        GetResult::Value {
            id: Some(b),
            len: 99,
            small_bytes_hex: None,
        },
    );
    assert_eq!(
        h.kinds(),
        vec![ViolationKind::Unknown, ViolationKind::Unknown]
    );
}

#[test]
fn lost_acknowledged_puts_are_flagged() {
    let mut h = H::default();
    h.put(0, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    assert_eq!(h.kinds(), vec![ViolationKind::Lost]);
}

#[test]
fn not_found_is_fine_when_a_delete_may_follow_the_put() {
    for delete in [
        Some((30, true)),  // acknowledged, overlapping the get
        Some((15, false)), // failed
        None,              // indeterminate
    ] {
        let mut h = H::default();
        h.put(0, Some((10, true)));
        h.delete(12, delete);
        h.get(20, 40, GetResult::NotFound);
        assert!(h.kinds().is_empty(), "{delete:?}");
    }
    // A delete concurrent with the put may take effect after it.
    let mut h = H::default();
    h.delete(0, Some((8, true)));
    h.put(5, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    assert!(h.kinds().is_empty());
    // But a delete that ended before the put began cannot, nor one begun after the get ended.
    let mut h = H::default();
    h.delete(0, Some((4, true)));
    h.put(5, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    h.delete(35, None);
    assert_eq!(h.kinds(), vec![ViolationKind::Lost]);
    // Events in the same microsecond are concurrent: a delete invoked as the get ends may precede it.
    let mut h = H::default();
    h.put(0, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    h.delete(30, Some((31, true)));
    assert!(h.kinds().is_empty());
    // ... as may a put completing as the get begins, or one begun as the get ends.
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    h.put(15, Some((20, true)));
    h.get_value(20, 30, a);
    assert!(h.kinds().is_empty());
    let mut h = H::default();
    h.op(
        OpKind::Get { key: K.into() },
        0,
        Some((
            10,
            Outcome::Ok(OpResult::Get(GetResult::Value {
                id: Some(ValueId { writer: W, seq: 1 }),
                len: 100,
                small_bytes_hex: None,
            })),
        )),
    );
    h.put(10, Some((20, true)));
    assert!(h.kinds().is_empty());
    // An unacknowledged put proves nothing.
    let mut h = H::default();
    h.put(0, Some((10, false)));
    h.put(0, None);
    h.get(20, 30, GetResult::NotFound);
    assert!(h.kinds().is_empty());
}

#[test]
fn torn_and_corrupt_reads_are_flagged() {
    let mut h = H::default();
    h.get(
        0,
        10,
        GetResult::Torn {
            reason: "body differs".into(),
            len: 5000,
        },
    );
    h.op(
        OpKind::Get { key: K.into() },
        20,
        Some((
            30,
            Outcome::Failed {
                error: "missing chunk".into(),
                corrupt: true,
            },
        )),
    );
    // A non-corrupt failure is not a violation, nor an indeterminate get.
    h.op(OpKind::Get { key: K.into() }, 40, Some((50, failed())));
    h.op(OpKind::Get { key: K.into() }, 60, None);
    assert_eq!(h.kinds(), vec![ViolationKind::Torn, ViolationKind::Corrupt]);
    let r = h.report();
    assert_eq!((r.failed, r.indeterminate), (2, 1));
}

fn small_get(h: &mut H, at: u64, done: u64, bytes: &[u8]) {
    h.get(
        at,
        done,
        GetResult::Value {
            id: None,
            len: bytes.len() as u64,
            small_bytes_hex: Some(to_hex(bytes)),
        },
    );
}

#[test]
fn small_values_are_matched_by_bytes() {
    let small = (header_len(K.as_bytes()).expect("short key") - 1) as u64;
    let mut h = H::default();
    let a = h.put_len(0, Some((10, true)), small);
    let bytes = generate(K.as_bytes(), a, small as usize);
    assert_eq!(verify(K.as_bytes(), &bytes), Identified::Small(small));
    small_get(&mut h, 20, 30, &bytes);
    assert!(h.kinds().is_empty());
    // Once overwritten, stale.
    h.put_len(40, Some((50, true)), small);
    small_get(&mut h, 60, 70, &bytes);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    // Bytes no put wrote: torn; a bad hex record too.
    let mut h = H::default();
    h.put_len(0, Some((10, true)), small);
    small_get(&mut h, 20, 30, &vec![0xaa; small as usize]);
    h.get(
        40,
        50,
        GetResult::Value {
            id: None,
            len: 2,
            small_bytes_hex: Some("zz".into()),
        },
    );
    assert_eq!(h.kinds(), vec![ViolationKind::Torn, ViolationKind::Torn]);
}

#[test]
fn identical_small_values_take_the_most_favourable_candidate() {
    // Every 0-byte value is the same: reading one is fine while any 0-byte put may be current.
    let mut h = H::default();
    h.put_len(0, Some((10, true)), 0);
    h.put_len(20, Some((30, true)), 0);
    small_get(&mut h, 40, 50, &[]);
    assert!(h.kinds().is_empty());
    // ... but not after a later 100-byte put and no 0-byte put since.
    h.put(60, Some((70, true)));
    small_get(&mut h, 80, 90, &[]);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
}

#[test]
fn keys_are_independent() {
    let mut h = H::default();
    h.put(0, Some((10, true)));
    h.op(
        OpKind::Get {
            key: "other".into(),
        },
        20,
        Some((30, Outcome::Ok(OpResult::Get(GetResult::NotFound)))),
    );
    assert!(h.kinds().is_empty());
}

#[test]
fn context_lists_the_ops_around_a_violation() {
    let mut h = H::default();
    h.put(0, Some((10, true))); // too early
    h.put(1000, Some((1010, true)));
    h.get(1020, 1030, GetResult::NotFound);
    h.op(
        OpKind::Delete {
            key: "other".into(),
        },
        1020,
        None,
    ); // other key
    h.delete(1040, None);
    let history = History::from_events(h.events.clone());
    let r = check(&history);
    assert_eq!(r.violations.len(), 1);
    let ctx: Vec<String> = context(&history, &r.violations[0], 100)
        .into_iter()
        .map(describe_op)
        .collect();
    assert_eq!(ctx.len(), 3, "{ctx:#?}");
    assert!(
        ctx[0].starts_with("put") && ctx[0].contains("(100 bytes)"),
        "{ctx:?}"
    );
    assert!(ctx[1].ends_with("→ not found"), "{ctx:?}");
    assert!(
        ctx[2].contains("indeterminate") && ctx[2].contains("ended never"),
        "{ctx:?}"
    );
}

#[test]
fn the_value_of_a_refused_put_is_never_read() {
    let mut h = H::default();
    let a = h.put(0, Some((10, true)));
    let refused = h.refused_put(20, 30, 100);
    let small = h.refused_put(40, 50, 3);
    h.get_value(60, 70, a);
    h.get_value(80, 90, refused);
    small_get(&mut h, 100, 110, &generate(K.as_bytes(), small, 3));
    let r = h.report();
    assert_eq!(r.refused, 2);
    assert_eq!(
        h.kinds(),
        vec![ViolationKind::Refused, ViolationKind::Refused],
        "{r:?}"
    );
    // While a failed put may have taken effect.
    let mut h = H::default();
    let b = h.put(0, Some((10, false)));
    h.get_value(20, 30, b);
    assert!(h.report().is_clean());
}

#[test]
fn summary_line_has_every_count() {
    let mut h = H::default();
    h.put(0, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    h.delete(40, None);
    assert_eq!(
        h.report().to_string(),
        "ops 3 (puts 1, gets 1, deletes 1, removals 0): ok 2, failed 0, refused 0, indeterminate 1; \
         violations: lost 1, torn 0, stale 0, corrupt 0, unknown 0, future 0, refused 0, wrong_version 0, \
         lost_version 0, resurrected 0"
    );
    let json = serde_json::to_string(&h.report()).expect("serializes");
    assert!(json.contains("\"kind\":\"lost\""), "{json}");
}

#[test]
fn large_hot_key_histories_check_quickly() {
    // 100 000 ops on one key, overlapping in pairs, half of the values small.
    let mut h = H::default();
    for i in 0..25_000u64 {
        let t = i * 100;
        let len = if i % 2 == 0 { 5 } else { 100 };
        let a = h.put_len(t, Some((t + 20, true)), len);
        let b = h.put_len(t + 10, Some((t + 30, true)), len);
        for (id, at) in [(a, t + 40), (b, t + 50)] {
            if len == 5 {
                small_get(&mut h, at, at + 5, &generate(K.as_bytes(), id, 5));
            } else {
                h.get_value(at, at + 5, id);
            }
        }
    }
    let history = History::from_events(h.events.clone());
    let started = std::time::Instant::now();
    let r = check(&history);
    let took = started.elapsed();
    println!("{} in {took:?}", r.summary());
    assert_eq!((r.ops, r.gets_with_value), (100_000, 50_000));
    assert!(r.is_clean());
    let limit = if cfg!(debug_assertions) { 30.0 } else { 3.0 };
    assert!(took.as_secs_f64() < limit, "took {took:?}");
}

/// Property: a sequential history generated from a model of the key (one op at a time, reads returning
/// the model's value) never has a violation, and corrupting one read of it to an older value does.
#[test]
fn sequential_model_histories_are_clean_and_mutations_are_caught() {
    use rand::{Rng, SeedableRng};
    for seed in 0..200u64 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut h = H::default();
        let mut current: Option<ValueId> = None;
        let mut older: Vec<ValueId> = Vec::new();
        let mut t = 0;
        let mut mutated = false;
        for _ in 0..60 {
            t += 10;
            match rng.random_range(0..3) {
                0 => {
                    let id = h.put(t, Some((t + 5, true)));
                    older.extend(current.replace(id));
                }
                1 => {
                    h.delete(t, Some((t + 5, true)));
                    older.extend(current.take());
                }
                _ => {
                    // Mutate the last read of the history to return an overwritten value.
                    if !mutated && !older.is_empty() && rng.random_bool(0.05) {
                        let stale = older[rng.random_range(0..older.len())];
                        h.get_value(t, t + 5, stale);
                        mutated = true;
                    } else {
                        match current {
                            Some(id) => h.get_value(t, t + 5, id),
                            None => h.get(t, t + 5, GetResult::NotFound),
                        }
                    }
                }
            }
        }
        let r = check(&History::from_events(h.events.clone()));
        if mutated {
            assert_eq!(r.violations.len(), 1, "seed {seed}: {r:?}");
            assert_eq!(r.violations[0].kind, ViolationKind::Stale);
        } else {
            assert!(r.is_clean(), "seed {seed}: {r:?}");
        }
    }
}

/// A put of value `id` (len 100), for a value several operations write (an S3 Complete sent again).
fn put_again(h: &mut H, id: ValueId, at: u64, done: Option<(u64, Outcome)>) {
    let kind = OpKind::Put {
        key: K.into(),
        id,
        len: 100,
    };
    h.op(kind, at, done);
}

#[test]
fn a_value_put_by_several_operations_takes_the_most_favourable_one() {
    // The first put of the value failed early; another write was acknowledged after it.
    let mut h = H::default();
    let v = h.put(0, Some((10, false)));
    h.put(20, Some((30, true)));
    h.get_value(40, 50, v);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale], "one put: stale");
    // A second operation putting the same value, acknowledged after that write, may have written it last.
    put_again(&mut h, v, 0, Some((35, Outcome::Ok(OpResult::Put))));
    h.get_value(60, 70, v);
    assert!(h.kinds().is_empty(), "the second put may be the last write");
    // Once a write is acknowledged after every put of the value, reading it is stale again.
    h.delete(80, Some((90, true)));
    h.get_value(100, 110, v);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    // A value whose every put is refused is never read.
    let mut h = H::default();
    let r = h.refused_put(0, 10, 100);
    let refused = Outcome::Refused {
        error: "precondition failed".into(),
    };
    put_again(&mut h, r, 0, Some((20, refused)));
    h.get_value(30, 40, r);
    assert_eq!(h.kinds(), vec![ViolationKind::Refused]);
}

// Kept versions. Versions are opaque strings to the checker: "v1", "v2"…

impl H {
    /// A put of a whole value (len 100) reporting version `version` when acknowledged; keeping or plain.
    fn put_version(
        &mut self,
        keep: bool,
        version: &str,
        at: u64,
        done: Option<(u64, bool)>,
    ) -> ValueId {
        let id = ValueId {
            writer: W,
            seq: self.next,
        };
        let (key, len) = (K.to_owned(), 100);
        let kind = if keep {
            OpKind::PutKeeping { key, id, len }
        } else {
            OpKind::Put { key, id, len }
        };
        let done = done.map(|(t, ok)| {
            let outcome = if ok {
                Outcome::Ok(OpResult::PutVersion {
                    version: version.into(),
                })
            } else {
                failed()
            };
            (t, outcome)
        });
        self.op(kind, at, done);
        id
    }

    fn get_version(&mut self, version: &str, at: u64, done: u64, result: GetResult) {
        let kind = OpKind::GetVersion {
            key: K.into(),
            version: version.into(),
        };
        self.op(kind, at, Some((done, Outcome::Ok(OpResult::Get(result)))));
    }

    fn get_version_value(&mut self, version: &str, at: u64, done: u64, id: ValueId) {
        self.get_version(version, at, done, whole(id));
    }

    /// An acknowledged removal of the current version `version` that made `promoted` current.
    fn promote(&mut self, version: &str, at: u64, done: u64, promoted: &str) {
        let kind = OpKind::RemoveVersion {
            key: K.into(),
            version: version.into(),
        };
        let outcome = Outcome::Ok(OpResult::RemoveVersion {
            found: true,
            promoted: Some(promoted.into()),
        });
        self.op(kind, at, Some((done, outcome)));
    }

    /// A removal of `version`: `Some(Some(found))` acknowledged (promoting nothing), `Some(None)` failed, `None`
    /// indeterminate.
    fn remove(&mut self, version: &str, at: u64, done: Option<(u64, Option<bool>)>) {
        let kind = OpKind::RemoveVersion {
            key: K.into(),
            version: version.into(),
        };
        let done = done.map(|(t, found)| {
            let outcome = match found {
                Some(found) => Outcome::Ok(OpResult::RemoveVersion {
                    found,
                    promoted: None,
                }),
                None => failed(),
            };
            (t, outcome)
        });
        self.op(kind, at, done);
    }
}

fn whole(id: ValueId) -> GetResult {
    GetResult::Value {
        id: Some(id),
        len: 100,
        small_bytes_hex: None,
    }
}

#[test]
fn kept_versions_read_back_and_promotions_are_fine() {
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    let b = h.put_version(true, "v2", 20, Some((30, true)));
    h.get_version_value("v1", 40, 50, a);
    h.get_version_value("v2", 40, 50, b);
    h.get_value(40, 50, b);
    // Removing the current version makes the kept one current again.
    h.promote("v2", 60, 70, "v1");
    h.get_value(80, 90, a);
    h.get_version_value("v1", 80, 90, a);
    h.get_version("v2", 80, 90, GetResult::NotFound);
    // A removal that found nothing changed nothing; an unknown version is not judged.
    h.remove("v2", 100, Some((110, Some(false))));
    h.get_version("v9", 120, 130, GetResult::NotFound);
    h.get_version_value("v9", 120, 130, a);
    // Removing the last version empties the key.
    h.remove("v1", 140, Some((150, Some(true))));
    h.get(160, 170, GetResult::NotFound);
    h.get_version("v1", 160, 170, GetResult::NotFound);
    let r = h.report();
    assert!(r.is_clean(), "{r:?}");
    assert_eq!((r.removals, r.gets), (3, 10));
}

#[test]
fn a_version_read_as_another_value_is_flagged() {
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    let b = h.put_version(true, "v2", 20, Some((30, true)));
    h.get_version_value("v1", 40, 50, b);
    h.get_version("v2", 40, 50, small(&generate(K.as_bytes(), b, 5)));
    h.get_version_value("v2", 40, 50, b);
    h.get_version_value("v1", 40, 50, a);
    assert_eq!(
        h.kinds(),
        vec![ViolationKind::WrongVersion, ViolationKind::WrongVersion]
    );
}

fn small(bytes: &[u8]) -> GetResult {
    GetResult::Value {
        id: None,
        len: bytes.len() as u64,
        small_bytes_hex: Some(to_hex(bytes)),
    }
}

#[test]
fn a_kept_version_not_found_is_lost() {
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.get_version("v1", 40, 50, GetResult::NotFound);
    h.get_version("v2", 40, 50, GetResult::NotFound);
    // Before its put completed, a version may not exist yet.
    h.get_version("v2", 25, 50, GetResult::NotFound);
    assert_eq!(
        h.kinds(),
        vec![ViolationKind::LostVersion, ViolationKind::LostVersion]
    );
    // A plain put after the keeping one replaces v2, not the kept v1.
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.put_version(false, "v3", 40, Some((50, true)));
    h.delete(60, Some((70, true)));
    h.get_version("v1", 80, 90, GetResult::NotFound);
    h.get_version("v2", 80, 90, GetResult::NotFound);
    h.get_version("v3", 80, 90, GetResult::NotFound);
    assert_eq!(h.kinds(), vec![ViolationKind::LostVersion]);
}

#[test]
fn a_version_not_found_is_fine_when_it_may_be_destroyed() {
    // Replaced without keeping: by a plain put, a delete, of any outcome, or concurrent with the keeping put.
    for destroyer in 0..4 {
        let mut h = H::default();
        h.put_version(false, "v1", 0, Some((10, true)));
        match destroyer {
            0 => {
                h.put_version(false, "v2", 20, Some((30, true)));
            }
            1 => h.delete(20, Some((30, false))),
            2 => h.delete(20, None),
            _ => {
                h.put_version(true, "v2", 20, Some((40, true)));
                h.put(30, Some((50, true)));
            }
        }
        h.get_version("v1", 60, 70, GetResult::NotFound);
        assert!(h.kinds().is_empty(), "destroyer {destroyer}");
    }
    // Removed, by a removal of any outcome but one that found nothing, begun before the get ended.
    for (done, clean) in [
        (Some((30, Some(true))), true),
        (Some((30, None)), true),
        (None, true),
        (Some((30, Some(false))), false),
    ] {
        let mut h = H::default();
        h.put_version(false, "v1", 0, Some((10, true)));
        h.put_version(true, "v2", 12, Some((14, true)));
        h.remove("v1", 20, done);
        h.get_version("v1", 15, 25, GetResult::NotFound);
        assert_eq!(h.kinds().is_empty(), clean, "{done:?}");
    }
    // A kept version made current again by a removal, then replaced by a plain put: destroyed.
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.promote("v2", 40, 50, "v1");
    h.put_version(false, "v3", 60, Some((70, true)));
    h.get_version("v1", 80, 90, GetResult::NotFound);
    assert!(h.kinds().is_empty());
    // v3 kept by a keeping put after the removal was over, then a plain put: shielded, v3 stays.
    h.put_version(true, "v4", 100, Some((110, true)));
    h.put(120, Some((130, true)));
    h.get_version("v3", 140, 150, GetResult::NotFound);
    assert_eq!(h.kinds(), vec![ViolationKind::LostVersion]);
}

#[test]
fn a_removed_version_read_back_is_resurrected() {
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    let b = h.put_version(true, "v2", 20, Some((30, true)));
    h.remove("v1", 40, Some((50, Some(true))));
    h.get_version_value("v1", 60, 70, a);
    // Concurrent with the removal, either answer is fine.
    h.get_version_value("v1", 45, 70, a);
    // A plain get of a removed current version's value, too.
    h.remove("v2", 80, Some((90, Some(true))));
    h.get_value(100, 110, b);
    assert_eq!(
        h.kinds(),
        vec![ViolationKind::Resurrected, ViolationKind::Resurrected]
    );
    // Another removal in flight since before the removal completed may have promoted it for a while.
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.promote("v2", 35, 80, "v1");
    h.remove("v1", 40, Some((50, Some(true))));
    h.get_version_value("v1", 60, 70, a);
    assert!(h.kinds().is_empty());
    h.get_version_value("v1", 90, 100, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Resurrected]);
}

#[test]
fn plain_gets_accept_promoted_values_only_after_a_removal() {
    // Kept by a keeping put, no removal: reading the replaced value is still stale.
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.get_value(40, 50, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    // A removal (of the current version) that may follow every acknowledged write may have promoted it.
    h.promote("v2", 60, 65, "v1");
    h.get_value(70, 80, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    // An acknowledged write after that removal ended: stale again.
    h.put_version(true, "v3", 90, Some((100, true)));
    h.get_value(110, 120, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale, ViolationKind::Stale]);
    // Without any keeping put, a removal promotes nothing: stale.
    let mut h = H::default();
    let a = h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(false, "v2", 20, Some((30, true)));
    h.remove("v2", 40, Some((50, Some(true))));
    h.get_value(60, 70, a);
    assert_eq!(h.kinds(), vec![ViolationKind::Stale]);
    // A removal may leave the key empty: NotFound is fine after one, lost without.
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.get(20, 30, GetResult::NotFound);
    h.remove("v1", 40, None);
    h.get(50, 60, GetResult::NotFound);
    h.remove("v1", 35, Some((45, Some(false))));
    assert_eq!(h.kinds(), vec![ViolationKind::Lost]);
}

#[test]
fn version_gets_are_checked_for_torn_corrupt_and_future_reads() {
    let mut h = H::default();
    h.put_version(true, "v1", 0, Some((10, true)));
    h.get_version(
        "v1",
        20,
        30,
        GetResult::Torn {
            reason: "mixed".into(),
            len: 100,
        },
    );
    let kind = OpKind::GetVersion {
        key: K.into(),
        version: "v1".into(),
    };
    let corrupt = Outcome::Failed {
        error: "checksum mismatch".into(),
        corrupt: true,
    };
    h.op(kind, 20, Some((30, corrupt)));
    // Indeterminate and failed gets are not judged.
    h.op(
        OpKind::GetVersion {
            key: K.into(),
            version: "v1".into(),
        },
        20,
        None,
    );
    // A version whose put began after the get ended.
    let late = h.put_version(true, "v2", 100, Some((110, true)));
    h.get_version_value("v2", 40, 50, late);
    assert_eq!(
        h.kinds(),
        vec![
            ViolationKind::Torn,
            ViolationKind::Corrupt,
            ViolationKind::Future
        ]
    );
}

#[test]
fn removals_that_promoted_nothing_do_not_unshield() {
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    // A removal of a kept version, acknowledged as promoting nothing, between the keeping put and a plain put.
    h.put_version(true, "v3", 32, Some((34, true)));
    h.remove("v2", 40, Some((50, Some(true))));
    h.put(60, Some((70, true)));
    h.get_version("v1", 80, 90, GetResult::NotFound);
    assert_eq!(h.kinds(), vec![ViolationKind::LostVersion]);
    // The same with a removal that reported a promotion overlapping it: it may have promoted v1 in a chain.
    let mut h = H::default();
    h.put_version(false, "v1", 0, Some((10, true)));
    h.put_version(true, "v2", 20, Some((30, true)));
    h.put_version(true, "v3", 32, Some((34, true)));
    h.remove("v2", 40, Some((50, Some(true))));
    let kind = OpKind::RemoveVersion {
        key: K.into(),
        version: "v3".into(),
    };
    let promoted = Outcome::Ok(OpResult::RemoveVersion {
        found: true,
        promoted: Some("v9".into()),
    });
    h.op(kind, 5, Some((45, promoted)));
    h.put(60, Some((70, true)));
    h.get_version("v1", 80, 90, GetResult::NotFound);
    assert!(h.kinds().is_empty());
}

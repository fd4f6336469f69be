//! [`ChunkIdCheck`]: the check of one article blob's chunk ids against its layout, in constant memory.

use std::collections::BTreeSet;

use super::layout::ArticleLayout;

/// Most chunk ids kept and named per kind of problem of one blob; a blob with more problems than this is
/// rejected without reading the rest of its partitions.
pub const MAX_LISTED: usize = 64;

/// The smallest [`MAX_LISTED`] ids of a set, and how many ids the set holds.
#[derive(Clone, Debug, Default)]
struct IdSample {
    kept: BTreeSet<i64>,
    count: u64,
}

impl IdSample {
    fn insert(&mut self, id: i64) {
        self.count = self.count.saturating_add(1);
        self.keep(id);
    }

    /// Adds the ids `start, start + step, …` below `end` (`step` ≥ 1) in at most [`MAX_LISTED`] steps.
    fn insert_progression(&mut self, start: i64, step: i64, end: i64) {
        if start >= end {
            return;
        }
        let count = (end - 1 - start) / step + 1;
        self.count = self.count.saturating_add(count.unsigned_abs());
        let mut id = start;
        for _ in 0..count.min(MAX_LISTED as i64) {
            if self.kept.len() >= MAX_LISTED && self.kept.last().is_some_and(|&max| id >= max) {
                break;
            }
            self.keep(id);
            match id.checked_add(step) {
                Some(next) if next < end => id = next,
                _ => break,
            }
        }
    }

    fn keep(&mut self, id: i64) {
        self.kept.insert(id);
        if self.kept.len() > MAX_LISTED {
            self.kept.pop_last();
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `3, 7-8`, or `1-64 and 99 more`.
    fn describe(&self) -> String {
        let ids: Vec<i64> = self.kept.iter().copied().collect();
        let more = self.count.saturating_sub(ids.len() as u64);
        if more == 0 {
            id_ranges(&ids)
        } else {
            format!("{} and {more} more", id_ranges(&ids))
        }
    }
}

/// Checks the chunk ids of one article blob as they are read, salt by salt in the order `0..salts_in_use`
/// and each salt's ids in ascending order, in constant memory: at most [`MAX_LISTED`] ids per kind of problem.
///
/// Call [`ChunkIdCheck::begin_salt`], [`ChunkIdCheck::id`] for each id of that salt, then
/// [`ChunkIdCheck::end_salt`]; stop reading once [`ChunkIdCheck::has_enough`] is true; then
/// [`ChunkIdCheck::verdict`].
#[derive(Clone, Debug)]
pub struct ChunkIdCheck {
    layout: ArticleLayout,
    salt: i64,
    /// The next id the current salt should hold.
    next: i64,
    /// The last id seen in the current salt.
    last: Option<i64>,
    missing: IdSample,
    misplaced: IdSample,
    beyond: IdSample,
    disordered: IdSample,
    salts_done: i64,
}

impl ChunkIdCheck {
    /// A check of a blob laid out as `layout`.
    pub fn new(layout: ArticleLayout) -> Self {
        Self {
            layout,
            salt: 0,
            next: 0,
            last: None,
            missing: IdSample::default(),
            misplaced: IdSample::default(),
            beyond: IdSample::default(),
            disordered: IdSample::default(),
            salts_done: 0,
        }
    }

    /// Starts reading the ids of `salt` (in `0..salts_in_use`).
    pub fn begin_salt(&mut self, salt: i64) {
        self.salt = salt;
        self.next = salt;
        self.last = None;
    }

    /// One id read from the current salt.
    pub fn id(&mut self, id: i64) {
        if self.last.is_some_and(|last| id <= last) {
            self.disordered.insert(id);
            return;
        }
        self.last = Some(id);
        let rows = self.layout.rows();
        let cardinality = self.layout.salt_cardinality;
        if id < 0 || id >= rows {
            self.beyond.insert(id);
        } else if id % cardinality != self.salt {
            self.misplaced.insert(id);
        } else {
            // id ≥ next: the ids of this salt are ascending and next was the one after the last.
            self.missing.insert_progression(self.next, cardinality, id);
            self.next = id.saturating_add(cardinality);
        }
    }

    /// Ends the current salt: the ids it should still hold are missing.
    pub fn end_salt(&mut self) {
        self.missing.insert_progression(
            self.next,
            self.layout.salt_cardinality,
            self.layout.rows(),
        );
        self.next = i64::MAX;
        self.salts_done += 1;
    }

    /// Whether the check has found more problems than it lists: reading further would not change the verdict.
    pub fn has_enough(&self) -> bool {
        let problems = [
            &self.missing,
            &self.misplaced,
            &self.beyond,
            &self.disordered,
        ]
        .iter()
        .fold(0u64, |n, s| n.saturating_add(s.count));
        problems > MAX_LISTED as u64
    }

    /// `Ok` when every chunk id is present once, in its salt; otherwise why not.
    pub fn verdict(&self) -> std::result::Result<(), String> {
        let total = self.layout.total_chunks;
        let cardinality = self.layout.salt_cardinality;
        let finished = self.salts_done >= self.layout.salts_in_use();
        // An id outside its salt is duplicated when its own salt holds it too: known when every salt was read
        // and every missing id is listed.
        let exact = finished && self.missing.count <= MAX_LISTED as u64;
        let (duplicated, misplaced): (Vec<i64>, Vec<i64>) = self
            .misplaced
            .kept
            .iter()
            .partition(|id| exact && !self.missing.kept.contains(id));
        let mut problems = Vec::new();
        if !self.missing.is_empty() {
            problems.push(format!(
                "missing chunk ids {} of 0..{total}",
                self.missing.describe()
            ));
        }
        if !duplicated.is_empty() {
            problems.push(format!(
                "duplicated chunk ids {} (in more than one salt)",
                id_ranges(&duplicated)
            ));
        }
        if !misplaced.is_empty() {
            let more = self
                .misplaced
                .count
                .saturating_sub((duplicated.len() + misplaced.len()) as u64);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            problems.push(format!(
                "chunk ids {}{more} not in salt chunk_id % {cardinality}{}",
                id_ranges(&misplaced),
                if exact { "" } else { " (or duplicated)" }
            ));
        }
        if !self.beyond.is_empty() {
            problems.push(format!(
                "chunk ids {} beyond total_chunks {total}",
                self.beyond.describe()
            ));
        }
        if !self.disordered.is_empty() {
            problems.push(format!(
                "chunk ids {} read out of order",
                self.disordered.describe()
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        if !finished {
            problems.push(format!(
                "check stopped after salt {} of 0..{}: more than {MAX_LISTED} problems",
                self.salts_done - 1,
                self.layout.salts_in_use()
            ));
        }
        Err(problems.join("; "))
    }
}

/// `0-3, 7, 9-10`.
pub fn id_ranges(ids: &[i64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut iter = ids.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while end
            .checked_add(1)
            .is_some_and(|next| iter.peek() == Some(&next))
        {
            end += 1;
            iter.next();
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use scylla::value::CqlValue;

    use super::*;

    fn layout(total_chunks: i64, salt_cardinality: i64) -> ArticleLayout {
        ArticleLayout {
            total_chunks,
            salt_cardinality,
        }
    }

    /// The recipe's chunk ids of `layout`, per salt in use.
    fn recipe_ids(layout: ArticleLayout) -> Vec<Vec<i64>> {
        let mut salts = vec![Vec::new(); usize::try_from(layout.salts_in_use()).expect("small")];
        for id in 0..layout.rows() {
            salts[usize::try_from(id % layout.salt_cardinality).expect("small")].push(id);
        }
        salts
    }

    /// Runs a check as the import does (salts in order, stopping once it has enough) over `salts`, the ids of
    /// each salt (missing salts are empty); returns the verdict and how many salts it read.
    fn run(layout: ArticleLayout, salts: &[Vec<i64>]) -> (std::result::Result<(), String>, i64) {
        let mut check = ChunkIdCheck::new(layout);
        let mut read = 0;
        let mut salt = 0;
        while salt < layout.salts_in_use() && !check.has_enough() {
            check.begin_salt(salt);
            let ids = usize::try_from(salt)
                .ok()
                .and_then(|s| salts.get(s))
                .map_or(&[][..], Vec::as_slice);
            for &id in ids {
                check.id(id);
                assert!(
                    [
                        &check.missing,
                        &check.misplaced,
                        &check.beyond,
                        &check.disordered
                    ]
                    .iter()
                    .all(|sample| sample.kept.len() <= MAX_LISTED),
                    "kept ids stay within MAX_LISTED"
                );
                if check.has_enough() {
                    break;
                }
            }
            check.end_salt();
            read += 1;
            salt += 1;
        }
        (check.verdict(), read)
    }

    #[test]
    fn complete_blobs_pass() {
        for (total, cardinality) in [(10, 4), (1, 10), (3, 1), (100, 100), (7, 3)] {
            let l = layout(total, cardinality);
            assert_eq!(run(l, &recipe_ids(l)).0, Ok(()), "{l:?}");
        }
    }

    #[test]
    fn problems_are_named_as_before() {
        let l = layout(10, 4);
        let mut holes = recipe_ids(l);
        holes[3].retain(|id| *id != 3 && *id != 7);
        holes[0].retain(|id| *id != 8);
        assert_eq!(
            run(l, &holes).0,
            Err("missing chunk ids 3, 7-8 of 0..10".into())
        );

        let mut twice = recipe_ids(l);
        twice[2].insert(1, 5); // 2, 5, 6
        assert_eq!(
            run(l, &twice).0,
            Err("duplicated chunk ids 5 (in more than one salt)".into())
        );

        let mut moved = recipe_ids(l);
        moved[1].retain(|id| *id != 5);
        moved[2].insert(1, 5);
        let verdict = run(l, &moved).0.expect_err("misplaced");
        assert!(
            verdict.contains("missing chunk ids 5 of 0..10")
                && verdict.contains("chunk ids 5 not in salt chunk_id % 4"),
            "{verdict}"
        );

        let mut beyond = recipe_ids(l);
        beyond[0].push(12);
        assert_eq!(
            run(l, &beyond).0,
            Err("chunk ids 12 beyond total_chunks 10".into())
        );
    }

    /// The article's recipe writes an empty value as `total_chunks 0, salt_cardinality 1` and one empty chunk
    /// row: that is a complete blob of zero bytes, not an invalid layout.
    #[test]
    fn an_empty_value_is_a_complete_blob() {
        let row = ArticleLayout::from_row(Some(&CqlValue::Int(0)), Some(&CqlValue::Int(1)))
            .expect("a valid layout");
        assert_eq!((row.rows(), row.salts_in_use()), (1, 1));
        assert_eq!(run(row, &[vec![0]]).0, Ok(()));
        assert_eq!(row.check_chunk(0, 0), Ok(()));
        assert!(
            row.check_chunk(0, 3).is_err(),
            "an empty value's row is empty"
        );
        assert_eq!(
            run(row, &[vec![0, 1]]).0,
            Err("chunk ids 1 beyond total_chunks 0".into())
        );
        assert_eq!(run(layout(0, 5), &[vec![0]]).0, Ok(()), "any cardinality");
    }

    /// A `total_chunks` or `salt_cardinality` of 2^62 costs no more than the rows that exist: the check reads
    /// a bounded number of salts and keeps a bounded number of ids.
    #[test]
    fn huge_layouts_are_rejected_in_bounded_work() {
        let huge = 1i64 << 62;
        let (verdict, salts_read) = run(layout(huge, 1), &[vec![0]]);
        let verdict = verdict.expect_err("incomplete");
        assert!(
            verdict.starts_with(&format!(
                "missing chunk ids 1-64 and {} more of 0..{huge}",
                huge - 65
            )),
            "{verdict}"
        );
        assert_eq!(salts_read, 1);

        let (verdict, salts_read) = run(layout(huge, huge), &[vec![0]]);
        let verdict = verdict.expect_err("incomplete");
        assert!(
            salts_read <= MAX_LISTED as i64 + 2,
            "{salts_read} salts read"
        );
        assert!(verdict.contains("check stopped after salt"), "{verdict}");

        let (verdict, _) = run(layout(i64::MAX, 7), &[vec![0, 7, i64::MAX - 3]]);
        assert!(verdict.is_err());
    }

    #[test]
    fn id_ranges_are_compact() {
        assert_eq!(id_ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        assert_eq!(id_ranges(&[5]), "5");
        assert_eq!(id_ranges(&[]), "");
        // The last id of the range does not overflow looking for its successor.
        assert_eq!(
            id_ranges(&[i64::MAX - 1, i64::MAX]),
            format!("{}-{}", i64::MAX - 1, i64::MAX)
        );
        assert_eq!(
            id_ranges(&[i64::MIN, i64::MAX]),
            format!("{}, {}", i64::MIN, i64::MAX)
        );
        // Past the maximum is not the minimum.
        assert_eq!(
            id_ranges(&[i64::MAX, i64::MIN]),
            format!("{}, {}", i64::MAX, i64::MIN)
        );
    }

    /// Longest verdict: four kinds of problem, each at most `MAX_LISTED` ids of up to 20 digits and a sign,
    /// plus fixed text.
    const MAX_VERDICT_LEN: usize = 4 * (MAX_LISTED * 44 + 120) + 200;

    fn any_integer() -> impl Strategy<Value = CqlValue> {
        prop_oneof![
            any::<i64>().prop_map(CqlValue::BigInt),
            any::<i32>().prop_map(CqlValue::Int),
            any::<i16>().prop_map(CqlValue::SmallInt),
            any::<i8>().prop_map(CqlValue::TinyInt),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(CqlValue::Blob),
        ]
    }

    proptest! {
        /// The article's rows, whatever they hold (layout values of any integer type or none, chunk ids of
        /// any value in any order, chunks of any length), never panic the import's checks, which keep at most
        /// `MAX_LISTED` ids per kind of problem, read at most `MAX_LISTED + 2` salts past the first problem,
        /// and return a verdict of bounded length.
        #[test]
        fn arbitrary_rows_never_panic_and_stay_bounded(
            total in proptest::option::of(any_integer()),
            cardinality in proptest::option::of(any_integer()),
            salts in proptest::collection::vec(proptest::collection::vec(any::<i64>(), 0..40), 0..8),
            chunk_len in 0usize..100,
        ) {
            if let Ok(layout) = ArticleLayout::from_row(total.as_ref(), cardinality.as_ref()) {
                prop_assert!(layout.rows() >= 1 && layout.salts_in_use() >= 1);
                let _ = layout.fits("int", "bigint");
                let _ = layout.check_chunk(0, chunk_len);
                let (verdict, salts_read) = run(layout, &salts);
                prop_assert!(salts_read <= layout.salts_in_use());
                prop_assert!(salts_read <= salts.len().max(1) as i64 + MAX_LISTED as i64 + 2);
                if let Err(reason) = verdict {
                    prop_assert!(reason.len() <= MAX_VERDICT_LEN, "{} bytes", reason.len());
                }
            }
        }

        /// Sorted ids of the recipe, with any ids taken out, give exactly those ids as missing (or pass).
        #[test]
        fn missing_ids_are_exact(total in 1i64..200, cardinality in 1i64..20, holes in proptest::collection::btree_set(0i64..200, 0..10)) {
            let l = layout(total, cardinality);
            let mut salts = recipe_ids(l);
            for salt in &mut salts {
                salt.retain(|id| !holes.contains(id));
            }
            let holes: Vec<i64> = holes.into_iter().filter(|h| *h < total).collect();
            let verdict = run(l, &salts).0;
            if holes.is_empty() {
                prop_assert_eq!(verdict, Ok(()));
            } else {
                prop_assert_eq!(verdict, Err(format!("missing chunk ids {} of 0..{total}", id_ranges(&holes))));
            }
        }
    }
}

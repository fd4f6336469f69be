//! The census of a store: how many blobs, how many bytes, of which sizes and in which layout (inline, one
//! partition, salted), and over how many partitions each blob's bytes are spread. [`BlobStore::census`] counts
//! a store (or a prefix, or the first blobs of a scan) in bounded memory: sizes go into a histogram of fixed
//! buckets, eight per power of two, so a percentile is known to within an eighth of its octave (12.5%), whatever
//! the number of blobs. `saltblob census` prints it; `saltblob plan` ([`crate::policy::plan`]) reads it.

use std::collections::BTreeMap;

use futures::StreamExt;

use crate::base::error::{Error, Result};
use crate::format::layout::Layout;
use crate::format::manifest::{Manifest, ManifestBody};
use crate::store::BlobStore;
use crate::store::pass::{PassEvent, PassOptions, unread_error};

/// Buckets per power of two of [`SizeHistogram`].
pub const BUCKETS_PER_OCTAVE: u32 = 8;

/// Where a blob's bytes are, as the blast radius sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayoutClass {
    /// In the manifest: one partition holds the whole blob.
    Inline,
    /// In chunks of one partition (plus the manifest's).
    SinglePartition,
    /// In chunks over more than one partition (salted, or a multipart blob of several segments).
    Salted,
}

impl LayoutClass {
    /// Every class, in order.
    pub const ALL: [LayoutClass; 3] = [Self::Inline, Self::SinglePartition, Self::Salted];

    /// The class's name as printed: `inline`, `single-partition`, `salted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::SinglePartition => "single-partition",
            Self::Salted => "salted",
        }
    }

    /// The class of a blob whose bytes are spread over `partitions` partitions ([`partitions_of`]).
    pub fn of_partitions(partitions: u64) -> Self {
        match partitions {
            0 | 1 => Self::Inline,
            2 => Self::SinglePartition,
            _ => Self::Salted,
        }
    }

    /// The class of a blob laid out as `layout` by a policy (see [`crate::format::layout::LayoutPolicy::layout_for`]).
    pub fn of_layout(layout: &Layout) -> Self {
        Self::of_partitions(partitions_of_layout(layout))
    }
}

/// How many partitions a blob's bytes depend on on a cluster: the manifest's, and one per salt of each chunked
/// body (a multipart blob's segments are versions of their own, so each salt of each segment is a partition).
pub fn partitions_of(manifest: &Manifest) -> u64 {
    1 + body_partitions(&manifest.body)
}

/// [`partitions_of`] for a layout a policy chose.
pub fn partitions_of_layout(layout: &Layout) -> u64 {
    match layout {
        Layout::Inline => 1,
        Layout::Chunked(l) => 1 + u64::from(l.salt_count),
    }
}

fn body_partitions(body: &ManifestBody) -> u64 {
    match body {
        ManifestBody::Inline(_) => 0,
        ManifestBody::Chunked { layout, .. } => u64::from(layout.salt_count),
        ManifestBody::Segmented(segments) => {
            segments.iter().map(|s| body_partitions(&s.body)).sum()
        }
    }
}

/// A count of blobs and of their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Blobs.
    pub count: u64,
    /// Their bytes (sizes as put, before compression).
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, count: u64, bytes: u64) {
        self.count += count;
        self.bytes = self.bytes.saturating_add(bytes);
    }
}

/// One bucket of a [`SizeHistogram`]: the blobs whose size falls in it, and the smallest and largest seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Blobs and bytes.
    pub tally: Tally,
    /// Smallest size seen.
    pub min: u64,
    /// Largest size seen.
    pub max: u64,
}

/// Blob sizes in buckets of fixed bounds: size 0 has bucket 0, sizes 1 to 7 one bucket each, and every power of
/// two from 8 up is cut into [`BUCKETS_PER_OCTAVE`] equal buckets ([`bucket_of`]). At most 496 buckets, so its
/// memory is bounded whatever it counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SizeHistogram {
    buckets: BTreeMap<u32, Bucket>,
}

/// The bucket of a blob of `size` bytes in a [`SizeHistogram`].
pub fn bucket_of(size: u64) -> u32 {
    if size < 8 {
        return u32::try_from(size).unwrap_or(0);
    }
    let octave = 63 - size.leading_zeros(); // 3 and up
    let step = octave - 3;
    let sub = u32::try_from((size >> step) & 7).unwrap_or(0);
    8 + (octave - 3) * BUCKETS_PER_OCTAVE + sub
}

/// The sizes bucket `index` holds, first and last ([`bucket_of`]).
pub fn bucket_bounds(index: u32) -> (u64, u64) {
    if index < 8 {
        return (u64::from(index), u64::from(index));
    }
    let octave = (index - 8) / BUCKETS_PER_OCTAVE + 3;
    let sub = u64::from((index - 8) % BUCKETS_PER_OCTAVE);
    let step = octave - 3;
    let low = (8 + sub) << step;
    (low, low + ((1u64 << step) - 1))
}

impl SizeHistogram {
    /// Counts one blob of `size` bytes.
    pub fn add(&mut self, size: u64) {
        self.add_bucket(
            bucket_of(size),
            Bucket {
                tally: Tally {
                    count: 1,
                    bytes: size,
                },
                min: size,
                max: size,
            },
        );
    }

    /// Adds a bucket's counts (from another histogram, or read back from a census file).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the bucket's sizes do not fit its bounds.
    pub fn add_checked(&mut self, index: u32, bucket: Bucket) -> Result<()> {
        let (low, high) = bucket_bounds(index);
        let fits = bucket.min <= bucket.max
            && (low..=high).contains(&bucket.min)
            && (low..=high).contains(&bucket.max)
            && bucket.tally.count > 0;
        if !fits {
            return Err(Error::invalid(
                "census bucket",
                format!(
                    "bucket {index} holds sizes {low} to {high}, not {} to {} ({} blobs)",
                    bucket.min, bucket.max, bucket.tally.count
                ),
            ));
        }
        self.add_bucket(index, bucket);
        Ok(())
    }

    fn add_bucket(&mut self, index: u32, bucket: Bucket) {
        let entry = self.buckets.entry(index).or_insert(Bucket {
            tally: Tally::default(),
            min: bucket.min,
            max: bucket.max,
        });
        entry.tally.add(bucket.tally.count, bucket.tally.bytes);
        entry.min = entry.min.min(bucket.min);
        entry.max = entry.max.max(bucket.max);
    }

    /// Adds every bucket of `other`.
    pub fn merge(&mut self, other: &SizeHistogram) {
        for (index, bucket) in &other.buckets {
            self.add_bucket(*index, *bucket);
        }
    }

    /// The buckets holding blobs, smallest sizes first.
    pub fn buckets(&self) -> impl Iterator<Item = (u32, &Bucket)> {
        self.buckets.iter().map(|(i, b)| (*i, b))
    }

    /// Blobs and bytes counted.
    pub fn total(&self) -> Tally {
        let mut total = Tally::default();
        for bucket in self.buckets.values() {
            total.add(bucket.tally.count, bucket.tally.bytes);
        }
        total
    }

    /// The size at or below which a fraction `q` (0 to 1) of the blobs are: the largest size seen in the bucket
    /// where that fraction is reached, so it is at most 12.5% above the exact percentile. `None` when empty.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        let total = self.total().count;
        if total == 0 {
            return None;
        }
        // The rank of the percentile, 1-based: the smallest count whose share reaches q.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for bucket in self.buckets.values() {
            seen += bucket.tally.count;
            if seen >= rank {
                return Some(bucket.max);
            }
        }
        self.buckets.values().last().map(|b| b.max)
    }
}

/// What a census counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Sizes of the blobs of each class, in [`LayoutClass::ALL`] order.
    pub sizes: [SizeHistogram; 3],
    /// Blobs and bytes by the number of partitions they depend on ([`partitions_of`]).
    pub partitions: BTreeMap<u64, Tally>,
    /// Keys whose manifest did not decode (not counted otherwise).
    pub damaged: u64,
    /// Whether the scan stopped at a sample's size before the end of the store.
    pub sampled: bool,
}

impl Census {
    /// Counts one blob.
    pub fn add(&mut self, manifest: &Manifest) {
        let partitions = partitions_of(manifest);
        let class = LayoutClass::of_partitions(partitions);
        self.sizes[class as usize].add(manifest.size);
        self.partitions
            .entry(partitions)
            .or_default()
            .add(1, manifest.size);
    }

    /// The sizes of one class.
    pub fn sizes_of(&self, class: LayoutClass) -> &SizeHistogram {
        &self.sizes[class as usize]
    }

    /// The sizes of every blob, whatever its class.
    pub fn all_sizes(&self) -> SizeHistogram {
        let mut all = SizeHistogram::default();
        for sizes in &self.sizes {
            all.merge(sizes);
        }
        all
    }

    /// Blobs and bytes counted.
    pub fn total(&self) -> Tally {
        self.all_sizes().total()
    }
}

impl BlobStore {
    /// Counts the blobs whose key starts with `prefix` ([`Census`]): every one, or the first `sample` in key
    /// order when given (the listing is in key order on every backend, so a sample is not random: it leans
    /// toward the first prefixes). `progress` is called with the census so far every 1000 blobs. Memory
    /// stays bounded: manifests are read a page at a time and only counts are kept. A damaged manifest is
    /// counted in [`Census::damaged`] and the count goes on.
    ///
    /// The whole store (no prefix, no sample) is counted by a pass over the backend's ranges, several at once
    /// ([`BlobStore::pass`]); a prefix or a sample by a listing, in key order.
    ///
    /// # Errors
    /// What listing the store returns; for a pass, an error naming the ranges left unread after retries (the
    /// census is then incomplete and not returned); [`Error::InvalidArgument`] naming `sample` when it is 0.
    pub async fn census(
        &self,
        prefix: &[u8],
        sample: Option<u64>,
        mut progress: impl FnMut(&Census),
    ) -> Result<Census> {
        if sample == Some(0) {
            return Err(Error::invalid(
                "sample",
                "0 blobs; a sample counts at least one",
            ));
        }
        let mut census = Census::default();
        let mut counted = 0u64;
        let mut count = |census: &mut Census, manifest: &Result<Manifest>| {
            match manifest {
                Ok(manifest) => census.add(manifest),
                Err(_) => census.damaged += 1,
            }
            counted += 1;
            if counted.is_multiple_of(1000) {
                progress(census);
            }
            counted
        };
        if prefix.is_empty() && sample.is_none() {
            let plan = self.plan_pass(b"").await?;
            let mut unread = Vec::new();
            let mut events = self.pass(&plan, &PassOptions::new());
            while let Some(event) = events.next().await {
                match event {
                    PassEvent::Page(page) => {
                        for entry in &page.entries {
                            count(&mut census, &entry.manifest);
                        }
                    }
                    PassEvent::Unread { range, error } => unread.push((range, error)),
                }
            }
            if !unread.is_empty() {
                let ranges = plan.range_count();
                return Err(unread_error(self.inner.info.name, "census", unread, ranges));
            }
            return Ok(census);
        }
        let mut so_far = 0;
        let mut entries = self.list_stream(prefix);
        while let Some(entry) = entries.next().await {
            if sample.is_some_and(|n| so_far >= n) {
                census.sampled = true;
                break;
            }
            so_far = count(&mut census, &entry?.manifest);
        }
        Ok(census)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::backend::memory::MemoryStore;
    use crate::state::config::{PutOptions, StoreConfig};

    #[test]
    fn buckets_hold_their_sizes_and_cut_each_octave_in_eight() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(7), 7);
        assert_eq!(bucket_bounds(bucket_of(8)), (8, 8));
        assert_eq!(
            bucket_bounds(bucket_of(1 << 20)),
            (1 << 20, (1 << 20) + (1 << 17) - 1)
        );
        assert_eq!(bucket_of(u64::MAX), 8 + 61 * 8 - 1);
        assert_eq!(bucket_bounds(bucket_of(u64::MAX)).1, u64::MAX);
    }

    proptest! {
        #[test]
        fn every_size_is_inside_its_bucket_and_buckets_are_in_order(size in any::<u64>(), other in any::<u64>()) {
            let (low, high) = bucket_bounds(bucket_of(size));
            prop_assert!(low <= size && size <= high);
            // Within 12.5% of the bucket's low end.
            prop_assert!(high - low <= low / 8);
            if size <= other {
                prop_assert!(bucket_of(size) <= bucket_of(other));
            }
        }
    }

    #[test]
    fn percentiles_come_from_the_bucket_where_the_share_is_reached() {
        let mut h = SizeHistogram::default();
        assert_eq!(h.percentile(0.5), None);
        for size in 1..=100u64 {
            h.add(size * 1000);
        }
        assert_eq!(
            h.total(),
            Tally {
                count: 100,
                bytes: 5_050_000
            }
        );
        for (q, exact) in [
            (0.5, 50_000u64),
            (0.9, 90_000),
            (0.99, 99_000),
            (1.0, 100_000),
        ] {
            let p = h.percentile(q).unwrap();
            assert!(
                p >= exact && p as f64 <= exact as f64 * 1.125,
                "P{q}: {p} vs {exact}"
            );
        }
    }

    #[test]
    fn a_bucket_read_back_must_fit_its_bounds() {
        let mut h = SizeHistogram::default();
        let bucket = |min, max| Bucket {
            tally: Tally {
                count: 2,
                bytes: min + max,
            },
            min,
            max,
        };
        h.add_checked(bucket_of(100), bucket(100, 103)).unwrap();
        let e = h
            .add_checked(bucket_of(100), bucket(100, 5000))
            .unwrap_err();
        assert!(e.to_string().contains("census bucket"), "{e}");
        assert_eq!(h.total().count, 2);
    }

    #[tokio::test]
    async fn a_census_counts_blobs_by_layout_and_partitions() {
        let store = BlobStore::new(Arc::new(MemoryStore::new()), StoreConfig::default()).unwrap();
        let put = async |key: &str, size: usize| {
            store
                .put(key, vec![1u8; size], &PutOptions::new())
                .await
                .unwrap();
        };
        for i in 0..5 {
            put(&format!("a/small{i}"), 100).await;
        }
        put("a/medium", 1 << 20).await; // 16 chunks of 64 KiB, one partition
        put("a/large", 9 << 20).await; // above the fan-out threshold: salted
        put("b/other", 10).await;

        let census = store.census(b"a/", None, |_| {}).await.unwrap();
        let count = |class| census.sizes_of(class).total();
        assert_eq!(
            count(LayoutClass::Inline),
            Tally {
                count: 5,
                bytes: 500
            }
        );
        assert_eq!(
            count(LayoutClass::SinglePartition),
            Tally {
                count: 1,
                bytes: 1 << 20
            }
        );
        assert_eq!(
            count(LayoutClass::Salted),
            Tally {
                count: 1,
                bytes: 9 << 20
            }
        );
        let partitions: Vec<_> = census
            .partitions
            .iter()
            .map(|(p, t)| (*p, t.count))
            .collect();
        let large_salts = match store.head("a/large").await.unwrap().layout() {
            Layout::Chunked(l) => u64::from(l.salt_count),
            Layout::Inline => 0,
        };
        assert!(large_salts > 1);
        assert_eq!(partitions, [(1, 5), (2, 1), (1 + large_salts, 1)]);
        assert!(!census.sampled);

        let sample = store.census(b"", Some(3), |_| {}).await.unwrap();
        assert_eq!((sample.total().count, sample.sampled), (3, true));
        assert!(store.census(b"", Some(0), |_| {}).await.is_err());
    }
}

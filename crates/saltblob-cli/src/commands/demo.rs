//! `saltblob demo`: stores and reads back a mixed-size set, verifies every digest, prints layouts (and where the
//! backend keeps each blob's chunks: on the embedded store, `extent` files for large blobs, RocksDB's `blob
//! files` for the others) and latencies.
//!
//! Each blob is read back as `saltblob get` and the S3 server read it: streamed, chunk by chunk, hashed as it
//! arrives, never held whole. Collecting a large value into one fresh buffer ([`BlobStore::get`]) would time
//! the kernel's first touch of that memory too: on virtual machines that hand freed memory back to the host
//! (virtio-balloon free page reporting, as on this project's machines), 49–624 ms for 60 MiB, several times the
//! read itself (docs/bench/journal/extents.md, *The demo's large gets*).

use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::LocalBoxFuture;
use saltblob::{BlobStore, Layout, PutOptions};

use super::command::{Command, Context};
use crate::failure::Failure;
use crate::human::short;

/// Arguments of `saltblob demo`.
#[derive(clap::Args, Debug)]
pub struct Demo {
    /// Skip the 60 MiB blob.
    #[arg(long)]
    small: bool,
}

impl Command for Demo {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(context.with_store(async |store| demo(store, self.small).await))
    }
}

/// The demo set: bytes, KiB, MiB and a 60 MiB blob, across all three layouts.
const SIZES: [u64; 9] = [
    0,
    100,
    16 << 10,
    (16 << 10) + 1,
    256 << 10,
    1 << 20,
    8 << 20,
    20 << 20,
    60 << 20,
];

/// Stores, reads back and verifies the demo set (without the 60 MiB blob when `small`); fails with exit code 4
/// if a blob reads back differently.
async fn demo(store: &BlobStore, small: bool) -> Result<(), Failure> {
    println!(
        "{:<22} {:>10}  {:<17} {:<10} {:>7} {:>6}  {:>9} {:>9} {:>10}  digest",
        "key", "size", "layout", "stored in", "chunks", "salts", "put ms", "get ms", "get MiB/s"
    );
    let mut failures = 0;
    for (i, size) in SIZES
        .into_iter()
        .filter(|s| !small || *s < 60 << 20)
        .enumerate()
    {
        let label = if size % 1024 == 0 {
            short(size).replace(' ', "")
        } else {
            format!("{size}B")
        };
        let key = format!("demo/{i:02}-{label}");
        let data = random_bytes(size);
        let written = *blake3::hash(&data).as_bytes();
        let t = Instant::now();
        let manifest = store.put(&key, data, &PutOptions::new()).await?;
        let put_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let read = read_back(store, &key).await?;
        let get_s = t.elapsed().as_secs_f64();
        let ok = read == (size, written) && manifest.digest == written;
        failures += usize::from(!ok);
        let d = store.describe(&key).await?;
        let (chunks, salts) = match manifest.layout() {
            Layout::Inline => ("-".to_owned(), "-".to_owned()),
            Layout::Chunked(l) => (l.chunk_count.to_string(), l.salt_count.to_string()),
        };
        let mib_s = if get_s > 0.0 {
            size as f64 / (1 << 20) as f64 / get_s
        } else {
            0.0
        };
        let stored = match (&d.storage, manifest.layout()) {
            (Some(s), _) => s.clone(),
            (None, Layout::Inline) => "manifest".to_owned(),
            (None, Layout::Chunked(_)) => "-".to_owned(),
        };
        println!(
            "{key:<22} {:>10}  {:<17} {stored:<10} {chunks:>7} {salts:>6}  {put_ms:>9.2} {:>9.2} {mib_s:>10.1}  {}",
            short(size),
            d.layout_kind,
            get_s * 1e3,
            if ok { "verified" } else { "MISMATCH" }
        );
    }
    if failures > 0 {
        return Err(Failure::new(
            Failure::DAMAGED,
            format!("{failures} blob(s) read back differently from what was written"),
        ));
    }
    println!("all digests verified; the blobs stay under demo/ (saltblob ls -l demo/)");
    Ok(())
}

/// Streams the current version of `key` (the store checks each chunk and the whole digest as it goes): its
/// length and BLAKE3 digest, hashed as the bytes arrive.
async fn read_back(store: &BlobStore, key: &str) -> Result<(u64, [u8; 32]), Failure> {
    let mut stream = store.get_stream(key).await?;
    let mut hasher = blake3::Hasher::new();
    let mut len = 0u64;
    while let Some(piece) = stream.next().await {
        let piece = piece?;
        len += piece.len() as u64;
        hasher.update(&piece);
    }
    Ok((len, *hasher.finalize().as_bytes()))
}

fn random_bytes(n: u64) -> Bytes {
    let mut v = vec![0u8; usize::try_from(n).unwrap_or(0)];
    rand::fill(&mut v[..]);
    Bytes::from(v)
}

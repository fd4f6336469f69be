//! [`ExtentWriter`]: the writer of one version's extent file. Chunk records are copied once, straight into
//! aligned I/O buffers of the configured size (the device's knee), and each full buffer is written at its place
//! in the file while the next one fills, up to `depth` writes in flight. The file grows with the records
//! received, a bounded step ahead of them (see [`ExtentWriter::reserve`]): a declared size caps it but reserves
//! nothing up front, so a client that declares much and sends little holds little of the disk. `sync` writes the
//! last, padded buffer, waits for every write, trims what was allocated beyond the data, then `fdatasync`s the
//! file and waits for the `fsync` of the directory that was started when the file got its name.
//!
//! Any failure (a write, the allocation, the sync) poisons the writer: every later call fails with it, so a
//! version whose bytes may not have reached the disk is never reported durable, and the put fails and deletes
//! the file.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use saltblob_core::{BlobRef, ChunkRecord, Error, Result};
use tokio::sync::Mutex;
use tokio::task::{JoinHandle, JoinSet};

use super::format::Pointer;
use super::io::{AlignedBuf, BufferPool, IoMode, preallocate};
use super::priority::IoPriority;
use crate::commit_gate::CommitGate;
use crate::error::NAME;

/// The first allocation of an extent file (beyond its header), and its first growth step; each later step
/// doubles, up to [`MAX_GROW_STEP`]. A file is never allocated past its version's largest size when that is
/// known. So what is allocated ahead of the records received is at most `max(FIRST_GROW_STEP, min(received,
/// MAX_GROW_STEP))`, rounded up to the alignment. Each growth costs the put a pause: `fallocate` waits for the
/// file's direct writes in flight. With a first step of 8 MiB (three growths for a 60 MiB put), large puts ran
/// at about half their throughput in six interleaved bench runs; 64 MiB keeps the usual large put to its first
/// allocation.
pub(crate) const FIRST_GROW_STEP: u64 = 64 << 20;
/// The largest allocation step of an extent file (four growths for a 1 GiB put).
const MAX_GROW_STEP: u64 = 1 << 30;
/// Where one chunk's record went: its salt and index (its key) and its pointer.
pub(crate) type Placed = (u32, u64, Pointer);

/// What opening a writer needs to know of its file.
pub(crate) struct Opened {
    /// The file, named and with its header written.
    pub(crate) file: File,
    /// Its final path (for messages).
    pub(crate) path: PathBuf,
    /// How it is written.
    pub(crate) mode: IoMode,
    /// Where the records start.
    pub(crate) data_start: u64,
    /// Bytes allocated so far (the file's size).
    pub(crate) allocated: u64,
    /// The file's largest size when the version's size is known (its growth stops there).
    pub(crate) cap: Option<u64>,
    /// What each growth must leave free on the file system.
    pub(crate) floor: super::space::Floor,
    /// The `fsync` of the directory, started once the file got its name.
    pub(crate) dir_sync: JoinHandle<io::Result<()>>,
    /// The file's descriptor in the extent files' share.
    pub(crate) permit: super::budget::FdPermit,
}

/// The writer of one version's extent file; see the module documentation.
pub(crate) struct ExtentWriter {
    blob: BlobRef,
    file: Arc<File>,
    path: PathBuf,
    mode: IoMode,
    depth: usize,
    pool: Arc<BufferPool>,
    /// Each write stands back here, before it is issued, while a synced commit is pending.
    gate: Arc<CommitGate>,
    /// The I/O priority of its writes (the idle class for a background class's put).
    priority: IoPriority,
    /// Counts the writes issued in the idle I/O class.
    idle_ios: Arc<AtomicU64>,
    /// What each growth must leave free.
    floor: super::space::Floor,
    state: Mutex<State>,
    /// Its file's descriptor in the extent files' share, given back when the writer goes.
    _permit: super::budget::FdPermit,
}

struct State {
    /// The buffer being filled: it covers the file's bytes `offset..offset + buffer length`.
    buf: Option<AlignedBuf>,
    offset: u64,
    filled: usize,
    /// Writes in flight; each gives its buffer back.
    inflight: JoinSet<io::Result<AlignedBuf>>,
    allocated: u64,
    step: u64,
    cap: Option<u64>,
    dir_sync: Option<JoinHandle<io::Result<()>>>,
    /// The first failure, after which the writer refuses everything.
    failed: Option<String>,
    /// Whether `sync` succeeded.
    synced: bool,
    /// When the writer was made (for the timings `sync` logs).
    started: std::time::Instant,
}

impl ExtentWriter {
    /// A writer of `blob`'s records into `opened`, with buffers from `pool` and at most `depth` writes in flight,
    /// each standing back at `gate` while a synced commit is pending and issued at `priority` (counted in
    /// `idle_ios` when it ran idle).
    pub(crate) fn new(
        blob: BlobRef,
        opened: Opened,
        pool: Arc<BufferPool>,
        depth: usize,
        gate: Arc<CommitGate>,
        priority: IoPriority,
        idle_ios: Arc<AtomicU64>,
    ) -> Self {
        let Opened {
            file,
            path,
            mode,
            data_start,
            allocated,
            cap,
            floor,
            dir_sync,
            permit,
        } = opened;
        Self {
            blob,
            file: Arc::new(file),
            path,
            mode,
            depth: depth.max(1),
            pool,
            gate,
            priority,
            idle_ios,
            floor,
            state: Mutex::new(State {
                buf: None,
                offset: data_start,
                filled: 0,
                inflight: JoinSet::new(),
                allocated,
                step: FIRST_GROW_STEP,
                cap,
                dir_sync: Some(dir_sync),
                failed: None,
                synced: false,
                started: std::time::Instant::now(),
            }),
            _permit: permit,
        }
    }

    /// Copies `records` into the file's buffers, in order, each right after the previous one; returns where each
    /// went. Full buffers are written while the call goes on (it waits only when `depth` writes are in flight).
    pub(crate) async fn append(&self, records: &[ChunkRecord]) -> Result<Vec<Placed>> {
        let mut st = self.state.lock().await;
        self.check(&st)?;
        let outcome = self.append_locked(&mut st, records).await;
        if let Err(e) = &outcome {
            st.failed.get_or_insert_with(|| e.to_string());
        }
        outcome
    }

    async fn append_locked(&self, st: &mut State, records: &[ChunkRecord]) -> Result<Vec<Placed>> {
        let mut placed = Vec::with_capacity(records.len());
        for r in records {
            let len = u32::try_from(r.len())
                .map_err(|_| self.error(format!("a chunk record of {} bytes", r.len()), None))?;
            let offset = st.offset + st.filled as u64;
            self.reserve(st, offset + u64::from(len)).await?;
            self.put(st, &r.header).await?;
            self.put(st, &r.payload).await?;
            placed.push((r.salt, r.index, Pointer { offset, len }));
        }
        Ok(placed)
    }

    /// Copies `bytes` at the fill point, writing out each buffer that fills.
    async fn put(&self, st: &mut State, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            if st.buf.is_none() {
                st.buf = Some(self.next_buffer(st).await?);
            }
            let Some(buf) = st.buf.as_mut() else {
                continue;
            };
            let room = buf.len() - st.filled;
            let n = room.min(bytes.len());
            let (now, rest) = bytes.split_at(n);
            buf.bytes_mut()
                .get_mut(st.filled..st.filled + n)
                .ok_or_else(|| self.error("buffer arithmetic".into(), None))?
                .copy_from_slice(now);
            st.filled += n;
            bytes = rest;
            let filled = st.filled;
            if filled == buf.len() {
                self.submit(st, filled)?;
            }
        }
        Ok(())
    }

    /// A buffer for the next stretch of the file: an idle one, once fewer than `depth` writes are in flight.
    async fn next_buffer(&self, st: &mut State) -> Result<AlignedBuf> {
        while st.inflight.len() >= self.depth {
            let done = st.inflight.join_next().await;
            if let Some(buf) = self.landed(done)? {
                self.pool.give(buf);
            }
        }
        Ok(self.pool.take())
    }

    /// Starts writing the current buffer's first `len` bytes (a multiple of the alignment) at its offset, and
    /// moves the fill point to the next buffer's stretch.
    fn submit(&self, st: &mut State, len: usize) -> Result<()> {
        let Some(buf) = st.buf.take() else {
            return Ok(());
        };
        let (file, offset, gate) = (Arc::clone(&self.file), st.offset, Arc::clone(&self.gate));
        let (priority, idle_ios) = (self.priority, Arc::clone(&self.idle_ios));
        st.inflight.spawn_blocking(move || {
            gate.stand_back();
            priority.run(&idle_ios, || {
                file.write_all_at(buf.bytes().get(..len).unwrap_or_default(), offset)
            })?;
            Ok(buf)
        });
        st.offset += self.pool.buffer_len() as u64;
        st.filled = 0;
        Ok(())
    }

    /// The buffer of a finished write, or its failure as an error.
    fn landed(
        &self,
        done: Option<std::result::Result<io::Result<AlignedBuf>, tokio::task::JoinError>>,
    ) -> Result<Option<AlignedBuf>> {
        match done {
            None => Ok(None),
            Some(Ok(Ok(buf))) => Ok(Some(buf)),
            Some(Ok(Err(e))) => Err(self.error("cannot write".into(), Some(e))),
            Some(Err(e)) => Err(self.error(format!("write task failed: {e}"), None)),
        }
    }

    /// Makes sure bytes up to `end` are allocated: whenever the data reaches the file's end, the file grows by a
    /// step (the first [`FIRST_GROW_STEP`], doubling up to [`MAX_GROW_STEP`]), never past its cap, and only
    /// while the file system keeps its hard floor free ([`super::space::Floor::check_growth`]).
    async fn reserve(&self, st: &mut State, end: u64) -> Result<()> {
        if end <= st.allocated {
            return Ok(());
        }
        let needed = self.mode.round_up(end - st.allocated);
        let room = st
            .cap
            .map_or(u64::MAX, |cap| cap.saturating_sub(st.allocated));
        let grow = st.step.min(room).max(needed);
        let (file, from, floor) = (Arc::clone(&self.file), st.allocated, self.floor);
        let grown = tokio::task::spawn_blocking(move || {
            floor.check_growth(&file, grow)?;
            preallocate(&file, from, grow)
        })
        .await
        .map_err(|e| self.error(format!("allocation task failed: {e}"), None))?;
        match grown {
            Ok(_) => {
                st.allocated = from + grow;
                st.step = (st.step * 2).min(MAX_GROW_STEP);
                Ok(())
            }
            Err(e) => Err(self.error(format!("cannot grow it by {grow} bytes"), Some(e))),
        }
    }

    /// Makes every record appended so far durable: writes the last buffer (zero-padded to the alignment), waits
    /// for every write, trims the file to its data, `fdatasync`s it and waits for the directory's `fsync`. A
    /// failure is final (see the module documentation).
    pub(crate) async fn sync(&self) -> Result<()> {
        let mut st = self.state.lock().await;
        self.check(&st)?;
        if st.synced {
            return Ok(());
        }
        let outcome = self.sync_locked(&mut st).await;
        match &outcome {
            Ok(()) => st.synced = true,
            Err(e) => {
                st.failed.get_or_insert_with(|| e.to_string());
            }
        }
        outcome
    }

    async fn sync_locked(&self, st: &mut State) -> Result<()> {
        let called = std::time::Instant::now();
        let end = self.mode.round_up(st.offset + st.filled as u64);
        if st.filled > 0 {
            let len = usize::try_from(end - st.offset).unwrap_or(usize::MAX);
            if let Some(buf) = st.buf.as_mut() {
                // The padding goes to disk: clear what an earlier use of the buffer left there.
                buf.bytes_mut()
                    .get_mut(st.filled..len)
                    .unwrap_or_default()
                    .fill(0);
            }
            self.submit(st, len)?;
        }
        let mut first_error = None;
        while let Some(done) = st.inflight.join_next().await {
            match self.landed(Some(done)) {
                Ok(Some(buf)) => self.pool.give(buf),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let landed = std::time::Instant::now();
        let (file, allocated) = (Arc::clone(&self.file), st.allocated);
        let synced = tokio::task::spawn_blocking(move || {
            if allocated > end {
                file.set_len(end)?;
            }
            file.sync_data()
        })
        .await
        .map_err(|e| self.error(format!("sync task failed: {e}"), None))?;
        synced.map_err(|e| self.error("cannot sync (fdatasync)".into(), Some(e)))?;
        let fdatasync = landed.elapsed();
        if let Some(dir_sync) = st.dir_sync.take() {
            dir_sync
                .await
                .map_err(|e| self.error(format!("directory sync task failed: {e}"), None))?
                .map_err(|e| self.error("cannot sync its directory".into(), Some(e)))?;
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            "extent file {}: {end} bytes durable {:.1} ms after its creation; the sync waited {:.1} ms for the \
             last writes, {:.1} ms for fdatasync, {:.1} ms for the directory",
            self.path.display(),
            ms(st.started.elapsed()),
            ms(landed - called),
            ms(fdatasync),
            ms(landed.elapsed() - fdatasync),
        );
        Ok(())
    }

    /// Waits for the writes in flight (so that none lands after the file is deleted) and poisons the writer.
    pub(crate) async fn abandon(&self) {
        let mut st = self.state.lock().await;
        while st.inflight.join_next().await.is_some() {}
        st.failed
            .get_or_insert_with(|| "the put was abandoned".to_owned());
    }

    /// Fails when an earlier call failed.
    fn check(&self, st: &State) -> Result<()> {
        match &st.failed {
            Some(first) => Err(Error::backend(
                NAME,
                format!(
                    "extent file {} of version {} is not trusted after an earlier failure: {first}",
                    self.path.display(),
                    self.blob.version
                ),
                false,
            )),
            None => Ok(()),
        }
    }

    /// An error of this writer: what failed, the file, and the I/O error (kept as the source).
    fn error(&self, what: String, e: Option<io::Error>) -> Error {
        let hint = match e.as_ref().and_then(io::Error::raw_os_error) {
            Some(libc::EDQUOT) => " (disk quota exceeded)",
            _ if e.as_ref().is_some_and(super::space::is_full) => {
                " (the device is full: free space on it, then retry)"
            }
            Some(libc::EROFS) => " (the file system is read-only)",
            _ => "",
        };
        let message = match &e {
            Some(e) => format!("extent file {}: {what}: {e}{hint}", self.path.display()),
            None => format!("extent file {}: {what}", self.path.display()),
        };
        match e {
            Some(e) => Error::backend_caused(NAME, message, false, e),
            None => Error::backend(NAME, message, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::time::Duration;

    use bytes::Bytes;
    use saltblob_core::VersionId;

    use super::*;

    /// A failed `fdatasync` is final: the writer never reports its version durable afterwards and refuses every
    /// later record, even where a second `fdatasync` would succeed (a kernel may drop the dirty pages whose
    /// writeback failed and report success the next time). A pipe stands in for a file whose sync fails: its
    /// `fdatasync` is EINVAL.
    #[tokio::test]
    async fn a_failed_sync_is_final() {
        let (_reader, pipe) = std::io::pipe().expect("pipe");
        let opened = Opened {
            file: File::from(OwnedFd::from(pipe)),
            path: PathBuf::from("a pipe"),
            mode: IoMode {
                direct: false,
                align: 4096,
            },
            data_start: 4096,
            allocated: 4096,
            cap: Some(4096),
            floor: super::super::space::Floor::NONE,
            dir_sync: tokio::task::spawn_blocking(|| Ok(())),
            permit: super::super::budget::FdBudget::new(1)
                .take_within(Duration::ZERO)
                .expect("a descriptor"),
        };
        let blob = BlobRef {
            key: Bytes::from_static(b"k"),
            version: VersionId::generate(),
        };
        let writer = ExtentWriter::new(
            blob,
            opened,
            Arc::new(BufferPool::new(65536, 4096, 2)),
            2,
            Arc::new(CommitGate::new(Duration::ZERO)),
            IoPriority::Inherited,
            Arc::new(AtomicU64::new(0)),
        );
        let first = writer.sync().await.expect_err("fdatasync of a pipe fails");
        assert!(first.to_string().contains("fdatasync"), "{first}");
        let again = writer
            .sync()
            .await
            .expect_err("never durable after a failed sync");
        assert!(
            again
                .to_string()
                .contains("not trusted after an earlier failure"),
            "{again}"
        );
        let record = ChunkRecord {
            salt: 0,
            index: 0,
            header: [0; saltblob_core::codec::CHUNK_HEADER_LEN],
            payload: Bytes::from_static(b"payload"),
        };
        let refused = writer
            .append(&[record])
            .await
            .expect_err("no record after a failed sync");
        assert!(refused.to_string().contains("not trusted"), "{refused}");
    }
}

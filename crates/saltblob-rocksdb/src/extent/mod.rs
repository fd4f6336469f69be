//! Extent files: the chunk records of a large version (a put of at least `extent_min_bytes`) in a file of the
//! version's own under `<store>/extents/`, written once with aligned direct I/O into a file that grows with the
//! records received; RocksDB keeps a pointer per chunk (offset and length in the file) under the chunk's key, so
//! that listing, ranges and deletion of a version's chunks work as for chunks in RocksDB's blob files.
//!
//! [`Extents`] is the store-wide side: the directory, the writers of puts in progress (one [`ExtentWriter`] per
//! version), the alignment and I/O mode of the file system, reads, deletion and listing. The format is in
//! [`format`]; `docs/format.md` (*Extent files*) describes it and `docs/guarantees.md` argues its durability.
//!
//! - **Create** ([`Extents::begin`]): the file is created under a temporary name (`.new-<name>`), its header is
//!   written and a first step allocated (`fallocate`; never more than the version's largest size when its
//!   length is known: a declared size caps the file but reserves nothing up front); it then gets its name (a
//!   hard link, which never replaces an existing file) and the directory's `fsync` starts. A file with an extent's name therefore always has its header. Temporary files are left
//!   only by a process that died creating one; the next open removes them.
//! - **Write** ([`Extents::append`]) and **sync** ([`Extents::sync`]): see [`writer`].
//! - **Read** ([`Extents::read`]): the records asked for are read in runs, with aligned reads (direct I/O) into
//!   one buffer per run that the chunks handed back share; a record past the end of the file (a truncated
//!   extent) is `Corrupt`, naming the file.
//! - **Delete** ([`Extents::remove`]): a put in progress stops writing, then the file is unlinked. A backup
//!   holds deletions back ([`Extents::hold_removals`]) while it takes its instant and links the files.
//! - **Space** ([`space`]): a new extent file is refused while the file system's free space, less the put's
//!   whole size, is below the floor ([`RocksConfig::extent_free_floor`]); a file stops growing at half of it
//!   (by default never below what RocksDB needs free to resume writes after a full disk).
//! - **Priority** ([`priority`]): the reads and writes of background classes run in the kernel's idle I/O class,
//!   so that small puts' commits pass them in the device queue.
//!
//! Nothing in the directory is touched but files of saltblob's naming ([`format::parse_file_name`]); others
//! are left alone and logged when listed.

mod budget;
pub(crate) mod format;
mod io;
mod priority;
mod space;
mod writer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use saltblob_core::schedule::current_class;
use saltblob_core::{BlobRef, ChunkRecord, Error, KeyDisplay, RecordsPlan, Result};

use self::budget::{FD_WAIT, FdBudget, FdPermit};
use self::format::{Header, Named, Pointer, file_name, parse_file_name, temp_name};
use self::io::{AlignedBuf, BufferPool, IoMode, ReadBuffers};
pub(crate) use self::priority::IoPriority;
use self::space::{Floor, is_full};
pub(crate) use self::writer::Placed;
use self::writer::{ExtentWriter, FIRST_GROW_STEP, Opened};
use crate::commit_gate::CommitGate;
use crate::config::RocksConfig;
use crate::error::NAME;

/// Largest span read in one request when records lie next to each other.
const MAX_RUN_BYTES: u64 = 16 << 20;
/// Records this close to the previous one are read in the same request (the gap is read and dropped).
const MAX_GAP_BYTES: u64 = 128 << 10;
/// Memory alignment of read buffers: a multiple of any file system's direct I/O alignment.
const READ_ALIGN: usize = 64 << 10;
/// Idle read buffers kept for reuse (about the reads in flight of one large get).
const READ_BUFFERS_KEPT: usize = 16;

/// A file [`Extents::create`] made: named, its header written, its size allocated.
struct Created {
    file: std::fs::File,
    /// Its descriptor's place in the extent files' share.
    permit: FdPermit,
    path: PathBuf,
    mode: IoMode,
    data_start: u64,
    allocated: u64,
}

/// One chunk to read from an extent: its slot in the caller's answer, its index (for messages) and its pointer.
pub(crate) struct Wanted {
    pub(crate) slot: usize,
    pub(crate) index: u64,
    pub(crate) pointer: Pointer,
}

/// Writers whose buffers the pool keeps when idle: a writer uses `extent_io_depth + 1` buffers, and the parts
/// of a multipart upload (or concurrent large puts) write several files at once. Past what the pool keeps, each
/// new buffer faults in fresh pages (a 2 MiB huge page per 1 MiB buffer), which cost a multipart upload of 16 MiB
/// parts, 8 at once, about 13% of its CPU (docs/bench/journal/s3.md). The pool only holds buffers once in use
/// together, so a single writer's store keeps `extent_io_depth + 1` as before.
const WRITERS_BUFFERED: usize = 4;

/// The extent files of one store; see the module documentation.
pub(crate) struct Extents {
    dir: PathBuf,
    /// Whether to use `O_DIRECT` where the file system takes it.
    direct: bool,
    /// What new files and each growth must leave free on the file system.
    floor: Floor,
    io_bytes: usize,
    depth: usize,
    writers: Mutex<HashMap<BlobRef, Arc<ExtentWriter>>>,
    /// The I/O mode of the directory's file system, learnt from the first file opened.
    mode: OnceLock<IoMode>,
    /// Buffers of `io_bytes`, once the alignment is known.
    pool: OnceLock<Arc<BufferPool>>,
    /// Buffers of reads, reused (aligned to at least any alignment the reads need: 64 KiB).
    reads: ReadBuffers,
    /// Whether the fall-back to buffered I/O was logged.
    fallback_logged: AtomicBool,
    /// Bytes on disk of the files [`Extents::remove`] unlinked since [`Extents::take_freed`] last took them.
    freed: AtomicU64,
    /// Each read and write stands back here while a synced commit is pending.
    gate: Arc<CommitGate>,
    /// Shared by each unlink of [`Extents::remove`], taken whole by a backup ([`Extents::hold_removals`]).
    removals: tokio::sync::RwLock<()>,
    /// Whether the reads and writes of background classes run in the kernel's idle I/O class.
    bulk_idle_io: bool,
    /// Reads and writes issued in the idle I/O class so far.
    idle_ios: Arc<AtomicU64>,
    /// The extent files' share of the open files ([`budget`]).
    fds: Arc<FdBudget>,
    /// The directory, opened once for the `fsync` of each new file's name.
    dir_handle: OnceLock<Arc<std::fs::File>>,
}

impl Extents {
    /// The extents of the store at `config.path` (opened, and locked, by RocksDB already): creates the directory
    /// when extents are on, and removes the temporary files a process that died creating an extent left. Reads
    /// and writes stand back at `gate` while a synced commit is pending.
    pub(crate) fn open(config: &RocksConfig, gate: Arc<CommitGate>) -> Result<Self> {
        let dir = config.path.join(format::EXTENT_DIR);
        if config.extent_min_bytes.is_some() && !dir.is_dir() {
            std::fs::create_dir_all(&dir)
                .map_err(|e| dir_error(&dir, "cannot create the extent directory", e))?;
            // The directory's own entry, durable before any file in it is trusted.
            std::fs::File::open(&config.path)
                .and_then(|d| d.sync_all())
                .map_err(|e| dir_error(&config.path, "cannot sync the store directory", e))?;
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if parse_file_name(&name.to_string_lossy()) == Named::Unfinished {
                    tracing::info!(
                        "removing {}, left by a process that died creating an extent file",
                        entry.path().display()
                    );
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let floor = Floor::of(
            &config.path,
            config.extent_free_floor,
            config.resume_free_bytes(),
        );
        Ok(Self {
            dir,
            direct: config.extent_direct_io,
            floor,
            io_bytes: config.extent_io_bytes,
            depth: config.extent_io_depth,
            writers: Mutex::new(HashMap::new()),
            mode: OnceLock::new(),
            pool: OnceLock::new(),
            reads: ReadBuffers::new(READ_ALIGN, READ_BUFFERS_KEPT),
            fallback_logged: AtomicBool::new(false),
            freed: AtomicU64::new(0),
            gate,
            removals: tokio::sync::RwLock::new(()),
            bulk_idle_io: config.bulk_idle_io,
            idle_ios: Arc::new(AtomicU64::new(0)),
            fds: FdBudget::new(
                config
                    .extent_open_files
                    .unwrap_or_else(|| saltblob_core::fds::FdShares::current().extents),
            ),
            dir_handle: OnceLock::new(),
        })
    }

    /// The extent directory, opened once (for the `fsync` of new names).
    fn dir_handle(&self) -> Result<Arc<std::fs::File>> {
        if let Some(dir) = self.dir_handle.get() {
            return Ok(Arc::clone(dir));
        }
        let dir = std::fs::File::open(&self.dir)
            .map_err(|e| dir_error(&self.dir, "cannot open the extent directory", e))?;
        Ok(Arc::clone(self.dir_handle.get_or_init(|| Arc::new(dir))))
    }

    /// The extent directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the unlinks in progress, then holds every later one back until the guard is dropped: a backup
    /// holds it from before its database checkpoint until it has linked the files that checkpoint refers to.
    pub(crate) async fn hold_removals(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.removals.write().await
    }

    /// The names of the files that puts are writing now (their writers not yet synced). A version whose file is
    /// among them was not committed before this call: its put commits only after the writer's sync.
    pub(crate) fn being_written(&self) -> Result<std::collections::HashSet<String>> {
        Ok(self.writers()?.keys().map(file_name).collect())
    }

    /// The path of `blob`'s extent file.
    pub(crate) fn path_of(&self, blob: &BlobRef) -> PathBuf {
        self.dir.join(file_name(blob))
    }

    /// The I/O mode of the file system, learnt from `file` (opened direct or not) the first time.
    fn mode_of(&self, file: &std::fs::File, direct: bool, why_not: Option<String>) -> IoMode {
        *self.mode.get_or_init(|| {
            let (mode, statx_no) = IoMode::of(file, direct);
            if let Some(why) = why_not.or(statx_no)
                && !self.fallback_logged.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "extent files in {}: {why}; they are written and read with buffered I/O (correct, but each byte \
                     is copied through the page cache)",
                    self.dir.display()
                );
            }
            mode
        })
    }

    fn writers(&self) -> Result<std::sync::MutexGuard<'_, HashMap<BlobRef, Arc<ExtentWriter>>>> {
        self.writers
            .lock()
            .map_err(|_| Error::backend(NAME, "extent writer table poisoned by a panic", false))
    }

    fn writer(&self, blob: &BlobRef) -> Result<Arc<ExtentWriter>> {
        self.writers()?.get(blob).cloned().ok_or_else(|| {
            Error::backend(
                NAME,
                format!(
                    "no extent file is being written for key \"{}\" version {} (chunk records before \
                     begin_chunk_records, or after their sync)",
                    KeyDisplay::from(&blob.key[..]),
                    blob.version
                ),
                false,
            )
        })
    }

    /// Creates, sizes and names `blob`'s extent file and readies its writer (see the module documentation).
    pub(crate) async fn begin(self: &Arc<Self>, blob: &BlobRef, plan: RecordsPlan) -> Result<()> {
        let this = Arc::clone(self);
        let for_task = blob.clone();
        let (opened, dir) = tokio::task::spawn_blocking(move || this.create(&for_task, plan))
            .await
            .map_err(crate::error::join)??;
        let Created {
            file,
            permit,
            path,
            mode,
            data_start,
            allocated,
        } = opened;
        let dir_sync = tokio::task::spawn_blocking(move || dir.sync_all());
        let pool = Arc::clone(self.pool.get_or_init(|| {
            let align = usize::try_from(mode.align).unwrap_or(4096);
            let len = usize::try_from(mode.round_up(self.io_bytes as u64)).unwrap_or(self.io_bytes);
            Arc::new(BufferPool::new(
                len,
                align,
                (self.depth + 1) * WRITERS_BUFFERED,
            ))
        }));
        let opened = Opened {
            file,
            path,
            mode,
            data_start,
            allocated,
            cap: plan
                .max_stored_bytes()
                .map(|max| mode.round_up(data_start + max)),
            floor: self.floor,
            dir_sync,
            permit,
        };
        let priority = IoPriority::of(current_class().as_ref(), self.bulk_idle_io);
        let writer = ExtentWriter::new(
            blob.clone(),
            opened,
            pool,
            self.depth,
            Arc::clone(&self.gate),
            priority,
            Arc::clone(&self.idle_ios),
        );
        self.writers()?.insert(blob.clone(), Arc::new(writer));
        Ok(())
    }

    /// The blocking part of [`Extents::begin`]: returns the named file and the directory, opened for its sync.
    fn create(&self, blob: &BlobRef, plan: RecordsPlan) -> Result<(Created, Arc<std::fs::File>)> {
        let name = file_name(blob);
        let path = self.dir.join(&name);
        let temp = self.dir.join(temp_name(&name));
        let fail = |what: &str, e: std::io::Error| dir_error(&path, what, e);
        // Refused before anything is made when the put's whole size would take the disk below the floor.
        let need = plan.max_stored_bytes().unwrap_or(FIRST_GROW_STEP);
        self.floor.check_admission(&self.dir, need).map_err(|e| {
            fail(
                &format!("cannot allocate {} MiB for it", need.div_ceil(1 << 20)),
                e,
            )
        })?;
        let permit = self.fds.take_within(FD_WAIT)?;
        let (file, direct, why_not) =
            io::create(&temp, self.direct).map_err(|e| fail("cannot create it", e))?;
        let made = (|| -> Result<(IoMode, u64, u64, Arc<std::fs::File>)> {
            let mode = self.mode_of(&file, direct, why_not);
            let data_start = format::data_start(mode.align, blob.key.len());
            let header = Header {
                blob: blob.clone(),
                chunk_size: plan.chunk_size,
                data_start,
            }
            .encode();
            // The first step only: the file grows with the records received (see `writer`).
            let allocated = match plan.max_stored_bytes() {
                Some(max) => mode.round_up(data_start + max.min(FIRST_GROW_STEP)),
                None => data_start + FIRST_GROW_STEP,
            };
            io::preallocate(&file, 0, allocated).map_err(|e| {
                fail(
                    &format!("cannot allocate {} MiB for it", allocated.div_ceil(1 << 20)),
                    e,
                )
            })?;
            let mut buf = AlignedBuf::new(
                usize::try_from(data_start).unwrap_or(4096),
                usize::try_from(mode.align).unwrap_or(4096),
            );
            buf.bytes_mut()
                .get_mut(..header.len())
                .unwrap_or_default()
                .copy_from_slice(&header);
            std::os::unix::fs::FileExt::write_all_at(&file, buf.bytes(), 0)
                .map_err(|e| fail("cannot write its header", e))?;
            std::fs::hard_link(&temp, &path).map_err(|e| fail("cannot name it", e))?;
            Ok((mode, data_start, allocated, self.dir_handle()?))
        })();
        // The temporary name goes whatever happened; the final name stays for the put's clean-up.
        let _ = std::fs::remove_file(&temp);
        let (mode, data_start, allocated, dir) = made?;
        let created = Created {
            file,
            permit,
            path,
            mode,
            data_start,
            allocated,
        };
        Ok((created, dir))
    }

    /// Copies `records` of `blob` into its extent file; returns where each went.
    pub(crate) async fn append(
        &self,
        blob: &BlobRef,
        records: &[ChunkRecord],
    ) -> Result<Vec<Placed>> {
        self.writer(blob)?.append(records).await
    }

    /// Makes every record of `blob` appended so far durable; the writer is done with once this succeeds.
    pub(crate) async fn sync(&self, blob: &BlobRef) -> Result<()> {
        let writer = self.writer(blob)?;
        writer.sync().await?;
        self.writers()?.remove(blob);
        Ok(())
    }

    /// Removes `blob`'s extent file: its writer, if a put is writing it, is stopped first (its writes in flight
    /// land before the file goes). A file that is not there is no error.
    pub(crate) async fn remove(&self, blob: &BlobRef) -> Result<()> {
        let writer = self.writers()?.remove(blob);
        if let Some(writer) = writer {
            writer.abandon().await;
        }
        let path = self.path_of(blob);
        let temp = self.dir.join(temp_name(&file_name(blob)));
        let _unlinking = self.removals.read().await;
        let freed = tokio::task::spawn_blocking(move || {
            let mut freed = 0;
            for p in [&path, &temp] {
                // Measured first: what unlinking it gives back (once no reader holds it open).
                let bytes = std::fs::metadata(p).map_or(0, |m| {
                    use std::os::unix::fs::MetadataExt;
                    m.blocks() * 512
                });
                match std::fs::remove_file(p) {
                    Ok(()) => freed += bytes,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(dir_error(p, "cannot delete it", e)),
                }
            }
            Ok(freed)
        })
        .await
        .map_err(crate::error::join)??;
        self.freed.fetch_add(freed, Ordering::Relaxed);
        Ok(())
    }

    /// Reads and writes issued in the kernel's idle I/O class so far ([`RocksConfig::bulk_idle_io`]).
    pub(crate) fn idle_ios(&self) -> u64 {
        self.idle_ios.load(Ordering::Relaxed)
    }

    /// The bytes on disk of the files unlinked since the last call (for the space report of a gc pass, whose
    /// reclaim pass unlinks them before the report measures the directory).
    pub(crate) fn take_freed(&self) -> u64 {
        self.freed.swap(0, Ordering::Relaxed)
    }

    /// Whether `blob` has an extent file.
    pub(crate) fn exists(&self, blob: &BlobRef) -> bool {
        self.path_of(blob).is_file()
    }

    /// Reads the records `wanted` of `blob` (blocking); returns each one's slot and stored bytes. When the file
    /// is gone (the version was deleted meanwhile) nothing is returned, and the caller reports the chunks
    /// missing. A record that lies past the end of the file is `Corrupt`. Each read runs at `priority`.
    pub(crate) fn read(
        &self,
        blob: &BlobRef,
        wanted: Vec<Wanted>,
        priority: IoPriority,
    ) -> Result<Vec<(usize, Bytes)>> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.path_of(blob);
        let _permit = self.fds.take_within(FD_WAIT)?;
        let (file, direct) = match io::open_read(&path, self.direct) {
            Ok(opened) => opened,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(dir_error(&path, "cannot open it", e)),
        };
        let mode = match self.mode.get() {
            Some(mode) if mode.direct == direct => *mode,
            _ => IoMode::of(&file, direct).0,
        };
        let file_len = file
            .metadata()
            .map_err(|e| dir_error(&path, "cannot stat it", e))?
            .len();
        let mut out = Vec::with_capacity(wanted.len());
        for run in plan_runs(wanted, mode) {
            if let Some(past) = run.members.iter().find(|w| w.pointer.end() > file_len) {
                return Err(truncated(blob, &path, file_len, past));
            }
            let mut buf = self
                .reads
                .take(usize::try_from(run.len).unwrap_or(usize::MAX));
            self.gate.stand_back();
            let got = priority
                .run(&self.idle_ios, || {
                    io::read_at_most(&file, buf.bytes_mut(), run.start)
                })
                .map_err(|e| dir_error(&path, "cannot read it", e))?;
            let got_end = run.start + got as u64;
            if let Some(past) = run.members.iter().find(|w| w.pointer.end() > got_end) {
                return Err(truncated(blob, &path, got_end, past));
            }
            let bytes = self.reads.share(buf);
            for w in &run.members {
                let from = usize::try_from(w.pointer.offset - run.start).unwrap_or(0);
                let to = usize::try_from(w.pointer.end() - run.start).unwrap_or(0);
                out.push((w.slot, bytes.slice(from..to)));
            }
        }
        Ok(out)
    }

    /// Lists the extent files (blocking): each one's version and key, read from its header, sent to `send`
    /// until it returns false. Foreign files and files whose header does not match their name are logged and
    /// skipped.
    pub(crate) fn list(&self, mut send: impl FnMut(Result<BlobRef>) -> bool) {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) => {
                send(Err(dir_error(&self.dir, "cannot list it", e)));
                return;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    send(Err(dir_error(&self.dir, "cannot list it", e)));
                    return;
                }
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            let version = match parse_file_name(&name) {
                Named::Extent(v) => v,
                Named::Unfinished => continue,
                Named::Foreign => {
                    tracing::warn!(
                        "{} is not an extent file of saltblob's: left alone",
                        entry.path().display()
                    );
                    continue;
                }
            };
            match read_header(&entry.path()) {
                Ok(h) if h.blob.version == version && file_name(&h.blob) == name => {
                    if !send(Ok(h.blob)) {
                        return;
                    }
                }
                Ok(h) => tracing::warn!(
                    "{}: its header names version {} of another key: left alone",
                    entry.path().display(),
                    h.blob.version
                ),
                Err(e) => tracing::warn!("{e}: left alone"),
            }
        }
    }

    /// Bytes the extent files take on disk (allocated blocks).
    pub(crate) fn disk_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .filter(|m| m.is_file())
                    .map(|m| m.blocks() * 512)
                    .sum()
            })
            .unwrap_or(0)
    }
}

/// One read of an extent file: the aligned span `start..start + len` and the records it covers.
struct Run {
    start: u64,
    len: u64,
    members: Vec<Wanted>,
}

/// Groups the records `wanted` into reads: sorted by offset, neighbours at most [`MAX_GAP_BYTES`] apart share
/// a read of at most [`MAX_RUN_BYTES`] (the gap is read and dropped), and each read covers its records rounded
/// out to `mode`'s alignment, nothing more. So a small range reads the few records that cover it, and a large
/// read one aligned request per batch of records.
fn plan_runs(mut wanted: Vec<Wanted>, mode: IoMode) -> Vec<Run> {
    wanted.sort_by_key(|w| w.pointer.offset);
    let mut runs: Vec<Run> = Vec::new();
    let mut end = 0;
    for w in wanted {
        let joins = runs.last().is_some_and(|run| {
            let first = run.members.first().map_or(run.start, |f| f.pointer.offset);
            w.pointer.offset <= end + MAX_GAP_BYTES
                && w.pointer.end().max(end) - first <= MAX_RUN_BYTES
        });
        match runs.last_mut() {
            Some(run) if joins => {
                end = end.max(w.pointer.end());
                run.len = mode.round_up(end) - run.start;
                run.members.push(w);
            }
            _ => {
                end = w.pointer.end();
                let start = mode.round_down(w.pointer.offset);
                runs.push(Run {
                    start,
                    len: mode.round_up(end) - start,
                    members: vec![w],
                });
            }
        }
    }
    runs
}

/// The header of the extent file at `path`.
pub(crate) fn read_header(path: &Path) -> Result<Header> {
    let what = format!("extent file {}", path.display());
    let mut bytes = vec![0u8; 8192];
    let file = std::fs::File::open(path).map_err(|e| dir_error(path, "cannot open it", e))?;
    let n =
        io::read_at_most(&file, &mut bytes, 0).map_err(|e| dir_error(path, "cannot read it", e))?;
    Header::decode(bytes.get(..n).unwrap_or_default(), &what)
}

/// An I/O error on `path`, with what was being done, as a non-retryable backend error.
fn dir_error(path: &Path, what: &str, e: std::io::Error) -> Error {
    let hint = match e.raw_os_error() {
        _ if is_full(&e) => " (the device is full: free space on it, then retry)",
        Some(libc::EACCES | libc::EPERM) => {
            " (check the permissions of the store's extents directory)"
        }
        Some(libc::EROFS) => " (the file system is read-only)",
        Some(libc::EEXIST) => {
            " (a file of that name is already there: it is not this put's, and is left alone)"
        }
        _ => "",
    };
    Error::backend_caused(
        NAME,
        format!("extent file {}: {what}: {e}{hint}", path.display()),
        false,
        e,
    )
}

/// The error for a record of `blob` that lies past the end (`len` bytes) of its extent file.
fn truncated(blob: &BlobRef, path: &Path, len: u64, w: &Wanted) -> Error {
    Error::corrupt(
        format!(
            "extent file {} of key \"{}\" version {}",
            path.display(),
            KeyDisplay::from(&blob.key[..]),
            blob.version
        ),
        format!(
            "it ends at byte {len}, but chunk {} lies at bytes {}..{}: the file was truncated",
            w.index,
            w.pointer.offset,
            w.pointer.end()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODE: IoMode = IoMode {
        direct: true,
        align: 4096,
    };
    /// A stored 64 KiB chunk: header and payload.
    const RECORD: u32 = 65_536 + 12;

    /// The pointers of chunks `indexes` of a version whose records lie one after another from 4096.
    fn wanted(indexes: &[u64]) -> Vec<Wanted> {
        indexes
            .iter()
            .enumerate()
            .map(|(slot, &index)| Wanted {
                slot,
                index,
                pointer: Pointer {
                    offset: 4096 + index * u64::from(RECORD),
                    len: RECORD,
                },
            })
            .collect()
    }

    /// A small range reads only the record that covers it, rounded out to the alignment; a batch of
    /// neighbours is one read; far-apart records, or more than a run holds, are separate reads.
    #[test]
    fn reads_cover_the_records_asked_for_and_no_more() {
        let runs = plan_runs(wanted(&[500]), MODE);
        assert_eq!(runs.len(), 1);
        let (start, len) = (runs[0].start, runs[0].len);
        let record = 4096 + 500 * u64::from(RECORD);
        assert!(start <= record && start + len >= record + u64::from(RECORD));
        assert!(
            len < u64::from(RECORD) + 2 * 4096,
            "{len} bytes read for one record"
        );
        assert_eq!((start % 4096, len % 4096), (0, 0), "aligned");

        // Sixteen neighbours, handed over in any order: one read, slots kept.
        let batch: Vec<u64> = (32..48).rev().collect();
        let runs = plan_runs(wanted(&batch), MODE);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].members.len(), 16);
        assert!(runs[0].len < 16 * u64::from(RECORD) + 2 * 4096);
        let first = runs[0].members.first().map(|w| (w.index, w.slot));
        assert_eq!(first, Some((32, 15)));

        // Two records far apart: two small reads, not the span between them.
        let runs = plan_runs(wanted(&[3, 900]), MODE);
        assert_eq!(runs.len(), 2, "a gap of 897 records is not read");
        assert!(runs.iter().all(|r| r.len < u64::from(RECORD) + 2 * 4096));

        // A gap of one record (64 KiB) is read through; more than a run's bytes are split.
        assert_eq!(plan_runs(wanted(&[10, 12]), MODE).len(), 1);
        let many: Vec<u64> = (0..400).collect();
        let runs = plan_runs(wanted(&many), MODE);
        assert!(runs.len() >= 2 && runs.iter().all(|r| r.len <= MAX_RUN_BYTES + 4096));
        assert_eq!(runs.iter().map(|r| r.members.len()).sum::<usize>(), 400);
    }
}

//! The local provider's keyring file (`docs/format.md`, "Keyring file, format 1"): named, versioned
//! key-encryption keys, mode 0600, rewritten whole and atomically.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::{KEY_LEN, Secret, random_key};
use crate::base::error::Error;
use crate::base::error::Result;

const MAGIC: &[u8; 4] = b"SBKR";
const FORMAT: u8 = 1;
/// Most keys a keyring holds.
pub const MAX_KEKS: usize = 65_536;
/// Longest key name in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Bytes of a keyring before its entries.
const HEADER_LEN: usize = 12;

/// Whether a key-encryption key wraps and opens data keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KekState {
    /// In use: its name's highest active version wraps new data keys; every active version opens them.
    Active,
    /// Kept in the file, but opens nothing: every data key it wrapped was re-wrapped.
    Retired,
}

impl KekState {
    fn tag(self) -> u8 {
        match self {
            KekState::Active => 1,
            KekState::Retired => 2,
        }
    }
}

/// One key-encryption key of a keyring.
#[derive(Clone)]
pub struct Kek {
    /// Its name (ASCII letters, digits, `-`, `_`, `.`; 1 to 64 bytes).
    pub name: String,
    /// Its version under that name, from 1.
    pub version: u32,
    /// When it was made, in Unix microseconds.
    pub created_micros: u64,
    /// Whether it is in use.
    pub state: KekState,
    key: Secret,
}

impl Kek {
    /// The key's bytes.
    pub(crate) fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }
}

impl fmt::Debug for Kek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kek")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("created_micros", &self.created_micros)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// A keyring file and the keys read from it.
#[derive(Debug)]
pub struct Keyring {
    path: PathBuf,
    keks: Vec<Kek>,
}

impl Keyring {
    /// Makes an empty keyring at `path` (mode 0600).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`keyring`) when the file exists or cannot be written.
    pub fn create(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        if path.symlink_metadata().is_ok() {
            return Err(invalid(
                &path,
                "exists already: a new keyring is never written over a file",
            ));
        }
        let keyring = Self {
            path,
            keks: Vec::new(),
        };
        keyring.save()?;
        Ok(keyring)
    }

    /// Reads the keyring at `path`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`keyring`) when the file cannot be read or grants any permission to group or
    /// others; [`Error::Corrupt`] when it does not decode, with what broke and where.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let meta =
            std::fs::metadata(&path).map_err(|e| invalid(&path, format!("cannot be read: {e}")))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(invalid(
                &path,
                format!(
                    "is open to group or others (mode {mode:04o}): a keyring must be readable by its owner only; \
                     run chmod 600 {}",
                    path.display()
                ),
            ));
        }
        let bytes =
            std::fs::read(&path).map_err(|e| invalid(&path, format!("cannot be read: {e}")))?;
        let keks = decode(&bytes)
            .map_err(|detail| Error::corrupt(format!("keyring {}", path.display()), detail))?;
        Ok(Self { path, keks })
    }

    /// Where the keyring is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every key, in the order made.
    pub fn keks(&self) -> &[Kek] {
        &self.keks
    }

    /// The version of `name` that wraps new data keys: its highest active one.
    pub fn current(&self, name: &str) -> Option<&Kek> {
        self.keks
            .iter()
            .filter(|k| k.name == name && k.state == KekState::Active)
            .max_by_key(|k| k.version)
    }

    /// Version `version` of `name`, whatever its state.
    pub fn get(&self, name: &str, version: u32) -> Option<&Kek> {
        self.keks
            .iter()
            .find(|k| k.name == name && k.version == version)
    }

    /// Adds a new key `name`, version 1, made of random bytes, at `now_micros`, and writes the file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`key name`) for a name that is taken or not 1 to 64 of `A-Z a-z 0-9 - _ .`,
    /// or when the keyring is full; the file's write errors.
    pub fn add(&mut self, name: &str, now_micros: u64) -> Result<&Kek> {
        check_name(name)?;
        if self.keks.iter().any(|k| k.name == name) {
            return Err(Error::invalid(
                "key name",
                format!("{name:?} is in the keyring already: rotate it to make a new version"),
            ));
        }
        self.push(name, 1, now_micros)
    }

    /// Makes a new version of key `name` (one above its highest), which wraps the data keys made from now on;
    /// the older versions keep opening what they wrapped. Writes the file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`key name`) for a name not in the keyring or a keyring that is full; the file's
    /// write errors.
    pub fn rotate(&mut self, name: &str, now_micros: u64) -> Result<&Kek> {
        let Some(highest) = self
            .keks
            .iter()
            .filter(|k| k.name == name)
            .map(|k| k.version)
            .max()
        else {
            return Err(Error::invalid(
                "key name",
                format!(
                    "{name:?} is not in the keyring {}: add it first",
                    self.path.display()
                ),
            ));
        };
        let version = highest.checked_add(1).ok_or_else(|| {
            Error::invalid(
                "key name",
                format!("{name:?} has no version left to rotate to"),
            )
        })?;
        self.push(name, version, now_micros)
    }

    /// Retires version `version` of key `name`: it stays in the file but wraps and opens nothing, so whatever it
    /// still wraps becomes unreadable (`saltblob rekey` first re-wraps those under the current version). Writes
    /// the file.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (`key name`) for a version not in the keyring or retired already; the file's
    /// write errors.
    pub fn retire(&mut self, name: &str, version: u32) -> Result<&Kek> {
        let path = self.path.clone();
        let Some(at) = self
            .keks
            .iter()
            .position(|k| k.name == name && k.version == version)
        else {
            return Err(Error::invalid(
                "key name",
                format!(
                    "{name:?} version {version} is not in the keyring {}",
                    path.display()
                ),
            ));
        };
        if self.keks[at].state == KekState::Retired {
            return Err(Error::invalid(
                "key name",
                format!("{name:?} version {version} is retired already"),
            ));
        }
        self.keks[at].state = KekState::Retired;
        if let Err(e) = self.save() {
            self.keks[at].state = KekState::Active;
            return Err(e);
        }
        Ok(&self.keks[at])
    }

    fn push(&mut self, name: &str, version: u32, now_micros: u64) -> Result<&Kek> {
        if self.keks.len() >= MAX_KEKS {
            return Err(Error::invalid(
                "key name",
                format!("the keyring holds {MAX_KEKS} keys, its most"),
            ));
        }
        self.keks.push(Kek {
            name: name.to_owned(),
            version,
            created_micros: now_micros,
            state: KekState::Active,
            key: random_key()?,
        });
        if let Err(e) = self.save() {
            self.keks.pop();
            return Err(e);
        }
        let made = self.keks.len() - 1;
        Ok(&self.keks[made])
    }

    /// Writes the keyring whole: a temporary file of mode 0600 beside it, synced, renamed over it, and the
    /// directory synced; a crash leaves the old file or the new one.
    fn save(&self) -> Result<()> {
        let bytes = encode(&self.keks);
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            let _ = std::fs::remove_file(&tmp);
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            std::fs::File::open(&dir)?.sync_all()
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            invalid(&self.path, format!("cannot be written: {e}"))
        })
    }
}

/// Checks a key name: 1 to 64 of `A-Z a-z 0-9 - _ .`.
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "key name",
            format!("{name:?}: a key name is 1 to {MAX_NAME_LEN} of A-Z a-z 0-9 - _ ."),
        ))
    }
}

fn invalid(path: &Path, reason: impl fmt::Display) -> Error {
    Error::invalid("keyring", format!("the file {} {reason}", path.display()))
}

/// The file's bytes for `keks`.
fn encode(keks: &[Kek]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + keks.len() * 110 + 4);
    out.extend_from_slice(MAGIC);
    out.push(FORMAT);
    out.extend_from_slice(&[0; 3]);
    // At most MAX_KEKS (checked when a key is added).
    out.extend_from_slice(&u32::try_from(keks.len()).unwrap_or(u32::MAX).to_le_bytes());
    for k in keks {
        // Names are at most 64 bytes (checked when a key is added).
        out.push(u8::try_from(k.name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(k.name.as_bytes());
        out.extend_from_slice(&k.version.to_le_bytes());
        out.extend_from_slice(&k.created_micros.to_le_bytes());
        out.push(k.state.tag());
        out.extend_from_slice(&k.key[..]);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The keys of a keyring file's `bytes`, or what is wrong with them and at which offset.
fn decode(bytes: &[u8]) -> std::result::Result<Vec<Kek>, String> {
    if bytes.len() < HEADER_LEN + 4 {
        return Err(format!(
            "{} bytes: shorter than a keyring's header",
            bytes.len()
        ));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    let actual = crc32c::crc32c(body);
    if stored != actual {
        return Err(format!(
            "crc32c {actual:#010x} of the contents, {stored:#010x} recorded"
        ));
    }
    if &body[..4] != MAGIC {
        return Err("it does not start with \"SBKR\": not a saltblob keyring".to_owned());
    }
    if body[4] != FORMAT {
        return Err(format!(
            "format {}; this build reads format {FORMAT}",
            body[4]
        ));
    }
    if body[5..8] != [0, 0, 0] {
        return Err("reserved bytes 5..8 are not zero".to_owned());
    }
    let count = u32::from_le_bytes([body[8], body[9], body[10], body[11]]) as usize;
    if count > MAX_KEKS {
        return Err(format!("{count} keys; at most {MAX_KEKS}"));
    }
    let mut at = HEADER_LEN;
    let mut take = |n: usize| -> std::result::Result<&[u8], String> {
        let start = at;
        let end = start
            .checked_add(n)
            .filter(|e| *e <= body.len())
            .ok_or_else(|| {
                format!(
                    "it ends inside an entry: {n} bytes wanted at offset {start} of {}",
                    body.len()
                )
            })?;
        at = end;
        Ok(&body[start..end])
    };
    let mut keks: Vec<Kek> = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let name_len = usize::from(take(1)?[0]);
        let name_bytes = take(name_len)?;
        let name = std::str::from_utf8(name_bytes)
            .map_err(|_| "a key name that is not UTF-8".to_owned())?
            .to_owned();
        check_name(&name).map_err(|e| e.to_string())?;
        let version = u32::from_le_bytes(array(take(4)?));
        if version == 0 {
            return Err(format!("key {name:?} has version 0"));
        }
        let created_micros = u64::from_le_bytes(array(take(8)?));
        let state = match take(1)?[0] {
            1 => KekState::Active,
            2 => KekState::Retired,
            other => {
                return Err(format!(
                    "key {name:?} version {version} has state tag {other}"
                ));
            }
        };
        let key: [u8; KEY_LEN] = array(take(KEY_LEN)?);
        if keks.iter().any(|k| k.name == name && k.version == version) {
            return Err(format!("key {name:?} version {version} appears twice"));
        }
        keks.push(Kek {
            name,
            version,
            created_micros,
            state,
            key: Secret::new(key),
        });
    }
    if at != body.len() {
        return Err(format!("{} bytes after the last key", body.len() - at));
    }
    Ok(keks)
}

/// The first `N` bytes of `bytes` (which has exactly `N`: [`decode`]'s `take`).
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&bytes[..N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_keyring_is_made_private_and_keys_are_added_and_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let mut ring = Keyring::create(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(ring.keks().is_empty());
        let first = ring.add("orders", 10).unwrap().key().to_owned();
        ring.add("logs.v-1_x", 11).unwrap();
        let second = ring.rotate("orders", 12).unwrap().key().to_owned();
        assert_ne!(first, second, "a rotation makes a new key");
        assert_eq!(mode(&path), 0o600, "still private after rewrites");

        let read = Keyring::open(&path).unwrap();
        assert_eq!(read.keks().len(), 3);
        let current = read.current("orders").unwrap();
        assert_eq!((current.version, current.created_micros), (2, 12));
        assert_eq!(current.key(), &second);
        assert_eq!(read.get("orders", 1).unwrap().key(), &first);
        assert!(read.current("nope").is_none());
        assert!(
            !format!("{read:?}").contains(&format!("{:?}", &first[..4])),
            "Debug shows no key bytes"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left");
    }

    #[test]
    fn a_retired_version_is_kept_but_is_no_longer_current() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        let mut ring = Keyring::create(&path).unwrap();
        ring.add("orders", 1).unwrap();
        ring.rotate("orders", 2).unwrap();
        assert_eq!(ring.retire("orders", 1).unwrap().state, KekState::Retired);
        let read = Keyring::open(&path).unwrap();
        assert_eq!(read.get("orders", 1).unwrap().state, KekState::Retired);
        assert_eq!(read.current("orders").unwrap().version, 2);
        let mut read = read;
        assert!(
            read.retire("orders", 1)
                .unwrap_err()
                .to_string()
                .contains("retired already")
        );
        assert!(
            read.retire("orders", 3)
                .unwrap_err()
                .to_string()
                .contains("not in the keyring")
        );
        read.retire("orders", 2).unwrap();
        assert!(read.current("orders").is_none(), "every version retired");
    }

    #[test]
    fn bad_names_taken_names_and_unknown_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Keyring::create(dir.path().join("k")).unwrap();
        for bad in ["", "a b", "ключ", &"x".repeat(65), "a/b"] {
            let e = ring.add(bad, 0).expect_err(bad);
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        what: "key name",
                        ..
                    }
                ),
                "{e}"
            );
        }
        ring.add("a", 0).unwrap();
        assert!(
            ring.add("a", 0)
                .unwrap_err()
                .to_string()
                .contains("rotate it")
        );
        assert!(
            ring.rotate("b", 0)
                .unwrap_err()
                .to_string()
                .contains("add it first")
        );
        assert!(
            Keyring::create(dir.path().join("k"))
                .unwrap_err()
                .to_string()
                .contains("exists already")
        );
    }

    #[test]
    fn a_keyring_open_to_others_is_refused_naming_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        Keyring::create(&path).unwrap().add("a", 0).unwrap();
        for loose in [0o640, 0o604, 0o660, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            let e = Keyring::open(&path).unwrap_err().to_string();
            assert!(
                e.contains(&format!("mode {loose:04o}")) && e.contains("chmod 600"),
                "{e}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(Keyring::open(&path).is_ok(), "owner-only read is enough");
        let missing = Keyring::open(dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("cannot be read"), "{missing}");
    }

    #[test]
    fn damage_is_reported_with_its_evidence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        let mut ring = Keyring::create(&path).unwrap();
        ring.add("a", 1).unwrap();
        ring.rotate("a", 2).unwrap();
        let good = std::fs::read(&path).unwrap();
        assert_eq!(&good[..5], b"SBKR\x01");
        assert!(decode(&good).is_ok());
        // Every flipped bit is caught (by the CRC, or the CRC itself).
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            assert!(decode(&bad).is_err(), "byte {i}");
        }
        assert!(decode(&good[..good.len() - 1]).is_err());
        // Well-formed CRC over bad contents: the field is named.
        let resealed = |mut body: Vec<u8>| {
            body.truncate(body.len() - 4);
            let crc = crc32c::crc32c(&body);
            body.extend_from_slice(&crc.to_le_bytes());
            decode(&body).unwrap_err()
        };
        let mut format = good.clone();
        format[4] = 9;
        assert!(resealed(format).contains("format 9"));
        let mut state = good.clone();
        state[HEADER_LEN + 1 + 1 + 4 + 8] = 7;
        assert!(resealed(state).contains("state tag 7"));
        let mut twice = good.clone();
        twice[HEADER_LEN + 2..HEADER_LEN + 6].copy_from_slice(&2u32.to_le_bytes());
        assert!(resealed(twice).contains("appears twice"));
        let e = Keyring::open(&path).map(drop);
        assert!(e.is_ok());
        std::fs::write(&path, &good[..10]).unwrap();
        let e = Keyring::open(&path).unwrap_err();
        assert!(
            e.is_corruption() && e.to_string().contains("keyring"),
            "{e}"
        );
    }
}

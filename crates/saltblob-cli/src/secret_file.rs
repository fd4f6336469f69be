//! Files that hold secrets (`serve --credentials`, `put`/`get --customer-key`): refused when group or others may
//! access them, as the keyring file is.

use std::path::Path;

use saltblob::encryption::CustomerKey;

/// Reads the file at `path` (given as `flag`), refusing one that group or others may access.
///
/// # Errors
/// What to fix, naming the flag and the file.
pub(crate) fn read_private(path: &Path, flag: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, String> {
    let cannot = |e: std::io::Error| format!("cannot read {flag} {}: {e}", path.display());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)
            .map_err(cannot)?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "{flag} {} is accessible by group or others (mode {:04o}): it holds secrets; run chmod 600 {}",
                path.display(),
                mode & 0o7777,
                path.display()
            ));
        }
    }
    std::fs::read(path)
        .map(zeroize::Zeroizing::new)
        .map_err(cannot)
}

/// The customer key in the file at `path` (`--customer-key`): its 32 bytes, raw (as `aws s3 cp --sse-c-key
/// fileb://FILE` reads it).
///
/// # Errors
/// As [`read_private`]; a file of another length.
pub(crate) fn customer_key(path: &Path) -> Result<CustomerKey, String> {
    let bytes = read_private(path, "--customer-key")?;
    CustomerKey::from_slice(&bytes).map_err(|_| {
        format!(
            "--customer-key {} holds {} bytes; a customer key is 32 raw bytes (e.g. head -c 32 /dev/urandom > FILE)",
            path.display(),
            bytes.len()
        )
    })
}

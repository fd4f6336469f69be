//! Writing an output file (`--json`), or standard output for "-".

/// Writes `text` to `path`, or to standard output when `path` is "-".
pub(crate) fn write_output(path: &std::path::Path, text: &str) -> saltblob::Result<()> {
    if path.as_os_str() == "-" {
        println!("{text}");
        return Ok(());
    }
    std::fs::write(path, format!("{text}\n")).map_err(|e| {
        saltblob::Error::Io(std::io::Error::new(
            e.kind(),
            format!("cannot write {}: {e}", path.display()),
        ))
    })
}

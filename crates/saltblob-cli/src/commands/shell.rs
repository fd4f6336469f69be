//! `saltblob completions SHELL` and `saltblob man`: shell completions and the manual page, made from the
//! command line's own definition, so that they always match the build that prints them.

use futures::future::LocalBoxFuture;

use super::command::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob completions`.
#[derive(clap::Args, Debug)]
pub struct Completions {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

impl Command for Completions {
    /// Opens no store: nothing to look for before it runs.
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, _context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let mut definition = crate::cli_definition();
            let mut script = Vec::new();
            clap_complete::generate(self.shell, &mut definition, "saltblob", &mut script);
            print(&script)
        })
    }
}

/// Arguments of `saltblob man` (none).
#[derive(clap::Args, Debug)]
pub struct Man {}

impl Command for Man {
    /// Opens no store: nothing to look for before it runs.
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, _context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            let mut page = Vec::new();
            clap_mangen::Man::new(crate::cli_definition())
                .render(&mut page)
                .map_err(|e| {
                    Failure::new(
                        Failure::FAILED,
                        format!("cannot render the manual page: {e}"),
                    )
                })?;
            print(&page)
        })
    }
}

/// Writes `bytes` to standard output; a reader that went away (`saltblob man | head`) is no failure.
fn print(bytes: &[u8]) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Failure::new(
            Failure::FAILED,
            format!("cannot write to standard output: {e}"),
        )),
        _ => Ok(()),
    }
}

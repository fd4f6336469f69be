//! `saltblob bench` and `saltblob probe`: run by saltblob-bench, which opens the store itself with its own
//! configuration (an embedded store can be open only once per process).

use futures::future::LocalBoxFuture;

use super::command::{Command, Context};
use crate::failure::Failure;

/// Arguments of `saltblob bench`.
#[derive(clap::Args, Debug)]
pub struct Bench {
    #[command(flatten)]
    args: saltblob_bench::BenchArgs,
}

impl Command for Bench {
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            if self.args.listing {
                saltblob_bench::listing_bench(&context.url, &self.args).await?;
            } else if let Some(mib) = self.args.s3_put {
                saltblob_bench::s3_put_bench(&context.url, &self.args, mib).await?;
            } else if self.args.background {
                saltblob_bench::background_bench(&context.url, &self.args).await?;
            } else {
                saltblob_bench::bench(&context.url, &self.args, context.quiet).await?;
            }
            Ok(())
        })
    }
}

/// Arguments of `saltblob probe`.
#[derive(clap::Args, Debug)]
pub struct Probe {
    #[command(flatten)]
    args: saltblob_bench::ProbeArgs,
}

impl Command for Probe {
    /// Not read-only in the sense of [`Command::is_read_only`]: probe measures the device of a store that may
    /// not exist yet (and creates nothing).
    fn is_read_only(&self) -> bool {
        false
    }

    fn run<'a>(&'a self, context: &'a Context) -> LocalBoxFuture<'a, Result<(), Failure>> {
        Box::pin(async move {
            saltblob_bench::probe(&context.url, &self.args, context.quiet).await?;
            Ok(())
        })
    }
}

//! Tests of the history checker against real stores: the in-memory store must pass, and each deliberately
//! broken backend must be caught (one test binary, topic modules). Run with `--nocapture` to see the
//! report lines.

mod broken;
mod common;
mod correct;

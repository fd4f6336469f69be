//! End-to-end runs of tiny benches and probes (one test binary). Performance is never asserted here: these check
//! that every phase runs, the JSON has every field, and the numbers are consistent.

mod background;
mod listing;
mod s3;
mod tiny;

//! Integration tests of the embedded backend on real directories (one test binary, topic modules).

mod conformance;
mod extents;
mod fixtures;
mod history;
mod unlogged;

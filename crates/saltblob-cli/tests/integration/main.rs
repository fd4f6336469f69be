//! End-to-end tests of the `saltblob` binary on the embedded store (one test binary, topic modules).

mod backup;
mod bad_input;
mod bulk;
mod bulk_keys;
mod common;
mod cql;
mod crash;
mod crash_loop;
mod encryption;
mod export;
mod extent_faults;
mod fault_injection;
mod keyring;
mod keys;
mod maintenance;
mod memory;
mod planning;
mod profiles;
mod roundtrip;
mod secrets;
mod serve;
mod shell;

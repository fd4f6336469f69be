//! The conformance suite every backend passes, against the cluster.

use crate::fixture;

saltblob_core::conformance_suite!({
    maybe_skip!();
    fixture()
});

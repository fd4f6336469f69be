//! The conformance suite every backend passes, against the cluster.

use crate::fixture;

saltblob_core::conformance_suite!(
    #[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
    fixture()
);

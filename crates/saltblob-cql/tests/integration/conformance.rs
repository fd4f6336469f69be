//! The conformance suite every backend passes, against the cluster.

use crate::fixture;

saltblob_core::conformance_suite!(
    #[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
    fixture()
);

/// Every case again, with every store sealing its puts (encryption at rest).
mod sealed {
    use crate::fixture;

    saltblob_core::conformance_suite!(sealed
        #[ignore = "needs a cluster: set TEST_CQL=host:port and pass --include-ignored"]
        fixture()
    );
}

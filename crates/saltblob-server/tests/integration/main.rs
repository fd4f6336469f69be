//! Integration tests of the S3 server: an in-process server on 127.0.0.1:0 over a temporary store, driven by a
//! small SigV4-signing client.

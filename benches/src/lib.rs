//! Criterion benches for leasehold's pure parts; the code is in `benches/`, this library is
//! empty. Run with `cargo bench` from this folder (see `README.md`).
#![forbid(unsafe_code)]

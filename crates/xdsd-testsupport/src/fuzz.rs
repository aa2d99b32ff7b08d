//! The fuzz targets' shared budget: every crate's proptest targets (`docs/fuzzing.md`) run
//! `XDSD_FUZZ_CASES` cases each (256 by default; CI's nightly-style runs raise it).

use proptest::test_runner::Config;

/// The proptest configuration of every fuzz target: `XDSD_FUZZ_CASES` cases (256 when unset or
/// not a number), and a bounded shrink (shrinking a long sequence takes long; the failing case is
/// printed either way).
pub fn config() -> Config {
    let cases = std::env::var("XDSD_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        max_shrink_iters: 256,
        ..Config::default()
    }
}

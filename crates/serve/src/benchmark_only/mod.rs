//! The matchers for benchmarks only, whose answers are not real matches: each says so at start,
//! in `stats` and on the metrics page, so that no one takes its answers for real ones.
//!
//! - [`null`] (`--matcher null`): no query is matched, every answer is "no match"; what the
//!   daemon costs is then its host path alone.
//! - [`emulated`] (`--matcher emulated`): a device emulated from a profile: exact answers
//!   precomputed for the benchmark's trace, each batch held for the profile's device time.

pub mod emulated;
pub mod null;

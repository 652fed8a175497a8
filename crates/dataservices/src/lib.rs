//! The near-data node's decision core (`python/offload/dataservices` is the node itself): what
//! `auto` runs on every query, kept in Rust because its cost counts against the query's
//! (issue 26: deciding at most 2% of the query's CPU on a quarter core).
//!
//! - [`forest`]: the time models' gradient-boosted trees, every regressor a decision needs
//!   evaluated in one pass.

pub mod forest;

pub use forest::Forest;

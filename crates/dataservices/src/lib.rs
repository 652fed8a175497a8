//! The near-data node's decision core (`python/offload/dataservices` is the node itself): what
//! `auto` runs on every query, kept in Rust because its cost counts against the query's
//! (issue 26: deciding at most 2% of the query's CPU on a quarter core).
//!
//! - [`forest`]: the time models' gradient-boosted trees, every regressor a decision needs
//!   evaluated in one pass.
//! - [`decide`]: the decision from the features: both ways' stages, the faster, why.
//! - [`plan`]: a Substrait plan read natively: its reads, its calls by cost class, its shape.
//! - [`pyfmt`]: numbers written as Python writes them (the steps and the reasons read the same).
//! - [`estimate`]: the cardinality estimate's walk of the plan, conditions priced by the caller
//!   where [`selectivity`] (inequalities on numeric columns) does not price them.
//!
//! The plan reader and the walk answer only for the plans they model and say `Unsupported`
//! otherwise: the Python reader (`plans.inspect`) is the reader's reference and gives the
//! errors; a plan the walk cannot estimate is decided on a bound of its result, saying why.

pub mod decide;
pub mod estimate;
pub mod forest;
pub mod plan;
pub mod pyfmt;
pub mod selectivity;

pub use forest::Forest;
/// The Substrait messages and their codec, for the bindings (one version of each).
pub use prost;
pub use substrait;

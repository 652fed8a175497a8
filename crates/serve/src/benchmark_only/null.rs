//! The null matcher (`--matcher null`, benchmarks only): the executors answer every query
//! "no match" without calling the matcher, so what the daemon costs is its host path alone. It
//! is no [`offload_rules::MatcherKind`], so nothing outside the service can pick it: the engine
//! compiles as `linear` (the cheapest to build; the workers still encode with it), and
//! `Config::null_matcher` tells the executors to skip the match call (`execute_group` and
//! `match_early_stop` in `server/executors.rs`).

/// Its name on the command line and in `stats`.
pub const NAME: &str = "null";

/// What the null matcher's daemon says at start and in `stats`.
pub const NOTE: &str = "null matcher: benchmark only, no query is matched and every answer is 'no match'; the \
                        numbers are the service's host path alone";

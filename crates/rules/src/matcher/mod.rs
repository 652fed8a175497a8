//! Matchers: compiled forms of a rule set that answer batches of encoded queries.
//!
//! Every matcher returns, for each query, the index (input order) of the winning rule: the
//! matching rule with the highest score, ties to the earliest rule; or [`NO_MATCH`].

pub mod fast;
pub mod gpu;
pub mod linear;
pub mod nfa;

use crate::encode::EncodedRules;
use std::str::FromStr;

/// The answer for a query that no rule matches.
pub const NO_MATCH: u32 = u32::MAX;

/// A compiled rule set answering batches of encoded queries.
pub trait Matcher: Send + Sync {
    /// Short name (`linear`, `nfa`, `fast`, `gpu`, `gpu-host`).
    fn name(&self) -> &'static str;
    /// Codes per query row (see [`crate::encode::Encoder::width`]).
    fn width(&self) -> usize;
    /// Writes the winning rule index (or [`NO_MATCH`]) of each query row of `queries` into `out`.
    /// `queries.len()` must be `out.len() * width()`.
    fn match_batch(&self, queries: &[u32], out: &mut [u32]);
    /// Heap bytes held by the compiled structure.
    fn memory_bytes(&self) -> usize;
    /// Structure statistics for `compile` reports, as JSON.
    fn stats(&self) -> serde_json::Value;
    /// Like [`Matcher::match_batch`], and for a matcher on a device, the device time of each
    /// stage of this batch (CPU matchers: `None`).
    fn match_batch_staged(&self, queries: &[u32], out: &mut [u32]) -> Option<DeviceStages> {
        self.match_batch(queries, out);
        None
    }
    /// Whether the matcher runs on a device: it takes a batch whole (the device has its own
    /// parallelism, and concurrent callers get streams of their own), so [`match_parallel`]
    /// does not split it.
    fn on_device(&self) -> bool {
        false
    }
    /// For a matcher on a device, where its time goes on (a prefix of) `queries`, as JSON,
    /// medians of `repeats` (CPU matchers: `None`).
    fn device_profile(&self, _queries: &[u32], _repeats: usize) -> Option<serde_json::Value> {
        None
    }
}

/// Device time of each stage of one batch on a device matcher, summed over its chunks. Chunks
/// overlap stages over two lanes, so the sum can exceed the batch's wall time; each stage
/// alone says what bounds the device.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct DeviceStages {
    pub h2d_s: f64,
    pub kernel_s: f64,
    pub d2h_s: f64,
    pub chunks: usize,
    pub queries: usize,
}

/// Which matcher to build. Written `linear`, `fast`, `nfa`, or `nfa:<order>` with a level
/// order of [`nfa::LevelOrder`] (`given`, `asc`, `desc`, `h2`; `nfa` alone is `nfa:h2`),
/// `gpu` (a CUDA device), or `gpu-host` (the gpu matcher's kernel compiled for the CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatcherKind {
    Linear,
    Nfa(nfa::LevelOrder),
    Fast,
    Gpu,
    GpuHost,
}

impl MatcherKind {
    /// The matchers every machine can build (`gpu` needs a device).
    pub const ALL: [MatcherKind; 4] =
        [MatcherKind::Linear, MatcherKind::Nfa(nfa::LevelOrder::H2), MatcherKind::Fast, MatcherKind::GpuHost];
    /// The matcher family (`linear`, `nfa`, `fast`, `gpu`, `gpu-host`).
    pub fn as_str(self) -> &'static str {
        match self {
            MatcherKind::Linear => "linear",
            MatcherKind::Nfa(_) => "nfa",
            MatcherKind::Fast => "fast",
            MatcherKind::Gpu => "gpu",
            MatcherKind::GpuHost => "gpu-host",
        }
    }
}

impl std::fmt::Display for MatcherKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MatcherKind::Nfa(order) if *order != nfa::LevelOrder::default() => write!(f, "nfa:{}", order.as_str()),
            other => f.write_str(other.as_str()),
        }
    }
}

impl FromStr for MatcherKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "linear" => Ok(MatcherKind::Linear),
            "nfa" => Ok(MatcherKind::Nfa(nfa::LevelOrder::default())),
            "fast" => Ok(MatcherKind::Fast),
            "gpu" => Ok(MatcherKind::Gpu),
            "gpu-host" => Ok(MatcherKind::GpuHost),
            other => match other.strip_prefix("nfa:") {
                Some(order) => order.parse().map(MatcherKind::Nfa),
                None => Err(format!(
                    "unknown matcher {other:?}; expected linear, fast, nfa, nfa:<given|asc|desc|h2>, gpu or gpu-host"
                )),
            },
        }
    }
}

/// Builds a matcher of the given kind over encoded rules. `cardinalities[c]` is the number of
/// distinct codes of criterion `c` (see [`crate::encode::Encoder::cardinality`]). Fails only
/// for `gpu` where there is no usable device, or for a structure the kernel cannot hold.
pub fn build(kind: MatcherKind, rules: &EncodedRules, cardinalities: &[usize]) -> Result<Box<dyn Matcher>, String> {
    Ok(match kind {
        MatcherKind::Linear => Box::new(linear::LinearMatcher::new(rules.clone())),
        MatcherKind::Nfa(order) => Box::new(nfa::NfaMatcher::new(rules, cardinalities, order)),
        MatcherKind::Fast => Box::new(fast::FastMatcher::new(rules, cardinalities)),
        MatcherKind::Gpu => Box::new(gpu::device::GpuMatcher::new(rules, cardinalities)?),
        MatcherKind::GpuHost => Box::new(gpu::GpuHostMatcher::new(rules, cardinalities)?),
    })
}

/// Runs `m` over `queries`: a device matcher takes the batch whole and reports its stages;
/// a CPU matcher runs on `threads` threads ([`match_parallel`]).
pub fn match_staged(m: &dyn Matcher, queries: &[u32], out: &mut [u32], threads: usize) -> Option<DeviceStages> {
    if m.on_device() {
        m.match_batch_staged(queries, out)
    } else {
        match_parallel(m, queries, out, threads);
        None
    }
}

/// Runs `m` over `queries` with `threads` threads, each on a contiguous slice of the batch.
/// Small batches run on the calling thread: starting threads costs more than they save. A
/// device matcher always takes the batch whole: splitting it would only cut its transfers
/// smaller and give each thread streams and pinned buffers of its own.
pub fn match_parallel(m: &dyn Matcher, queries: &[u32], out: &mut [u32], threads: usize) {
    const MIN_PER_THREAD: usize = 1024;
    let n = out.len();
    let threads = threads.max(1).min(n.div_ceil(MIN_PER_THREAD)).max(1);
    if threads == 1 || m.on_device() {
        m.match_batch(queries, out);
        return;
    }
    let w = m.width();
    let per = n.div_ceil(threads);
    std::thread::scope(|s| {
        for (q, o) in queries.chunks(per * w).zip(out.chunks_mut(per)) {
            s.spawn(move || m.match_batch(q, o));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matcher_names_round_trip() {
        for name in ["linear", "fast", "nfa", "nfa:given", "nfa:asc", "nfa:desc", "gpu", "gpu-host"] {
            let kind: MatcherKind = name.parse().unwrap();
            assert_eq!(kind.to_string(), name);
        }
        assert_eq!("nfa:h2".parse::<MatcherKind>().unwrap().to_string(), "nfa");
        assert!("nfa:sideways".parse::<MatcherKind>().is_err());
        assert!("tree".parse::<MatcherKind>().unwrap_err().contains("expected linear, fast, nfa"));
    }
}

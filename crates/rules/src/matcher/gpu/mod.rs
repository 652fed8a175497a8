//! The gpu matcher: the fast matcher's tree laid out flat (an *image*, [`image`]) and matched
//! by a CUDA kernel, one thread per query (`match.cu`).
//!
//! The kernel source is compiled twice. On a GPU, NVRTC compiles it at run time and the
//! driver runs it ([`device::GpuMatcher`]); both libraries are loaded dynamically, so the
//! project builds and runs without CUDA and says "no GPU" with the reason. On every machine,
//! the host C compiler builds the same source (build.rs), and [`GpuHostMatcher`] runs it on
//! the CPU: the property tests check the device's logic against `linear` in CI.

pub mod device;
mod image;

use super::fast::FastMatcher;
use super::Matcher;
use crate::encode::EncodedRules;

/// The kernel source, as NVRTC compiles it.
pub const KERNEL_SOURCE: &str = include_str!("match.cu");

extern "C" {
    fn offload_gpu_match_host(img: *const u32, queries: *const u32, n: usize, out: *mut u32);
}

/// Lays out the fast matcher's tree for the kernel.
fn image_of(rules: &EncodedRules, cardinalities: &[usize]) -> Result<(Vec<u32>, serde_json::Value), String> {
    let fast = FastMatcher::new(rules, cardinalities);
    Ok((image::build(&fast)?, fast.stats()))
}

/// The gpu matcher's kernel, compiled for the CPU and run there (`gpu-host`): the device's
/// matching logic, testable on any machine. Not a fast matcher: one query at a time, no SIMD.
pub struct GpuHostMatcher {
    width: usize,
    image: Vec<u32>,
    stats: serde_json::Value,
}

impl GpuHostMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize]) -> Result<Self, String> {
        let (image, stats) = image_of(rules, cardinalities)?;
        Ok(GpuHostMatcher { width: rules.width, image, stats })
    }

    /// The kernel over a given tree (tests use tiny leaves to exercise deep trees).
    pub fn from_fast(fast: &FastMatcher) -> Result<Self, String> {
        Ok(GpuHostMatcher { width: fast.width, image: image::build(fast)?, stats: fast.stats() })
    }
}

impl Matcher for GpuHostMatcher {
    fn name(&self) -> &'static str {
        "gpu-host"
    }
    fn width(&self) -> usize {
        self.width
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        assert_eq!(queries.len(), out.len() * self.width, "queries must hold width codes per answer");
        if out.is_empty() {
            return;
        }
        // SAFETY: `image` passed `image::check` when it was built and is never changed, so the
        // C code reads only inside it and each query row (criteria below the width, checked),
        // whatever the codes, and ends (children precede parents, the partition table has a
        // free slot, the stack is deep enough). The assert above makes `queries` hold
        // `out.len()` rows of `width` codes, which is what the C loop reads, and it writes
        // `out.len()` answers. Both slices outlive the call, which keeps no pointer.
        unsafe { offload_gpu_match_host(self.image.as_ptr(), queries.as_ptr(), out.len(), out.as_mut_ptr()) }
    }
    fn memory_bytes(&self) -> usize {
        self.image.len() * 4
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({"image_words": self.image.len(), "tree": self.stats})
    }
}

#[cfg(test)]
mod tests {
    use crate::{native, Engine, MatcherKind, RawColumn};
    use std::path::Path;
    use std::sync::Arc;

    /// An equality criterion with a wildcard and a range: the host kernel answers as `linear`
    /// does, also on values no rule names, and on an empty batch.
    #[test]
    fn the_host_kernel_answers_like_linear() {
        let rule_type = "code = \"T\"\n[[criterion]]\ncode = \"A\"\nkind = \"equ\"\nweight = 2\n\
                         [[criterion]]\ncode = \"N\"\nkind = \"int_range\"\nweight = 1\n";
        let rules = "RULE_ID,A,N,CONTENT\nr0,x,,1\nr1,*,3..4,2\nr2,y,5..9,3\nr3,x,..2,4\n";
        let rt = native::parse_rule_type(Path::new("t.toml"), rule_type).unwrap();
        let rs = Arc::new(native::parse_rules(&rt, Path::new("r.csv"), rules).unwrap());
        let (a, n): (Vec<&str>, Vec<String>) =
            ["x", "y", "z"].iter().flat_map(|&a| (0..12).map(move |n| (a, n.to_string()))).unzip();
        let cols = [RawColumn::Str(a), RawColumn::Str(n.iter().map(String::as_str).collect())];
        let answers = |kind| {
            let eng = Engine::compile(rs.clone(), kind).unwrap();
            eng.match_encoded(&eng.encoder.encode_columns(&cols).unwrap(), 1)
        };
        let want = answers(MatcherKind::Linear);
        assert!(want.contains(&3) && want.contains(&crate::NO_MATCH));
        assert_eq!(answers(MatcherKind::GpuHost), want);
        let eng = Engine::compile(rs.clone(), MatcherKind::GpuHost).unwrap();
        eng.matcher.match_batch(&[], &mut []);
    }
}

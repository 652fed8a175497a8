//! The reference matcher: scan every rule, keep the first one with the highest score.

use super::{Matcher, NO_MATCH};
use crate::encode::{row_matches, EncodedRules};

pub struct LinearMatcher {
    rules: EncodedRules,
}

impl LinearMatcher {
    pub fn new(rules: EncodedRules) -> Self {
        LinearMatcher { rules }
    }

    fn match_one(&self, q: &[u32]) -> u32 {
        let mut best = NO_MATCH;
        let mut best_score = 0u128;
        for r in 0..self.rules.len() {
            let s = self.rules.scores[r];
            // Strictly greater: on a tie the earlier rule stays.
            if (best == NO_MATCH || s > best_score) && row_matches(self.rules.lo_row(r), self.rules.hi_row(r), q) {
                best = r as u32;
                best_score = s;
            }
        }
        best
    }
}

impl Matcher for LinearMatcher {
    fn name(&self) -> &'static str {
        "linear"
    }
    fn width(&self) -> usize {
        self.rules.width
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        for (q, o) in queries.chunks_exact(self.rules.width).zip(out.iter_mut()) {
            *o = self.match_one(q);
        }
    }
    fn memory_bytes(&self) -> usize {
        self.rules.lo.len() * 8 + self.rules.scores.len() * 16
    }
    fn stats(&self) -> serde_json::Value {
        serde_json::json!({ "rules": self.rules.len() })
    }
}

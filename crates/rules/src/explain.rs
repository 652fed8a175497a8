//! Explanations: for one query, the winner, its score, the criteria it matched, and the
//! runner-up (the best other matching rule). Computed by a plain scan, independent of the
//! matcher that answered, so it also serves as a cross-check.

use crate::encode::{EncodedRules, Encoder};
use crate::model::RuleSet;

#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleExplanation {
    pub index: usize,
    pub rule_id: String,
    pub line: u64,
    pub score: String,
    pub content: i64,
    /// Criteria on which the rule is specific (and therefore matched the query's value).
    pub specific: Vec<(String, String)>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Explanation {
    pub query: Vec<(String, String)>,
    pub matching_rules: usize,
    pub winner: Option<RuleExplanation>,
    pub runner_up: Option<RuleExplanation>,
}

fn describe(rs: &RuleSet, enc: &EncodedRules, r: usize) -> RuleExplanation {
    RuleExplanation {
        index: r,
        rule_id: rs.ids[r].clone(),
        line: rs.lines[r],
        score: enc.scores[r].to_string(),
        content: rs.contents[r],
        specific: (0..rs.n_criteria())
            .filter(|&c| rs.is_specific(r, c))
            .map(|c| (rs.rule_type.criteria[c].code.clone(), rs.cell_text(r, c)))
            .collect(),
    }
}

/// Explains the answer to one encoded query row `q` whose raw values are `raw`.
pub fn explain(encoder: &Encoder, enc: &EncodedRules, q: &[u32], raw: &[String]) -> Explanation {
    let rs = encoder.rules();
    let mut matching: Vec<usize> =
        (0..enc.len()).filter(|&r| crate::encode::row_matches(enc.lo_row(r), enc.hi_row(r), q)).collect();
    matching.sort_by(|&a, &b| enc.scores[b].cmp(&enc.scores[a]).then(a.cmp(&b)));
    Explanation {
        query: rs.rule_type.criteria.iter().map(|c| c.code.clone()).zip(raw.iter().cloned()).collect(),
        matching_rules: matching.len(),
        winner: matching.first().map(|&r| describe(rs, enc, r)),
        runner_up: matching.get(1).map(|&r| describe(rs, enc, r)),
    }
}

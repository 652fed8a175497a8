//! NfaMatcher against the reference LinearMatcher, for every level order and both walks.

use offload_rules::encode::{EncodedRules, LANES};
use offload_rules::matcher::linear::LinearMatcher;
use offload_rules::matcher::nfa::{LevelOrder, NfaMatcher, Walk};
use offload_rules::{Matcher, NO_MATCH};
use proptest::prelude::*;
use std::time::Instant;

/// SplitMix64: a tiny deterministic generator for test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
}

/// Empty rule set with the given criteria.
fn empty_rules(is_range: Vec<bool>, mandatory: Vec<bool>, weights: Vec<u64>) -> EncodedRules {
    let n = is_range.len();
    EncodedRules {
        width: n.div_ceil(LANES).max(1) * LANES,
        n_criteria: n,
        is_range,
        mandatory,
        weights,
        lo: Vec::new(),
        hi: Vec::new(),
        scores: Vec::new(),
    }
}

/// Appends a rule given as one interval per criterion (`None` = wildcard).
fn push_rule(rules: &mut EncodedRules, cells: &[Option<(u32, u32)>]) {
    let mut score = 0u128;
    for c in 0..rules.width {
        match cells.get(c).copied().flatten() {
            Some((lo, hi)) => {
                rules.lo.push(lo);
                rules.hi.push(hi);
                score += rules.weights[c] as u128;
            }
            None => {
                rules.lo.push(0);
                rules.hi.push(u32::MAX);
            }
        }
    }
    rules.scores.push(score);
}

/// Random small rule set with many overlaps, ties and duplicates, plus queries.
fn random_case(n_crit: usize, n_rules: usize, n_queries: usize, seed: u64) -> (EncodedRules, Vec<u32>, Vec<usize>) {
    let mut rng = Rng(seed);
    let is_range: Vec<bool> = (0..n_crit).map(|_| rng.chance(0.35)).collect();
    let mandatory: Vec<bool> = (0..n_crit).map(|_| rng.chance(0.25)).collect();
    let weight_mode = rng.below(3);
    let weights: Vec<u64> = (0..n_crit)
        .map(|c| match weight_mode {
            0 => rng.below(3),           // many zeros and ties
            1 => 1 << c,                 // lexicographic, like MCT
            _ => rng.below(1 << 40) * 7, // large arbitrary
        })
        .collect();
    // Mostly tiny dictionaries (many overlaps); sometimes large ones (binary-searched states).
    let big = rng.chance(0.3);
    let card: Vec<u32> = (0..n_crit).map(|_| 1 + rng.below(if big { 40 } else { 5 }) as u32).collect();
    let wild_p = rng.below(100) as f64 / 100.0;
    let mut rules = empty_rules(is_range.clone(), mandatory.clone(), weights);
    let mut rows: Vec<Vec<Option<(u32, u32)>>> = Vec::new();
    for _ in 0..n_rules {
        if !rows.is_empty() && rng.chance(0.15) {
            // Duplicate (or near-duplicate) of an earlier rule.
            let mut row = rows[rng.below(rows.len() as u64) as usize].clone();
            if rng.chance(0.5) {
                let c = rng.below(n_crit as u64) as usize;
                if !mandatory[c] {
                    row[c] = None;
                }
            }
            rows.push(row);
            continue;
        }
        let row: Vec<Option<(u32, u32)>> = (0..n_crit)
            .map(|c| {
                if !mandatory[c] && rng.chance(wild_p) {
                    None
                } else if is_range[c] {
                    // Ranges over codes 1..=card+1, often touching at their bounds.
                    let a = 1 + rng.below(card[c] as u64 + 1) as u32;
                    let b = a + rng.below(3) as u32;
                    Some((a, b))
                } else {
                    let v = 1 + rng.below(card[c] as u64) as u32;
                    Some((v, v))
                }
            })
            .collect();
        rows.push(row);
    }
    for row in &rows {
        push_rule(&mut rules, row);
    }
    let w = rules.width;
    let mut queries = vec![0u32; n_queries * w];
    for q in 0..n_queries {
        let base = if !rows.is_empty() && rng.chance(0.5) { Some(rng.below(rows.len() as u64) as usize) } else { None };
        for c in 0..n_crit {
            // Code 0 = a value no rule names; card+3 lies beyond every range.
            let random = rng.below(card[c] as u64 + 4) as u32;
            queries[q * w + c] = match base.and_then(|b| rows[b][c]) {
                Some((lo, hi)) if rng.chance(0.8) => lo + rng.below((hi - lo + 1) as u64) as u32,
                _ => random,
            };
        }
    }
    let cards: Vec<usize> = card.iter().map(|&k| k as usize + 3).collect();
    (rules, queries, cards)
}

fn check_all(rules: &EncodedRules, queries: &[u32], cards: &[usize]) -> Result<(), TestCaseError> {
    let n = queries.len() / rules.width;
    let mut want = vec![0u32; n];
    LinearMatcher::new(rules.clone()).match_batch(queries, &mut want);
    for order in LevelOrder::ALL {
        // Also without cardinalities (the matcher estimates them).
        for cards in [cards, &[][..]] {
            let m = NfaMatcher::new(rules, cards, order);
            for walk in [Walk::DepthFirst, Walk::Frontier] {
                let mut got = vec![7u32; n];
                m.match_batch_with(walk, queries, &mut got);
                prop_assert_eq!(&got, &want, "order {:?} walk {:?}", order, walk);
            }
            let mut got = vec![7u32; n];
            m.match_batch(queries, &mut got);
            prop_assert_eq!(&got, &want);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]
    #[test]
    fn nfa_matches_linear(n_crit in 1usize..6, n_rules in 0usize..40, n_queries in 0usize..40, seed in any::<u64>()) {
        let (rules, queries, cards) = random_case(n_crit, n_rules, n_queries, seed);
        check_all(&rules, &queries, &cards)?;
    }

    #[test]
    fn nfa_matches_linear_larger(n_crit in 1usize..10, n_rules in 40usize..300, seed in any::<u64>()) {
        let (rules, queries, cards) = random_case(n_crit, n_rules, 200, seed);
        check_all(&rules, &queries, &cards)?;
    }
}

#[test]
fn nfa_edge_cases() {
    // Empty rule set, with and without queries.
    let rules = empty_rules(vec![false, true], vec![true, false], vec![1, 2]);
    let m = NfaMatcher::new(&rules, &[3, 3], LevelOrder::H2);
    let mut out = vec![0u32; 2];
    m.match_batch(&[1u32; 16], &mut out);
    assert_eq!(out, vec![NO_MATCH; 2]);
    m.match_batch(&[], &mut []);
    assert!(m.stats()["states"].as_u64().is_some());

    // One rule; a code outside its interval; code 0 (unknown value).
    let mut rules = empty_rules(vec![false, true], vec![false, false], vec![0, 0]);
    push_rule(&mut rules, &[Some((2, 2)), Some((3, 5))]);
    let mut q = vec![0u32; 3 * 8];
    q[..2].copy_from_slice(&[2, 5]);
    q[8..10].copy_from_slice(&[2, 6]);
    q[16..18].copy_from_slice(&[0, 4]);
    for order in LevelOrder::ALL {
        let m = NfaMatcher::new(&rules, &[], order);
        let mut out = vec![0u32; 3];
        m.match_batch(&q, &mut out);
        assert_eq!(out, vec![0, NO_MATCH, NO_MATCH]);
    }

    // Zero criteria: every rule matches; the first wins (all scores 0).
    let mut rules = empty_rules(vec![], vec![], vec![]);
    push_rule(&mut rules, &[]);
    push_rule(&mut rules, &[]);
    let m = NfaMatcher::new(&rules, &[], LevelOrder::H2);
    let mut out = vec![9u32; 2];
    m.match_batch(&[0u32; 16], &mut out);
    assert_eq!(out, vec![0, 0]);

    // Duplicates with ties: lowest index wins; a later higher score beats them.
    let mut rules = empty_rules(vec![false, false], vec![false, false], vec![1, 1]);
    push_rule(&mut rules, &[Some((1, 1)), None]);
    push_rule(&mut rules, &[None, Some((1, 1))]);
    push_rule(&mut rules, &[Some((1, 1)), None]);
    push_rule(&mut rules, &[Some((1, 1)), Some((1, 1))]);
    let mut q = vec![0u32; 3 * 8];
    q[..2].copy_from_slice(&[1, 0]);
    q[8..10].copy_from_slice(&[0, 1]);
    q[16..18].copy_from_slice(&[1, 1]);
    let m = NfaMatcher::new(&rules, &[], LevelOrder::AsGiven);
    let mut out = vec![0u32; 3];
    m.match_batch(&q, &mut out);
    assert_eq!(out, vec![0, 1, 3]);
}

#[test]
fn level_order_parse() {
    for o in LevelOrder::ALL {
        assert_eq!(o.as_str().parse::<LevelOrder>(), Ok(o));
    }
    assert!("nope".parse::<LevelOrder>().is_err());
    assert_eq!(LevelOrder::default(), LevelOrder::H2);
}

/// MCT criteria: (name, weight, mandatory, range, share specific, distinct values).
const MCT: [(&str, u64, bool, bool, f64, u32); 22] = [
    ("CTN_TYPE", 0, true, false, 1.0, 4),
    ("MCT_PRD", 1 << 0, false, true, 0.11, 60),
    ("MCT_BRD", 0, true, false, 1.0, 2000),
    ("MCT_OFF", 0, true, false, 1.0, 2000),
    ("IN_CRR", 1 << 7, false, false, 0.73, 300),
    ("OUT_CRR", 1 << 17, false, false, 0.74, 300),
    ("IN_EQP", 1 << 1, false, false, 0.012, 200),
    ("OUT_EQP", 1 << 11, false, false, 0.008, 200),
    ("NXT_APT", 1 << 16, false, false, 0.053, 2000),
    ("NXT_AREA", 1 << 13, false, false, 0.012, 4),
    ("NXT_CTRY", 1 << 14, false, false, 0.023, 200),
    ("PRV_AREA", 1 << 3, false, false, 0.012, 4),
    ("PRV_CTRY", 1 << 4, false, false, 0.024, 200),
    ("NXT_STATE", 1 << 15, false, false, 0.001, 50),
    ("PRV_STATE", 1 << 5, false, false, 0.001, 50),
    ("IN_FLT_NB", 1 << 9, false, false, 0.044, 5000),
    ("OUT_FLT_NB", 1 << 19, false, false, 0.039, 5000),
    ("IN_TER", 1 << 2, false, false, 0.25, 10),
    ("IN_FLT_RG", 1 << 8, false, true, 0.17, 400),
    ("OUT_FLT_RG", 1 << 18, false, true, 0.18, 400),
    ("OUT_TER", 1 << 12, false, false, 0.26, 10),
    ("PRV_APT", 1 << 6, false, false, 0.064, 2000),
];

/// MCT-like rules in families per airport: a family base rule and variants that change one
/// or two fields. Queries: half derived from a rule (so they match deep), half random
/// connections at a rule's airport.
fn mct_like(n_rules: usize, n_queries: usize, seed: u64) -> (EncodedRules, Vec<u32>, Vec<usize>) {
    let mut rng = Rng(seed);
    let n = MCT.len();
    let mut rules = empty_rules(
        MCT.iter().map(|c| c.3).collect(),
        MCT.iter().map(|c| c.2).collect(),
        MCT.iter().map(|c| c.1).collect(),
    );
    let cell = |rng: &mut Rng, c: usize| -> Option<(u32, u32)> {
        let (_, _, mand, range, share, card) = MCT[c];
        if !mand && !rng.chance(share) {
            return None;
        }
        // Skewed values: small codes are popular.
        let v = 1 + (rng.below(card as u64) * rng.below(card as u64) / card as u64) as u32;
        if range {
            Some((v, (v + rng.below(40) as u32).min(card)))
        } else {
            Some((v, v))
        }
    };
    let mut rows: Vec<Vec<Option<(u32, u32)>>> = Vec::new();
    while rows.len() < n_rules {
        let mut base: Vec<Option<(u32, u32)>> = (0..n).map(|c| cell(&mut rng, c)).collect();
        if rng.chance(0.85) {
            base[3] = base[2]; // MCT_OFF = MCT_BRD
        }
        let family = 1 + rng.below(30) as usize;
        for _ in 0..family.min(n_rules - rows.len()) {
            let mut row = base.clone();
            for _ in 0..1 + rng.below(2) {
                let c = [0, 1, 4, 5, 15, 16, 17, 18, 19, 20][rng.below(10) as usize];
                row[c] = cell(&mut rng, c);
            }
            rows.push(row);
        }
    }
    for row in &rows {
        push_rule(&mut rules, row);
    }
    let w = rules.width;
    let mut queries = vec![0u32; n_queries * w];
    for q in 0..n_queries {
        let b = &rows[rng.below(rows.len() as u64) as usize];
        let derived = rng.chance(0.5);
        for c in 0..n {
            let (_, _, _, _, _, card) = MCT[c];
            let random = 1 + (rng.below(card as u64) * rng.below(card as u64) / card as u64) as u32;
            queries[q * w + c] = match b[c] {
                Some((lo, hi)) if derived || c == 2 || c == 3 => lo + rng.below((hi - lo + 1) as u64) as u32,
                _ => random,
            };
        }
    }
    let cards: Vec<usize> = MCT.iter().map(|c| c.5 as usize + 1).collect();
    (rules, queries, cards)
}

#[test]
fn nfa_mct_like_small_exact() {
    let (rules, queries, cards) = mct_like(2000, 3000, 42);
    let n = queries.len() / rules.width;
    let mut want = vec![0u32; n];
    LinearMatcher::new(rules.clone()).match_batch(&queries, &mut want);
    for order in LevelOrder::ALL {
        let m = NfaMatcher::new(&rules, &cards, order);
        for walk in [Walk::DepthFirst, Walk::Frontier] {
            let mut got = vec![0u32; n];
            m.match_batch_with(walk, &queries, &mut got);
            assert_eq!(got, want, "order {order:?} walk {walk:?}");
        }
    }
}

/// Prints structure statistics and single-thread throughput on 20k MCT-like rules.
/// `cargo test -p offload-rules --release --test nfa -- --ignored --nocapture`
#[test]
#[ignore]
fn nfa_mct_like_throughput() {
    let n_rules = std::env::var("NFA_RULES").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let (rules, queries, cards) = mct_like(n_rules, 200_000, 7);
    let n = queries.len() / rules.width;
    let t = Instant::now();
    let mut want = vec![0u32; 20_000];
    LinearMatcher::new(rules.clone()).match_batch(&queries[..20_000 * rules.width], &mut want);
    println!("linear: {:.0} q/s", 20_000.0 / t.elapsed().as_secs_f64());
    for order in LevelOrder::ALL {
        let t = Instant::now();
        let m = NfaMatcher::new(&rules, &cards, order);
        let build = t.elapsed();
        let s = m.stats();
        println!(
            "order {:5} build {:.0} ms: states {} transitions {} (trie: {} / {}), {} bytes, levels {}",
            order.as_str(),
            build.as_secs_f64() * 1e3,
            s["states"],
            s["transitions"],
            s["trie_states"],
            s["trie_transitions"],
            s["memory_bytes"],
            s["level_criteria"],
        );
        for lv in s["levels"].as_array().unwrap() {
            println!(
                "    level {:2} crit {:2} ({:10}) states {:6} trans {:6} wild {:6} | trie states {:6} trans {:6}",
                lv["level"],
                lv["criterion"],
                MCT[lv["criterion"].as_u64().unwrap() as usize].0,
                lv["states"],
                lv["transitions"],
                lv["wildcard_transitions"],
                lv["trie_states"],
                lv["trie_transitions"],
            );
        }
        let p = m.profile(&queries[..20_000 * rules.width]);
        println!(
            "    profile: matched {} / 20000, avg active states total {:.1}, max level avg {:.1}, dfs entered {:.1}",
            p["matched"], p["avg_active_states_total"], p["max_level_avg_active"], p["dfs_avg_states_entered"]
        );
        for walk in [Walk::DepthFirst, Walk::Frontier] {
            let mut got = vec![0u32; n];
            let t = Instant::now();
            m.match_batch_with(walk, &queries, &mut got);
            let qps = n as f64 / t.elapsed().as_secs_f64();
            assert_eq!(got[..20_000], want[..], "order {order:?} walk {walk:?}");
            println!("    walk {walk:?}: {:.2} M q/s", qps / 1e6);
        }
    }
}

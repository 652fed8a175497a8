//! The ERBIUM-style matcher: a levelled NFA with one level per criterion.
//!
//! Construction (as in ERBIUM, with exactness added):
//!
//! 1. **Level order.** One level per criterion, ordered by a heuristic ([`LevelOrder`]): as
//!    given, by dictionary size ascending or descending, or "h2" (mandatory criteria first,
//!    largest dictionary first so the airports lead; range criteria last).
//! 2. **Prefix merge.** The rules are threaded through a trie from the root: at level `l` a
//!    state has one outgoing transition per distinct code interval (value `[k, k]`, wildcard
//!    `[0, MAX]`, range `[a, b]`) of the criterion of that level among the rules passing
//!    through it. Rules are inserted in *winner order* (score descending, input index
//!    ascending); a transition of the last level carries the rank (position in that order) of
//!    the first rule that created it, so rules sharing the full path (identical criteria, hence
//!    identical score) keep the lowest input index.
//! 3. **Suffix merge.** Bottom up, level by level, states with the same sorted outgoing
//!    `(label, merged target)` list are merged (hash-consing). Because results are distinct
//!    rule ranks rather than ERBIUM's contents, fewer states merge than in ERBIUM; the
//!    statistics report how many.
//!
//! Storage: per level, each state's transitions are contiguous in one flat array; a transition
//! is 96 bits, three u32: `lo`, `span = hi - lo` (so the interval test is one wrapping
//! subtraction and one compare) and `target` (a state of the next level, or a rule rank at the
//! last level; the top bit marks targets with more than one incoming transition, the only ones
//! that need de-duplication during a walk).
//!
//! Matching. The answer is the smallest rank among the reached last-level transitions: a rank
//! orders rules by (score desc, index asc), so this is exactly the reference winner whatever
//! the weights, and path-accumulated scores are not needed for the decision. Two walks:
//!
//! * [`Walk::Frontier`]: the FPGA's walk, level by level over the set of active states
//!   (de-duplicated by a per-state stamp).
//! * [`Walk::DepthFirst`] (default): the same automaton walked depth first with ERBIUM's
//!   early-exit idea made exact: every state knows the best (smallest) rank reachable below it,
//!   transitions are sorted by that bound, and a subtree is skipped as soon as its bound cannot
//!   beat the best rank found so far.

use super::{Matcher, NO_MATCH};
use crate::encode::EncodedRules;
use rustc_hash::FxHashMap;
use std::str::FromStr;

/// How the levels (criteria) of the automaton are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LevelOrder {
    /// Criteria in rule-type order.
    AsGiven,
    /// Smallest dictionary first.
    DictAsc,
    /// Largest dictionary first.
    DictDesc,
    /// Mandatory criteria first (largest dictionary first), range criteria last, the other
    /// equality criteria in between by dictionary size descending.
    #[default]
    H2,
}

impl LevelOrder {
    pub const ALL: [LevelOrder; 4] = [LevelOrder::AsGiven, LevelOrder::DictAsc, LevelOrder::DictDesc, LevelOrder::H2];

    pub fn as_str(self) -> &'static str {
        match self {
            LevelOrder::AsGiven => "given",
            LevelOrder::DictAsc => "asc",
            LevelOrder::DictDesc => "desc",
            LevelOrder::H2 => "h2",
        }
    }
}

impl FromStr for LevelOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "given" => Ok(LevelOrder::AsGiven),
            "asc" => Ok(LevelOrder::DictAsc),
            "desc" => Ok(LevelOrder::DictDesc),
            "h2" => Ok(LevelOrder::H2),
            other => Err(format!("unknown level order {other:?}; expected given, asc, desc or h2")),
        }
    }
}

/// How [`NfaMatcher::match_batch`](Matcher::match_batch) walks the automaton.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Walk {
    /// Level by level over the active states, like the FPGA.
    Frontier,
    /// Depth first with exact early exit (best reachable rank per state).
    #[default]
    DepthFirst,
}

/// Top bit of a transition target: the target state has more than one incoming transition.
const SHARED: u32 = 1 << 31;

/// One transition: the code interval `[lo, lo + span]` and its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Trans {
    lo: u32,
    span: u32,
    target: u32,
}

impl Trans {
    #[inline(always)]
    fn hit(&self, v: u32) -> bool {
        v.wrapping_sub(self.lo) <= self.span
    }
}

/// Per-level sizes, before and after suffix merging.
#[derive(Debug, Clone, Default)]
struct LevelStats {
    trie_states: usize,
    trie_transitions: usize,
    wildcard_transitions: usize,
}

pub struct NfaMatcher {
    width: usize,
    order: LevelOrder,
    walk: Walk,
    n_rules: usize,
    /// Criterion tested at each level.
    levels: Vec<u32>,
    /// Global id of the first state of each level, plus the total (len = levels + 1).
    level_start: Vec<u32>,
    /// Offsets of each state's transitions in `trans` (len = states + 1).
    state_trans: Vec<u32>,
    trans: Vec<Trans>,
    /// Smallest rule rank reachable from each state.
    state_best: Vec<u32>,
    /// Rule index of each rank (winner order).
    rank_rule: Vec<u32>,
    cardinalities: Vec<usize>,
    level_stats: Vec<LevelStats>,
}

/// Raw transitions of one state while building: (lo, hi, target).
type RawState = Vec<(u32, u32, u32)>;

fn cardinality_of(rules: &EncodedRules, cardinalities: &[usize], c: usize) -> usize {
    if let Some(&k) = cardinalities.get(c) {
        return k;
    }
    // Not given: count the distinct interval bounds the rules use (an estimate of the
    // dictionary size, good enough for ordering).
    let mut seen: Vec<u32> = Vec::with_capacity(rules.len() * 2);
    for r in 0..rules.len() {
        let i = r * rules.width + c;
        if rules.hi[i] != u32::MAX || rules.lo[i] != 0 {
            seen.push(rules.lo[i]);
            seen.push(rules.hi[i]);
        }
    }
    seen.sort_unstable();
    seen.dedup();
    seen.len() + 1
}

/// The criteria in level order.
fn level_order(rules: &EncodedRules, card: &[usize], order: LevelOrder) -> Vec<u32> {
    let mut lv: Vec<usize> = (0..rules.n_criteria).collect();
    match order {
        LevelOrder::AsGiven => {}
        LevelOrder::DictAsc => lv.sort_by_key(|&c| (card[c], c)),
        LevelOrder::DictDesc => lv.sort_by_key(|&c| (std::cmp::Reverse(card[c]), c)),
        LevelOrder::H2 => lv.sort_by_key(|&c| {
            let group = if rules.is_range[c] {
                2
            } else if rules.mandatory[c] {
                0
            } else {
                1
            };
            (group, std::cmp::Reverse(card[c]), c)
        }),
    }
    lv.into_iter().map(|c| c as u32).collect()
}

impl NfaMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize], order: LevelOrder) -> Self {
        let n = rules.len();
        let w = rules.width;
        let n_levels = rules.n_criteria;
        let card: Vec<usize> = (0..n_levels).map(|c| cardinality_of(rules, cardinalities, c)).collect();
        let levels = level_order(rules, &card, order);

        // Winner order: score descending, input index ascending.
        let mut rank_rule: Vec<u32> = (0..n as u32).collect();
        rank_rule.sort_by(|&a, &b| rules.scores[b as usize].cmp(&rules.scores[a as usize]).then(a.cmp(&b)));

        let mut m = NfaMatcher {
            width: w,
            order,
            walk: Walk::default(),
            n_rules: n,
            levels,
            level_start: vec![0],
            state_trans: vec![0],
            trans: Vec::new(),
            state_best: Vec::new(),
            rank_rule,
            cardinalities: card,
            level_stats: vec![LevelStats::default(); n_levels],
        };
        if n_levels == 0 {
            return m;
        }

        // 1. Prefix merge, level by level: `cur[k]` is the state of the rule of rank k.
        let mut trie: Vec<Vec<RawState>> = Vec::with_capacity(n_levels);
        let mut cur = vec![0u32; n];
        let mut n_states = 1usize;
        for l in 0..n_levels {
            let c = m.levels[l] as usize;
            let last = l + 1 == n_levels;
            let mut states: Vec<RawState> = vec![Vec::new(); n_states];
            let mut edges: FxHashMap<(u32, u32, u32), u32> = FxHashMap::default();
            edges.reserve(n);
            let mut next = 0u32;
            for (k, &r) in m.rank_rule.iter().enumerate() {
                let (lo, hi) = (rules.lo[r as usize * w + c], rules.hi[r as usize * w + c]);
                let s = cur[k];
                let target = *edges.entry((s, lo, hi)).or_insert_with(|| {
                    // At the last level the first (best-ranked) rule on the path keeps it.
                    let t = if last { k as u32 } else { next };
                    next += !last as u32;
                    states[s as usize].push((lo, hi, t));
                    t
                });
                cur[k] = target;
            }
            let st = &mut m.level_stats[l];
            st.trie_states = states.len();
            st.trie_transitions = states.iter().map(Vec::len).sum();
            trie.push(states);
            n_states = next as usize;
        }

        // 2. Suffix merge, bottom up: hash-cons each state's sorted (label, merged target) list.
        let mut merged: Vec<Vec<RawState>> = vec![Vec::new(); n_levels];
        let mut canon_next: Vec<u32> = Vec::new();
        for l in (0..n_levels).rev() {
            let last = l + 1 == n_levels;
            let mut ids: FxHashMap<RawState, u32> = FxHashMap::default();
            let mut canon: Vec<u32> = Vec::with_capacity(trie[l].len());
            let mut uniq: Vec<RawState> = Vec::new();
            for mut st in std::mem::take(&mut trie[l]) {
                if !last {
                    for t in st.iter_mut() {
                        t.2 = canon_next[t.2 as usize];
                    }
                }
                st.sort_unstable();
                let id = *ids.entry(st).or_insert_with_key(|st| {
                    uniq.push(st.clone());
                    (uniq.len() - 1) as u32
                });
                canon.push(id);
            }
            merged[l] = uniq;
            canon_next = canon;
        }

        // 3. Best reachable rank per state, bottom up; sort each state's transitions by it.
        let mut best: Vec<Vec<u32>> = vec![Vec::new(); n_levels];
        for l in (0..n_levels).rev() {
            let last = l + 1 == n_levels;
            let (here, below) = best.split_at_mut(l + 1);
            let bound = |t: &(u32, u32, u32)| if last { t.2 } else { below[0][t.2 as usize] };
            for st in merged[l].iter_mut() {
                st.sort_unstable_by_key(|t| (bound(t), t.0, t.1));
                here[l].push(st.first().map_or(NO_MATCH, bound));
            }
        }

        // 4. Flatten: global state ids, level after level.
        for l in 0..n_levels {
            let base = *m.level_start.last().unwrap();
            m.level_start.push(base + merged[l].len() as u32);
        }
        let total = *m.level_start.last().unwrap() as usize;
        let mut indeg = vec![0u32; total];
        for l in 0..n_levels - 1 {
            let next_base = m.level_start[l + 1];
            for st in &merged[l] {
                for t in st {
                    indeg[(next_base + t.2) as usize] += 1;
                }
            }
        }
        for l in 0..n_levels {
            let last = l + 1 == n_levels;
            let next_base = if last { 0 } else { m.level_start[l + 1] };
            for st in &merged[l] {
                for &(lo, hi, t) in st {
                    let mut target = t;
                    if !last {
                        target += next_base;
                        if indeg[target as usize] > 1 {
                            target |= SHARED;
                        }
                    }
                    if lo == 0 && hi == u32::MAX {
                        m.level_stats[l].wildcard_transitions += 1;
                    }
                    m.trans.push(Trans { lo, span: hi.wrapping_sub(lo), target });
                }
                m.state_trans.push(m.trans.len() as u32);
            }
            m.state_best.extend_from_slice(&best[l]);
        }
        assert!(total < SHARED as usize, "too many NFA states");
        m
    }

    /// Chooses the walk used by `match_batch` (default: [`Walk::DepthFirst`]).
    pub fn with_walk(mut self, walk: Walk) -> Self {
        self.walk = walk;
        self
    }

    pub fn walk(&self) -> Walk {
        self.walk
    }

    pub fn level_order(&self) -> LevelOrder {
        self.order
    }

    /// Criterion tested at each level.
    pub fn levels(&self) -> &[u32] {
        &self.levels
    }

    /// Total states after suffix merging.
    pub fn n_states(&self) -> usize {
        self.state_best.len()
    }

    /// Total transitions after suffix merging.
    pub fn n_transitions(&self) -> usize {
        self.trans.len()
    }

    #[inline(always)]
    fn state_range(&self, s: usize) -> &[Trans] {
        &self.trans[self.state_trans[s] as usize..self.state_trans[s + 1] as usize]
    }

    #[inline]
    fn winner(&self, rank: u32) -> u32 {
        if rank == NO_MATCH {
            NO_MATCH
        } else {
            self.rank_rule[rank as usize]
        }
    }

    /// Depth-first walk from state `s` at level `l`; lowers `best` to the smallest matching
    /// rank below `s`. `visits` counts the states entered when `COUNT`.
    fn dfs<const COUNT: bool>(
        &self,
        s: usize,
        l: usize,
        q: &[u32],
        best: &mut u32,
        seen: &mut [u32],
        epoch: u32,
        visits: &mut u64,
    ) {
        if COUNT {
            *visits += 1;
        }
        let v = q[self.levels[l] as usize];
        let ts = self.state_range(s);
        if l + 2 == self.level_start.len() {
            // Last level: targets are ranks, sorted ascending; the first hit is the best.
            for t in ts {
                if t.target >= *best {
                    break;
                }
                if t.hit(v) {
                    *best = t.target;
                    break;
                }
            }
            return;
        }
        for t in ts {
            if t.hit(v) {
                let c = (t.target & !SHARED) as usize;
                // Transitions are sorted by their target's bound: none after this one can win.
                if self.state_best[c] >= *best {
                    break;
                }
                if t.target & SHARED != 0 {
                    if seen[c] == epoch {
                        continue;
                    }
                    seen[c] = epoch;
                }
                self.dfs::<COUNT>(c, l + 1, q, best, seen, epoch, visits);
            }
        }
    }

    /// Level-by-level walk; returns the best rank. `active[l]` accumulates the number of active
    /// states at level `l` when given.
    fn frontier(
        &self,
        q: &[u32],
        seen: &mut [u32],
        epoch: u32,
        cur: &mut Vec<u32>,
        next: &mut Vec<u32>,
        mut active: Option<&mut [u64]>,
    ) -> u32 {
        let n_levels = self.levels.len();
        cur.clear();
        cur.push(0);
        for l in 0..n_levels - 1 {
            if let Some(a) = active.as_deref_mut() {
                a[l] += cur.len() as u64;
            }
            let v = q[self.levels[l] as usize];
            next.clear();
            for &s in cur.iter() {
                for t in self.state_range(s as usize) {
                    if t.hit(v) {
                        let c = t.target & !SHARED;
                        if t.target & SHARED != 0 {
                            if seen[c as usize] == epoch {
                                continue;
                            }
                            seen[c as usize] = epoch;
                        }
                        next.push(c);
                    }
                }
            }
            std::mem::swap(cur, next);
            if cur.is_empty() {
                return NO_MATCH;
            }
        }
        if let Some(a) = active.as_deref_mut() {
            a[n_levels - 1] += cur.len() as u64;
        }
        let v = q[self.levels[n_levels - 1] as usize];
        let mut best = NO_MATCH;
        for &s in cur.iter() {
            for t in self.state_range(s as usize) {
                if t.target >= best {
                    break;
                }
                if t.hit(v) {
                    best = t.target;
                    break;
                }
            }
        }
        best
    }

    /// Runs `f(query, seen, epoch)` for each query with a fresh stamp epoch.
    fn for_each_query(&self, queries: &[u32], mut f: impl FnMut(usize, &[u32], &mut [u32], u32)) {
        let mut seen = vec![0u32; self.n_states()];
        let mut epoch = 0u32;
        for (i, q) in queries.chunks_exact(self.width).enumerate() {
            if epoch == u32::MAX {
                seen.fill(0);
                epoch = 0;
            }
            epoch += 1;
            f(i, q, &mut seen, epoch);
        }
    }

    /// Answers a batch with the given walk (whatever [`Self::walk`] is).
    pub fn match_batch_with(&self, walk: Walk, queries: &[u32], out: &mut [u32]) {
        assert_eq!(queries.len(), out.len() * self.width, "query batch size mismatch");
        if self.levels.is_empty() {
            // No criteria: every rule matches every query.
            out.fill(self.winner(if self.n_rules > 0 { 0 } else { NO_MATCH }));
            return;
        }
        if self.n_rules == 0 {
            out.fill(NO_MATCH);
            return;
        }
        match walk {
            Walk::DepthFirst => self.for_each_query(queries, |i, q, seen, epoch| {
                let mut best = NO_MATCH;
                self.dfs::<false>(0, 0, q, &mut best, seen, epoch, &mut 0);
                out[i] = self.winner(best);
            }),
            Walk::Frontier => {
                let (mut cur, mut next) = (Vec::new(), Vec::new());
                self.for_each_query(queries, |i, q, seen, epoch| {
                    let best = self.frontier(q, seen, epoch, &mut cur, &mut next, None);
                    out[i] = self.winner(best);
                })
            }
        }
    }

    /// Walk profile over a batch: average active states per level of the frontier walk (the
    /// FPGA's parallelism), and average states entered by the depth-first walk.
    pub fn profile(&self, queries: &[u32]) -> serde_json::Value {
        let nq = queries.len() / self.width.max(1);
        let n_levels = self.levels.len();
        let mut active = vec![0u64; n_levels];
        let mut visits = 0u64;
        let mut matched = 0u64;
        if n_levels > 0 && self.n_rules > 0 {
            let (mut cur, mut next) = (Vec::new(), Vec::new());
            self.for_each_query(queries, |_, q, seen, epoch| {
                let best = self.frontier(q, seen, epoch, &mut cur, &mut next, Some(&mut active));
                matched += (best != NO_MATCH) as u64;
            });
            self.for_each_query(queries, |_, q, seen, epoch| {
                let mut best = NO_MATCH;
                self.dfs::<true>(0, 0, q, &mut best, seen, epoch, &mut visits);
            });
        }
        let div = nq.max(1) as f64;
        let per_level: Vec<serde_json::Value> = (0..n_levels)
            .map(|l| {
                serde_json::json!({
                    "level": l,
                    "criterion": self.levels[l],
                    "avg_active_states": active[l] as f64 / div,
                })
            })
            .collect();
        serde_json::json!({
            "queries": nq,
            "matched": matched,
            "levels": per_level,
            "avg_active_states_total": active.iter().sum::<u64>() as f64 / div,
            "max_level_avg_active": active.iter().map(|&a| a as f64 / div).fold(0.0, f64::max),
            "dfs_avg_states_entered": visits as f64 / div,
        })
    }
}

impl Matcher for NfaMatcher {
    fn name(&self) -> &'static str {
        "nfa"
    }
    fn width(&self) -> usize {
        self.width
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        self.match_batch_with(self.walk, queries, out)
    }
    fn memory_bytes(&self) -> usize {
        self.trans.len() * std::mem::size_of::<Trans>()
            + (self.state_trans.len() + self.state_best.len() + self.rank_rule.len()) * 4
            + (self.levels.len() + self.level_start.len()) * 4
    }
    fn stats(&self) -> serde_json::Value {
        let n_levels = self.levels.len();
        let levels: Vec<serde_json::Value> = (0..n_levels)
            .map(|l| {
                let (a, b) = (self.level_start[l] as usize, self.level_start[l + 1] as usize);
                let transitions = (self.state_trans[b] - self.state_trans[a]) as usize;
                let c = self.levels[l] as usize;
                let st = &self.level_stats[l];
                serde_json::json!({
                    "level": l,
                    "criterion": c,
                    "cardinality": self.cardinalities[c],
                    "states": b - a,
                    "transitions": transitions,
                    "wildcard_transitions": st.wildcard_transitions,
                    "trie_states": st.trie_states,
                    "trie_transitions": st.trie_transitions,
                })
            })
            .collect();
        let trie_states: usize = self.level_stats.iter().map(|s| s.trie_states).sum();
        let trie_transitions: usize = self.level_stats.iter().map(|s| s.trie_transitions).sum();
        serde_json::json!({
            "rules": self.n_rules,
            "order": self.order.as_str(),
            "walk": match self.walk { Walk::Frontier => "frontier", Walk::DepthFirst => "depth_first" },
            "level_criteria": self.levels,
            "levels": levels,
            "states": self.n_states(),
            "transitions": self.n_transitions(),
            "wildcard_transitions": self.level_stats.iter().map(|s| s.wildcard_transitions).sum::<usize>(),
            "trie_states": trie_states,
            "trie_transitions": trie_transitions,
            "suffix_merged_states": trie_states - self.n_states(),
            "transitions_per_rule": self.n_transitions() as f64 / self.n_rules.max(1) as f64,
            "transition_bits": 8 * std::mem::size_of::<Trans>(),
            "memory_bytes": self.memory_bytes(),
        })
    }
}

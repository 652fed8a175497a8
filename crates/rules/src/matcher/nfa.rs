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
//!    `(label, merged target)` list are merged (hash-consing). ERBIUM's results are contents
//!    (a few distinct connecting times), so many suffixes coincide. Ours are rule ranks, which
//!    exactness requires, and then nothing merges: each surviving rank labels exactly one
//!    last-level transition, so distinct states reach disjoint, non-empty rank sets and are
//!    never equivalent. The pass is kept (it is what ERBIUM does, and it stays correct if
//!    results ever become coarser); `stats()` reports the trie and merged sizes side by side.
//!
//! Storage: one flat array of 128-bit entries, level after level; each state is a contiguous
//! block, a header (number of scanned / all transitions, best rank below) followed by its
//! transitions `lo`, `span = hi - lo` (so the interval test is one wrapping subtraction and one
//! compare), `target` (the header index of the next-level state, or a rule rank at the last
//! level; the top bit marks targets with several incoming transitions, the only ones a walk
//! must de-duplicate) and `bound` (the best rank reachable through the transition). ERBIUM
//! packs 64 bits; the extra target/bound width lets a walk follow a transition with one memory
//! access per level and prune without a look-up. States with many single-value labels keep
//! those sorted for a binary search; ranges and wildcards are scanned (the FPGA tests them all
//! in parallel).
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

/// One 128-bit entry of the transition array. A state is a block of entries: a header
/// (`lo` = number of scanned transitions, `span` = number of transitions, `bound` = best rank
/// below the state) followed by its transitions: the code interval `[lo, lo + span]`, `target`
/// (the header index of a next-level state, or a rule rank at the last level) and `bound` (the
/// best rank reachable through the transition, so pruning needs no look-up). The scanned
/// transitions (ranges, wildcards, and all labels of small states) come first, sorted by bound;
/// in large states the single-value labels `[k, k]` follow, sorted by `k` for binary search.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C, align(16))]
struct Trans {
    lo: u32,
    span: u32,
    target: u32,
    bound: u32,
}

impl Trans {
    #[inline(always)]
    fn hit(&self, v: u32) -> bool {
        v.wrapping_sub(self.lo) <= self.span
    }
}

/// States with more single-value labels than this get the binary-searched part.
const POINT_INDEX_MIN: usize = 8;

/// Per-level sizes, before and after suffix merging.
#[derive(Debug, Clone, Default)]
struct LevelStats {
    trie_states: usize,
    trie_transitions: usize,
    wildcard_transitions: usize,
    value_transitions: usize,
    indexed_states: usize,
}

pub struct NfaMatcher {
    width: usize,
    order: LevelOrder,
    walk: Walk,
    n_rules: usize,
    /// Criterion tested at each level.
    levels: Vec<u32>,
    /// Index in `trans` of the first state header of each level, plus the total length.
    level_start: Vec<u32>,
    /// Number of states of each level.
    level_states: Vec<u32>,
    /// All levels' state blocks, level after level; the root's header is entry 0.
    trans: Vec<Trans>,
    /// Whether suffix merging left any state with several incoming transitions.
    has_shared: bool,
    /// Rule index of each rank (winner order).
    rank_rule: Vec<u32>,
    cardinalities: Vec<usize>,
    level_stats: Vec<LevelStats>,
}

/// State of one depth-first query walk.
struct Walker<'a> {
    q: &'a [u32],
    /// Best (smallest) rank found so far.
    best: u32,
    /// Per state: the epoch of the last query that entered it (shared states only).
    seen: &'a mut [u32],
    epoch: u32,
    /// States entered (profiling).
    visits: u64,
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

/// Step 1 of construction, the prefix merge: threads the rules, in winner order (`rank_rule`),
/// through a trie level by level; returns each level's states and records its trie sizes in
/// `level_stats`. At the last level a transition's target is the rank of its first rule.
fn prefix_merge(
    rules: &EncodedRules,
    levels: &[u32],
    rank_rule: &[u32],
    level_stats: &mut [LevelStats],
) -> Vec<Vec<RawState>> {
    let n = rules.len();
    let w = rules.width;
    let n_levels = levels.len();
    let mut trie: Vec<Vec<RawState>> = Vec::with_capacity(n_levels);
    // `cur[k]` is the state of the rule of rank k.
    let mut cur = vec![0u32; n];
    let mut n_states = 1usize;
    for l in 0..n_levels {
        let c = levels[l] as usize;
        let last = l + 1 == n_levels;
        let mut states: Vec<RawState> = vec![Vec::new(); n_states];
        let mut edges: FxHashMap<(u32, u32, u32), u32> = FxHashMap::default();
        edges.reserve(n);
        let mut next = 0u32;
        for (k, &r) in rank_rule.iter().enumerate() {
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
        let st = &mut level_stats[l];
        st.trie_states = states.len();
        st.trie_transitions = states.iter().map(Vec::len).sum();
        trie.push(states);
        n_states = next as usize;
    }
    trie
}

/// Step 2 of construction, the suffix merge: bottom up, hash-conses each state's sorted
/// (label, merged target) list; returns each level's distinct states.
fn suffix_merge(mut trie: Vec<Vec<RawState>>) -> Vec<Vec<RawState>> {
    let n_levels = trie.len();
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
    merged
}

/// Step 3 of construction: the best reachable rank per state, bottom up, and each state's
/// transitions ordered: the scanned part by bound (best first), the single-value part (large
/// states) by value. Returns (best rank, number of scanned transitions) per state per level.
fn order_transitions(merged: &mut [Vec<RawState>]) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let n_levels = merged.len();
    let mut best: Vec<Vec<u32>> = vec![Vec::new(); n_levels];
    let mut n_scan: Vec<Vec<u32>> = vec![Vec::new(); n_levels];
    for l in (0..n_levels).rev() {
        let last = l + 1 == n_levels;
        let (here, below) = best.split_at_mut(l + 1);
        let bound = |t: &(u32, u32, u32)| if last { t.2 } else { below[0][t.2 as usize] };
        for st in merged[l].iter_mut() {
            here[l].push(st.iter().map(bound).min().unwrap_or(NO_MATCH));
            let points = st.iter().filter(|t| t.0 == t.1).count();
            if points > POINT_INDEX_MIN {
                st.sort_unstable_by_key(|t| if t.0 == t.1 { (1, t.0, 0) } else { (0, bound(t), t.0) });
                n_scan[l].push((st.len() - points) as u32);
            } else {
                st.sort_unstable_by_key(|t| (bound(t), t.0, t.1));
                n_scan[l].push(st.len() as u32);
            }
        }
    }
    (best, n_scan)
}

impl NfaMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize], order: LevelOrder) -> Self {
        let n = rules.len();
        let n_levels = rules.n_criteria;
        let card: Vec<usize> = (0..n_levels).map(|c| cardinality_of(rules, cardinalities, c)).collect();
        let levels = level_order(rules, &card, order);

        // Winner order: score descending, input index ascending.
        let mut rank_rule: Vec<u32> = (0..n as u32).collect();
        rank_rule.sort_by(|&a, &b| rules.scores[b as usize].cmp(&rules.scores[a as usize]).then(a.cmp(&b)));

        let mut m = NfaMatcher {
            width: rules.width,
            order,
            walk: Walk::default(),
            n_rules: n,
            levels,
            level_start: Vec::new(),
            level_states: Vec::new(),
            trans: Vec::new(),
            has_shared: false,
            rank_rule,
            cardinalities: card,
            level_stats: vec![LevelStats::default(); n_levels],
        };
        if n_levels == 0 {
            return m;
        }
        let trie = prefix_merge(rules, &m.levels, &m.rank_rule, &mut m.level_stats);
        let mut merged = suffix_merge(trie);
        let (best, n_scan) = order_transitions(&mut merged);
        m.flatten(&merged, &best, &n_scan);
        m
    }

    /// Step 4 of construction: lays the merged, ordered states out in `trans`, level after
    /// level, each state a header followed by its transitions.
    fn flatten(&mut self, merged: &[Vec<RawState>], best: &[Vec<u32>], n_scan: &[Vec<u32>]) {
        let n_levels = merged.len();
        let mut offsets: Vec<Vec<u32>> = Vec::with_capacity(n_levels);
        let mut pos = 0usize;
        for st_l in merged {
            self.level_start.push(pos as u32);
            self.level_states.push(st_l.len() as u32);
            let mut o = Vec::with_capacity(st_l.len());
            for st in st_l {
                o.push(pos as u32);
                pos += 1 + st.len();
            }
            offsets.push(o);
        }
        self.level_start.push(pos as u32);
        assert!(pos < SHARED as usize, "NFA too large");
        let mut indeg = vec![0u32; pos];
        for l in 0..n_levels - 1 {
            for st in &merged[l] {
                for t in st {
                    indeg[offsets[l + 1][t.2 as usize] as usize] += 1;
                }
            }
        }
        self.trans.reserve_exact(pos);
        for l in 0..n_levels {
            let last = l + 1 == n_levels;
            for (i, st) in merged[l].iter().enumerate() {
                self.trans.push(Trans { lo: n_scan[l][i], span: st.len() as u32, target: 0, bound: best[l][i] });
                for &(lo, hi, t) in st {
                    let (mut target, bound) =
                        if last { (t, t) } else { (offsets[l + 1][t as usize], best[l + 1][t as usize]) };
                    if !last && indeg[target as usize] > 1 {
                        target |= SHARED;
                        self.has_shared = true;
                    }
                    let ls = &mut self.level_stats[l];
                    ls.wildcard_transitions += (lo == 0 && hi == u32::MAX) as usize;
                    ls.value_transitions += (lo == hi) as usize;
                    self.trans.push(Trans { lo, span: hi.wrapping_sub(lo), target, bound });
                }
                self.level_stats[l].indexed_states += (n_scan[l][i] < st.len() as u32) as usize;
            }
        }
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
        self.level_states.iter().map(|&k| k as usize).sum()
    }

    /// Total transitions after suffix merging.
    pub fn n_transitions(&self) -> usize {
        self.trans.len() - self.n_states()
    }

    /// The scanned transitions of the state with header `s`, and its single-value transition
    /// for code `v`.
    #[inline(always)]
    fn parts(&self, s: usize, v: u32) -> (&[Trans], Option<&Trans>) {
        let h = self.trans[s];
        let (mid, end) = (s + 1 + h.lo as usize, s + 1 + h.span as usize);
        let scan = &self.trans[s + 1..mid];
        if mid == end {
            return (scan, None);
        }
        let points = &self.trans[mid..end];
        let i = points.partition_point(|t| t.lo < v);
        (scan, points.get(i).filter(|t| t.lo == v))
    }

    #[inline]
    fn winner(&self, rank: u32) -> u32 {
        if rank == NO_MATCH {
            NO_MATCH
        } else {
            self.rank_rule[rank as usize]
        }
    }

    /// Best matching rank among the last-level transitions of state `s` (below `best`).
    #[inline(always)]
    fn last_level(&self, s: usize, v: u32, best: u32) -> u32 {
        let (scan, point) = self.parts(s, v);
        let mut b = best;
        if let Some(p) = point {
            b = b.min(p.target);
        }
        // Sorted by rank: the first hit is the best of the scanned part.
        for t in scan {
            if t.target >= b {
                break;
            }
            if t.hit(v) {
                b = t.target;
                break;
            }
        }
        b
    }

    /// Follows inner transition `t` (bound `bt`) from level `l` unless it cannot win.
    #[inline(always)]
    fn enter<const COUNT: bool>(&self, t: &Trans, bt: u32, l: usize, w: &mut Walker<'_>) {
        if bt >= w.best {
            return;
        }
        let c = (t.target & !SHARED) as usize;
        if t.target & SHARED != 0 {
            if w.seen[c] == w.epoch {
                return;
            }
            w.seen[c] = w.epoch;
        }
        self.dfs::<COUNT>(c, l + 1, w);
    }

    /// Depth-first walk from state `s` at level `l`: lowers `w.best` to the smallest matching
    /// rank below `s`, visiting children best bound first and skipping those that cannot win.
    fn dfs<const COUNT: bool>(&self, s: usize, l: usize, w: &mut Walker<'_>) {
        if COUNT {
            w.visits += 1;
        }
        let v = w.q[self.levels[l] as usize];
        if l + 1 == self.levels.len() {
            w.best = self.last_level(s, v, w.best);
            return;
        }
        let (scan, point) = self.parts(s, v);
        let mut point = point.map(|p| (p, p.bound));
        for t in scan {
            if !t.hit(v) {
                continue;
            }
            let bt = t.bound;
            if let Some((p, bp)) = point {
                if bp <= bt {
                    point = None;
                    self.enter::<COUNT>(p, bp, l, w);
                }
            }
            // Sorted by bound: no later scanned transition can win either.
            if bt >= w.best {
                break;
            }
            self.enter::<COUNT>(t, bt, l, w);
        }
        if let Some((p, bp)) = point {
            self.enter::<COUNT>(p, bp, l, w);
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
                let (scan, point) = self.parts(s as usize, v);
                for t in scan.iter().chain(point) {
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
        if let Some(a) = active {
            a[n_levels - 1] += cur.len() as u64;
        }
        let v = q[self.levels[n_levels - 1] as usize];
        cur.iter().fold(NO_MATCH, |b, &s| self.last_level(s as usize, v, b))
    }

    /// Runs `f(query, seen, epoch)` for each query with a fresh stamp epoch.
    fn for_each_query(&self, queries: &[u32], mut f: impl FnMut(usize, &[u32], &mut [u32], u32)) {
        // Stamps are only needed for states with several incoming transitions.
        let mut seen = vec![0u32; if self.has_shared { self.trans.len() } else { 0 }];
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
                let mut w = Walker { q, best: NO_MATCH, seen, epoch, visits: 0 };
                self.dfs::<false>(0, 0, &mut w);
                out[i] = self.winner(w.best);
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
                let mut w = Walker { q, best: NO_MATCH, seen, epoch, visits: 0 };
                self.dfs::<true>(0, 0, &mut w);
                visits += w.visits;
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
            + self.rank_rule.len() * 4
            + (self.levels.len() + self.level_start.len() + self.level_states.len()) * 4
    }
    fn stats(&self) -> serde_json::Value {
        let n_levels = self.levels.len();
        let levels: Vec<serde_json::Value> = (0..n_levels)
            .map(|l| {
                let states = self.level_states[l] as usize;
                let transitions = (self.level_start[l + 1] - self.level_start[l]) as usize - states;
                let c = self.levels[l] as usize;
                let st = &self.level_stats[l];
                serde_json::json!({
                    "level": l,
                    "criterion": c,
                    "cardinality": self.cardinalities[c],
                    "states": states,
                    "transitions": transitions,
                    "wildcard_transitions": st.wildcard_transitions,
                    "value_transitions": st.value_transitions,
                    "indexed_states": st.indexed_states,
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

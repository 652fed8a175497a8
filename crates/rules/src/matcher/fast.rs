//! The fast matcher: a decision tree over equality criteria with sorted leaves.
//!
//! Idea. Sort the rules once by (score descending, input order ascending): then the *first*
//! matching rule in that order is the winner, so a scan can stop at its first hit. A scan over
//! all rules is still too long, so a tree narrows the candidates first: an inner node splits on
//! one equality criterion; the child for value `v` keeps the rules whose value is `v` *or* a
//! wildcard (wildcard rules are copied into every child and into the default child, which
//! serves values no rule of the node names). Every rule that can match a query reaching a leaf
//! is in that leaf, still in winner order, so the leaf scan with early exit is exact for any
//! non-negative weights and ties. Range criteria are never split on; the leaf row test checks
//! them, with every other criterion, in a few vector compares.
//!
//! The split criterion at each node is the one that minimises the expected leaf size (a query
//! drawn like the node's rules lands in a child of size n_v + w), subject to a bound on copies.

use super::{Matcher, NO_MATCH};
use crate::encode::{row_matches, EncodedRules};
use rustc_hash::FxHashMap;

/// Nodes with at most this many rules become leaves.
const LEAF_SIZE: usize = 4;
/// A split must shrink the expected candidate list to this fraction of the node's size.
const MIN_GAIN: f64 = 0.85;
/// Leaf entries (rule copies) allowed per rule before the tree stops splitting.
const COPY_BUDGET_PER_RULE: usize = 12;

#[derive(Debug, Clone, Copy)]
enum Node {
    /// Candidates `start..start + len` of the leaf arrays, in winner order.
    Leaf { start: u32, len: u32 },
    /// `child_tab[start + code]` for `code < len`, else `default`.
    Dense { crit: u32, start: u32, len: u32, default: u32 },
    /// Sorted `keys[start..start + len]`, children in `child_tab` at the same offsets.
    Sparse { crit: u32, start: u32, len: u32, default: u32 },
}

pub struct FastMatcher {
    width: usize,
    nodes: Vec<Node>,
    child_tab: Vec<u32>,
    keys: Vec<u32>,
    leaf_rule: Vec<u32>,
    leaf_lo: Vec<u32>,
    leaf_hi: Vec<u32>,
    depth_max: usize,
    n_rules: usize,
}

struct Builder<'a> {
    rules: &'a EncodedRules,
    cardinalities: &'a [usize],
    m: FastMatcher,
    budget: usize,
}

impl<'a> Builder<'a> {
    fn code(&self, r: u32, c: usize) -> u32 {
        let i = r as usize * self.rules.width + c;
        // Equality cells are [code, code] or the wildcard [0, MAX].
        if self.rules.hi[i] == u32::MAX {
            0
        } else {
            self.rules.lo[i]
        }
    }

    fn leaf(&mut self, set: &[u32]) -> u32 {
        let w = self.rules.width;
        let start = self.m.leaf_rule.len() as u32;
        for &r in set {
            self.m.leaf_rule.push(r);
            self.m.leaf_lo.extend_from_slice(self.rules.lo_row(r as usize));
            self.m.leaf_hi.extend_from_slice(self.rules.hi_row(r as usize));
        }
        debug_assert_eq!(self.m.leaf_lo.len(), self.m.leaf_rule.len() * w);
        self.m.nodes.push(Node::Leaf { start, len: set.len() as u32 });
        (self.m.nodes.len() - 1) as u32
    }

    /// Picks the split criterion for `set`: (criterion, expected child size, total copies).
    fn best_split(&self, set: &[u32], used: &[bool]) -> Option<(usize, f64, usize)> {
        let n = set.len();
        let mut best: Option<(usize, f64, usize)> = None;
        let mut counts: FxHashMap<u32, u32> = FxHashMap::default();
        for c in 0..self.rules.n_criteria {
            if used[c] || self.rules.is_range[c] {
                continue;
            }
            counts.clear();
            let mut wild = 0usize;
            for &r in set {
                match self.code(r, c) {
                    0 => wild += 1,
                    v => *counts.entry(v).or_insert(0) += 1,
                }
            }
            if counts.is_empty() {
                continue;
            }
            let spec: f64 = counts.values().map(|&k| k as f64 * (k as f64 + wild as f64)).sum();
            let cost = (spec + (wild * wild) as f64) / n as f64;
            let copies = (n - wild) + wild * (counts.len() + 1);
            if best.is_none_or(|(_, bc, _)| cost < bc) {
                best = Some((c, cost, copies));
            }
        }
        best
    }

    fn build(&mut self, set: &[u32], used: &mut Vec<bool>, depth: usize) -> u32 {
        self.m.depth_max = self.m.depth_max.max(depth);
        if set.len() <= LEAF_SIZE {
            return self.leaf(set);
        }
        let Some((c, cost, copies)) = self.best_split(set, used) else {
            return self.leaf(set);
        };
        let extra = copies - set.len();
        if cost > MIN_GAIN * set.len() as f64 || extra > self.budget {
            return self.leaf(set);
        }
        self.budget -= extra;
        // Distribute in one pass; wildcard rules go to every child, preserving winner order.
        let mut keys: Vec<u32> = Vec::new();
        let mut slot: FxHashMap<u32, usize> = FxHashMap::default();
        for &r in set {
            let v = self.code(r, c);
            if v != 0 && !slot.contains_key(&v) {
                slot.insert(v, keys.len());
                keys.push(v);
            }
        }
        let mut parts: Vec<Vec<u32>> = vec![Vec::new(); keys.len()];
        let mut default: Vec<u32> = Vec::new();
        for &r in set {
            match self.code(r, c) {
                0 => {
                    for p in parts.iter_mut() {
                        p.push(r);
                    }
                    default.push(r);
                }
                v => parts[slot[&v]].push(r),
            }
        }
        used[c] = true;
        let default_id = self.build(&default, used, depth + 1);
        let mut kids: Vec<(u32, u32)> = Vec::with_capacity(keys.len());
        for (k, p) in keys.iter().zip(parts.iter()) {
            kids.push((*k, self.build(p, used, depth + 1)));
        }
        used[c] = false;
        kids.sort_unstable_by_key(|&(k, _)| k);
        let card = self.cardinalities[c];
        let start = self.m.child_tab.len() as u32;
        // Dense tables cost one u32 per distinct code of the criterion: use them when that is
        // at most a few times the number of children (or small anyway).
        let node = if card <= 64 || card <= 8 * kids.len() {
            self.m.child_tab.resize(self.m.child_tab.len() + card, default_id);
            for &(k, id) in &kids {
                self.m.child_tab[start as usize + k as usize] = id;
            }
            self.m.keys.resize(self.m.child_tab.len(), 0);
            Node::Dense { crit: c as u32, start, len: card as u32, default: default_id }
        } else {
            for &(k, id) in &kids {
                self.m.keys.push(k);
                self.m.child_tab.push(id);
            }
            Node::Sparse { crit: c as u32, start, len: kids.len() as u32, default: default_id }
        };
        self.m.nodes.push(node);
        (self.m.nodes.len() - 1) as u32
    }
}

impl FastMatcher {
    pub fn new(rules: &EncodedRules, cardinalities: &[usize]) -> Self {
        let mut order: Vec<u32> = (0..rules.len() as u32).collect();
        order.sort_by(|&a, &b| rules.scores[b as usize].cmp(&rules.scores[a as usize]).then(a.cmp(&b)));
        let mut b = Builder {
            rules,
            cardinalities,
            m: FastMatcher {
                width: rules.width,
                nodes: Vec::new(),
                child_tab: Vec::new(),
                keys: Vec::new(),
                leaf_rule: Vec::new(),
                leaf_lo: Vec::new(),
                leaf_hi: Vec::new(),
                depth_max: 0,
                n_rules: rules.len(),
            },
            budget: COPY_BUDGET_PER_RULE * rules.len().max(1),
        };
        let mut used = vec![false; rules.n_criteria];
        let root = b.build(&order, &mut used, 0);
        // The root is built last; move it to index 0 so the search starts there.
        let mut m = b.m;
        debug_assert_eq!(root as usize, m.nodes.len() - 1);
        m.nodes.rotate_right(1);
        let fix = |id: u32| if id == root { 0 } else { id + 1 };
        for n in m.nodes.iter_mut() {
            match n {
                Node::Leaf { .. } => {}
                Node::Dense { default, .. } | Node::Sparse { default, .. } => *default = fix(*default),
            }
        }
        for id in m.child_tab.iter_mut() {
            *id = fix(*id);
        }
        m
    }

    #[inline]
    fn match_one(&self, q: &[u32]) -> u32 {
        let mut id = 0usize;
        loop {
            match self.nodes[id] {
                Node::Leaf { start, len } => {
                    let w = self.width;
                    for i in start as usize..(start + len) as usize {
                        let lo = &self.leaf_lo[i * w..(i + 1) * w];
                        let hi = &self.leaf_hi[i * w..(i + 1) * w];
                        if row_matches(lo, hi, q) {
                            return self.leaf_rule[i];
                        }
                    }
                    return NO_MATCH;
                }
                Node::Dense { crit, start, len, default } => {
                    let v = q[crit as usize];
                    id = if v < len { self.child_tab[(start + v) as usize] } else { default } as usize;
                }
                Node::Sparse { crit, start, len, default } => {
                    let v = q[crit as usize];
                    let keys = &self.keys[start as usize..(start + len) as usize];
                    id = match keys.binary_search(&v) {
                        Ok(i) => self.child_tab[start as usize + i],
                        Err(_) => default,
                    } as usize;
                }
            }
        }
    }
}

impl Matcher for FastMatcher {
    fn name(&self) -> &'static str {
        "fast"
    }
    fn width(&self) -> usize {
        self.width
    }
    fn match_batch(&self, queries: &[u32], out: &mut [u32]) {
        for (q, o) in queries.chunks_exact(self.width).zip(out.iter_mut()) {
            *o = self.match_one(q);
        }
    }
    fn memory_bytes(&self) -> usize {
        self.nodes.len() * std::mem::size_of::<Node>()
            + (self.child_tab.len() + self.keys.len() + self.leaf_rule.len()) * 4
            + (self.leaf_lo.len() + self.leaf_hi.len()) * 4
    }
    fn stats(&self) -> serde_json::Value {
        let leaves: Vec<u32> = self
            .nodes
            .iter()
            .filter_map(|n| match n {
                Node::Leaf { len, .. } => Some(*len),
                _ => None,
            })
            .collect();
        let max_leaf = leaves.iter().copied().max().unwrap_or(0);
        serde_json::json!({
            "rules": self.n_rules,
            "nodes": self.nodes.len(),
            "leaves": leaves.len(),
            "leaf_entries": self.leaf_rule.len(),
            "copies_per_rule": self.leaf_rule.len() as f64 / self.n_rules.max(1) as f64,
            "max_leaf": max_leaf,
            "depth_max": self.depth_max,
        })
    }
}

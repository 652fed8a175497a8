//! Gradient-boosted regression trees (scikit-learn's, fitted in Python) evaluated together.
//!
//! Python flattens every tree of every regressor into one node array (tree `i` at
//! `roots[i]`; a leaf's children are itself, its threshold +inf) and hands it over once;
//! [`Forest::raw`] then walks each tree from its root for the rows given and sums each
//! regressor's leaves. A node's `slot` says which value of the rows it compares (flattened:
//! `row * features + feature`), so one call serves regressors that read different rows (a
//! query's features, its scan's). Values compare as `f32`, as scikit-learn's trees do.

/// The trees of several regressors, flattened (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Forest {
    /// The nodes, each one's fields together: a walk's step reads one cache line, not five
    /// arrays' (a decision walks ~2,000 trees, mostly out of cache after the query before).
    nodes: Vec<Node>,
    roots: Vec<usize>,
    starts: Vec<usize>,
    rate: Vec<f64>,
    depth: usize,
    /// The values a row set must hold at least: one past the largest slot.
    width: usize,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    threshold: f64,
    value: f64,
    slot: usize,
    left: usize,
    right: usize,
}

/// The node arrays of a [`Forest`]: per node its slot, threshold, children and leaf value.
pub struct Nodes {
    pub slot: Vec<usize>,
    pub threshold: Vec<f64>,
    pub left: Vec<usize>,
    pub right: Vec<usize>,
    pub value: Vec<f64>,
}

impl Forest {
    /// `roots`: each tree's root node; `starts`: each regressor's first tree (ascending, the
    /// first 0: a regressor's trees are consecutive); `rate`: each regressor's learning rate;
    /// `depth`: the deepest tree's depth (a walk takes at most that many steps).
    pub fn new(
        nodes: Nodes,
        roots: Vec<usize>,
        starts: Vec<usize>,
        rate: Vec<f64>,
        depth: usize,
    ) -> Result<Forest, String> {
        let Nodes { slot, threshold, left, right, value } = nodes;
        let n = slot.len();
        if [threshold.len(), left.len(), right.len(), value.len()].iter().any(|&m| m != n) {
            return Err(format!("node arrays of different lengths (slot has {n})"));
        }
        if let Some(bad) = left.iter().chain(&right).chain(&roots).find(|&&c| c >= n) {
            return Err(format!("node {bad} is outside the forest's {n} nodes"));
        }
        if starts.len() != rate.len() || starts.first().is_some_and(|&s| s != 0) {
            return Err(format!("{} regressors' starts, the first not 0, or {} rates", starts.len(), rate.len()));
        }
        if starts.windows(2).any(|w| w[0] > w[1]) || starts.last().is_some_and(|&s| s > roots.len()) {
            return Err(format!("regressors' starts {starts:?} are not ascending within {} trees", roots.len()));
        }
        let width = slot.iter().max().map_or(0, |&m| m + 1);
        let nodes = (0..n)
            .map(|i| Node { threshold: threshold[i], value: value[i], slot: slot[i], left: left[i], right: right[i] })
            .collect();
        Ok(Forest { nodes, roots, starts, rate, depth, width })
    }

    /// Regressors in the forest.
    pub fn regressors(&self) -> usize {
        self.starts.len()
    }

    /// Each regressor's learning-rate-weighted sum of its trees' leaves for the rows `x`
    /// (flattened), which must hold every value a node compares.
    pub fn raw(&self, x: &[f64]) -> Result<Vec<f64>, String> {
        if x.len() < self.width {
            return Err(format!("{} values given, the trees compare up to the {}th", x.len(), self.width));
        }
        let x32: Vec<f64> = x.iter().map(|&v| f64::from(v as f32)).collect();
        let mut out = vec![0.0; self.starts.len()];
        for (j, sum) in out.iter_mut().enumerate() {
            let end = self.starts.get(j + 1).copied().unwrap_or(self.roots.len());
            let leaves: f64 = self.roots[self.starts[j]..end].iter().map(|&root| self.leaf(root, &x32).value).sum();
            *sum = leaves * self.rate[j];
        }
        Ok(out)
    }

    /// The leaf the tree at `root` reaches for `x` (NaN goes right, as in numpy's `<=`).
    fn leaf(&self, root: usize, x: &[f64]) -> &Node {
        let mut node = &self.nodes[root];
        for _ in 0..self.depth {
            if node.left == node.right {
                break; // a leaf: its children are itself (an inner node's differ)
            }
            node = &self.nodes[if x[node.slot] <= node.threshold { node.left } else { node.right }];
        }
        node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A complete tree of depth `d` over `features` values, random splits, at `at`.
    fn tree(at: usize, d: u32, features: usize, seed: &[f64]) -> Nodes {
        let n = (1usize << (d + 1)) - 1;
        let mut t = Nodes {
            slot: vec![0; n],
            threshold: vec![f64::INFINITY; n],
            left: vec![0; n],
            right: vec![0; n],
            value: vec![0.0; n],
        };
        for i in 0..n {
            let r = seed[i % seed.len()];
            if 2 * i + 2 < n {
                t.slot[i] = (i * 7 + (r.abs() * 10.0) as usize) % features;
                t.threshold[i] = r;
                t.left[i] = at + 2 * i + 1;
                t.right[i] = at + 2 * i + 2;
            } else {
                t.left[i] = at + i;
                t.right[i] = at + i;
                t.value[i] = r * 3.0;
            }
        }
        t
    }

    /// The plain reference: each tree walked by recursion over its own arrays.
    fn reference(trees: &[Nodes], owners: &[usize], rate: &[f64], x: &[f64], sizes: &[usize]) -> Vec<f64> {
        let mut out = vec![0.0; rate.len()];
        let mut at = 0;
        for (t, (&j, &size)) in trees.iter().zip(owners.iter().zip(sizes)) {
            let mut i = 0;
            while t.left[i] != at + i {
                i = if f64::from(x[t.slot[i]] as f32) <= t.threshold[i] { t.left[i] - at } else { t.right[i] - at };
            }
            out[j] += t.value[i] * rate[j];
            at += size;
        }
        out
    }

    proptest! {
        #[test]
        fn raw_equals_walking_each_tree(
            depths in proptest::collection::vec(0u32..5, 1..8),
            regressors in 1usize..4,
            seed in proptest::collection::vec(-2.0f64..2.0, 1..40),
            x in proptest::collection::vec(prop_oneof![-2.5f64..2.5, Just(f64::NAN), Just(0.5)], 6),
        ) {
            let regressors = regressors.min(depths.len());
            let (mut all, mut roots, mut sizes, mut trees) = (Nodes { slot: vec![], threshold: vec![], left: vec![], right: vec![], value: vec![] }, vec![], vec![], vec![]);
            for &d in &depths {
                let t = tree(all.slot.len(), d, x.len(), &seed);
                roots.push(all.slot.len());
                sizes.push(t.slot.len());
                all.slot.extend(&t.slot);
                all.threshold.extend(&t.threshold);
                all.left.extend(&t.left);
                all.right.extend(&t.right);
                all.value.extend(&t.value);
                trees.push(t);
            }
            // regressor j owns trees [starts[j], starts[j + 1]): the first trees one each, the rest the last's
            let owners: Vec<usize> = (0..depths.len()).map(|i| i.min(regressors - 1)).collect();
            let starts: Vec<usize> = (0..regressors).collect();
            let rate: Vec<f64> = (0..regressors).map(|j| 0.1 * (j + 1) as f64).collect();
            let f = Forest::new(all, roots, starts, rate.clone(), *depths.iter().max().unwrap() as usize).unwrap();
            let want = reference(&trees, &owners, &rate, &x, &sizes);
            let got = f.raw(&x).unwrap();
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{got:?} vs {want:?}");
            }
        }
    }

    #[test]
    fn bad_forests_and_short_rows_are_errors() {
        let nodes = || Nodes {
            slot: vec![3, 0, 0],
            threshold: vec![0.0, f64::INFINITY, f64::INFINITY],
            left: vec![1, 1, 2],
            right: vec![2, 1, 2],
            value: vec![0.0, 1.0, 2.0],
        };
        let f = Forest::new(nodes(), vec![0], vec![0], vec![1.0], 1).unwrap();
        assert_eq!(f.raw(&[0.0, 0.0, 0.0, -1.0]).unwrap(), vec![1.0]);
        assert_eq!(f.raw(&[0.0, 0.0, 0.0, 1.0]).unwrap(), vec![2.0]);
        assert!(f.raw(&[0.0; 3]).unwrap_err().contains("4th"));
        assert!(Forest::new(nodes(), vec![5], vec![0], vec![1.0], 1).unwrap_err().contains("outside"));
        assert!(Forest::new(nodes(), vec![0], vec![0, 2], vec![1.0, 1.0], 1).unwrap_err().contains("ascending"));
        assert!(Forest::new(nodes(), vec![0], vec![1], vec![1.0], 1).is_err());
    }
}

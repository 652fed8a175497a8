//! The gpu matcher's *image*: the fast matcher's tree as one flat array of u32 words, every
//! reference a word offset into the array, so the device gets one upload and the kernel one
//! pointer. The layout is documented, and read, in `match.cu`; the constants here mirror it.

use crate::matcher::fast::{FastMatcher, Lookup, Node, NONE};

pub(super) const MAGIC: u32 = 0x4F46_4732;
pub(super) const NODE_WORDS: usize = 8;
/// Pending subtrees the kernel's search can hold (`STACK_DEPTH` in match.cu).
pub(super) const STACK_DEPTH: usize = 48;

// Header words, in match.cu's order.
pub(super) const H_MAGIC: usize = 0;
pub(super) const H_WIDTH: usize = 1;
const H_ROOT: usize = 2;
const H_NPART: usize = 3;
const H_PART_MASK: usize = 4;
const H_PART_CRITS: usize = 5;
const H_PART_RADIX: usize = 6;
const H_PART_SLOTS: usize = 7;
const H_RULE_OF_RANK: usize = 8;
const H_NODES: usize = 9;
const H_WORDS: usize = 10;

// Node words and tags.
const N_TAG: usize = 0;
const N_CRIT: usize = 1;
const N_START: usize = 2;
const N_LEN: usize = 3;
const N_WILD: usize = 4;
// (word 5, the subtree's smallest rank, is read by the kernel only.)
const N_NCOLS: usize = 6;
const TAG_LEAF: u32 = 1;
const TAG_SPARSE: u32 = 2;
const TAG_COPY_WILD: u32 = 4;

/// The criteria of the mandatory-tuple partitions (none if the tree has no partitions).
pub(super) fn partition_criteria(img: &[u32]) -> Vec<usize> {
    let (n, at) = (img[H_NPART] as usize, img[H_PART_CRITS] as usize);
    img[at..at + n].iter().map(|&c| c as usize).collect()
}

/// Lays out `m`'s tree as an image, or says why the kernel could not run it (too large for
/// 32-bit offsets, or a search deeper than the kernel's stack).
pub(super) fn build(m: &FastMatcher) -> Result<Vec<u32>, String> {
    let mut img = vec![0u32; H_WORDS];
    img[H_MAGIC] = MAGIC;
    img[H_WIDTH] = m.width as u32;
    img[H_NODES] = m.nodes.len() as u32;
    let nodes_at = img.len();
    let node_at = |id: u32| if id == NONE { NONE } else { (nodes_at + id as usize * NODE_WORDS) as u32 };
    img.resize(nodes_at + m.nodes.len() * NODE_WORDS, 0);
    for (id, node) in m.nodes.iter().enumerate() {
        let at = img.len() as u32;
        let words = match *node {
            Node::Leaf { start, len, min_rank, ncols } => {
                let (start, nc) = (start as usize, ncols as usize);
                img.extend_from_slice(&m.leaf_data[start..start + nc + (1 + 2 * nc) * len as usize]);
                [TAG_LEAF, 0, at, len, NONE, min_rank, ncols, 0]
            }
            Node::Split { lookup, copy_wild, crit, start, len, wild, min_rank } => {
                let part = start as usize..(start + len) as usize;
                let mut tag = if copy_wild { TAG_COPY_WILD } else { 0 };
                match lookup {
                    Lookup::Dense => img.extend(m.child_tab[part].iter().map(|&c| node_at(c))),
                    Lookup::Sparse => {
                        tag |= TAG_SPARSE;
                        img.extend_from_slice(&m.keys[part.clone()]);
                        img.extend(m.sparse_kids[part].iter().map(|&c| node_at(c)));
                    }
                }
                [tag, crit, at, len, node_at(wild), min_rank, 0, 0]
            }
        };
        let slot = nodes_at + id * NODE_WORDS;
        img[slot..slot + NODE_WORDS].copy_from_slice(&words);
    }
    img[H_ROOT] = node_at(m.root);
    if let Some(p) = &m.partitions {
        img[H_NPART] = p.crits.len() as u32;
        img[H_PART_MASK] = p.mask as u32;
        img[H_PART_CRITS] = img.len() as u32;
        img.extend(p.crits.iter().map(|&c| c as u32));
        img.extend_from_slice(&p.bounds);
        img[H_PART_RADIX] = img.len() as u32;
        img.extend(p.radix.iter().flat_map(|&r| [r as u32, (r >> 32) as u32]));
        img[H_PART_SLOTS] = img.len() as u32;
        img.extend(p.slots.iter().flat_map(|&(k, node)| [k as u32, (k >> 32) as u32, node_at(node)]));
    }
    img[H_RULE_OF_RANK] = img.len() as u32;
    img.extend_from_slice(&m.rule_of_rank);
    if img.len() >= NONE as usize {
        return Err(format!("the rule structure needs {} words, more than 32-bit offsets reach", img.len()));
    }
    check(&img)?;
    Ok(img)
}

/// Checks that the kernel, run on `img` with any query codes, reads only inside `img` and
/// the query row, and ends: every offset in bounds, every criterion below the width, every
/// rank below the rule count, children before their parents (so a search cannot loop), a
/// free slot in the partition table (so a probe ends), and the kernel's stack deep enough.
/// The host build of the kernel is called on images that passed this check only.
pub(super) fn check(img: &[u32]) -> Result<(), String> {
    let n = img.len();
    let bad = |what: &str| Err(format!("gpu image: {what}"));
    let within = |start: u32, words: usize| (start as usize).checked_add(words).is_some_and(|end| end <= n);
    if n < H_WORDS || img[H_MAGIC] != MAGIC {
        return bad("missing header");
    }
    let width = img[H_WIDTH];
    let rules_at = img[H_RULE_OF_RANK];
    let nodes_at = H_WORDS;
    if !within(rules_at, 0) || (rules_at as usize) < nodes_at {
        return bad("rule table out of bounds");
    }
    let n_rules = n - rules_at as usize;
    if img[rules_at as usize..].iter().any(|&r| r as usize >= n_rules) {
        return bad("rule index out of range");
    }
    let n_nodes = img[H_NODES] as usize;
    let first_data = nodes_at + n_nodes * NODE_WORDS;
    if first_data > rules_at as usize {
        return bad("nodes out of bounds");
    }
    let is_node = |at: u32| {
        at == NONE
            || (at as usize >= nodes_at
                && (at as usize) < first_data
                && (at as usize - nodes_at).is_multiple_of(NODE_WORDS))
    };
    let mut need = vec![0usize; n_nodes];
    for i in 0..n_nodes {
        let at = nodes_at + i * NODE_WORDS;
        let node = &img[at..at + NODE_WORDS];
        let (start, len) = (node[N_START], node[N_LEN] as usize);
        // A child's stack need, for children stored before this node only.
        let below = |c: u32| -> Option<usize> {
            if c == NONE {
                Some(0)
            } else if is_node(c) && (c as usize) < at {
                Some(need[(c as usize - nodes_at) / NODE_WORDS])
            } else {
                None
            }
        };
        if node[N_TAG] & TAG_LEAF != 0 {
            let nc = node[N_NCOLS] as usize;
            if !within(start, nc + (1 + 2 * nc) * len) {
                return bad("leaf out of bounds");
            }
            let s = start as usize;
            if img[s..s + nc].iter().any(|&c| c >= width) {
                return bad("leaf criterion beyond the query width");
            }
            if img[s + nc..].iter().step_by(1 + 2 * nc).take(len).any(|&rank| rank as usize >= n_rules) {
                return bad("leaf rank beyond the rule table");
            }
            continue;
        }
        if node[N_CRIT] >= width {
            return bad("split criterion beyond the query width");
        }
        let kids = if node[N_TAG] & TAG_SPARSE != 0 {
            if !within(start, 2 * len) {
                return bad("sparse split out of bounds");
            }
            &img[start as usize + len..start as usize + 2 * len]
        } else {
            if !within(start, len) {
                return bad("dense split out of bounds");
            }
            &img[start as usize..start as usize + len]
        };
        let mut deepest = below(node[N_WILD]).ok_or("gpu image: bad wild child".to_string())?;
        for &c in kids {
            deepest = deepest.max(below(c).ok_or("gpu image: bad child".to_string())?);
        }
        // A non-copying split with a wild child may push one subtree while searching another.
        let pushes = node[N_TAG] & TAG_COPY_WILD == 0 && node[N_WILD] != NONE;
        need[i] = deepest + usize::from(pushes);
        if need[i] > STACK_DEPTH {
            return Err(format!(
                "the rule structure needs a search stack of {} subtrees, the gpu kernel holds {STACK_DEPTH}",
                need[i]
            ));
        }
    }
    if !is_node(img[H_ROOT]) {
        return bad("bad root");
    }
    let n_part = img[H_NPART] as usize;
    if n_part > 0 {
        let mask = img[H_PART_MASK] as usize;
        let slots = img[H_PART_SLOTS];
        if !(mask + 1).is_power_of_two()
            || !within(img[H_PART_CRITS], 2 * n_part)
            || !within(img[H_PART_RADIX], 2 * n_part)
            || !within(slots, 3 * (mask + 1))
        {
            return bad("partition table out of bounds");
        }
        let crits = img[H_PART_CRITS] as usize;
        if img[crits..crits + n_part].iter().any(|&c| c >= width) {
            return bad("partition criterion beyond the query width");
        }
        let table = &img[slots as usize..slots as usize + 3 * (mask + 1)];
        if !table.chunks_exact(3).any(|s| s[0] == 0 && s[1] == 0) {
            return bad("partition table has no free slot");
        }
        if table.chunks_exact(3).any(|s| !is_node(s[2])) {
            return bad("partition points outside the nodes");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_image_is_refused() {
        assert!(check(&[]).is_err());
        let mut img = vec![0u32; H_WORDS];
        img[H_MAGIC] = MAGIC;
        img[H_WIDTH] = 2;
        img[H_ROOT] = NONE;
        img[H_RULE_OF_RANK] = H_WORDS as u32;
        assert!(check(&img).is_ok(), "an empty rule set is a valid image");
        img[H_ROOT] = 3;
        assert!(check(&img).unwrap_err().contains("bad root"));
        img[H_ROOT] = NONE;
        img[H_RULE_OF_RANK] = 1_000;
        assert!(check(&img).unwrap_err().contains("rule table"));
    }
}

//! A perfect hash of a dictionary's packed short keys ([`crate::model::Dictionary::short_key`]),
//! built once the rule set is complete: a lookup is two multiplies, two table reads and one
//! compare, with no branch on whether the key is known. The general hash map branches on every
//! probe's outcome, and a query column that mixes known and unknown values (flight numbers,
//! say) mispredicts those branches about half the time.
//!
//! Keys are split into buckets by their hash; every bucket gets a "pilot" chosen at build time
//! so that all keys land in distinct slots of a power-of-two table (the PTHash scheme). A key
//! is known exactly when the slot it lands in holds it.

/// Multipliers (odd, bits spread) for the bucket hash, the slot hash and the pilots.
const M1: u64 = 0x9e37_79b9_7f4a_7c15;
const M2: u64 = 0xd6e8_feb8_6659_fd93;
const M3: u64 = 0xa076_1d64_78bd_642f;

/// Never a packed short key: their top byte is the length, at most 7.
const EMPTY: u64 = u64::MAX;

/// Pilot values tried for one bucket before the table is grown.
const PILOT_TRIES: u64 = 1 << 12;

/// Largest key count given a table (about 3 MB; 0.06 s to build): a bigger one would not stay
/// in cache anyway, so bigger sets keep the map and its memory is not doubled.
const MAX_KEYS: usize = 1 << 18;

#[derive(Debug, Clone)]
pub struct ShortTable {
    /// Per bucket, the value its keys' hashes are xor-ed with before the slot hash.
    pilots: Vec<u64>,
    /// 64 - log2(pilots.len()).
    bucket_shift: u32,
    /// Per slot, the key it holds or [`EMPTY`].
    keys: Vec<u64>,
    codes: Vec<u32>,
    /// 64 - log2(keys.len()).
    slot_shift: u32,
}

impl ShortTable {
    /// Builds the table of `entries` (distinct packed short keys and their codes); `None` when
    /// there are too many keys or no pilots were found (the caller keeps using its map).
    pub fn build(entries: &[(u64, u32)]) -> Option<ShortTable> {
        let n = entries.len();
        if n > MAX_KEYS {
            return None;
        }
        // About 4 keys per bucket; slots at most 80% full. At least 2 of each, so that the
        // shifts stay below 64.
        let n_buckets = (n / 4).next_power_of_two().max(2);
        let mut n_slots = (n + n / 4).next_power_of_two().max(2);
        for _ in 0..4 {
            if let Some(t) = Self::try_build(entries, n_buckets, n_slots) {
                return Some(t);
            }
            n_slots *= 2;
        }
        None
    }

    fn try_build(entries: &[(u64, u32)], n_buckets: usize, n_slots: usize) -> Option<ShortTable> {
        let bucket_shift = 64 - n_buckets.trailing_zeros();
        let slot_shift = 64 - n_slots.trailing_zeros();
        let mut buckets: Vec<Vec<(u64, u32)>> = vec![Vec::new(); n_buckets];
        for &(k, code) in entries {
            debug_assert_ne!(k, EMPTY);
            buckets[(k.wrapping_mul(M1) >> bucket_shift) as usize].push((k, code));
        }
        // Fullest buckets first, while most slots are free.
        let mut order: Vec<usize> = (0..n_buckets).filter(|&b| !buckets[b].is_empty()).collect();
        order.sort_by_key(|&b| std::cmp::Reverse(buckets[b].len()));
        let mut t = ShortTable {
            pilots: vec![0; n_buckets],
            bucket_shift,
            keys: vec![EMPTY; n_slots],
            codes: vec![0; n_slots],
            slot_shift,
        };
        let mut slots = Vec::new();
        for b in order {
            let found = (0..PILOT_TRIES).map(|p| p.wrapping_mul(M3)).find(|&pilot| {
                slots.clear();
                for &(k, _) in &buckets[b] {
                    let s = t.slot(k.wrapping_mul(M1), pilot);
                    if t.keys[s] != EMPTY || slots.contains(&s) {
                        return false;
                    }
                    slots.push(s);
                }
                true
            })?;
            t.pilots[b] = found;
            for (&(k, code), &s) in buckets[b].iter().zip(&slots) {
                t.keys[s] = k;
                t.codes[s] = code;
            }
        }
        Some(t)
    }

    #[inline]
    fn slot(&self, h: u64, pilot: u64) -> usize {
        ((h ^ pilot).wrapping_mul(M2) >> self.slot_shift) as usize
    }

    /// The code of a packed short key, 0 when it is not in the table.
    #[inline]
    pub fn code_of_key(&self, k: u64) -> u32 {
        let h = k.wrapping_mul(M1);
        let s = self.slot(h, self.pilots[(h >> self.bucket_shift) as usize]);
        // Both reads, then a select the compiler must not turn into a branch (a plain `if` or
        // a mask became one, mispredicted whenever known and unknown values mix).
        let (key, code) = (self.keys[s], self.codes[s]);
        std::hint::select_unpredictable(key == k, code, 0)
    }

    pub fn memory_bytes(&self) -> usize {
        self.pilots.len() * 8 + self.keys.len() * 12
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Dictionary;

    #[test]
    fn every_key_is_found_and_no_other() {
        for n in [0usize, 1, 2, 3, 7, 100, 1000, 5000, 40_000] {
            let keys: Vec<String> = (0..n).map(|i| format!("{:x}", i * 7919 % 10_000_019)).collect();
            let entries: Vec<(u64, u32)> =
                keys.iter().enumerate().map(|(i, k)| (Dictionary::short_key(k).unwrap(), i as u32 + 1)).collect();
            let t = ShortTable::build(&entries).expect("built");
            for &(k, code) in &entries {
                assert_eq!(t.code_of_key(k), code);
            }
            for i in 0..2000 {
                let unknown = Dictionary::short_key(&format!("z{i}")).unwrap();
                assert_eq!(t.code_of_key(unknown), 0);
            }
            // Digit strings of every length, as flight numbers are.
            let digits: Vec<(u64, u32)> =
                (0..n.min(9999)).map(|i| (Dictionary::short_key(&i.to_string()).unwrap(), i as u32 + 1)).collect();
            let t = ShortTable::build(&digits).expect("built");
            for &(k, code) in &digits {
                assert_eq!(t.code_of_key(k), code);
            }
            assert_eq!(t.code_of_key(Dictionary::short_key("0001").unwrap()), 0);
        }
    }
}

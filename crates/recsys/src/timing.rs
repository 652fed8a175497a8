//! What one batch costs and how it is timed, shared by the engine and the device side: the
//! timing mode (`disk`: measured on this machine; `flash`: the seed's Table II model), seconds
//! per stage (Fig. 2's names plus the host link) and the I/O counters.

use crate::flash::FlashModel;
use serde::Serialize;

/// How the media and the device's work are timed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Mode {
    Disk,
    Flash(FlashModel),
}

/// Seconds per stage for one batch (Fig. 2's names).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Stages {
    pub bot_mlp: f64,
    /// Time in the device / on the media.
    pub emb_ssd: f64,
    /// Time in the host I/O stack (page cache, system calls).
    pub emb_fs: f64,
    /// The pooled sums on the host (and merging partial sums).
    pub emb_op: f64,
    pub concat: f64,
    pub top_mlp: f64,
    /// Host↔device exchanges (inputs, pages or sums, outputs).
    pub link: f64,
}

impl Stages {
    pub fn total(&self) -> f64 {
        self.bot_mlp + self.emb_ssd + self.emb_fs + self.emb_op + self.concat + self.top_mlp + self.link
    }
    pub fn add(&mut self, o: &Stages) {
        self.bot_mlp += o.bot_mlp;
        self.emb_ssd += o.emb_ssd;
        self.emb_fs += o.emb_fs;
        self.emb_op += o.emb_op;
        self.concat += o.concat;
        self.top_mlp += o.top_mlp;
        self.link += o.link;
    }
}

/// I/O of one batch (or a sum of batches).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct IoCounters {
    pub lookups: u64,
    /// Bytes a byte-addressable device would read: lookups × vector bytes (Fig. 3's "ideal").
    pub useful_bytes: u64,
    pub media_reads: u64,
    pub media_bytes: u64,
    /// Bytes crossing the host↔device link (Table IV's I/O traffic).
    pub link_bytes: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
}

impl IoCounters {
    pub fn add(&mut self, o: &IoCounters) {
        self.lookups += o.lookups;
        self.useful_bytes += o.useful_bytes;
        self.media_reads += o.media_reads;
        self.media_bytes += o.media_bytes;
        self.link_bytes += o.link_bytes;
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
    }
    /// Media bytes over useful bytes.
    pub fn read_amplification(&self) -> f64 {
        if self.useful_bytes == 0 {
            0.0
        } else {
            self.media_bytes as f64 / self.useful_bytes as f64
        }
    }
}

//! The seed's flash timing model (Table II and §V-A), deterministic, so that `flash`-mode results
//! are reproducible and testable.
//!
//! * A page read occupies its flash channel for T_page (= C_page cycles at the device clock).
//! * A vector read (the Embedding Lookup Engine's second stage) flushes the page into the page
//!   buffer (T_flush = 0.7·T_page) and transfers only EV_size bytes (EV_size/P_size · 0.3·T_page):
//!   C_EV = ⌈(60·EV_size/P_size + 140)·T_page(µs)⌉ cycles at 200 MHz.
//! * Reads are striped over channels by physical page number (the linear FTL of the seed's
//!   emulator); each channel serves its reads one after another, channels in parallel.
//! * Host block reads (through NVMe and the kernel, as `ssd-s` page-cache misses) are
//!   synchronous: each costs 1/IOPS_4K (45K IOPS in Table II, i.e. 22.2 µs at queue depth 1).
//! * Results cross the host link at `link_bytes_per_s` after a fixed `doorbell_s` per exchange
//!   (the MMIO register write/read of `RM_send_inputs` / `RM_read_outputs`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FlashModel {
    pub channels: u32,
    pub page_bytes: u32,
    /// T_page: one page from the cell array to the controller (µs).
    pub t_page_us: f64,
    /// Share of T_page spent flushing cells into the page buffer (the rest is the bus transfer).
    pub flush_fraction: f64,
    /// Random 4 KiB read IOPS through the host block path.
    pub host_iops_4k: f64,
    /// The device's clock (cycles are counted at this rate).
    pub clock_mhz: f64,
    /// Host↔device bandwidth (bytes/s): PCIe gen3 ×4 for an NVMe drive.
    pub link_bytes_per_s: f64,
    /// Fixed cost of one host↔device exchange (µs).
    pub doorbell_us: f64,
}

impl Default for FlashModel {
    /// Table II of the seed.
    fn default() -> FlashModel {
        FlashModel {
            channels: 4,
            page_bytes: 4096,
            t_page_us: 20.0,
            flush_fraction: 0.7,
            host_iops_4k: 45_000.0,
            clock_mhz: 200.0,
            link_bytes_per_s: 3.2e9,
            doorbell_us: 2.0,
        }
    }
}

/// What a read does on the media.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadKind {
    Page,
    /// A vector of this many bytes.
    Vector(u32),
}

impl FlashModel {
    /// Every parameter inside its domain (finite, positive where it divides or counts), or what
    /// is not: a parameter given by hand (`--flash key=value`, the API) is checked once, here, so
    /// no figure is computed from a NaN, a zero or a negative time.
    pub fn check(&self) -> std::result::Result<(), String> {
        let positive = [
            ("t_page_us", self.t_page_us),
            ("host_iops_4k", self.host_iops_4k),
            ("clock_mhz", self.clock_mhz),
            ("link_bytes_per_s", self.link_bytes_per_s),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{name} = {v}: must be a finite number > 0"));
            }
        }
        if !(self.doorbell_us.is_finite() && self.doorbell_us >= 0.0) {
            return Err(format!("doorbell_us = {}: must be a finite number >= 0", self.doorbell_us));
        }
        if !(0.0..=1.0).contains(&self.flush_fraction) {
            return Err(format!("flush_fraction = {}: must be in [0, 1]", self.flush_fraction));
        }
        if !(1..=1024).contains(&self.channels) {
            return Err(format!("channels = {}: must be in [1, 1024]", self.channels));
        }
        if !(512..=1 << 20).contains(&self.page_bytes) {
            return Err(format!("page_bytes = {}: must be in [512, 1048576]", self.page_bytes));
        }
        Ok(())
    }

    /// C_page: cycles of one page read (4000 in Table II).
    pub fn page_cycles(&self) -> u64 {
        (self.t_page_us * self.clock_mhz).round() as u64
    }

    /// C_EV: cycles of one vector read of `ev_bytes` (0.293·EV_size + 2800 in Table II).
    pub fn vector_cycles(&self, ev_bytes: u32) -> u64 {
        let frac = f64::from(ev_bytes.min(self.page_bytes)) / f64::from(self.page_bytes);
        let transfer = (1.0 - self.flush_fraction) * frac;
        ((transfer + self.flush_fraction) * self.t_page_us * self.clock_mhz - 1e-9).ceil() as u64
    }

    pub fn cycles(&self, kind: ReadKind) -> u64 {
        match kind {
            ReadKind::Page => self.page_cycles(),
            ReadKind::Vector(b) => self.vector_cycles(b),
        }
    }

    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / (self.clock_mhz * 1e6)
    }

    /// The channel serving physical byte address `phys`.
    pub fn channel(&self, phys: u64) -> usize {
        ((phys / u64::from(self.page_bytes)) % u64::from(self.channels.max(1))) as usize
    }

    /// Cycles until the last of `reads` (physical address, kind) completes when all are issued
    /// at once inside the device: the busiest channel's total.
    pub fn device_read_cycles(&self, reads: impl IntoIterator<Item = (u64, ReadKind)>) -> u64 {
        let mut busy = vec![0u64; self.channels.max(1) as usize];
        for (phys, kind) in reads {
            busy[self.channel(phys)] += self.cycles(kind);
        }
        busy.into_iter().max().unwrap_or(0)
    }

    /// One synchronous host block read (a page-cache miss): 1/IOPS.
    pub fn host_block_read_s(&self) -> f64 {
        1.0 / self.host_iops_4k
    }

    /// One exchange of `bytes` over the host link.
    pub fn transfer_s(&self, bytes: u64) -> f64 {
        self.doorbell_us * 1e-6 + bytes as f64 / self.link_bytes_per_s
    }

    /// Fits the model to a measured disk: T_page from the QD1 latency of 4 KiB reads and the
    /// host path's IOPS from the QD1 rate, as the seed tuned Table II to fio on its F1 host.
    pub fn calibrated(qd1_latency_s: f64, qd1_iops: f64) -> FlashModel {
        FlashModel { t_page_us: qd1_latency_s * 1e6, host_iops_4k: qd1_iops, ..FlashModel::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ii_cycles() {
        let m = FlashModel::default();
        assert_eq!(m.page_cycles(), 4000);
        // 0.293·128 + 2800 = 2837.5 → 2838; 0.293·256 + 2800 = 2875.0 exactly.
        assert_eq!(m.vector_cycles(128), 2838);
        assert_eq!(m.vector_cycles(256), 2875);
        assert_eq!(m.vector_cycles(4096), 4000);
        assert!((m.seconds(4000) - 20e-6).abs() < 1e-15);
        assert!((m.host_block_read_s() - 1.0 / 45_000.0).abs() < 1e-15);
    }

    #[test]
    fn channels_serve_in_parallel_and_in_series() {
        let m = FlashModel::default();
        // 8 pages on 8 consecutive page addresses: 2 per channel.
        let pages = (0..8u64).map(|p| (p * 4096, ReadKind::Page));
        assert_eq!(m.device_read_cycles(pages), 8000);
        // All on one channel (stride of 4 pages): serial.
        let same = (0..8u64).map(|p| (p * 4 * 4096, ReadKind::Page));
        assert_eq!(m.device_read_cycles(same), 32_000);
        // Vector reads of 128 B, 5 on channel 0 and 1 on channel 1.
        let v = [0u64, 4 * 4096, 8 * 4096, 12 * 4096, 16 * 4096, 4096].map(|a| (a, ReadKind::Vector(128)));
        assert_eq!(m.device_read_cycles(v), 5 * 2838);
        assert_eq!(m.device_read_cycles(std::iter::empty()), 0);
    }

    #[test]
    fn parameters_outside_their_domain_are_named() {
        assert_eq!(FlashModel::default().check(), Ok(()));
        let bad = [
            FlashModel { t_page_us: f64::NAN, ..FlashModel::default() },
            FlashModel { host_iops_4k: 0.0, ..FlashModel::default() },
            FlashModel { link_bytes_per_s: f64::INFINITY, ..FlashModel::default() },
            FlashModel { doorbell_us: -1.0, ..FlashModel::default() },
            FlashModel { flush_fraction: 1.5, ..FlashModel::default() },
            FlashModel { channels: 0, ..FlashModel::default() },
            FlashModel { page_bytes: 0, ..FlashModel::default() },
        ];
        let names = [
            "t_page_us",
            "host_iops_4k",
            "link_bytes_per_s",
            "doorbell_us",
            "flush_fraction",
            "channels",
            "page_bytes",
        ];
        for (m, name) in bad.iter().zip(names) {
            assert!(m.check().unwrap_err().starts_with(name), "{name}");
        }
    }

    #[test]
    fn link_and_calibration() {
        let m = FlashModel::default();
        assert!((m.transfer_s(3_200_000) - (2e-6 + 1e-3)).abs() < 1e-12);
        let c = FlashModel::calibrated(28e-6, 36_000.0);
        assert_eq!(c.page_cycles(), 5600);
        assert_eq!(c.host_iops_4k, 36_000.0);
    }
}

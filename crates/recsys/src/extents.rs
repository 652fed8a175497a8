//! A file's extents (logical → physical byte ranges), found with the FIEMAP ioctl as the seed's
//! EV Translator does (`RM_open_table` sends the start LBA and length of every extent to the
//! drive). Where FIEMAP is missing (tmpfs, some network file systems) the file is one extent
//! whose physical address equals its logical one, and `source` says so.

use serde::Serialize;
use std::fs::File;
use std::os::unix::io::AsRawFd;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub length: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Extents {
    pub extents: Vec<Extent>,
    /// "fiemap", or "fallback: <why>".
    pub source: String,
}

impl Extents {
    /// One extent covering `len` bytes, physical = logical.
    pub fn identity(len: u64, why: impl Into<String>) -> Extents {
        Extents {
            extents: vec![Extent { logical: 0, physical: 0, length: len }],
            source: format!("fallback: {}", why.into()),
        }
    }

    /// The extents of `file` (FIEMAP, syncing delayed allocations first), or the identity map.
    pub fn of(file: &File, len: u64) -> Extents {
        match fiemap(file, len) {
            Ok(e) if !e.is_empty() => Extents { extents: e, source: "fiemap".into() },
            Ok(_) => Extents::identity(len, "FIEMAP mapped no extent"),
            Err(why) => Extents::identity(len, why),
        }
    }

    /// Physical byte address of logical byte `offset` (binary search over the extents; an offset
    /// past every extent, e.g. in a hole, maps to itself).
    pub fn translate(&self, offset: u64) -> u64 {
        let i = self.extents.partition_point(|e| e.logical + e.length <= offset);
        match self.extents.get(i) {
            Some(e) if e.logical <= offset => e.physical + (offset - e.logical),
            _ => offset,
        }
    }
}

const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_FLAG_SYNC: u32 = 0x1;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const BATCH: usize = 256;

/// struct fiemap_extent (linux/fiemap.h), 56 bytes.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct RawExtent {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

/// struct fiemap with room for BATCH extents.
#[repr(C)]
struct RawFiemap {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
    extents: [RawExtent; BATCH],
}

fn fiemap(file: &File, len: u64) -> Result<Vec<Extent>, String> {
    let mut out = Vec::new();
    let mut start = 0u64;
    while start < len {
        let mut m = RawFiemap {
            start,
            length: len - start,
            flags: if start == 0 { FIEMAP_FLAG_SYNC } else { 0 },
            mapped_extents: 0,
            extent_count: BATCH as u32,
            reserved: 0,
            extents: [RawExtent::default(); BATCH],
        };
        // SAFETY: FS_IOC_FIEMAP reads the header of `m` and writes at most `extent_count`
        // (= BATCH) `fiemap_extent`s into `m.extents`, which is exactly that long; `m` is a
        // live, properly aligned #[repr(C)] value matching the kernel's struct layout, and the
        // fd stays open for the duration of the call.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut m as *mut RawFiemap) };
        if rc < 0 {
            return Err(format!("FIEMAP: {}", std::io::Error::last_os_error()));
        }
        let n = (m.mapped_extents as usize).min(BATCH);
        if n == 0 {
            break;
        }
        for e in &m.extents[..n] {
            out.push(Extent { logical: e.logical, physical: e.physical, length: e.length });
        }
        let last = m.extents[n - 1];
        if last.flags & FIEMAP_EXTENT_LAST != 0 {
            break;
        }
        start = last.logical + last.length;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translate_inside_between_and_past_extents() {
        let x = Extents {
            extents: vec![
                Extent { logical: 0, physical: 1 << 20, length: 8192 },
                Extent { logical: 8192, physical: 4096, length: 4096 },
            ],
            source: "test".into(),
        };
        assert_eq!(x.translate(0), 1 << 20);
        assert_eq!(x.translate(8191), (1 << 20) + 8191);
        assert_eq!(x.translate(8192), 4096);
        assert_eq!(x.translate(12287), 8191);
        assert_eq!(x.translate(12288), 12288);
    }

    #[test]
    fn a_real_file_maps_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 3 * 4096 + 100]).unwrap();
        let f = File::open(&p).unwrap();
        let x = Extents::of(&f, 3 * 4096 + 100);
        let covered: u64 = x.extents.iter().map(|e| e.length).sum();
        assert!(covered >= 3 * 4096 + 100 || x.source.starts_with("fallback"), "{x:?}");
    }
}

//! Helpers shared by the integration tests: a seeded xorshift and small random DLRMs.
#![allow(dead_code)] // each test crate uses a part

use offload_recsys::{Dlrm, Linear, Mlp};

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in [-1, 1] on a 0.001 grid.
    pub fn f(&mut self) -> f32 {
        (self.next() % 2001) as f32 / 1000.0 - 1.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn layer(r: &mut Rng, i: usize, o: usize) -> Linear {
    let scale = 1.0 / (i as f32).sqrt();
    Linear::new(i, o, (0..i * o).map(|_| r.f() * scale).collect(), (0..o).map(|_| r.f() * 0.1).collect()).unwrap()
}

/// Bottom dense → 8 → dim, top (tables + 1)·dim → 6 → 1.
pub fn model(r: &mut Rng, dense: usize, tables: usize, dim: usize) -> Dlrm {
    let bottom = Mlp::new(vec![layer(r, dense, 8), layer(r, 8, dim)]).unwrap();
    let top = Mlp::new(vec![layer(r, dim + tables * dim, 6), layer(r, 6, 1)]).unwrap();
    Dlrm::new(dense, bottom, top, tables, dim).unwrap()
}

//! Recommendation inference with embedding tables on disk (seed 002, RM-SSD): table files and
//! their extents, the read paths (page cache, O_DIRECT io_uring at page or vector granularity),
//! pooled sums, RecSSD's host cache, the seed's flash timing model, fp32 MLPs, and every strategy
//! of the paper behind one interface ([`engine::Engine`]).

pub mod device;
pub mod engine;
pub mod error;
pub mod extents;
pub mod flash;
pub mod mlp;
pub mod sls;
pub mod table;
pub mod timing;
pub mod uring;

pub use engine::{Engine, Options, Outcome, Strategy, STRATEGIES};
pub use error::{Error, Result};
pub use flash::FlashModel;
pub use mlp::{Dlrm, Linear, Mlp};
pub use sls::Bags;
pub use table::{Table, TableMeta, TableWriter};
pub use timing::{IoCounters, Mode, Stages};

//! Pieces shared by the per-token codecs' CPU references (TurboQuant, QJL, VecInfer): the
//! SplitMix64 streams of docs/contracts/turboquant.md, the 1-bit Gaussian sketch of QJL and
//! TurboQuant-Prod, and the f32 vector arithmetic of their
//! "Notation" sections (sums in index order, two roundings per multiply-add, never an FMA).

pub mod sketch;
pub mod splitmix;
pub mod vector;

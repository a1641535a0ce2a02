//! A CPU copy of a layer's stored words: the same on every path (a GPU layer reads its
//! segments and ring back), so tests compare paths word for word and tools (or the CPU
//! reference of attention) can read what a GPU stores.

use half::f16;

/// The stored words of one side.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SideWords {
    /// Tokens stored in the codec's form (`Q` of this side, a multiple of its block).
    pub quantized: usize,
    /// Per stream of the codec, the words of its `Q / G` blocks.
    pub streams: Vec<Vec<u32>>,
    /// f16 rows `[T − Q][H][D]` of the residual window, tokens `[Q, T)` in order.
    pub residual: Vec<f16>,
}

impl SideWords {
    /// The streams as slices (what the codec's CPU hooks read).
    pub fn words(&self) -> Vec<&[u32]> {
        self.streams.iter().map(Vec::as_slice).collect()
    }
}

/// The stored words of one layer (see [`crate::layer::KvLayer::snapshot`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Tokens held.
    pub tokens: usize,
    /// The key side.
    pub keys: SideWords,
    /// The value side.
    pub values: SideWords,
}

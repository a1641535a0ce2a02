//! A CPU copy of a layer's stored words: the same on every path (a GPU layer reads its
//! segments and ring back), so tests compare paths word for word and tools (or the CPU
//! reference of attention) can read what a GPU stores. A snapshot is also what a layer is
//! saved as and restored from ([`crate::persist`], [`crate::layer::Layer::from_snapshot`]):
//! [`Snapshot::check`] is the store's rule for what a restorable snapshot holds.

use half::f16;

use super::quantized_len;
use crate::codec::Codec;
use crate::error::{Error, Result};

/// The stored words of one side.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct Snapshot {
    /// Tokens held.
    pub tokens: usize,
    /// The key side.
    pub keys: SideWords,
    /// The value side.
    pub values: SideWords,
}

impl SideWords {
    /// Checks that these are the words `codec` stores for a side holding `tokens` tokens with
    /// residual window `residual`: `Q` as the store computes it, every stream `Q / G` blocks
    /// long, the window `(T − Q)` rows of `H·D` finite f16, and whatever the codec itself
    /// requires of its words ([`Codec::check_words`]). What a layer restored from a snapshot
    /// ([`crate::layer::Layer::from_snapshot`]) must hold, so that a snapshot that did not
    /// come from a layer (a file, a tool) is an error instead of a wrong answer.
    pub fn check(&self, codec: &dyn Codec, tokens: usize, residual: usize) -> Result<()> {
        let side = codec.side().name();
        let bad = |message: String| Error::Shape {
            what: "snapshot",
            message: format!("{side}: {message}"),
        };
        let gb = codec.block_tokens();
        let q = quantized_len(tokens, residual, gb);
        if self.quantized != q {
            return Err(bad(format!(
                "{} tokens quantized, but {tokens} tokens with residual window {residual} and \
                 blocks of {gb} quantize {q}",
                self.quantized
            )));
        }
        let streams = codec.streams();
        if self.streams.len() != streams.len() {
            return Err(bad(format!(
                "{} streams, the {} codec stores {}",
                self.streams.len(),
                codec.method(),
                streams.len()
            )));
        }
        let blocks = q / gb;
        for (s, (words, def)) in self.streams.iter().zip(streams).enumerate() {
            let want = blocks.checked_mul(def.words_per_block);
            if want != Some(words.len()) {
                return Err(bad(format!(
                    "stream {s} ({}) has {} words, {blocks} blocks of {} take {}",
                    def.name,
                    words.len(),
                    def.words_per_block,
                    blocks * def.words_per_block
                )));
            }
        }
        let row = codec.geometry().token_elems();
        if self.residual.len() != (tokens - q) * row {
            return Err(bad(format!(
                "the residual window has {} values, {} rows of {row} take {}",
                self.residual.len(),
                tokens - q,
                (tokens - q) * row
            )));
        }
        if let Some(i) = self.residual.iter().position(|x| !x.is_finite()) {
            return Err(Error::NonFinite {
                what: "snapshot residual window",
                index: i,
                value: self.residual[i].to_f32(),
            });
        }
        // The window's rows are encoded once they leave it: the codec's entry check applies.
        codec.check_rows(q, &self.residual)?;
        codec.check_words(&self.words(), blocks)
    }
}

impl Snapshot {
    /// Checks both sides ([`SideWords::check`]) for a layer of these codecs (keys, values)
    /// and residual window, and the token limit.
    pub fn check(&self, codecs: [&dyn Codec; 2], residual: usize) -> Result<()> {
        super::check_token_limit(self.tokens, 0)?;
        self.keys.check(codecs[0], self.tokens, residual)?;
        self.values.check(codecs[1], self.tokens, residual)
    }
}

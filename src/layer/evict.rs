//! What eviction needs of a [`Layer`]: moving the kept units' stored words down (every
//! stream, then the ring), and the positions stream in the key side's segment 0 that the
//! attention core reads for each held token.

use crate::error::{Error, Result};
use crate::store::Side;
use crate::store::gpu::GpuSide;

use super::{Layer, Store, lcm};

impl Layer {
    /// Eviction (`crate::policy`): drops whole units of `unit` tokens (a multiple of both
    /// sides' block sizes) from the quantized tokens of both sides: of the first `keep_of`
    /// units (all quantized on both sides), head h keeps `keep[h]` (ascending, one count for
    /// every head); later tokens move down; the residual window stays. CPU path only: on a
    /// GPU path [`Error::PathUnavailable`] (no GPU compaction kernel yet), nothing changed.
    pub(crate) fn evict_units(
        &mut self,
        unit: usize,
        keep_of: usize,
        keep: &[Vec<usize>],
    ) -> Result<()> {
        let kept = keep.first().map_or(keep_of, Vec::len);
        let ok = keep.len() == self.g.heads
            && keep.iter().all(|k| {
                k.len() == kept
                    && k.windows(2).all(|w| w[0] < w[1])
                    && k.iter().all(|&u| u < keep_of)
            })
            && self
                .codecs
                .iter()
                .all(|c| unit.is_multiple_of(c.block_tokens()))
            && keep_of * unit
                <= Side::ALL
                    .iter()
                    .map(|&s| self.quantized_len(s))
                    .min()
                    .unwrap_or(0);
        if !ok {
            return Err(Error::Config(format!(
                "eviction: a keep list that this layer cannot apply (unit {unit}, of {keep_of}); a kvpack bug"
            )));
        }
        self.check_unsynced()?;
        let qs = Side::ALL.map(|side| self.quantized_len(side));
        match &mut self.store {
            Store::Cpu(sides) => {
                for (side, codec) in sides.iter_mut().zip(&self.codecs) {
                    side.compact(&**codec, unit, keep_of, keep);
                }
            }
            Store::Gpu(s) => {
                // Segment 0 only (checked on both sides before either moves anything).
                if let Some(side) = s.sides.iter().find(|side| side.segments.len() > 1) {
                    return Err(Error::PathUnavailable {
                        kernel: "evict_compact",
                        requested: s.choice.to_string(),
                        reason: format!(
                            "eviction over {} segments: compaction moves units within segment 0 \
                             only in this version",
                            side.segments.len()
                        ),
                    });
                }
                for ((side, codec), q) in s.sides.iter().zip(&self.codecs).zip(qs) {
                    side.compact(&**codec, s.choice, unit, keep_of, keep, q, self.tokens)?;
                }
            }
        }
        self.tokens -= (keep_of - kept) * unit;
        Ok(())
    }

    /// Eviction: gives the key side a positions stream (`attention::plan::KeyPositions`) in
    /// every segment, and builds attention for it (`ATT_POS = 1`); an empty GPU layer only
    /// (a CPU layer has nothing to do: its positions are host tables). [`Error::Limit`] where
    /// a segment with the stream no longer fits a binding.
    pub(crate) fn enable_positions(&mut self) -> Result<()> {
        let Store::Gpu(s) = &mut self.store else {
            return Ok(());
        };
        if self.tokens > 0 {
            return Err(Error::Config(
                "eviction: positions are enabled on an empty layer (a kvpack bug)".into(),
            ));
        }
        let words = self.g.heads * self.codecs[0].block_tokens();
        let k = &*self.codecs[0];
        if !GpuSide::fits_with_positions(&self.ctx, k, s.sides[0].seg_blocks, words) {
            // Fewer blocks per segment on both sides (they split at the same tokens).
            let unit = lcm(k.block_tokens(), self.codecs[1].block_tokens());
            let mut blocks = s.sides[0].seg_blocks;
            while blocks > 0 && !GpuSide::fits_with_positions(&self.ctx, k, blocks, words) {
                blocks = blocks * 7 / 8;
            }
            let tokens = blocks * k.block_tokens() / unit * unit;
            if tokens == 0 {
                return Err(Error::Limit {
                    what: "one block of keys with its positions in a segment",
                    needed: words as u64 * 4,
                    limit: self.ctx.max_storage_binding_size(),
                });
            }
            for (side, c) in s.sides.iter_mut().zip(&self.codecs) {
                side.seg_blocks = tokens / c.block_tokens();
            }
        }
        s.sides[0].pos_words = words;
        s.positions = true;
        Ok(())
    }

    /// Eviction: the first `table.len() / H` held slots' positions (`[rows][H]`), written into
    /// segment 0's positions stream (nothing on the CPU path).
    pub(crate) fn write_positions(&self, table: &[u32]) -> Result<()> {
        match &self.store {
            Store::Gpu(s) => s.sides[0].write_positions(table),
            Store::Cpu(_) => Ok(()),
        }
    }
}

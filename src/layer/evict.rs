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
        self.write_positions_at(0, table)
    }

    /// Eviction: held slots `[row0, row0 + table.len() / H)`'s positions written into segment
    /// 0's positions stream (queued before the next submission; nothing on the CPU path).
    pub(crate) fn write_positions_at(&self, row0: usize, table: &[u32]) -> Result<()> {
        match &self.store {
            Store::Gpu(s) => s.sides[0].write_positions_at(row0, table),
            Store::Cpu(_) => Ok(()),
        }
    }

    /// Eviction: segment 0's positions stream's first `rows` rows (`[rows][H]` u32), read back
    /// (blocking; empty on the CPU path or with no stream).
    pub(crate) fn read_positions(&self, rows: usize) -> Result<Vec<u32>> {
        let Store::Gpu(s) = &self.store else {
            return Ok(Vec::new());
        };
        match (rows, s.sides[0].positions_stream()) {
            (0, _) | (_, None) => Ok(Vec::new()),
            (_, Some((buf, at))) => {
                let bytes = crate::gpu::readback_range(
                    &self.ctx,
                    buf,
                    (at * 4) as u64,
                    (rows * self.g.heads * 4) as u64,
                )?;
                Ok(bytemuck::pod_collect_to_vec(&bytes))
            }
        }
    }

    /// Eviction with the keep lists on the device (GPU paths; `crate::policy`): of the first
    /// `keep_of` units of `unit` tokens, each head keeps `kept` units whose indices are in
    /// `keep` (`[H][kept]` u32, ascending; written by `record_select`, recorded first into the
    /// same encoder); every stream of both sides and segment 0's positions stream (its first
    /// `keep_of` units) move down, the rings rotate, and `record_after` runs last (the
    /// caller's own tables). Allocates before recording; one submission, not waited for
    /// ([`crate::gpu::submit`]). The checks and errors of
    /// [`Layer::evict_units`], and [`Error::PathUnavailable`] on the CPU path.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn evict_units_on_device(
        &mut self,
        unit: usize,
        keep_of: usize,
        kept: usize,
        keep: &wgpu::Buffer,
        record_select: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
        record_after: impl FnOnce(&mut wgpu::CommandEncoder) -> Result<()>,
    ) -> Result<()> {
        use crate::cpu::policy::evict_compact::CompactShape;
        let quantized = Side::ALL
            .iter()
            .map(|&s| self.quantized_len(s))
            .min()
            .unwrap_or(0);
        if kept > keep_of
            || keep_of * unit > quantized
            || !self
                .codecs
                .iter()
                .all(|c| unit.is_multiple_of(c.block_tokens()))
        {
            return Err(Error::Config(format!(
                "eviction: {kept} of {keep_of} units of {unit} cannot be kept in this layer; a kvpack bug"
            )));
        }
        self.check_unsynced()?;
        let qs = Side::ALL.map(|side| self.quantized_len(side));
        let Store::Gpu(s) = &self.store else {
            return Err(Error::PathUnavailable {
                kernel: "evict_compact",
                requested: crate::context::PathChoice::Cpu.to_string(),
                reason: "a keep list on the device for a layer on the CPU".into(),
            });
        };
        // Allocated before anything is recorded (segment 0 only: checked on both sides first).
        let mut works = Vec::new();
        for (side, q) in s.sides.iter().zip(qs) {
            let codec = &*self.codecs[works.len()];
            works.push(side.compact_work(codec, s.choice, unit, keep_of, kept, q, self.tokens)?);
        }
        let h = self.g.heads;
        let positions = match s.sides[0].positions_stream() {
            Some((buf, at)) => {
                let shape = CompactShape {
                    row_words: h,
                    unit_rows: unit,
                    head_bits: 32,
                    heads: h,
                    kept,
                    keep_of,
                    words: keep_of * unit * h,
                };
                let plan = crate::policy::kernels::plan_compact(&shape, at)?;
                let path = self
                    .ctx
                    .resolve(&crate::policy::kernels::EVICT_COMPACT, s.choice)?;
                let bytes = (kept * unit * h * 4) as u64;
                let scratch = crate::gpu::storage_buffer(
                    &self.ctx,
                    "kvpack eviction positions scratch",
                    bytes.max(4),
                )?;
                Some((buf, at, plan, path, scratch, bytes))
            }
            None => None,
        };
        // Submitted, not waited for: later work on the queue (attention, appends) runs after
        // it, reads of the tables wait for it, and the scratch buffers dropped here live until
        // the device is done with them (wgpu). An app sharing the queue is never stalled.
        crate::gpu::submit(&self.ctx, "eviction", |enc| {
            record_select(enc)?;
            for (side, work) in s.sides.iter().zip(works) {
                side.record_compact(enc, work, keep)?;
            }
            if let Some((buf, at, plan, path, scratch, bytes)) = &positions {
                crate::gpu::encode_plan(&self.ctx, enc, *path, plan, &[buf, keep, scratch])?;
                if *bytes > 0 {
                    enc.copy_buffer_to_buffer(scratch, 0, buf, (*at * 4) as u64, *bytes);
                }
            }
            record_after(enc)
        })?;
        self.tokens -= (keep_of - kept) * unit;
        Ok(())
    }
}

//! The score table of an [`super::EvictingLayer`] on a GPU path, kept on the device: `[cap][H]`
//! f32, the first `held` rows the held tokens' scores (token-major, one per KV head), written
//! at append (host appends: the CPU twin's scores, queued; device appends: the `evict_score`
//! kernel's output copied in, recorded), read by `evict_select` and compacted by
//! `evict_compact` (one 32-bit "head" per column) at each eviction. Grows by doubling, copying
//! its held rows in the same command stream as the append that needs the room. Read back only
//! for a saved cache, [`super::EvictingLayer::state`] and the CPU reference of attention.

use crate::context::{Context, PathChoice};
use crate::cpu::policy::evict_compact::CompactShape;
use crate::error::Result;
use crate::gpu;

use super::kernels::{plan_compact, plan_select};
use super::select::Order;

/// The device score table (see the module docs).
pub(crate) struct DeviceScores {
    buffer: wgpu::Buffer,
    /// Rows the buffer holds.
    cap: usize,
    heads: usize,
}

impl DeviceScores {
    /// An empty table of `heads` heads.
    pub(crate) fn new(ctx: &Context, heads: usize) -> Result<Self> {
        let cap = 64;
        Ok(Self {
            buffer: gpu::storage_buffer(ctx, "kvpack eviction scores", (cap * heads * 4) as u64)?,
            cap,
            heads,
        })
    }

    /// Bytes allocated.
    pub(crate) fn bytes(&self) -> u64 {
        (self.cap * self.heads * 4) as u64
    }

    /// Room for `need` rows, allocated (nothing recorded yet): `None` when the table has it,
    /// else a larger buffer (doubling) for [`Self::commit`].
    pub(crate) fn reserve(&self, ctx: &Context, need: usize) -> Result<Option<Grown>> {
        if need <= self.cap {
            return Ok(None);
        }
        let cap = need.max(self.cap * 2);
        let buffer =
            gpu::storage_buffer(ctx, "kvpack eviction scores", (cap * self.heads * 4) as u64)?;
        Ok(Some(Grown { buffer, cap }))
    }

    /// Takes the room [`Self::reserve`] allocated: the first `held` rows copied into it in `enc`
    /// (recorded in order with the appends that wrote them).
    pub(crate) fn commit(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        grown: Option<Grown>,
        held: usize,
    ) {
        let Some(g) = grown else {
            return;
        };
        if held > 0 {
            enc.copy_buffer_to_buffer(
                &self.buffer,
                0,
                &g.buffer,
                0,
                (held * self.heads * 4) as u64,
            );
        }
        self.buffer = g.buffer;
        self.cap = g.cap;
    }

    /// Queues host scores `[n][H]` into rows `[row0, row0 + n)` (they land before the next
    /// submission's commands; the rows must be reserved).
    pub(crate) fn write(&self, ctx: &Context, row0: usize, scores: &[f32]) -> Result<()> {
        debug_assert!(row0 + scores.len() / self.heads <= self.cap);
        let g = gpu::gpu_of(ctx, "eviction scores")?;
        g.queue.write_buffer(
            &self.buffer,
            (row0 * self.heads * 4) as u64,
            bytemuck::cast_slice(scores),
        );
        Ok(())
    }

    /// Records `n` rows of `src` (`[n][H]` f32 from its start) copied into rows
    /// `[row0, row0 + n)`, or zeros where `src` is `None` (StreamingLLM scores nothing).
    pub(crate) fn record_rows(
        &self,
        enc: &mut wgpu::CommandEncoder,
        src: Option<&wgpu::Buffer>,
        row0: usize,
        n: usize,
    ) {
        let (at, bytes) = ((row0 * self.heads * 4) as u64, (n * self.heads * 4) as u64);
        match src {
            Some(src) => enc.copy_buffer_to_buffer(src, 0, &self.buffer, at, bytes),
            None => enc.clear_buffer(&self.buffer, at, Some(bytes)),
        }
    }

    /// The first `held` rows, read back (blocking).
    pub(crate) fn read(&self, ctx: &Context, held: usize) -> Result<Vec<f32>> {
        if held == 0 {
            return Ok(Vec::new());
        }
        let bytes = gpu::readback(ctx, &self.buffer, (held * self.heads * 4) as u64)?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// A larger score table, allocated by [`DeviceScores::reserve`].
pub(crate) struct Grown {
    buffer: wgpu::Buffer,
    cap: usize,
}

/// One eviction's selection on the device: `evict_select` over the score table into a keep
/// list `[H][end − n]` u32, and the table's own compaction after it. Everything is allocated
/// by [`Selection::new`], before anything is recorded.
pub(crate) struct Selection {
    select: (crate::context::KernelPath, gpu::DispatchPlan),
    compact: (crate::context::KernelPath, gpu::DispatchPlan),
    /// The candidates' keys (scratch).
    keys: wgpu::Buffer,
    /// `[H][end − n]` u32: the units each head keeps.
    pub(crate) keep: wgpu::Buffer,
    /// The table compacted (scratch), and its bytes.
    moved: wgpu::Buffer,
    moved_bytes: u64,
}

impl Selection {
    /// Each of `heads` heads evicts `n` of the candidate units `[first, end)` of `unit` tokens
    /// from a table holding `held` rows.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        ctx: &Context,
        choice: PathChoice,
        heads: usize,
        unit: usize,
        (first, end, n): (usize, usize, usize),
        order: Order,
        held: usize,
    ) -> Result<Self> {
        let plan = plan_select(heads, unit, first, end, n, order)?;
        let select = (ctx.resolve(plan.kernel, choice)?, plan);
        let shape = CompactShape {
            row_words: heads,
            unit_rows: unit,
            head_bits: 32,
            heads,
            kept: end - n,
            keep_of: end,
            words: held * heads,
        };
        let plan = plan_compact(&shape, 0)?;
        let compact = (ctx.resolve(plan.kernel, choice)?, plan);
        let buf = |label, words: usize| gpu::storage_buffer(ctx, label, (words.max(1) * 4) as u64);
        let moved_words = (held - n * unit) * heads;
        Ok(Self {
            select,
            compact,
            keys: buf("kvpack eviction keys", heads * (end - first))?,
            keep: buf("kvpack eviction keep lists", heads * (end - n))?,
            moved: buf("kvpack eviction scores scratch", moved_words)?,
            moved_bytes: (moved_words * 4) as u64,
        })
    }

    /// Records the selection (reads `table`'s scores, writes [`Self::keep`]).
    pub(crate) fn record_select(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        table: &DeviceScores,
    ) -> Result<()> {
        let (path, plan) = &self.select;
        gpu::encode_plan(
            ctx,
            enc,
            *path,
            plan,
            &[&table.buffer, &self.keys, &self.keep],
        )
    }

    /// Records the table's compaction by [`Self::keep`] (kept units down, later rows after).
    pub(crate) fn record_compact(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        table: &DeviceScores,
    ) -> Result<()> {
        let (path, plan) = &self.compact;
        gpu::encode_plan(
            ctx,
            enc,
            *path,
            plan,
            &[&table.buffer, &self.keep, &self.moved],
        )?;
        if self.moved_bytes > 0 {
            enc.copy_buffer_to_buffer(&self.moved, 0, &table.buffer, 0, self.moved_bytes);
        }
        Ok(())
    }
}

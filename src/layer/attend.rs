//! Attention over a [`Layer`]: the call's checks and plan, the CPU reference over the stored
//! words, the GPU core (blocking and recorded), and the forms with each held token's
//! absolute position (eviction).

use crate::attention::{self, AttendOptions};
use crate::context::{Context, PathChoice};
use crate::cpu::attend::{Positions, SideView};
use crate::error::{Error, Result};
use crate::store::{Side, SideWords, Snapshot, quantized_len};

use super::{GpuStore, KvLayer, Layer, Store};

impl Layer {
    pub(super) fn side_words(&self, i: usize) -> Result<SideWords> {
        let q = quantized_len(self.tokens, self.residual, self.codecs[i].block_tokens());
        Ok(match &self.store {
            Store::Cpu(sides) => SideWords {
                quantized: q,
                streams: sides[i].streams.clone(),
                residual: sides[i].resid.clone(),
            },
            Store::Gpu(s) => SideWords {
                quantized: q,
                streams: s.sides[i].read_streams(&*self.codecs[i], q)?,
                residual: s.sides[i].read_ring(q, self.tokens)?,
            },
        })
    }

    pub(super) fn check_attend(
        &self,
        q_len: usize,
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<usize> {
        attention::check_query(q_len, hq, self.g.heads, self.g.dim, self.tokens, opts)
    }

    pub(super) fn call(&self, tq: usize, hq: usize, opts: &AttendOptions) -> attention::plan::Call {
        attention::plan::Call {
            tq,
            hq,
            hkv: self.g.heads,
            dim: self.g.dim,
            tokens: self.tokens,
            opts: *opts,
        }
    }

    /// What the attention kernels read of the GPU store: both sides' segments and rings, and
    /// the cache's shape.
    pub(super) fn attend_inputs<'a>(
        &'a self,
        s: &'a GpuStore,
        at: Option<HeldRows>,
    ) -> (
        [attention::gpu::SideBuffers<'a>; 2],
        attention::plan::CacheShape,
    ) {
        let side = |i: usize| {
            let g = &s.sides[i];
            attention::gpu::SideBuffers {
                codec: &*self.codecs[i],
                segments: g.segments.iter().map(|seg| seg.at(0, &g.tables)).collect(),
                ring: g.ring.as_ref().map(|r| &r.buffer),
                tables: &g.tables,
            }
        };
        let shape = attention::plan::CacheShape {
            qk: self.quantized_len(Side::Keys),
            qv: self.quantized_len(Side::Values),
            seg_tokens: s.sides[0].seg_blocks * self.codecs[0].block_tokens(),
            ring_cap: [0, 1].map(|i| s.sides[i].ring.as_ref().map_or(1, |r| r.cap)),
            row_words: self.g.row_words(),
            value_dim: self.codecs[1].value_dim(),
            value_space_out: self.codecs[1].attend_value_space_out(),
            key_prep: self.codecs[0].attend_hooks().k_prep,
            ring: self.has_ring(),
            positions: s.positions.then(|| attention::plan::KeyPositions {
                offset: s.sides[0].positions_offset().unwrap_or(0),
                rows: at.map_or(0, |p| p.rows),
                evicted: at.map_or(0, |p| p.appended - self.tokens),
            }),
        };
        ([side(0), side(1)], shape)
    }

    /// Attention on the GPU store for host queries (blocking), reusing the layer's partials.
    pub(super) fn run_gpu(
        ctx: &Context,
        s: &GpuStore,
        call: &attention::plan::Call,
        shape: &attention::plan::CacheShape,
        sides: &[attention::gpu::SideBuffers<'_>; 2],
        q: &[f32],
    ) -> Result<Vec<f32>> {
        attention::gpu::run(
            ctx,
            s.choice,
            call,
            shape,
            [&sides[0], &sides[1]],
            s.sides[0].placeholder(),
            q,
            &s.scratch,
        )
    }

    pub(super) fn cpu_attend(
        &self,
        snap: Option<&Snapshot>,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<Vec<f32>> {
        self.cpu_attend_at(snap, None, q, hq, opts)
    }

    /// The CPU reference of attention, the held tokens at `positions` (`None`: token j at j).
    pub(super) fn cpu_attend_at(
        &self,
        snap: Option<&Snapshot>,
        positions: Option<&Positions<'_>>,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
    ) -> Result<Vec<f32>> {
        let views = |s: &Snapshot| -> Result<Vec<f32>> {
            let k = SideView::new(&*self.codecs[0], &s.keys);
            let v = SideView::new(&*self.codecs[1], &s.values);
            Ok(crate::cpu::attend::attend_at(
                &k,
                &v,
                self.tokens,
                positions,
                q,
                hq,
                opts,
            ))
        };
        match (&self.store, snap) {
            (Store::Cpu(sides), None) => {
                let side = |i: usize| SideView {
                    codec: &*self.codecs[i],
                    words: sides[i].streams.iter().map(Vec::as_slice).collect(),
                    quantized: quantized_len(
                        self.tokens,
                        self.residual,
                        self.codecs[i].block_tokens(),
                    ),
                    residual: &sides[i].resid,
                };
                Ok(crate::cpu::attend::attend_at(
                    &side(0),
                    &side(1),
                    self.tokens,
                    positions,
                    q,
                    hq,
                    opts,
                ))
            }
            (_, Some(s)) => views(s),
            (Store::Gpu(_), None) => views(&self.snapshot()?),
        }
    }

    /// Eviction (`crate::policy`): the CPU reference of attention over the held tokens at
    /// `positions` (query rows at the last positions of `positions.appended`). Checks the
    /// query like [`KvLayer::attend`], the row count against the tokens appended.
    pub(crate) fn attend_positions(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        positions: &Positions<'_>,
    ) -> Result<Vec<f32>> {
        self.check_positions_query(q, hq, opts, positions.appended)?;
        match &self.store {
            Store::Gpu(s) if s.positions => {
                let at = HeldRows::of(positions, self.g.heads);
                let (sides, shape) = self.attend_inputs(s, Some(at));
                let call = attention::plan::Call {
                    tokens: self.tokens,
                    ..self.call(q.len() / (hq * self.g.dim), hq, opts)
                };
                Self::run_gpu(&self.ctx, s, &call, &shape, &sides, q)
            }
            _ => self.cpu_attend_at(None, Some(positions), q, hq, opts),
        }
    }

    /// [`KvLayer::encode_attend`] over held tokens at `at` (eviction: the first `at.rows`
    /// slots' positions are already in the positions stream); `q` holds `tq` rows checked
    /// against the tokens appended.
    #[allow(clippy::too_many_arguments)] // encode_attend's arguments and the positions
    pub(crate) fn encode_attend_positions(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
        at: HeldRows,
    ) -> Result<()> {
        attention::check_query(
            tq * hq * self.g.dim,
            hq,
            self.g.heads,
            self.g.dim,
            at.appended,
            opts,
        )?;
        self.encode_attend_at(enc, q, tq, hq, opts, out, Some(at))
    }

    /// Attention over held tokens at `at` on a GPU layer with a positions stream (host queries,
    /// blocking): [`Self::attend_positions`] without a host table. The CPU path is
    /// [`Error::PathUnavailable`].
    pub(crate) fn attend_held(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        at: HeldRows,
    ) -> Result<Vec<f32>> {
        self.check_positions_query(q, hq, opts, at.appended)?;
        match &self.store {
            Store::Gpu(s) if s.positions => {
                let (sides, shape) = self.attend_inputs(s, Some(at));
                let call = attention::plan::Call {
                    tokens: self.tokens,
                    ..self.call(q.len() / (hq * self.g.dim), hq, opts)
                };
                Self::run_gpu(&self.ctx, s, &call, &shape, &sides, q)
            }
            _ => Err(Error::PathUnavailable {
                kernel: "attend",
                requested: PathChoice::Cpu.to_string(),
                reason: "held tokens without a host positions table on a CPU layer (a kvpack bug)"
                    .into(),
            }),
        }
    }

    /// Records attention on the GPU store (checked by the caller).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode_attend_at(
        &self,
        enc: &mut wgpu::CommandEncoder,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &AttendOptions,
        out: &wgpu::Buffer,
        positions: Option<HeldRows>,
    ) -> Result<()> {
        let Store::Gpu(s) = &self.store else {
            return Err(Error::PathUnavailable {
                kernel: "attend",
                requested: PathChoice::Cpu.to_string(),
                reason: "encode_attend() records GPU work; this layer runs on the CPU".into(),
            });
        };
        let (sides, shape) = self.attend_inputs(s, positions.filter(|_| s.positions));
        attention::gpu::encode(
            &self.ctx,
            enc,
            s.choice,
            &self.call(tq, hq, opts),
            &shape,
            [&sides[0], &sides[1]],
            s.sides[0].placeholder(),
            q,
            out,
            &s.scratch,
        )
    }

    /// The CPU reference of [`Self::attend_positions`] on any path (GPU words read back).
    pub(crate) fn attend_positions_reference(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        positions: &Positions<'_>,
    ) -> Result<Vec<f32>> {
        self.check_positions_query(q, hq, opts, positions.appended)?;
        self.cpu_attend_at(None, Some(positions), q, hq, opts)
    }

    /// The checks of an attention call over held tokens (`appended` tokens appended): nothing
    /// unsynced, q's shape against the tokens appended, finite values.
    pub(super) fn check_positions_query(
        &self,
        q: &[f32],
        hq: usize,
        opts: &AttendOptions,
        appended: usize,
    ) -> Result<()> {
        self.check_unsynced()?;
        attention::check_query(q.len(), hq, self.g.heads, self.g.dim, appended, opts)?;
        attention::check_finite(q)
    }
}

/// Where a GPU layer's held tokens sit for attention (eviction): the first `rows` held slots'
/// positions are in segment 0's positions stream (`[rows][H]` u32), every later slot j at
/// `j + appended − held`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeldRows {
    /// Slots whose position is in the positions stream.
    pub rows: usize,
    /// Tokens appended (the next token's position).
    pub appended: usize,
}

impl HeldRows {
    /// The rows of a host positions table of `heads` heads.
    pub(crate) fn of(p: &Positions<'_>, heads: usize) -> Self {
        Self {
            rows: p.table.len() / heads,
            appended: p.appended,
        }
    }
}

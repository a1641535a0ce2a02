//! The GPU path of a KIVI layer: packed codes and parameters in segment buffers, the f16
//! residual in a ring, all on the device. Nothing dequantized is ever kept.
//!
//! Segments: quantized tokens are stored in segments of at most `segment_tokens` tokens (a
//! multiple of the key group, sized so every buffer fits the device's storage-binding limit),
//! so a cache can outgrow any single binding. The last segment grows geometrically by a
//! device-side copy; the history is never re-uploaded.
//!
//! Residual ring: `R + Gk` rows of f16 K and of f16 V; token s sits in slot `s mod (R + Gk)`.
//! An append uploads only its own tokens (as f16), quantizes whole key blocks straight from
//! ring + upload, then copies the tokens that stay in the window into the ring.

use half::f16;

use super::cpu_store::{overflow_error, payload_memory};
use super::layout::{Layout, ParamStorage};
use super::{KiviPaths, Memory, RawKivi};
use crate::context::Context;
use crate::cpu::kivi_quant_keys::ParamOverflow;
use crate::error::{Error, Result};
use crate::gpu;

pub use super::plans::*;

struct Segment {
    key_codes: wgpu::Buffer,
    key_params: wgpu::Buffer,
    value_codes: wgpu::Buffer,
    value_params: wgpu::Buffer,
    /// Tokens this segment's buffers can hold now (a multiple of the key group).
    cap: usize,
}

pub(crate) struct GpuStore {
    ctx: Context,
    choice: crate::context::PathChoice,
    l: Layout,
    paths: KiviPaths,
    segment_tokens: usize,
    segments: Vec<Segment>,
    ring_k: wgpu::Buffer,
    ring_v: wgpu::Buffer,
    status: wgpu::Buffer,
}

impl GpuStore {
    pub(crate) fn new(
        ctx: &Context,
        l: Layout,
        paths: KiviPaths,
        choice: crate::context::PathChoice,
    ) -> Result<Self> {
        let ring_bytes = (l.ring_tokens() * l.residual_row_words() * 4) as u64;
        let ring_k = gpu::storage_buffer(ctx, "kvpack kivi ring k", ring_bytes)?;
        let ring_v = gpu::storage_buffer(ctx, "kvpack kivi ring v", ring_bytes)?;
        let status = gpu::storage_buffer(ctx, "kvpack kivi status", 4)?;
        let segment_tokens = Self::segment_tokens(ctx, &l)?;
        Ok(Self {
            ctx: ctx.clone(),
            choice,
            l,
            paths,
            segment_tokens,
            segments: Vec::new(),
            ring_k,
            ring_v,
            status,
        })
    }

    /// The most tokens one segment may hold: every buffer within the binding limit, and
    /// token indices within u32.
    fn segment_tokens(ctx: &Context, l: &Layout) -> Result<usize> {
        gpu::gpu_of(ctx, "kivi cache")?;
        let limit = ctx.max_storage_binding_size();
        let per_token = [
            l.key_block_words().div_ceil(l.key_group),
            l.key_block_param_words().div_ceil(l.key_group),
            l.value_token_words(),
            l.value_token_param_words(),
        ]
        .into_iter()
        .max()
        .unwrap_or(1) as u64
            * 4;
        let tokens = (limit / per_token.max(1)).min(1 << 24) as usize / l.key_group * l.key_group;
        if tokens == 0 {
            return Err(Error::Limit {
                what: "one key block of the cache",
                needed: per_token * l.key_group as u64,
                limit,
            });
        }
        Ok(tokens)
    }

    fn alloc_segment(&self, cap: usize) -> Result<Segment> {
        let l = &self.l;
        let blocks = cap / l.key_group;
        Ok(Segment {
            key_codes: gpu::storage_buffer(
                &self.ctx,
                "kvpack kivi key codes",
                (blocks * l.key_block_words() * 4) as u64,
            )?,
            key_params: gpu::storage_buffer(
                &self.ctx,
                "kvpack kivi key params",
                (blocks * l.key_block_param_words() * 4) as u64,
            )?,
            value_codes: gpu::storage_buffer(
                &self.ctx,
                "kvpack kivi value codes",
                (cap * l.value_token_words() * 4) as u64,
            )?,
            value_params: gpu::storage_buffer(
                &self.ctx,
                "kvpack kivi value params",
                (cap * l.value_token_param_words() * 4) as u64,
            )?,
            cap,
        })
    }

    /// Makes room for `q_new` quantized tokens: new segments, or the last one grown (its
    /// first `q_old` tokens copied on the device).
    fn reserve(
        &mut self,
        q_old: usize,
        q_new: usize,
        enc: &mut wgpu::CommandEncoder,
    ) -> Result<()> {
        let st = self.segment_tokens;
        let needed_segments = q_new.div_ceil(st);
        for s in 0..needed_segments {
            let need = (q_new - s * st).min(st);
            let have = self.segments.get(s).map_or(0, |g| g.cap);
            if need <= have {
                continue;
            }
            let cap = crate::cache::grown_capacity(have, need)
                .min(st)
                .div_ceil(self.l.key_group)
                * self.l.key_group;
            let seg = self.alloc_segment(cap)?;
            if let Some(old) = self.segments.get(s) {
                let used = q_old.saturating_sub(s * st).min(old.cap);
                let l = &self.l;
                let blocks = used / l.key_group;
                for (src, dst, bytes) in [
                    (
                        &old.key_codes,
                        &seg.key_codes,
                        blocks * l.key_block_words() * 4,
                    ),
                    (
                        &old.key_params,
                        &seg.key_params,
                        blocks * l.key_block_param_words() * 4,
                    ),
                    (
                        &old.value_codes,
                        &seg.value_codes,
                        used * l.value_token_words() * 4,
                    ),
                    (
                        &old.value_params,
                        &seg.value_params,
                        used * l.value_token_param_words() * 4,
                    ),
                ] {
                    if bytes > 0 {
                        enc.copy_buffer_to_buffer(src, 0, dst, 0, bytes as u64);
                    }
                }
                self.segments[s] = seg;
            } else {
                self.segments.push(seg);
            }
        }
        Ok(())
    }

    /// Tokens one upload of f16 rows may hold (a multiple of the key group).
    fn max_piece_tokens(&self) -> Result<usize> {
        let row_bytes = (self.l.residual_row_words() * 4) as u64;
        let limit = self.ctx.max_storage_binding_size();
        let tokens = (limit / row_bytes) as usize / self.l.key_group * self.l.key_group;
        if tokens == 0 {
            return Err(Error::Limit {
                what: "one key group of f16 rows",
                needed: row_bytes * self.l.key_group as u64,
                limit,
            });
        }
        Ok(tokens.min(self.segment_tokens))
    }

    /// Whether a flush can produce a pair that f16 storage cannot hold: only with 1-bit codes
    /// (scale = range ≤ 131008) and f16 parameters. Elsewhere the status check is moot.
    pub(crate) fn can_overflow(&self) -> bool {
        self.l.params == ParamStorage::F16 && (self.l.key_bits == 1 || self.l.value_bits == 1)
    }

    /// Appends f16 rows after `t_old` tokens in two phases. Phase 1 quantizes whole key
    /// blocks into the segments past the committed length, then reads the status word.
    /// Phase 2 commits: the rows that stay in the window are copied into the ring. A failure
    /// in phase 1 leaves the cache as it was.
    pub(crate) fn append(&mut self, t_old: usize, k: &[f16], v: &[f16]) -> Result<()> {
        let ctx = self.ctx.clone();
        let mut quantized = false;
        gpu::submit_blocking(&ctx, "kivi quantize", |enc| {
            quantized = self.record_quantize(enc, t_old, k, v)?;
            Ok(())
        })?;
        if quantized {
            let status = u32::from_le_bytes(
                gpu::readback(&ctx, &self.status, 4)?
                    .try_into()
                    .unwrap_or([0xff; 4]),
            );
            if status & 2 != 0 {
                return Err(Error::Gpu {
                    during: "kivi quantize",
                    message: "this device does not lay subgroups out in invocation order; the subgroup variant of \
                              kivi_quant_values cannot run here: use PathChoice::WgslWorkgroup"
                        .into(),
                });
            }
            if status & 1 != 0 {
                let o = ParamOverflow {
                    token: self.l.quantized_len(t_old),
                    head: 0,
                    index: 0,
                };
                return Err(overflow_error(
                    o,
                    "a key or value (first token of the failed flush; exact group on the CPU path)",
                ));
            }
        }
        gpu::submit_blocking(&ctx, "kivi residual", |enc| {
            self.record_commit(enc, t_old, k, v)
        })
    }

    /// Records both phases of an append into the caller's encoder (no status check: only for
    /// layouts where [`Self::can_overflow`] is false).
    pub(crate) fn encode_append(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        t_old: usize,
        k: &[f16],
        v: &[f16],
    ) -> Result<()> {
        if self.can_overflow() {
            return Err(Error::Config(
                "1-bit codes with f16 parameters can overflow f16 and need the status check of the blocking \
                 append(); encode_append() records without reading back"
                    .into(),
            ));
        }
        self.record_quantize(enc, t_old, k, v)?;
        self.record_commit(enc, t_old, k, v)
    }

    /// Phase 1: quantizes tokens `[Q_old, Q_new)` in pieces that respect segment boundaries
    /// and the binding limit (each piece uploads only the rows it needs). Returns whether
    /// anything was quantized.
    fn record_quantize(
        &mut self,
        enc: &mut wgpu::CommandEncoder,
        t_old: usize,
        k: &[f16],
        v: &[f16],
    ) -> Result<bool> {
        let l = self.l;
        let row = l.token_elems();
        let t_new = t_old + k.len() / row;
        let (q_old, q_new) = (l.quantized_len(t_old), l.quantized_len(t_new));
        if q_new == q_old {
            return Ok(false);
        }
        let ctx = self.ctx.clone();
        let rows = |x: &[f16], a: usize, b: usize| {
            rows_to_words(&l, &x[(a - t_old) * row..(b - t_old) * row])
        };
        let piece = self.max_piece_tokens()?;
        let st = self.segment_tokens;
        // Pieces [a, b) and their incoming uploads (rows [max(a, t_old), b)).
        let mut pieces = Vec::new();
        let mut a = q_old;
        while a < q_new {
            let b = ((a / st + 1) * st).min(q_new).min(a + piece);
            let first = a.max(t_old);
            let (ik, iv) = if first < b {
                (
                    gpu::upload(
                        &ctx,
                        "kvpack kivi incoming k",
                        bytemuck::cast_slice(&rows(k, first, b)),
                    )?,
                    gpu::upload(
                        &ctx,
                        "kvpack kivi incoming v",
                        bytemuck::cast_slice(&rows(v, first, b)),
                    )?,
                )
            } else {
                // Every token of this piece is in the ring; bind a placeholder.
                (
                    gpu::storage_buffer(&ctx, "kvpack kivi no incoming", 4)?,
                    gpu::storage_buffer(&ctx, "kvpack kivi no incoming", 4)?,
                )
            };
            pieces.push((a, b, first, ik, iv));
            a = b;
        }
        enc.clear_buffer(&self.status, 0, None);
        self.reserve(q_old, q_new, enc)?;
        let paths = self.paths;
        for (a, b, first, ik, iv) in &pieces {
            let seg_i = a / st;
            let seg = &self.segments[seg_i];
            let off = a - seg_i * st;
            let src = QuantSource {
                start: *a,
                t_old,
                inc_start: *first,
            };
            let pk = plan_quant_keys_from(&l, (b - a) / l.key_group, src, off / l.key_group);
            gpu::encode_plan(
                &ctx,
                enc,
                paths.quant_keys,
                &pk,
                &[
                    &self.ring_k,
                    ik,
                    &seg.key_codes,
                    &seg.key_params,
                    &self.status,
                ],
            )?;
            let pv = plan_quant_values_from(&l, b - a, src, off);
            gpu::encode_plan(
                &ctx,
                enc,
                paths.quant_values,
                &pv,
                &[
                    &self.ring_v,
                    iv,
                    &seg.value_codes,
                    &seg.value_params,
                    &self.status,
                ],
            )?;
        }
        Ok(true)
    }

    /// Phase 2 (commit): tokens that stay in the window go to the ring (at most R + G − 1
    /// rows, so one upload within the ring's own size).
    fn record_commit(
        &self,
        enc: &mut wgpu::CommandEncoder,
        t_old: usize,
        k: &[f16],
        v: &[f16],
    ) -> Result<()> {
        let l = self.l;
        let row = l.token_elems();
        let t_new = t_old + k.len() / row;
        let first = l.quantized_len(t_new).max(t_old);
        if first >= t_new {
            return Ok(());
        }
        let rows = |x: &[f16]| rows_to_words(&l, &x[(first - t_old) * row..]);
        let (c, rw) = (l.ring_tokens(), l.residual_row_words() as u64 * 4);
        let rk = gpu::upload(
            &self.ctx,
            "kvpack kivi residual k",
            bytemuck::cast_slice(&rows(k)),
        )?;
        let rv = gpu::upload(
            &self.ctx,
            "kvpack kivi residual v",
            bytemuck::cast_slice(&rows(v)),
        )?;
        let mut s = first;
        while s < t_new {
            let slot = s % c;
            let run = (t_new - s).min(c - slot);
            for (src, ring) in [(&rk, &self.ring_k), (&rv, &self.ring_v)] {
                enc.copy_buffer_to_buffer(
                    src,
                    (s - first) as u64 * rw,
                    ring,
                    slot as u64 * rw,
                    run as u64 * rw,
                );
            }
            s += run;
        }
        Ok(())
    }

    pub(crate) fn reconstruct(&self, t: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let l = self.l;
        let q = l.quantized_len(t);
        let row = l.token_elems();
        let mut k = vec![0f32; t * row];
        let mut v = vec![0f32; t * row];
        let st = self.segment_tokens;
        // f32 output per piece within the binding limit (whole key blocks).
        let max_out = (self.ctx.max_storage_binding_size() / (row as u64 * 4)) as usize
            / l.key_group
            * l.key_group;
        if max_out == 0 && q > 0 {
            return Err(Error::Limit {
                what: "one key block of f32 output",
                needed: (l.key_group * row * 4) as u64,
                limit: self.ctx.max_storage_binding_size(),
            });
        }
        let mut a = 0;
        while a < q {
            let si = a / st;
            let seg = &self.segments[si];
            let b = ((si + 1) * st).min(q).min(a + max_out);
            let (count, off) = (b - a, a - si * st);
            let bytes = (count * row * 4) as u64;
            let out_k = gpu::storage_buffer(&self.ctx, "kvpack kivi dequant k", bytes)?;
            let out_v = gpu::storage_buffer(&self.ctx, "kvpack kivi dequant v", bytes)?;
            let path = self.paths.quant_keys;
            gpu::submit_blocking(&self.ctx, "kivi dequantize", |enc| {
                gpu::encode_plan(
                    &self.ctx,
                    enc,
                    path,
                    &plan_dequant_keys(&l, count, off / l.key_group),
                    &[&seg.key_codes, &seg.key_params, &out_k],
                )?;
                gpu::encode_plan(
                    &self.ctx,
                    enc,
                    path,
                    &plan_dequant_values(&l, count, off),
                    &[&seg.value_codes, &seg.value_params, &out_v],
                )
            })?;
            let rk = gpu::readback(&self.ctx, &out_k, bytes)?;
            let rv = gpu::readback(&self.ctx, &out_v, bytes)?;
            k[a * row..b * row].copy_from_slice(bytemuck::cast_slice(&rk));
            v[a * row..b * row].copy_from_slice(bytemuck::cast_slice(&rv));
            a = b;
        }
        let (rk, rv) = self.residual_rows(t)?;
        for (out, resid) in [(&mut k, rk), (&mut v, rv)] {
            for (o, r) in out[q * row..].iter_mut().zip(resid) {
                *o = r.to_f32();
            }
        }
        Ok((k, v))
    }

    /// f16 K and V of tokens `[Q, T)` read back from the ring.
    fn residual_rows(&self, t: usize) -> Result<(Vec<f16>, Vec<f16>)> {
        let l = self.l;
        let q = l.quantized_len(t);
        let (c, rw, row) = (l.ring_tokens(), l.residual_row_words(), l.token_elems());
        let mut out = Vec::new();
        for ring in [&self.ring_k, &self.ring_v] {
            let mut rows = Vec::with_capacity((t - q) * row);
            if t > q {
                let words: Vec<u32> = bytemuck::pod_collect_to_vec(&gpu::readback(
                    &self.ctx,
                    ring,
                    (c * rw * 4) as u64,
                )?);
                for s in q..t {
                    let w = &words[(s % c) * rw..];
                    rows.extend(
                        (0..row).map(|e| f16::from_bits((w[e / 2] >> (16 * (e % 2))) as u16)),
                    );
                }
            }
            out.push(rows);
        }
        let v = out.pop().unwrap_or_default();
        let k = out.pop().unwrap_or_default();
        Ok((k, v))
    }

    /// The regions attention reads: one per segment (packed codes), then the ring (f16).
    fn attend_regions(&self, t: usize) -> Vec<crate::attention::gpu::Region<'_>> {
        use crate::attention::gpu::{Region, Source};
        let l = &self.l;
        let qn = l.quantized_len(t);
        let st = self.segment_tokens;
        let mut regions = Vec::new();
        for (si, seg) in self.segments.iter().enumerate() {
            let start = si * st;
            if start >= qn {
                break;
            }
            regions.push(Region {
                start,
                end: (start + st).min(qn),
                seg_offset: 0,
                source: Source::Kivi {
                    layout: l,
                    key_codes: &seg.key_codes,
                    key_params: &seg.key_params,
                    value_codes: &seg.value_codes,
                    value_params: &seg.value_params,
                },
            });
        }
        regions.push(Region {
            start: qn,
            end: t,
            seg_offset: 0,
            source: Source::F16 {
                k_rows: &self.ring_k,
                v_rows: &self.ring_v,
                row_words: l.residual_row_words(),
                ring_tokens: l.ring_tokens(),
            },
        });
        regions
    }

    fn attend_call(
        &self,
        t: usize,
        tq: usize,
        hq: usize,
        opts: &crate::attention::AttendOptions,
    ) -> crate::attention::gpu::Call {
        crate::attention::gpu::Call {
            tq,
            hq,
            hkv: self.l.heads,
            dim: self.l.dim,
            tokens: t,
            opts: *opts,
        }
    }

    /// Attention on host queries (blocking).
    pub(crate) fn attend(
        &self,
        t: usize,
        q: &[f32],
        hq: usize,
        opts: &crate::attention::AttendOptions,
    ) -> Result<Vec<f32>> {
        use crate::attention::gpu as ag;
        let paths = ag::AttendPaths::resolve(&self.ctx, self.choice)?;
        let call = self.attend_call(t, q.len() / (hq * self.l.dim), hq, opts);
        ag::run(&self.ctx, &paths, &call, &self.attend_regions(t), q)
    }

    /// Attention recorded into the caller's encoder, q and out on the device.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn encode_attend(
        &self,
        enc: &mut wgpu::CommandEncoder,
        t: usize,
        q: &wgpu::Buffer,
        tq: usize,
        hq: usize,
        opts: &crate::attention::AttendOptions,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        use crate::attention::gpu as ag;
        let paths = ag::AttendPaths::resolve(&self.ctx, self.choice)?;
        ag::encode(
            &self.ctx,
            enc,
            &paths,
            &self.attend_call(t, tq, hq, opts),
            &self.attend_regions(t),
            q,
            out,
        )
    }

    pub(crate) fn memory(&self, t: usize) -> (Memory, Memory) {
        let mut held = Memory {
            residual: self.ring_k.size() + self.ring_v.size(),
            ..Default::default()
        };
        for s in &self.segments {
            held.key_codes += s.key_codes.size();
            held.key_params += s.key_params.size();
            held.value_codes += s.value_codes.size();
            held.value_params += s.value_params.size();
        }
        (held, payload_memory(&self.l, t))
    }

    pub(crate) fn raw(&self, t: usize) -> Result<RawKivi> {
        let l = self.l;
        let q = l.quantized_len(t);
        let st = self.segment_tokens;
        let mut raw = RawKivi::default();
        for (si, seg) in self.segments.iter().enumerate() {
            let start = si * st;
            if start >= q {
                break;
            }
            let count = (q - start).min(st);
            let blocks = count / l.key_group;
            let read = |b: &wgpu::Buffer, words: usize| -> Result<Vec<u32>> {
                Ok(bytemuck::pod_collect_to_vec(&gpu::readback(
                    &self.ctx,
                    b,
                    (words * 4) as u64,
                )?))
            };
            raw.key_codes
                .extend(read(&seg.key_codes, blocks * l.key_block_words())?);
            raw.key_params
                .extend(read(&seg.key_params, blocks * l.key_block_param_words())?);
            raw.value_codes
                .extend(read(&seg.value_codes, count * l.value_token_words())?);
            raw.value_params.extend(read(
                &seg.value_params,
                count * l.value_token_param_words(),
            )?);
        }
        (raw.residual_k, raw.residual_v) = self.residual_rows(t)?;
        Ok(raw)
    }
}

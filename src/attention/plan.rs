//! Planning one attention call on the GPU: the uniform of every dispatch, the splits of its
//! tokens and the partials' size. A dispatch covers the tokens of one segment index
//! `[d·S, min((d + 1)·S, T))` (S = the layer's segment tokens): both sides' stored words of
//! those tokens are in their segment d below the side's Q, and in the side's ring above. Its
//! tokens are cut into splits, the unit of work of one workgroup per (KV head, 4 query
//! vectors); where the value codec accumulates in a space of its own, also at the value side's
//! Q: codec splits (values from the value codec) and ring splits (values from the ring, in the
//! output space). Split sizes follow the call's shape and the
//! device ([`split_target`]), never a pipeline specialization.
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).

use super::{AttendKernel, AttendOptions};
use crate::error::{Error, Result};

/// Uniform block of the attention kernels (one per dispatch).
/// Keep in sync with `AttendParams` in wgsl/attend/attend_params.wgsl and
/// msl/attend/attend_core.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[allow(missing_docs)]
pub struct AttendParams {
    pub tq: u32,
    pub hq: u32,
    pub hkv: u32,
    pub qg: u32,
    pub q_pos0: u32,
    pub window: u32,
    pub sinks: u32,
    pub scale_log2: f32,
    pub vec_total: u32,
    pub vblocks: u32,
    pub tok0: u32,
    pub tok_end: u32,
    pub qk: u32,
    pub qv: u32,
    pub c_end: u32,
    pub r0: u32,
    pub n_split_c: u32,
    pub split_c: u32,
    pub n_split_r: u32,
    pub split_r: u32,
    pub part_c: u32,
    pub part_r: u32,
    pub n_parts: u32,
    pub n_parts_c: u32,
    pub ring_cap_k: u32,
    pub ring_cap_v: u32,
    pub row_words: u32,
    pub direct: u32,
    pub t_total: u32,
    /// [`KeyPositions::offset`] (segment 0's dispatches; 0 without positions).
    pub pos_off: u32,
    /// [`KeyPositions::rows`] in segment 0's dispatches, 0 in the others'.
    pub pos_rows: u32,
    /// [`KeyPositions::evicted`].
    pub evicted: u32,
}

/// Where a cache that evicted tokens keeps its held tokens' absolute positions
/// (spec/attention.md, "Which keys a query sees"; the CPU twin is
/// [`crate::cpu::attend::Positions`]): a positions stream `[rows][Hkv]` u32 in the key side's
/// segment 0, after the codec's streams (the kernels read it through the key segment's binding:
/// they bind 8 storage buffers, the most a device is guaranteed), slot s < `rows` of head h at
/// word `offset + s·Hkv + h`; slot s ≥ `rows` (tokens appended since the last eviction, the
/// residual window) sits at `s + evicted`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyPositions {
    /// Word offset of the positions stream in the key side's segment 0.
    pub offset: usize,
    /// Slots with an entry (the end of the kept units of the last eviction), within segment 0.
    pub rows: usize,
    /// Tokens evicted so far (tokens appended − tokens held).
    pub evicted: usize,
}

/// Largest head width (and value-space width) the kernels hold.
pub const D_MAX: usize = 256;

/// The prefill kernel's output width for rows `width` wide (the wider of D and the value
/// space), rounded up to 64 (`PF_WP` in wgsl/attend/attend_prefill.wgsl).
fn prefill_width(width: usize) -> usize {
    width.div_ceil(64) * 64
}

/// Query vectors per workgroup of the prefill kernel for rows `width` wide (`PF_QB`): 32 up
/// to width 128, 16 beyond (its workgroup storage then stays within 32 KiB).
pub fn prefill_vectors(width: usize) -> usize {
    if prefill_width(width) <= 128 { 32 } else { 16 }
}

/// Workgroup storage (bytes) of the prefill kernel for head width `dim` and rows `width`
/// wide (the wider of D and the value space): the scaled queries (D rounded up to 16 ×
/// `PF_QB`), a tile's keys or values (`PF_TT` × the width rounded up to 64), the scores by
/// part (4 per invocation, which also hold the weights) with the rescale factors (one per
/// vector) and the softmax's maxima (one per invocation), all f32. 27,264 bytes at D = 128,
/// 27,200 at D = 256: within Metal's 32 KiB.
pub fn prefill_workgroup_bytes(dim: usize, width: usize) -> usize {
    let qb = prefill_vectors(width);
    let tt = if prefill_width(width) <= 128 { 16 } else { 8 };
    let scores = 5 * super::kernel::WORKGROUP_SIZE as usize + qb;
    4 * (dim.div_ceil(16) * 16 * qb + tt * prefill_width(width) + scores)
}

/// Query vectors per workgroup of the tensor-core prefill kernel (`TC_QB` in
/// wgsl/attend/attend_prefill_tc.wgsl: four subgroups of 16).
pub const TENSOR_VECTORS: usize = 64;

/// Workgroup storage (bytes) of the tensor-core prefill kernel for head width `dim` and a
/// value space `value_dim` wide (wgsl/attend/attend_prefill_tc.wgsl): in f16 a tile's keys
/// (two parts, channel-major) and values (32 tokens, 16 where D > 128; widths rounded up to
/// 16) and the weights of 64 vectors (two parts), every row 8 f16 longer unless
/// [`tensor_pad`] is off; in f32 their scores and 64 factors; a 16-byte flag; the 64 vectors'
/// row offsets in q (u32). 48,144 bytes at D = 128 (41,488 unpadded), 43,792 at D = 256.
pub fn tensor_workgroup_bytes(dim: usize, value_dim: usize) -> usize {
    let dp = dim.div_ceil(16) * 16;
    let wp = value_dim.max(dim).div_ceil(16) * 16;
    let tt = if dp > 128 { 16 } else { 32 };
    let pad = tensor_pad() as usize;
    let (ks, vs) = (tt + 8 * pad, wp + 8 * pad);
    let v = TENSOR_VECTORS;
    2 * (2 * dp * ks + tt * vs + 2 * v * ks) + 4 * (v * tt + 2 * v) + 16
}

/// Workgroup storage (bytes) of the tensor-core decode kernel for head width `dim`, a value
/// space `value_dim` wide and `groups` value groups (wgsl/attend/attend_decode_tc.wgsl): in
/// f16 a tile's keys and values (32 tokens, 16 where D > 128; widths rounded up to 16), the
/// query's two parts (16 rows) and the weights (16 rows per group), every row 8 f16 longer
/// where D ≤ 128 unless [`tensor_pad`] is off; in f32 the scores and a pass of the
/// tile's output (two passes where the value width is above 128). 40,960 bytes at D = 128
/// with 4 groups.
pub fn tensor_decode_workgroup_bytes(dim: usize, value_dim: usize, groups: usize) -> usize {
    let dp = dim.div_ceil(16) * 16;
    let pad = if dp <= 128 {
        8 * tensor_pad() as usize
    } else {
        0
    };
    let wp = value_dim.max(dim).div_ceil(16) * 16;
    let tt = if dp > 128 { 16 } else { 32 };
    let passes = if wp > 128 && wp.is_multiple_of(64) {
        2
    } else {
        1
    };
    let keys = (dp * (tt + pad)).max(tt * (dp + pad));
    2 * (keys + tt * (wp + pad) + 32 * (dp + pad) + groups * 16 * (tt + pad))
        + 4 * (16 * tt).max(16 * wp / passes)
}

/// Workgroup storage (bytes) of the tensor-core decode kernel for f16 rows on both sides
/// (wgsl/attend/attend_decode_tc_rows.wgsl) at head width `dim`: in f16 a tile's keys and
/// values (32 tokens, 16 where D > 128; the width rounded up to 16), the query's two parts
/// (16 rows) and the weights (16 rows); in f32 the four subgroups' score blocks or a flush
/// pass of the output (up to 128 columns), and 8 words. Rows of K, V and Q″ are 8 f16 longer
/// than D (rounded up to 16) unless [`tensor_pad`] is off. 35,360 bytes at
/// D = 128.
pub fn tensor_decode_rows_workgroup_bytes(dim: usize) -> usize {
    let dp = dim.div_ceil(16) * 16;
    let rs = dp + 8 * tensor_pad() as usize;
    let tt = if dp > 128 { 16 } else { 32 };
    2 * (2 * tt * rs + 32 * rs + 16 * tt) + 4 * 1024usize.max(16 * dp.min(128)) + 32
}

/// Whether the tensor-core kernels (decode and prefill) pad their workgroup rows by 8 f16
/// (their `ATT_TC_PAD`): yes, unless `KVPACK_TC_PAD=0` (measuring only; read once). Unpadded,
/// the rows of a matrix all start on the same banks: the f16-rows decode kernel took 211
/// against 132 µs for the f16 cache at 32k on the H200 (benches/results/h200-2026-12-04-tcrows).
pub fn tensor_pad() -> u32 {
    static PAD: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PAD.get_or_init(|| u32::from(std::env::var("KVPACK_TC_PAD").map_or(true, |v| v != "0")))
}

/// What the tensor-core decode kernel needs to know of a pair's tile hooks
/// ([`crate::attention::gpu::tiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiles {
    /// The value side's groups (their weights each take 16 rows of workgroup storage).
    pub groups: usize,
    /// Whether both sides are f16 rows ([`super::kernel::tensor_decode_rows`]: the kernel's
    /// form with four subgroups per workgroup).
    pub rows: bool,
}

/// The kernel that runs a call's splits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitKernel {
    /// `attend_<k>_<v>`: 4 query vectors per workgroup.
    Decode,
    /// `attend_prefill_<k>_<v>`: the GEMM form on the f32 pipe.
    Prefill,
    /// `attend_prefill_tc_<k>_<v>`: the GEMM form on cooperative matrices (f16 products).
    Tensor,
    /// `attend_decode_tc_<k>_<v>`: 4 query vectors per one-subgroup workgroup on cooperative
    /// matrices; splits cut at the key side's Q (a split's keys all from the codec or all
    /// from the ring); always partials.
    TensorDecode,
}

/// The shape of one attention call.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Query rows.
    pub tq: usize,
    /// Query heads.
    pub hq: usize,
    /// KV heads.
    pub hkv: usize,
    /// Head width.
    pub dim: usize,
    /// Tokens in the cache (T).
    pub tokens: usize,
    /// Options.
    pub opts: AttendOptions,
}

/// How the cache stores the call's tokens.
#[derive(Clone, Copy, Debug)]
pub struct CacheShape {
    /// Keys quantized below this token.
    pub qk: usize,
    /// Values quantized below this token.
    pub qv: usize,
    /// Tokens per segment (both sides split their segments at the same tokens).
    pub seg_tokens: usize,
    /// Rows of the key side's ring and of the value side's (0 or 1 when there is none).
    pub ring_cap: [usize; 2],
    /// u32 words of one f16 row.
    pub row_words: usize,
    /// Width of the value codec's accumulation space.
    pub value_dim: usize,
    /// Whether that space is the output space (then splits are not cut at `qv`: the ring's
    /// values join the codec's accumulator).
    pub value_space_out: bool,
    /// Whether the key codec transforms the query (`K_PREP`: the prefill kernel does not
    /// serve it).
    pub key_prep: bool,
    /// Whether the cache can hold rows in a ring at all (a residual window or a block size
    /// above 1 on either side: fixed for the cache's life). Without one the kernel is built
    /// without its ring paths (`ATT_RING = 0`: fewer registers), and every token must be below
    /// `qk` and `qv`.
    pub ring: bool,
    /// The held tokens' positions, for a cache that evicts (`Some` for a layer under an
    /// eviction policy, fixed for its life: its kernels are built with `ATT_POS = 1` and read
    /// them; `None`: token j at position j, the positions code compiled out).
    pub positions: Option<KeyPositions>,
}

/// One dispatch of the partials kernel.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// The segment index (both sides) its tokens are stored in.
    pub segment: usize,
    /// Its uniform.
    pub params: AttendParams,
    /// Its workgroups.
    pub workgroups: u64,
}

/// Every dispatch of one call.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The partials (or, when `direct`, the output) dispatches, in order.
    pub dispatches: Vec<Dispatch>,
    /// The merge's uniform and workgroups (`None` when one split serves every vector).
    pub merge: Option<(AttendParams, u64)>,
    /// Bytes of the partials buffer (0 when direct).
    pub partial_bytes: u64,
    /// Whether the splits write partials whatever their number (the prefill kernels: then
    /// even one split is merged).
    pub prefill: bool,
    /// The kernel of the splits.
    pub kernel: SplitKernel,
    /// Whether the kernels read positions ([`CacheShape::positions`]: `ATT_POS`).
    pub positions: bool,
}

/// Tokens per split at most on an adapter whose shader loops are limited: lavapipe (Mesa's
/// llvmpipe) ends an invocation's loops after 65,535 iterations counted over all its loops
/// (gallivm's `LP_MAX_TGSI_LOOP_ITERATIONS`), without an error, so a longer split would attend
/// over a part of its tokens. The decode kernel's slices take a split's 32-token tiles in
/// turn (at 65,536 tokens 2,048 times). The prefill kernel loops over 16-token tiles and, in
/// each, over the channels in steps of 16 (at most 8 steps: 4,096 × 9 = 36,864 times), or,
/// with 8-token tiles (widths past 128), over its tiles and one step of a part's channels
/// (8,192 × 2 = 16,384 times). Automatic splits stay far below (2,048 tokens per decode
/// split, 16,384 per prefill split); a longer `chunk_tokens` is refused there.
pub const LOOP_LIMITED_SPLIT: usize = 65_536;

/// [`LOOP_LIMITED_SPLIT`] where the adapter is lavapipe (its Vulkan and GL devices are named
/// `llvmpipe (...)`), else `None`.
pub fn split_cap(info: Option<&wgpu::AdapterInfo>) -> Option<usize> {
    info.filter(|i| i.name.starts_with("llvmpipe"))
        .map(|_| LOOP_LIMITED_SPLIT)
}

/// Workgroups a call aims at on this adapter: about two per streaming multiprocessor where the
/// adapter is known (wgpu exposes no SM count), a small number on CPU adapters.
pub fn split_target(info: Option<&wgpu::AdapterInfo>) -> usize {
    match info {
        Some(i) if i.device_type == wgpu::DeviceType::Cpu => 16,
        // 132 SMs: measured on the H200 (ATTENTION.md's proto: ~264 workgroups at 32k).
        Some(i) if i.name.contains("H100") || i.name.contains("H200") => 264,
        _ => 256,
    }
}

impl Call {
    /// Validates what the kernels can hold.
    pub fn check(&self, value_dim: usize) -> Result<()> {
        if self.dim > D_MAX || value_dim > D_MAX {
            return Err(Error::Config(format!(
                "GPU attention supports head widths (and value spaces) up to {D_MAX} (got D = {}, value space {value_dim})",
                self.dim
            )));
        }
        Ok(())
    }

    /// Query vectors (rows × grouped heads) of each KV head.
    pub fn vectors(&self) -> usize {
        self.tq * (self.hq / self.hkv)
    }

    /// Tokens per split for `target` workgroups: about T·(KV heads)·(vector blocks) / target,
    /// 128 (a tile per slice) to 2048 (64 tiles; measured on the H200, KIVI-4 decode at 128k:
    /// 2048 tokens per split 276 µs against 308 at the former cap of 1024), a
    /// multiple of 32; or the caller's `chunk_tokens`. On the decode kernels, where even
    /// 64-token splits stay within the target (short contexts), 64: half the slices idle but
    /// twice the workgroups (H200, KIVI-4: 43.1 against 48.1 µs at 1k, 44.7 against 49.0 at
    /// 2k; at 3k, where 64 would exceed the target, 61.0 against 49.4 for 128). `per_wg`:
    /// query vectors per workgroup (4 on the decode kernel; the prefill kernel's splits may be
    /// 16 times longer: its workgroups do 8 to 32 times a decode workgroup's work per token).
    pub fn split_tokens(&self, target: usize, per_wg: usize) -> usize {
        if let Some(c) = self.opts.chunk_tokens {
            return c;
        }
        let per_split = self.hkv * self.vectors().div_ceil(per_wg);
        let max = if per_wg > 4 { 16384 } else { 2048 };
        let even = self.tokens * per_split / target.max(1);
        if per_wg <= 4 && even <= 64 {
            return 64;
        }
        even.clamp(128, max).div_ceil(32) * 32
    }

    /// Tokens per split on the tensor-core prefill kernel for `target` workgroups (one wave):
    /// as many splits of a KV head's vector blocks as the target holds, T / ⌊target / (KV
    /// heads · vector blocks)⌋ tokens each (at least one split), 128 to 16,384, a multiple of
    /// 32; or the caller's `chunk_tokens`. Rounding up to 32 only ever makes fewer splits, so
    /// below the cap a call's splits stay within the target (the plan splits the codec's
    /// tokens and the ring's apart: a ring adds its own short splits). Measured on an H100,
    /// 64 rows at 32k (8 splits of 4,096 tokens against the former 17 of 2,016, two waves of
    /// twice the target; BENCHMARKS.md, "Tier 3 prefill: splits in one wave"): f16 808 against
    /// 874 µs, KIVI-4 1,147–1,158 against 1,178, in the same rounds of two processes.
    /// `per_wg`: query vectors per workgroup ([`TENSOR_VECTORS`]).
    pub fn wave_tokens(&self, target: usize, per_wg: usize) -> usize {
        if let Some(c) = self.opts.chunk_tokens {
            return c;
        }
        let per_split = self.hkv * self.vectors().div_ceil(per_wg);
        let splits = (target / per_split.max(1)).max(1);
        self.tokens.div_ceil(splits).clamp(128, 16384).div_ceil(32) * 32
    }

    /// Whether the call runs on the prefill kernel (`opts.kernel`, see [`AttendKernel`]) on
    /// a device without tensor cores; `wg_limit`: the device's workgroup storage.
    pub fn prefill(&self, shape: &CacheShape, wg_limit: usize) -> Result<bool> {
        let no = Err("not asked for".to_string());
        Ok(self.split_kernel(shape, wg_limit, &no, &Err(String::new()))? == SplitKernel::Prefill)
    }

    /// The kernel of the call's splits (`opts.kernel`, see [`AttendKernel`]); `wg_limit`: the
    /// device's workgroup storage; `tensor`: whether the device runs the tensor-core kernels,
    /// or why not ([`crate::Context::tensor_cores`]); `tiles`: whether both codecs' tile
    /// hooks serve the tensor-core decode kernel, with the value side's groups, or why not
    /// ([`crate::codec::Codec::attend_tiles`]).
    pub fn split_kernel(
        &self,
        shape: &CacheShape,
        wg_limit: usize,
        tensor: &std::result::Result<(), String>,
        tiles: &std::result::Result<Tiles, String>,
    ) -> Result<SplitKernel> {
        let width = shape.value_dim.max(self.dim);
        let fits = prefill_workgroup_bytes(self.dim, width) <= wg_limit;
        let tc_bytes = tensor_workgroup_bytes(self.dim, shape.value_dim);
        // Auto picks the tensor-core prefill kernel where the device runs it, the key codec
        // does not transform the query, its storage fits and the call's query vectors per KV
        // head and cached tokens reach one of TENSOR_AUTO's measured pairs; else the decode
        // kernel.
        let auto_tensor = tensor.is_ok()
            && !shape.key_prep
            && tc_bytes <= wg_limit
            && tensor_auto(self.vectors(), self.tokens);
        Ok(match self.opts.kernel {
            AttendKernel::Auto if auto_tensor => SplitKernel::Tensor,
            AttendKernel::Decode | AttendKernel::Auto => SplitKernel::Decode,
            AttendKernel::Tensor if shape.key_prep => {
                return Err(Error::Config(
                    "the tensor-core attention kernel does not serve a key codec that transforms the query"
                        .into(),
                ));
            }
            AttendKernel::Tensor => match tensor {
                Err(reason) => {
                    return Err(Error::PathUnavailable {
                        kernel: "attend_prefill_tc",
                        requested: "tensor".into(),
                        reason: reason.clone(),
                    });
                }
                Ok(()) if tc_bytes > wg_limit => {
                    return Err(Error::Limit {
                        what: "tensor-core attention workgroup storage",
                        needed: tc_bytes as u64,
                        limit: wg_limit as u64,
                    });
                }
                Ok(()) => SplitKernel::Tensor,
            },
            AttendKernel::TensorDecode => {
                let tiles = tiles.clone().and_then(|groups| {
                    if self.dim.is_multiple_of(16) {
                        Ok(groups)
                    } else {
                        Err(format!(
                            "head width {} (a multiple of 16 is needed)",
                            self.dim
                        ))
                    }
                });
                let groups = match (tensor, tiles) {
                    (Err(r), _) => Err(r.clone()),
                    (_, Err(r)) => Err(r),
                    (Ok(()), Ok(g)) => Ok(g),
                };
                let tiles = match groups {
                    Ok(g) => g,
                    Err(reason) => {
                        return Err(Error::PathUnavailable {
                            kernel: "attend_decode_tc",
                            requested: "tensor-decode".into(),
                            reason,
                        });
                    }
                };
                let need = if tiles.rows {
                    tensor_decode_rows_workgroup_bytes(self.dim)
                } else {
                    tensor_decode_workgroup_bytes(self.dim, shape.value_dim, tiles.groups)
                };
                if need > wg_limit {
                    return Err(Error::Limit {
                        what: "tensor-core decode workgroup storage",
                        needed: need as u64,
                        limit: wg_limit as u64,
                    });
                }
                SplitKernel::TensorDecode
            }
            _ => {
                if self.prefill_only(shape, wg_limit, fits, width)? {
                    SplitKernel::Prefill
                } else {
                    SplitKernel::Decode
                }
            }
        })
    }

    fn prefill_only(
        &self,
        shape: &CacheShape,
        wg_limit: usize,
        fits: bool,
        width: usize,
    ) -> Result<bool> {
        match self.opts.kernel {
            AttendKernel::Decode
            | AttendKernel::Auto
            | AttendKernel::Tensor
            | AttendKernel::TensorDecode => Ok(false),
            AttendKernel::Prefill if shape.key_prep => Err(Error::Config(
                "the prefill attention kernel does not serve a key codec that transforms the query"
                    .into(),
            )),
            AttendKernel::Prefill if !fits => Err(Error::Limit {
                what: "prefill attention workgroup storage",
                needed: prefill_workgroup_bytes(self.dim, width) as u64,
                limit: wg_limit as u64,
            }),
            AttendKernel::Prefill => Ok(true),
        }
    }
}

/// Where Auto runs the tensor-core prefill kernel (on a device that has it, for keys that do
/// not transform the query): pairs of (the fewest query vectors per KV head, rows × grouped
/// heads; the fewest cached tokens), a call reaching both of any pair ([`tensor_auto`]); the
/// decode kernel otherwise. Measured on an H100 with the kernel's splits in one wave
/// (BENCHMARKS.md, "Tier 3 prefill: splits in one wave", two processes; f16 / KIVI-4,
/// medians µs, tensor cores against the decode kernel):
/// - 256 vectors (64 rows at GQA 4) from 512 tokens: at 4k 220 / 297 against 324 / 444, at
///   32k 808–820 / 1159 against 2230–2265 / 2771–2815; at 8k 302 / 421 against 608 / 790, at
///   16k 475 / 654 against 1166 / 1452. At 1k it was slower then (162 / 196 against 106 /
///   152: its fixed cost per workgroup) and 2k split (180 / 236 against 175 / 252); since the
///   kernel is built without naga's index clamps (BENCHMARKS.md, "The goals on an H100", the
///   full run of 2026-12-07) it is faster at 1k too: 88 / 132 against 106 / 153 (4k 130 /
///   204 against 327 / 450). At 512 tokens (H100, 2026-12-07, a later session: `7882668`,
///   benches/results/h100-2026-12-07b/call2/pf512.txt) 60 / 85 against 71 / 95; at 256 even
///   for f16 (55 against 55) and slower for KIVI-4 (82 against 71): the decode kernel there.
/// - 64 vectors (16 rows: one of its workgroups) from 4k (16k until 2026-12-07). Measured then,
///   with naga's index clamps: at 16k 231 / 282 against 322 / 423, at 32k 309–311 / 423–425
///   against 588–597 / 747–758, at 128k 767 / 1110 against 2199 / 2724; at 8k split, at 4k
///   slower (160 / 191 against 115 / 159). Without the clamps (H100, 2026-12-07, a later
///   session, one process per length pair, 12 rounds: benches/results/h100-2026-12-07d/) faster
///   from 4k: at 4k 119 / 166 against 175 / 233, at 8k 141 / 200 against 281 / 368, at 16k 132
///   / 188 against 322 / 399, at 32k 185 / 281 against 608 / 711, at 128k 500 / 783 against
///   2206 / 2512 (shorter lengths not measured).
/// - 32 vectors (8 rows) from 16k (128k until 2026-12-07; with the clamps at 16k and below
///   slower, 215 / 265 against 178 / 244). Without them (the same run): at 16k 120 / 183
///   against 180 / 233, at 32k 182 / 283 against 322 / 386, at 128k 528 / 830 against 1141 /
///   1288; at 8k f16 faster (128 against 173) and KIVI-4 even (188 against 187), at 4k f16
///   faster (101 against 116) and KIVI-4 slower (150 against 123).
/// - 16 vectors (4 rows) never: KIVI-4 slower at every length measured (without the clamps: at
///   4k 145 against 91, at 32k 279 against 213, at 128k 825 against 677); f16 about even from
///   16k (at 128k 521 against 601, at 32k 175 against 180) and slower at 4k (95 against 73).
///   The pairs hold for every codec pair, so they follow KIVI.
///
/// Auto asks for the measured points. A choice between two built kernels by the call's size,
/// not a pipeline specialized on it.
pub const TENSOR_AUTO: [(usize, usize); 3] = [(256, 512), (64, 4_096), (32, 16_384)];

/// Whether a call of `vectors` query vectors per KV head over `tokens` cached tokens reaches
/// one of [`TENSOR_AUTO`]'s pairs.
pub fn tensor_auto(vectors: usize, tokens: usize) -> bool {
    TENSOR_AUTO
        .iter()
        .any(|&(v, t)| vectors >= v && tokens >= t)
}

/// The base of every dispatch's uniform (`per_wg` query vectors per workgroup).
fn base(call: &Call, shape: &CacheShape, per_wg: usize) -> AttendParams {
    let qg = call.hq / call.hkv;
    let evicted = shape.positions.map_or(0, |p| p.evicted);
    let scale = call.opts.scale.unwrap_or(1.0 / (call.dim as f32).sqrt());
    AttendParams {
        tq: call.tq as u32,
        hq: call.hq as u32,
        hkv: call.hkv as u32,
        qg: qg as u32,
        q_pos0: (call.tokens + evicted - call.tq) as u32,
        window: call.opts.window.unwrap_or(0) as u32,
        sinks: call.opts.sinks as u32,
        scale_log2: scale * std::f32::consts::LOG2_E,
        vec_total: call.vectors() as u32,
        vblocks: call.vectors().div_ceil(per_wg) as u32,
        qk: shape.qk as u32,
        qv: shape.qv as u32,
        ring_cap_k: shape.ring_cap[0].max(1) as u32,
        ring_cap_v: shape.ring_cap[1].max(1) as u32,
        row_words: shape.row_words as u32,
        t_total: call.tokens as u32,
        pos_off: shape.positions.map_or(0, |p| p.offset) as u32,
        evicted: evicted as u32,
        ..Default::default()
    }
}

/// Plans a call (see the module docs). `max_binding` bounds the partials buffer: splits grow
/// until it fits. `prefill`: the splits run on the prefill kernel ([`Call::prefill`]; it
/// writes partials only, so even one split is merged), else on the decode kernel.
pub fn plan(
    call: &Call,
    shape: &CacheShape,
    target: usize,
    max_binding: u64,
    prefill: bool,
) -> Result<Plan> {
    let kernel = if prefill {
        SplitKernel::Prefill
    } else {
        SplitKernel::Decode
    };
    plan_kernel(call, shape, target, max_binding, kernel)
}

/// [`plan`] for any kernel of the splits ([`Call::split_kernel`]).
pub fn plan_kernel(
    call: &Call,
    shape: &CacheShape,
    target: usize,
    max_binding: u64,
    kernel: SplitKernel,
) -> Result<Plan> {
    let prefill = kernel != SplitKernel::Decode;
    call.check(shape.value_dim)?;
    let t = call.tokens;
    if !shape.ring && (shape.qk < t || shape.qv < t) {
        return Err(Error::Config(format!(
            "attention plan: tokens {}..{t} are not quantized but the cache has no ring",
            shape.qk.min(shape.qv)
        )));
    }
    let st = shape.seg_tokens.max(1);
    if let Some(p) = shape.positions {
        if p.rows > t.min(st) || t + p.evicted > u32::MAX as usize {
            return Err(Error::Config(format!(
                "attention plan: {} positions for a cache of {t} tokens, {st} per segment \
                 ({} evicted): the positions table covers held slots of segment 0",
                p.rows, p.evicted
            )));
        }
    }
    let pw = shape.value_dim.max(call.dim) + 2;
    let per_part = (call.hkv * call.vectors() * pw * 4) as u64;
    let per_wg = match kernel {
        SplitKernel::Prefill => prefill_vectors(shape.value_dim.max(call.dim)),
        SplitKernel::Tensor => TENSOR_VECTORS,
        SplitKernel::Decode | SplitKernel::TensorDecode => 4,
    };
    let mut split = if kernel == SplitKernel::Tensor {
        call.wave_tokens(target, per_wg)
    } else {
        call.split_tokens(target, per_wg)
    };
    loop {
        let mut dispatches = Vec::new();
        let (mut n_c, mut n_r) = (0usize, 0usize);
        let mut d = 0;
        while d * st < t {
            let tok0 = d * st;
            let tok_end = ((d + 1) * st).min(t);
            // Cut at qv only where the ring's values cannot join the codec's accumulator; the
            // tensor-core decode kernel cuts at qk (its tiles' keys come from one source).
            let cut = if kernel == SplitKernel::TensorDecode {
                shape.qk
            } else if shape.value_space_out {
                tok_end
            } else {
                shape.qv
            };
            let c_end = cut.min(tok_end).max(tok0);
            let r0 = cut.max(tok0).min(tok_end);
            let sc = (c_end - tok0).div_ceil(split);
            let sr = (tok_end - r0).div_ceil(split);
            dispatches.push((d, tok0, tok_end, c_end, r0, sc, sr, n_c, n_r));
            n_c += sc;
            n_r += sr;
            d += 1;
        }
        let n_parts = n_c + n_r;
        let direct = n_parts == 1 && !prefill;
        let bytes = if direct { 0 } else { per_part * n_parts as u64 };
        if bytes > max_binding {
            if split >= t.div_ceil(32) * 32 {
                return Err(Error::Limit {
                    what: "attention partials (one split per segment)",
                    needed: bytes,
                    limit: max_binding,
                });
            }
            split *= 2;
            continue;
        }
        let b = base(call, shape, per_wg);
        let vb = b.vblocks as u64;
        let plans = dispatches
            .into_iter()
            .map(|(d, tok0, tok_end, c_end, r0, sc, sr, pc, pr)| Dispatch {
                segment: d,
                params: AttendParams {
                    tok0: tok0 as u32,
                    tok_end: tok_end as u32,
                    c_end: c_end as u32,
                    r0: r0 as u32,
                    n_split_c: sc as u32,
                    split_c: split as u32,
                    n_split_r: sr as u32,
                    split_r: split as u32,
                    part_c: pc as u32,
                    part_r: (n_c + pr) as u32,
                    n_parts: n_parts as u32,
                    n_parts_c: n_c as u32,
                    direct: u32::from(direct),
                    pos_rows: if d == 0 {
                        shape.positions.map_or(0, |p| p.rows) as u32
                    } else {
                        0
                    },
                    ..b
                },
                workgroups: call.hkv as u64 * vb * (sc + sr) as u64,
            })
            .collect();
        let merge = (!direct).then(|| {
            (
                AttendParams {
                    n_parts: n_parts as u32,
                    n_parts_c: n_c as u32,
                    ..b
                },
                (call.hkv * call.vectors()) as u64,
            )
        });
        return Ok(Plan {
            dispatches: plans,
            merge,
            partial_bytes: bytes,
            prefill,
            kernel,
            positions: shape.positions.is_some(),
        });
    }
}

/// The largest workgroup memory (bytes) a value hook of this library declares on top of the
/// core's (TurboQuant's 8+8-bit RVQ centroids, 2 × 256 f32): reserved when a key codec picks
/// the form of its prepared query at construction, before the value codec is known.
pub const VALUE_HOOK_RESERVE: usize = 2 * 256 * 4;

/// Whether a key hook's prepared query of `k_prep` vec4 entries and `k_bytes` of its own
/// workgroup memory fit the partials kernel for head width `dim` on a device with `limit`
/// bytes of workgroup storage, whatever the value codec: its space taken as wide as D's
/// largest rotation (the next power of two) and its own memory as [`VALUE_HOOK_RESERVE`].
pub fn key_prep_fits(dim: usize, k_prep: usize, k_bytes: usize, limit: usize) -> bool {
    workgroup_bytes(dim, k_prep, dim.next_power_of_two()) + k_bytes + VALUE_HOOK_RESERVE <= limit
}

/// Workgroup storage (bytes) the partials kernel needs for head width `dim`, a key codec's
/// prepared query of `k_prep` vec4 (0: none) and a value space `value_dim` wide, on the larger
/// of its variants: `wsm` holds one region of max(value_dim, dim) per slice of 32 invocations
/// (the subgroup variant's merge of the slices) or 4 vec4 per invocation (the workgroup
/// variant's exchanges).
pub fn workgroup_bytes(dim: usize, k_prep: usize, value_dim: usize) -> usize {
    let r_cpl = dim.div_ceil(8);
    let wg = super::kernel::partials_workgroup_size() as usize;
    let wsm = (value_dim.max(dim) * (wg / 32)).max(4 * wg);
    16 * (8 * r_cpl + k_prep.max(1) + wsm + 8) + 4 * value_dim.max(dim)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefill kernel fits Metal's 32 KiB of threadgroup memory at every head width and
    /// value space the GPU kernels hold, and fills it at D = 128 and 256.
    #[test]
    fn prefill_storage_within_32_kib() {
        let mut largest = 0;
        for dim in 1..=D_MAX {
            for width in dim..=D_MAX {
                let b = prefill_workgroup_bytes(dim, width);
                assert!(b <= 32_768, "D = {dim}, width {width}: {b} bytes");
                largest = largest.max(b);
            }
        }
        assert_eq!(prefill_workgroup_bytes(128, 128), 27_264);
        assert_eq!(prefill_workgroup_bytes(256, 256), 27_200);
        assert_eq!(largest, 27_264);
    }

    /// The tensor-core prefill kernel's splits come in one wave: at 32 query heads over 8 KV
    /// heads, 64 rows (four 64-vector blocks per KV head) and 264 target workgroups, 8 splits
    /// of T / 8 (at twice the target, the rule before, 17 of 2,016 at 32k: 544 workgroups, a
    /// short third wave); the plan's dispatches hold no more workgroups than the target.
    #[test]
    fn tensor_splits_fill_one_wave() {
        let call = |tokens, tq| Call {
            tq,
            hq: 32,
            hkv: 8,
            dim: 128,
            tokens,
            opts: crate::AttendOptions::default(),
        };
        let shape = |tokens| CacheShape {
            qk: tokens,
            qv: tokens,
            seg_tokens: 1 << 20,
            ring_cap: [1, 1],
            row_words: 64,
            value_dim: 128,
            value_space_out: false,
            key_prep: false,
            ring: false,
            positions: None,
        };
        for (tokens, tq, split) in [
            (32_768, 64, 4096),
            (131_072, 64, 16_384),
            (4096, 64, 512),
            (1024, 64, 128),
            (32_768, 16, 1024),
            (4096, 16, 128),
            (32_768, 256, 16_384),
        ] {
            let c = call(tokens, tq);
            let got = c.wave_tokens(264, TENSOR_VECTORS);
            assert_eq!(got, split, "T = {tokens}, Tq = {tq}");
            let plan =
                plan_kernel(&c, &shape(tokens), 264, u64::MAX, SplitKernel::Tensor).expect("plan");
            let wgs: u64 = plan.dispatches.iter().map(|d| d.workgroups).sum();
            let blocks = 8 * (tq * 4).div_ceil(TENSOR_VECTORS) as u64;
            assert_eq!(
                wgs,
                tokens.div_ceil(split) as u64 * blocks,
                "T = {tokens}, Tq = {tq}"
            );
            // One wave where the cap of 16,384 tokens and the floor of 128 allow it.
            if split < 16_384 && split > 128 {
                assert!(wgs <= 264, "T = {tokens}, Tq = {tq}: {wgs} workgroups");
            }
        }
        assert_eq!(call(32_768, 64).split_tokens(528, TENSOR_VECTORS), 2016);
        // Longer than 8 · 16,384 tokens: the cap, more waves.
        assert_eq!(call(262_144, 64).wave_tokens(264, TENSOR_VECTORS), 16_384);
        // A target below one split's workgroups: one split per vector block.
        assert_eq!(call(4096, 64).wave_tokens(16, TENSOR_VECTORS), 4096);
        // The caller's chunk wins.
        let mut c = call(32_768, 64);
        c.opts.chunk_tokens = Some(2048);
        assert_eq!(c.wave_tokens(264, TENSOR_VECTORS), 2048);
    }
}

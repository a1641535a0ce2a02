//! Attention that reads a compressed cache in its stored form (docs/contracts/attention.md).
//!
//! **One core, codec hooks** (docs/contracts/attention.md "The codec hooks"). The core owns tiling,
//! masks, the online softmax, grouped-query sharing, splits and their merge, and the residual
//! window; a key codec and a value codec (any pair) plug in:
//! - on the CPU, through the hooks of [`crate::codec::Codec`] (prepare_query, score, value,
//!   finish_output); [`crate::cpu::attend::attend`] is the core;
//! - on the GPU, through their hook files (`wgsl/<codec>/attend_k.wgsl`, `attend_v.wgsl`, and
//!   the MSL twins) composed with the core per pair ([`kernel`]): a lane owns a slice of a
//!   32-token tile's stored words, the key hook returns its partial scores, the value hook
//!   accumulates weighted values in its own space; [`plan`] cuts a call into splits, [`gpu`]
//!   records it.

pub mod gpu;
pub mod kernel;
pub mod plan;

use crate::error::{Error, Result};

/// Options of one attention call: `AttendOptions::new().window(256).sinks(4)` (the type is
/// `#[non_exhaustive]`: build it with [`AttendOptions::new`] and the setters, so that a new
/// option is not a breaking change).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct AttendOptions {
    /// Score scale; `None` is 1/√D.
    pub scale: Option<f32>,
    /// Sliding window W: key j is visible to the query at position p when j > p − W
    /// (and j ≤ p), unless j is one of the first `sinks` tokens.
    pub window: Option<usize>,
    /// Attention sinks: the first `sinks` tokens stay visible under a window.
    pub sinks: usize,
    /// GPU tuning: tokens per split, the work of one workgroup (a multiple of 32; `None`:
    /// automatic, see [`plan::Call::split_tokens`]). Grown automatically when the partials
    /// would not fit a binding. Changes speed only (and the f32 summation order).
    pub chunk_tokens: Option<usize>,
    /// GPU: which partials kernel serves the call (changes speed and the f32 summation
    /// order only). The CPU path has one form and ignores it.
    pub kernel: AttendKernel,
}

impl AttendOptions {
    /// The defaults: scale 1/√D, no window, no sinks, automatic splits and kernel.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the score scale (`None`: 1/√D).
    pub fn scale(mut self, scale: impl Into<Option<f32>>) -> Self {
        self.scale = scale.into();
        self
    }

    /// Sets the sliding window W in tokens (`None`: no window).
    pub fn window(mut self, window: impl Into<Option<usize>>) -> Self {
        self.window = window.into();
        self
    }

    /// Sets the number of attention sinks kept visible under a window.
    pub fn sinks(mut self, sinks: usize) -> Self {
        self.sinks = sinks;
        self
    }

    /// Sets the tokens per split on the GPU (`None`: automatic).
    pub fn chunk_tokens(mut self, chunk_tokens: impl Into<Option<usize>>) -> Self {
        self.chunk_tokens = chunk_tokens.into();
        self
    }

    /// Sets the GPU kernel of the call's splits.
    pub fn kernel(mut self, kernel: AttendKernel) -> Self {
        self.kernel = kernel;
        self
    }
}

/// The GPU kernel of an attention call's splits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttendKernel {
    /// The faster kernel as measured: the tensor-core prefill kernel ([`AttendKernel::Tensor`])
    /// where the device has it, the key codec does not transform the query and the call's
    /// query vectors per KV head and cached tokens reach one of [`plan::TENSOR_AUTO`]'s pairs
    /// (256 vectors from 512 tokens, 64 from 4k, 32 from 16k; on an H100 a 64-row chunk of
    /// KIVI-4 at 32k takes 0.84 ms there against 2.6 on the decode kernel, at 4k 0.21 against
    /// 0.43, at 1k 0.13 against 0.14, at 512 0.085 against 0.095; f16 products, the 1e-3
    /// bound); the decode kernel for
    /// every other call (shorter caches and fewer rows, where the tensor-core and f32 prefill
    /// kernels are slower or were not measured: BENCHMARKS.md, "Tier 3 prefill: splits in one
    /// wave", "The goals on an H100").
    #[default]
    Auto,
    /// Four query vectors per workgroup, a lane owning 8 tokens × a slice of the stored
    /// words (`attend_<k>_<v>`: the decode kernel).
    Decode,
    /// 32 query vectors per workgroup (16 beyond a width of 128), every tile's keys and
    /// values read once into workgroup memory, an invocation's scores 4 vectors × 1 token
    /// (summed over four parts of the channels past a width of 128), the softmax spread over
    /// the workgroup, the output in register tiles (`attend_prefill_<k>_<v>`: the GEMM form of a prefill chunk; correct on every
    /// path; about 1.7× slower than the decode kernel on the H200 with 64-row chunks:
    /// BENCHMARKS.md, "Prefill chunks"). An error for a key codec that transforms the query,
    /// or where the workgroup storage does not fit.
    Prefill,
    /// The prefill kernel's GEMM form on tensor cores (`attend_prefill_tc_<k>_<v>`: wgpu's
    /// experimental cooperative matrices, 16×16×16 f16 products with f32 accumulation, 64
    /// query vectors per workgroup): within docs/contracts/attention.md's f16-product bound (relative L2
    /// ≤ 1e-3 per row) of the f32 kernels, not their 1e-4. [`crate::Error::PathUnavailable`]
    /// where the device cannot run it ([`crate::Context::tensor_cores`] says why), an error
    /// for a key codec that transforms the query.
    Tensor,
    /// The decode kernel on tensor cores (`attend_decode_tc_<k>_<v>`,
    /// wgsl/attend/attend_decode_tc.wgsl: one subgroup per (KV head, 4 query vectors, split),
    /// raw codes as 16×16×16 f16 MMA operands with the codecs' scales folded into the query
    /// and into the softmax weights, f32 accumulation): the f16-product bound (relative L2 ≤
    /// 1e-3 per row). For pairs whose codecs have tile hooks (KIVI with whole-word codes, the
    /// f16 cache: [`crate::codec::Codec::attend_tiles`]) and head widths a multiple of 16;
    /// [`crate::Error::PathUnavailable`] elsewhere, or where the device cannot run it.
    TensorDecode,
}

/// Checks q `[Tq, Hq, D]` against a cache of `t` tokens, `hkv` heads of width `d`; returns Tq.
pub fn check_query(
    q_len: usize,
    hq: usize,
    hkv: usize,
    d: usize,
    t: usize,
    opts: &AttendOptions,
) -> Result<usize> {
    if hq == 0 || !hq.is_multiple_of(hkv) {
        return Err(Error::Shape {
            what: "q",
            message: format!("{hq} query heads is not a positive multiple of {hkv} KV heads"),
        });
    }
    if !q_len.is_multiple_of(hq * d) || q_len == 0 {
        return Err(Error::Shape {
            what: "q",
            message: format!(
                "{q_len} values is not a whole, non-empty number of [Hq={hq}, D={d}] rows"
            ),
        });
    }
    let tq = q_len / (hq * d);
    if tq > t {
        return Err(Error::Shape {
            what: "q",
            message: format!(
                "{tq} query rows but the cache holds {t} tokens (queries are the last Tq tokens)"
            ),
        });
    }
    if opts.chunk_tokens.is_some_and(|c| c == 0 || c % 32 != 0) {
        return Err(Error::Config(
            "chunk_tokens must be a positive multiple of 32".into(),
        ));
    }
    if opts.window == Some(0) {
        return Err(Error::Config(
            "a sliding window of 0 tokens sees nothing".into(),
        ));
    }
    if let Some(s) = opts.scale {
        if !s.is_finite() {
            return Err(Error::NonFinite {
                what: "scale",
                index: 0,
                value: s,
            });
        }
    }
    Ok(tq)
}

/// Rejects NaN/Inf in a query.
pub fn check_finite(q: &[f32]) -> Result<()> {
    match q.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::NonFinite {
            what: "q",
            index: i,
            value: q[i],
        }),
        None => Ok(()),
    }
}

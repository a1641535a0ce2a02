//! Attention that reads a compressed cache in its stored form (../shared/spec/attention.md).
//!
//! **The codec interface.** A codec tells attention how to score a query against its stored
//! keys and how to accumulate its stored values, reconstructing one token at a time in
//! registers; the online-softmax machinery is written once:
//! - on the CPU, a codec implements the hooks of [`crate::codec::Codec`] (prepare_query,
//!   score, value, finish_output) and [`crate::cpu::attend::attend`] is the core;
//! - on the GPU, a codec is a WGSL/MSL file that defines `codec_key(pos, h, d)` and
//!   `codec_value(pos, h, d)` over its own bindings (3..); the shared core
//!   (`wgsl/attend/attend_core.wgsl`) turns it into a partial-attention kernel over a chunk of
//!   tokens, and `attend_merge` combines the chunks' (max, sum, accumulator) triples
//!   (flash-decoding). KIVI (packed codes) and f16 (the uncompressed baseline, also KIVI's
//!   residual window) are the first two codecs.

pub mod gpu;

use crate::error::{Error, Result};

/// Options of one attention call.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttendOptions {
    /// Score scale; `None` is 1/√D.
    pub scale: Option<f32>,
    /// Sliding window W: key j is visible to the query at position p when j > p − W
    /// (and j ≤ p), unless j is one of the first `sinks` tokens.
    pub window: Option<usize>,
    /// Attention sinks: the first `sinks` tokens stay visible under a window.
    pub sinks: usize,
    /// GPU tuning: tokens per flash-decoding chunk (a multiple of 32; `None`: automatic, see
    /// [`gpu::Call::chunk_tokens`]). Grown automatically when the partials would not fit a
    /// binding.
    pub chunk_tokens: Option<usize>,
    /// GPU tuning hint: stage each 32-token tile of packed KIVI words in workgroup memory
    /// before decoding it (`Some(true)`: in every region whose layout allows it, i.e. a key
    /// group that is a multiple of 32 and a 32-aligned start, and where the device's workgroup
    /// storage holds the stage) instead of reading every code from the cache's buffers
    /// (`None`, `Some(false)`). Changes speed only, never results. Off by default: on the
    /// H200 it was 2–14 % slower for decode and 4–10 % slower for 64-row prefill chunks
    /// (BENCHMARKS.md); devices with weaker caches may differ.
    pub stage_tiles: Option<bool>,
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
    if hq == 0 || hq % hkv != 0 {
        return Err(Error::Shape {
            what: "q",
            message: format!("{hq} query heads is not a positive multiple of {hkv} KV heads"),
        });
    }
    if q_len % (hq * d) != 0 || q_len == 0 {
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

//! The uncompressed f16 codec: the speed and quality baseline every method is measured
//! against (`f16`), and a valid side of any pair (`kivi:bits=2/f16`). One block is one token;
//! one stream, `rows` `[H·D/2]` u32 words per token (two f16 per word, element 2i in the low
//! half, odd rows padded), the same rows the residual window keeps.

use std::fmt;
use std::sync::Arc;

use crate::attention::kernel::{self, AttendHooks};
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::context::{Context, KernelPath, PathChoice};
use crate::error::Result;
use crate::method::types::{MethodRow, Options, SideConfig, Sides};
use crate::store::input::{f16_rows_to_words, words_to_f16_rows};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

pub mod kernels;

/// The `f16` row.
pub static ROW: MethodRow = MethodRow {
    name: "f16",
    summary: "uncompressed f16 K/V (the baseline)",
    sides: Sides::Both,
    options: &[],
    default_residual: 0,
    parse,
    short: |_| None,
};

fn parse(side: Side, _both: bool, _o: &Options) -> Result<Arc<dyn SideConfig>> {
    Ok(Arc::new(F16Side(side)))
}

/// The f16 side's (empty) settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct F16Side(pub Side);

impl fmt::Display for F16Side {
    fn fmt(&self, _f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}

impl SideConfig for F16Side {
    fn method(&self) -> &'static str {
        "f16"
    }
    fn side(&self) -> Side {
        self.0
    }
    fn block_tokens(&self) -> usize {
        1
    }
    fn bits_per_value(&self, _g: Geometry) -> f64 {
        16.0
    }
    fn build(
        &self,
        ctx: &Context,
        g: Geometry,
        _residual: usize,
        _layer: usize,
        choice: PathChoice,
    ) -> Result<Arc<dyn Codec>> {
        Ok(Arc::new(F16Codec::new(ctx, self.0, g, choice)?))
    }
}

/// The f16 codec of one side.
#[derive(Debug)]
pub struct F16Codec {
    side: Side,
    g: Geometry,
    path: KernelPath,
    streams: [Stream; 1],
}

impl F16Codec {
    /// The codec on `choice` (the path of the f16 attention kernel decides CPU or GPU).
    pub fn new(ctx: &Context, side: Side, g: Geometry, choice: PathChoice) -> Result<Self> {
        // No kernel of its own: the path of its attention kernel decides.
        let path = ctx.resolve(
            kernel::partials(&kernels::ATTEND_HOOKS, &kernels::ATTEND_HOOKS),
            choice,
        )?;
        if path.is_gpu() {
            crate::codec::require_gpu(ctx, "f16 cache")?;
        }
        Ok(Self {
            side,
            g,
            path,
            streams: [Stream::halves("rows", StreamKind::Codes, g.heads, g.dim)],
        })
    }
}

impl Codec for F16Codec {
    fn method(&self) -> &'static str {
        "f16"
    }
    fn settings(&self) -> String {
        String::new()
    }
    fn side(&self) -> Side {
        self.side
    }
    fn geometry(&self) -> Geometry {
        self.g
    }
    fn path(&self) -> KernelPath {
        self.path
    }
    fn block_tokens(&self) -> usize {
        1
    }
    fn streams(&self) -> &[Stream] {
        &self.streams
    }

    fn encode(
        &self,
        _first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let rows = crate::codec::rows_from(self.g, blocks, x);
        out[0] = f16_rows_to_words(self.g.token_elems(), &rows);
        Ok(())
    }

    fn check_words(&self, words: &Words<'_>, _blocks: usize) -> Result<()> {
        // Rows (padding halves of odd rows are zero, hence finite).
        match crate::codec::first_non_finite_f16(words[0]) {
            Some((index, value)) => Err(crate::error::Error::NonFinite {
                what: "stored f16 rows",
                index,
                value,
            }),
            None => Ok(()),
        }
    }

    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()> {
        let rows = words_to_f16_rows(self.g.token_elems(), words[0], blocks);
        for (o, r) in out.iter_mut().zip(rows) {
            *o = r.to_f32();
        }
        Ok(())
    }

    fn encode_gpu(
        &self,
        _ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &EncodeSource<'_>,
        dst: &SegmentRef<'_>,
        blocks: usize,
        _status: &wgpu::Buffer,
    ) -> Result<()> {
        // Rows are stored as they are: copies, no kernel.
        let rb = (self.g.row_words() * 4) as u64;
        let (offset, _) = dst.ranges[0];
        let at = |s: usize| offset + (dst.block + s - src.start) as u64 * rb;
        let end = src.start + blocks;
        let mut s = src.start;
        while s < end.min(src.t_old) {
            let slot = s % src.ring_tokens;
            let run = (end.min(src.t_old) - s).min(src.ring_tokens - slot);
            enc.copy_buffer_to_buffer(
                src.ring,
                slot as u64 * rb,
                dst.buffer,
                at(s),
                run as u64 * rb,
            );
            s += run;
        }
        if s < end {
            enc.copy_buffer_to_buffer(
                src.incoming,
                src.incoming_at + (s - src.inc_start) as u64 * rb,
                dst.buffer,
                at(s),
                (end - s) as u64 * rb,
            );
        }
        Ok(())
    }

    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        let (rw, d) = (self.g.row_words(), self.g.dim);
        match self.side {
            Side::Keys => crate::cpu::f16::attend_k::f16_row(words[0], rw, d, j, h, out),
            Side::Values => crate::cpu::f16::attend_v::value_row(words[0], rw, d, j, h, out),
        }
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::ATTEND_HOOKS
    }

    /// Rows of f16, read by the tensor-core decode kernel itself (wgsl/f16/attend_kt.wgsl).
    fn attend_tiles(&self) -> std::result::Result<usize, String> {
        Ok(1)
    }
}

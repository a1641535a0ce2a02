//! The [`Codec`] of one KIVI side: keys (per channel over blocks of `G` tokens; streams
//! `codes` `[H][D][key_group_words]` and `params` `[H][D][1 or 2]` per block) or values (per
//! token over channel groups; streams `codes` `[G][H][value_row_words]` and `params`
//! `[G][H][value_groups][1 or 2]` per block of `G` tokens). Layout: [`super::layout`].

use super::config::KiviSide;
use super::kernels;
use super::layout::{Layout, ParamStorage};
use super::plans;
use crate::attention::kernel::AttendHooks;
use crate::codec::{Codec, EncodeSource, SegmentRef, Stream, Words};
use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu::kivi::kivi_quant_keys::ParamOverflow;
use crate::cpu::kivi::{attend_k, attend_v};
use crate::cpu::kivi::{
    kivi_dequant_keys, kivi_dequant_values, kivi_quant_keys, kivi_quant_values,
};
use crate::error::{Error, Result};
use crate::gpu::{self, Bind};
use crate::store::memory::StreamKind;
use crate::store::{Geometry, Side};

/// One KIVI side (see the module docs).
#[derive(Debug)]
pub struct KiviCodec {
    cfg: KiviSide,
    l: Layout,
    quant: KernelPath,
    dequant: KernelPath,
    streams: [Stream; 2],
}

/// The error of a group whose (scale, lo) f16 storage cannot hold.
pub(crate) fn overflow_error(o: ParamOverflow, what: &str) -> Error {
    Error::Config(format!(
        "{what} group at token {}, head {}, index {} has a scale or lo that f16 parameter storage \
         cannot hold (use f32 parameters or more bits)",
        o.token, o.head, o.index
    ))
}

impl KiviCodec {
    /// The codec for `cfg` with layout `l`, its kernels resolved on `ctx` for `choice`.
    pub fn new(ctx: &Context, cfg: KiviSide, l: Layout, choice: PathChoice) -> Result<Self> {
        let (quant_def, dequant_def) = match cfg.side {
            Side::Keys => (&kernels::KIVI_QUANT_KEYS, &kernels::KIVI_DEQUANT_KEYS),
            Side::Values => (plans::values_kernel(&l), &kernels::KIVI_DEQUANT_VALUES),
        };
        let quant = ctx.resolve(quant_def, choice)?;
        let dequant = ctx.resolve(dequant_def, choice)?;
        if quant.is_gpu() {
            crate::codec::require_gpu(ctx, "kivi cache")?;
        }
        // Keys: one head-major row per block; values: G token rows, each head-major.
        let (rows, codes, params) = match cfg.side {
            Side::Keys => (
                1,
                l.key_block_words() / l.heads,
                l.key_block_param_words() / l.heads,
            ),
            Side::Values => (
                l.key_group,
                l.value_token_words() / l.heads,
                l.value_token_param_words() / l.heads,
            ),
        };
        Ok(Self {
            cfg,
            l,
            quant,
            dequant,
            streams: [
                Stream::words("codes", StreamKind::Codes, l.heads, rows, codes),
                Stream::words("params", StreamKind::Params, l.heads, rows, params),
            ],
        })
    }

    /// The KIVI layout (its side's fields).
    pub fn layout(&self) -> &Layout {
        &self.l
    }
}

impl Codec for KiviCodec {
    fn method(&self) -> &'static str {
        "kivi"
    }

    fn settings(&self) -> String {
        self.cfg.to_string()
    }

    fn side(&self) -> Side {
        self.cfg.side
    }

    fn geometry(&self) -> Geometry {
        Geometry {
            heads: self.l.heads,
            dim: self.l.dim,
        }
    }

    fn path(&self) -> KernelPath {
        self.quant
    }

    fn block_tokens(&self) -> usize {
        self.l.key_group
    }

    fn streams(&self) -> &[Stream] {
        &self.streams
    }

    fn encode(
        &self,
        first: usize,
        blocks: usize,
        x: &dyn Fn(usize, usize, usize) -> f32,
        out: &mut [Vec<u32>],
    ) -> Result<()> {
        let l = &self.l;
        let [codes, params] = out else {
            return Err(Error::LengthMismatch {
                what: "kivi streams",
                expected: 2,
                actual: out.len(),
            });
        };
        *codes = vec![0u32; blocks * self.streams[0].words_per_block];
        *params = vec![0u32; blocks * self.streams[1].words_per_block];
        let shift = |o: ParamOverflow| ParamOverflow {
            token: o.token + first,
            ..o
        };
        match self.cfg.side {
            Side::Keys => kivi_quant_keys::kivi_quant_keys(l, blocks, x, codes, params)
                .map_err(|o| overflow_error(shift(o), "key")),
            Side::Values => {
                kivi_quant_values::kivi_quant_values(l, blocks * l.key_group, x, codes, params)
                    .map_err(|o| overflow_error(shift(o), "value"))
            }
        }
    }

    fn check_words(&self, words: &Words<'_>, _blocks: usize) -> Result<()> {
        // Every params word is (scale, lo): two f16 halves, or f32 bits.
        let bad = match self.l.params {
            ParamStorage::F16 => crate::codec::first_non_finite_f16(words[1]),
            ParamStorage::F32 => words[1]
                .iter()
                .map(|w| f32::from_bits(*w))
                .enumerate()
                .find(|(_, x)| !x.is_finite()),
        };
        match bad {
            Some((index, value)) => Err(Error::NonFinite {
                what: "stored kivi (scale, lo) parameters",
                index,
                value,
            }),
            None => Ok(()),
        }
    }

    fn decode(&self, words: &Words<'_>, blocks: usize, out: &mut [f32]) -> Result<()> {
        let l = &self.l;
        match self.cfg.side {
            Side::Keys => kivi_dequant_keys::kivi_dequant_keys(l, blocks, words[0], words[1], out),
            Side::Values => kivi_dequant_values::kivi_dequant_values(
                l,
                blocks * l.key_group,
                words[0],
                words[1],
                out,
            ),
        }
        Ok(())
    }

    fn encode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &EncodeSource<'_>,
        dst: &SegmentRef<'_>,
        blocks: usize,
        status: &wgpu::Buffer,
    ) -> Result<()> {
        let qs = src.rows();
        let plan = match self.cfg.side {
            Side::Keys => plans::plan_quant_keys_from(&self.l, blocks, qs, dst.block),
            Side::Values => plans::plan_quant_values_from(
                &self.l,
                blocks * self.l.key_group,
                qs,
                dst.block * self.l.key_group,
            ),
        };
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.quant,
            &plan,
            &[
                Bind::from(src.ring),
                src.incoming_bind(),
                dst.stream(0),
                dst.stream(1),
                Bind::from(status),
            ],
        )
    }

    fn needs_status(&self) -> bool {
        // Only 1-bit codes can make a scale (the whole range) that f16 storage cannot hold.
        self.l.params == ParamStorage::F16 && self.cfg.bits == 1
    }

    fn status_error(&self, _status: u32, first: usize) -> Error {
        // The only flag KIVI's quantize kernels raise: a (scale, lo) f16 cannot hold.
        overflow_error(
            ParamOverflow {
                token: first,
                head: 0,
                index: 0,
            },
            &format!(
                "a {} (first token of the failed flush; exact group on the CPU path)",
                if self.cfg.side == Side::Keys {
                    "key"
                } else {
                    "value"
                }
            ),
        )
    }

    fn decode_gpu(
        &self,
        ctx: &Context,
        enc: &mut wgpu::CommandEncoder,
        src: &SegmentRef<'_>,
        blocks: usize,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let l = &self.l;
        let plan = match self.cfg.side {
            Side::Keys => plans::plan_dequant_keys(l, blocks * l.key_group, src.block),
            Side::Values => {
                plans::plan_dequant_values(l, blocks * l.key_group, src.block * l.key_group)
            }
        };
        gpu::encode_plan_bound(
            ctx,
            enc,
            self.dequant,
            &plan,
            &[src.stream(0), src.stream(1), Bind::from(out)],
        )
    }

    fn gpu_decodes(&self) -> bool {
        true
    }

    fn row(&self, words: &Words<'_>, j: usize, h: usize, out: &mut [f32]) {
        match self.cfg.side {
            Side::Keys => attend_k::key_row(&self.l, words[0], words[1], j, h, out),
            Side::Values => attend_v::value_row(&self.l, words[0], words[1], j, h, out),
        }
    }

    fn attend_hooks(&self) -> &'static AttendHooks {
        &kernels::ATTEND_HOOKS
    }

    fn attend_spec(&self) -> Vec<(&'static str, u32)> {
        let f16 = u32::from(self.l.params == ParamStorage::F16);
        let mut spec = match self.cfg.side {
            Side::Keys => vec![
                ("ATT_KBITS", self.l.key_bits),
                ("ATT_KGROUP", self.l.key_group as u32),
                ("ATT_KPARAMS_F16", f16),
            ],
            Side::Values => vec![
                ("ATT_VBITS", self.l.value_bits),
                ("ATT_VGROUP", self.l.value_group as u32),
                ("ATT_VPARAMS_F16", f16),
            ],
        };
        // The group arithmetic both sides include (wgsl/kivi/kivi_common.wgsl) names it.
        spec.push(("PARAMS_F16", f16));
        spec
    }

    /// The tile hooks (wgsl/kivi/attend_kt.wgsl, attend_vt.wgsl) read whole words of codes:
    /// b ∈ {1, 2, 4, 8}; keys in blocks of a multiple of 32 tokens (a tile of 32 tokens, 16
    /// where D > 128, is one block's whole words); values in groups of a multiple of 16
    /// channels dividing D, each starting at a word.
    fn attend_tiles(&self) -> std::result::Result<usize, String> {
        let d = self.l.dim;
        let tile = if d.div_ceil(16) * 16 > 128 { 16 } else { 32 };
        let (bits, group) = match self.cfg.side {
            Side::Keys => (self.l.key_bits, self.l.key_group),
            Side::Values => (self.l.value_bits, self.l.value_group),
        };
        if ![1, 2, 4, 8].contains(&bits) {
            return Err(format!(
                "KIVI with {bits}-bit codes (the tile hooks read 1, 2, 4 or 8)"
            ));
        }
        match self.cfg.side {
            Side::Keys
                if !group.is_multiple_of(32) || !(tile * bits as usize).is_multiple_of(32) =>
            {
                Err(format!(
                    "KIVI keys in blocks of {group} tokens at {bits} bits (the tile hooks need blocks of a multiple of 32 and {tile}-token tiles of whole words)"
                ))
            }
            Side::Keys => Ok(1),
            Side::Values
                if !group.is_multiple_of(16)
                    || !d.is_multiple_of(group)
                    || !(group * bits as usize).is_multiple_of(32) =>
            {
                Err(format!(
                    "KIVI values in groups of {group} channels at {bits} bits, D = {d} (the tile hooks need groups of a multiple of 16 channels dividing D, starting at a word)"
                ))
            }
            Side::Values => Ok(d / group),
        }
    }
}

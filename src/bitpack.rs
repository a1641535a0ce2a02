//! Bit packing on every path: [`BitPacker`] packs codes of b bits (1..=8) into a dense
//! LSB-first bitstream of u32 words and back (docs/contracts/bitpack.md).
//!
//! GPU layouts (shared by `wgsl/bitpack/bitpack.wgsl`, `wgsl/bitpack/bitunpack.wgsl` and their MSL twins):
//! - codes: `array<u32>` of `ceil(n / 4)` words, code i is byte `i % 4` of word `i / 4`
//!   (the little-endian bytes of a `&[u8]`);
//! - words: `array<u32>` of `ceil(n·b / 32)` words, the bitstream.

use crate::context::{Context, KernelPath, PathChoice};
use crate::cpu;
use crate::error::{Error, Result};
use crate::gpu::registry::{self, BITS, Binding, DISPATCH, KernelDef, MSL_BITS};
use crate::gpu::{self, DispatchPlan};

pub use cpu::bitpack::packed_words;

/// Uniform block of the bitpack/bitunpack kernels.
/// Keep in sync with `BitpackParams` in wgsl/bitpack/bitpack.wgsl, wgsl/bitpack/bitunpack.wgsl,
/// msl/bitpack.metal and msl/bitunpack.metal.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct BitpackParams {
    /// Number of codes.
    pub n: u32,
    /// Bits per code, 1..=8.
    pub bits: u32,
    /// ceil(n·b / 32).
    pub n_words: u32,
    /// Padding to 16 bytes.
    pub pad: u32,
}

impl BitpackParams {
    /// Validated parameters for `n` codes of `bits` bits on the GPU (indices are u32 there).
    pub fn new(n: usize, bits: u32) -> Result<Self> {
        let n_words = packed_words(n, bits)?;
        let total_bits = n as u64 * u64::from(bits);
        let max = u64::from(u32::MAX - 32);
        if total_bits > max {
            return Err(Error::Limit {
                what: "bitstream length in bits (GPU indices are u32)",
                needed: total_bits,
                limit: max,
            });
        }
        Ok(Self {
            n: n as u32,
            bits,
            n_words: n_words as u32,
            pad: 0,
        })
    }

    /// Bytes of the code buffer: ceil(n / 4) words.
    pub fn code_bytes(&self) -> u64 {
        u64::from(self.n).div_ceil(4) * 4
    }

    /// Bytes of the bitstream.
    pub fn word_bytes(&self) -> u64 {
        u64::from(self.n_words) * 4
    }
}

/// Packs and unpacks codes on one resolved path.
#[derive(Clone, Debug)]
pub struct BitPacker {
    ctx: Context,
    pack_path: KernelPath,
    unpack_path: KernelPath,
}

impl BitPacker {
    /// On the context's default path.
    pub fn new(ctx: &Context) -> Result<Self> {
        Self::with_path(ctx, ctx.path())
    }

    /// On an explicit path; an error when this context cannot run it.
    pub fn with_path(ctx: &Context, choice: PathChoice) -> Result<Self> {
        Ok(Self {
            ctx: ctx.clone(),
            pack_path: ctx.resolve(&BITPACK, choice)?,
            unpack_path: ctx.resolve(&BITUNPACK, choice)?,
        })
    }

    /// The path `pack` runs on.
    pub fn pack_path(&self) -> KernelPath {
        self.pack_path
    }

    /// The path `unpack` runs on.
    pub fn unpack_path(&self) -> KernelPath {
        self.unpack_path
    }

    /// Packs `codes` (each < 2^bits) and returns the words (blocking on GPU paths).
    pub fn pack(&self, codes: &[u8], bits: u32) -> Result<Vec<u32>> {
        cpu::bitpack::check_codes(codes, bits)?;
        let params = BitpackParams::new(codes.len(), bits)?;
        if !self.pack_path.is_gpu() {
            let mut words = vec![0u32; params.n_words as usize];
            cpu::bitpack::bitpack(codes, bits, &mut words)?;
            return Ok(words);
        }
        if codes.is_empty() {
            return Ok(Vec::new());
        }
        let input = gpu::upload(&self.ctx, "kvpack codes", codes)?;
        let output = gpu::storage_buffer(&self.ctx, "kvpack packed words", params.word_bytes())?;
        gpu::submit_blocking(&self.ctx, "bitpack", |enc| {
            self.encode_pack(enc, &input, codes.len(), bits, &output)
        })?;
        let bytes = gpu::readback(&self.ctx, &output, params.word_bytes())?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Unpacks `n` codes of `bits` bits from `words` (blocking on GPU paths).
    pub fn unpack(&self, words: &[u32], bits: u32, n: usize) -> Result<Vec<u8>> {
        let params = BitpackParams::new(n, bits)?;
        if !self.unpack_path.is_gpu() {
            let mut codes = vec![0u8; n];
            cpu::bitunpack::bitunpack(words, bits, &mut codes)?;
            return Ok(codes);
        }
        // Same validation as the CPU path: lengths and zero padding.
        cpu::bitunpack::check_stream(words, bits, n)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let input = gpu::upload(
            &self.ctx,
            "kvpack packed words",
            bytemuck::cast_slice(words),
        )?;
        let output = gpu::storage_buffer(&self.ctx, "kvpack codes", params.code_bytes())?;
        gpu::submit_blocking(&self.ctx, "bitunpack", |enc| {
            self.encode_unpack(enc, &input, n, bits, &output)
        })?;
        let mut bytes = gpu::readback(&self.ctx, &output, params.code_bytes())?;
        bytes.truncate(n);
        Ok(bytes)
    }

    /// Records the pack of `n` codes from the GPU buffer `codes` (layout in the module docs)
    /// into `words`. Codes are masked to `bits` on the GPU: validate them before upload
    /// (kvpack's own kernels produce in-range codes by construction). GPU paths only.
    pub fn encode_pack(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        codes: &wgpu::Buffer,
        n: usize,
        bits: u32,
        words: &wgpu::Buffer,
    ) -> Result<()> {
        let params = BitpackParams::new(n, bits)?;
        gpu::check_buffer(codes, "bitpack input codes", params.code_bytes())?;
        gpu::check_buffer(words, "bitpack output words", params.word_bytes())?;
        gpu::encode_plan(
            &self.ctx,
            encoder,
            self.pack_path,
            &plan_pack(n, bits)?,
            &[codes, words],
        )
    }

    /// Records the unpack of `n` codes from the GPU bitstream `words` into `codes`.
    /// GPU paths only.
    pub fn encode_unpack(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        words: &wgpu::Buffer,
        n: usize,
        bits: u32,
        codes: &wgpu::Buffer,
    ) -> Result<()> {
        let params = BitpackParams::new(n, bits)?;
        gpu::check_buffer(words, "bitunpack input words", params.word_bytes())?;
        gpu::check_buffer(codes, "bitunpack output codes", params.code_bytes())?;
        gpu::encode_plan(
            &self.ctx,
            encoder,
            self.unpack_path,
            &plan_unpack(n, bits)?,
            &[words, codes],
        )
    }
}

/// The dispatch of `bitpack` for `n` codes of `bits` bits: one invocation per output word.
/// Storage bindings: 1 = codes, 2 = words.
pub fn plan_pack(n: usize, bits: u32) -> Result<DispatchPlan> {
    let params = BitpackParams::new(n, bits)?;
    let def = &BITPACK;
    Ok(DispatchPlan {
        kernel: def,
        spec: registry::Specialization::default(),
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups: u64::from(params.n_words).div_ceil(u64::from(def.workgroup_size)),
    })
}

/// The dispatch of `bitunpack` for `n` codes of `bits` bits: one invocation per 4 codes.
/// Storage bindings: 1 = words, 2 = codes.
pub fn plan_unpack(n: usize, bits: u32) -> Result<DispatchPlan> {
    let params = BitpackParams::new(n, bits)?;
    let def = &BITUNPACK;
    Ok(DispatchPlan {
        kernel: def,
        spec: registry::Specialization::default(),
        uniform: bytemuck::bytes_of(&params).to_vec(),
        workgroups: u64::from(params.n)
            .div_ceil(4)
            .div_ceil(u64::from(def.workgroup_size)),
    })
}

/// `bitpack`: codes (bytes, 4 per u32) → dense LSB-first bitstream.
pub static BITPACK: KernelDef = KernelDef {
    name: "bitpack",
    folder: "bitpack",
    wgsl_common: &[DISPATCH],
    wgsl_subgroup: None,
    wgsl: include_str!("../wgsl/bitpack/bitpack.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../msl/bitpack/bitpack.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

/// `bitunpack`: dense bitstream → codes (bytes, 4 per u32).
pub static BITUNPACK: KernelDef = KernelDef {
    name: "bitunpack",
    folder: "bitpack",
    wgsl_common: &[DISPATCH, BITS],
    wgsl_subgroup: None,
    wgsl: include_str!("../wgsl/bitpack/bitunpack.wgsl"),
    msl_common: &[MSL_BITS],
    msl: Some(include_str!("../msl/bitpack/bitunpack.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

//! Appends from the application's own GPU buffers ([`GpuInput`]): the store's input
//! conversion done on the device.
//!
//! An append from device buffers runs kvpack's conversion kernels (`wgsl/store/`) before the
//! codecs see the tokens: `input_convert` rounds each side's `[n, H, D]` input to the f16 rows
//! the store keeps (f32 rounded to nearest even, exactly as [`super::Input::to_f16`] does on
//! the host) into a scratch buffer, and marks the first element that is NaN, ±Inf or beyond
//! f16's range; `input_norms` repeats the codecs' per-vector norm check
//! ([`crate::codec::Codec::check_rows`] of the codecs that store f16 norms) on those rows;
//! `input_finish` records the first problem in the layer's **input status** and sets its
//! sticky *rejected* word. From then on `ring_write` (the residual window's writes of every
//! append recorded before the layer syncs) skips its writes, so the tokens held before the
//! rejected append keep their stored words; the codecs' encodes only write blocks past the
//! ones already held, which the layer forgets when it rolls back.
//!
//! What the layer does with the status is described at [`crate::KvLayer::encode_append_gpu`]
//! and [`crate::KvLayer::sync`].

use half::f16;

use super::Geometry;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::gpu::registry::{Binding, DISPATCH, KernelDef, Specialization};
use crate::gpu::{self, Bind, DispatchPlan};
use crate::path::KernelPath;

/// The element type of a [`GpuInput`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GpuDtype {
    /// IEEE binary16, two per 4-byte word, element `2i` in the low half (little-endian
    /// storage, what `half::f16` slices and WGSL's `pack2x16float` produce).
    F16,
    /// IEEE binary32 (rounded to f16 on entry, to nearest even).
    F32,
}

impl GpuDtype {
    /// Bytes of one element.
    pub fn size(self) -> u64 {
        match self {
            GpuDtype::F16 => 2,
            GpuDtype::F32 => 4,
        }
    }

    fn code(self) -> u32 {
        match self {
            GpuDtype::F16 => 0,
            GpuDtype::F32 => 1,
        }
    }
}

/// One append's K or V that already lives in the application's `wgpu::Buffer`
/// ([`crate::KvLayer::append_gpu`], [`crate::KvLayer::encode_append_gpu`]).
///
/// Layout: `tokens` tokens of `H·D` elements each, `[tokens, H, D]` row-major (token, then
/// KV head, then channel), packed with no padding between tokens or heads, the first element
/// at byte `offset` of `buffer`. `offset` must be a multiple of the element size (2 for f16,
/// 4 for f32); the bytes read, `[offset, offset + tokens·H·D·size)` rounded out to whole
/// 4-byte words, must lie inside the buffer and within the device's
/// `max_storage_buffer_binding_size` (split larger appends). The buffer needs
/// [`wgpu::BufferUsages::STORAGE`] and must belong to the layer's device: a buffer of another
/// device of the same `wgpu::Instance` is an [`Error::Config`] (wgpu's own validation, run in
/// an error scope before anything is recorded); a buffer of another `Instance` is beyond what
/// wgpu's public API can tell (wgpu itself panics on it). kvpack only reads the buffer,
/// in the commands it records: the application must have written it before those run (an
/// earlier command of the same encoder or an earlier submission).
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct GpuInput<'a> {
    /// The application's buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset of the first element.
    pub offset: u64,
    /// The element type.
    pub dtype: GpuDtype,
    /// Tokens (rows of `H·D` elements).
    pub tokens: usize,
}

impl<'a> GpuInput<'a> {
    /// `tokens` tokens of `dtype` at byte `offset` of `buffer`.
    pub fn new(buffer: &'a wgpu::Buffer, offset: u64, dtype: GpuDtype, tokens: usize) -> Self {
        Self {
            buffer,
            offset,
            dtype,
            tokens,
        }
    }

    /// f16 tokens from byte `offset`.
    pub fn f16(buffer: &'a wgpu::Buffer, offset: u64, tokens: usize) -> Self {
        Self::new(buffer, offset, GpuDtype::F16, tokens)
    }

    /// f32 tokens from byte `offset`.
    pub fn f32(buffer: &'a wgpu::Buffer, offset: u64, tokens: usize) -> Self {
        Self::new(buffer, offset, GpuDtype::F32, tokens)
    }
}

/// A checked [`GpuInput`]: the binding that covers it and where its first element sits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound<'a> {
    pub bind: Bind<'a>,
    pub elem_offset: u32,
    pub dtype: GpuDtype,
}

/// Checks one side's input against the layer's row width (`row_elems` = H·D) and returns the
/// binding that covers it: typed errors for a missing STORAGE usage, a misaligned offset, a
/// range past the buffer's end or beyond one binding.
pub(crate) fn check_input<'a>(
    ctx: &Context,
    what: &'static str,
    input: &GpuInput<'a>,
    row_elems: usize,
) -> Result<Bound<'a>> {
    let buf = input.buffer;
    if !buf.usage().contains(wgpu::BufferUsages::STORAGE) {
        return Err(Error::Config(format!(
            "{what}: the buffer lacks STORAGE usage (it has {:?})",
            buf.usage()
        )));
    }
    let size = input.dtype.size();
    if !input.offset.is_multiple_of(size) {
        return Err(Error::Shape {
            what,
            message: format!(
                "byte offset {} is not a multiple of the element size {size}",
                input.offset
            ),
        });
    }
    let bytes = (input.tokens as u64)
        .checked_mul(row_elems as u64 * size)
        .ok_or_else(|| Error::Shape {
            what,
            message: format!("{} tokens overflow", input.tokens),
        })?;
    let align = ctx.storage_offset_alignment().max(4);
    let base = input.offset / align * align;
    let end = input
        .offset
        .checked_add(bytes)
        .ok_or_else(|| Error::Shape {
            what,
            message: "offset + size overflows".into(),
        })?;
    let end_words = end.div_ceil(4) * 4;
    if end_words > buf.size() {
        return Err(Error::LengthMismatch {
            what,
            expected: end_words.min(usize::MAX as u64) as usize,
            actual: buf.size() as usize,
        });
    }
    let bound = (end_words - base).max(4);
    if bound > ctx.max_storage_binding_size() {
        return Err(Error::Limit {
            what: "one GPU append's input range (split the append)",
            needed: bound,
            limit: ctx.max_storage_binding_size(),
        });
    }
    let elem_offset = (input.offset - base) / size;
    Ok(Bound {
        bind: Bind::range(buf, base, bound),
        elem_offset: elem_offset as u32,
        dtype: input.dtype,
    })
}

/// `input_convert` (see the module docs; `wgsl/store/input_convert.wgsl`).
pub static INPUT_CONVERT: KernelDef = KernelDef {
    name: "input_convert",
    folder: "store",
    wgsl_common: &[DISPATCH, COMMON],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/store/input_convert.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 256,
};

/// `input_norms` (`wgsl/store/input_norms.wgsl`).
pub static INPUT_NORMS: KernelDef = KernelDef {
    name: "input_norms",
    folder: "store",
    wgsl_common: &[DISPATCH, COMMON],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/store/input_norms.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

/// `input_finish` (`wgsl/store/input_finish.wgsl`).
pub static INPUT_FINISH: KernelDef = KernelDef {
    name: "input_finish",
    folder: "store",
    wgsl_common: &[COMMON],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/store/input_finish.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

/// `ring_write` (`wgsl/store/ring_write.wgsl`).
pub static RING_WRITE: KernelDef = KernelDef {
    name: "ring_write",
    folder: "store",
    wgsl_common: &[DISPATCH, COMMON],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/store/ring_write.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageRead,
    ],
    workgroup_size: 256,
};

const COMMON: &str = include_str!("../../wgsl/store/input_common.wgsl");

/// The store's kernels need no cross-lane operation: they run as WGSL on every GPU path
/// (on Metal through naga, next to the codecs' MSL).
const PATH: KernelPath = KernelPath::WgslWorkgroup;

/// Word indices of the input status (keep in sync with wgsl/store/input_common.wgsl).
pub(crate) mod status {
    pub const REJECTED: usize = 0;
    pub const T_OLD: usize = 5;
    pub const KIND: usize = 6;
    pub const INDEX: usize = 7;
    pub const RAW: usize = 8;
    pub const DTYPE: usize = 9;
    pub const ROW: usize = 16;
}

/// Bytes of a layer's input status for geometry `g`.
pub(crate) fn status_bytes(g: Geometry) -> u64 {
    ((status::ROW + g.row_words()) * 4) as u64
}

/// keep in sync with ConvertParams in wgsl/store/input_convert.wgsl
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ConvertParams {
    words: u32,
    row_elems: u32,
    row_words: u32,
    elem_offset: u32,
    dtype: u32,
    side: u32,
    _pad: [u32; 2],
}

/// keep in sync with NormParams in wgsl/store/input_norms.wgsl
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct NormParams {
    vectors: u32,
    heads: u32,
    dim: u32,
    row_words: u32,
    side: u32,
    _pad: [u32; 3],
}

/// keep in sync with FinishParams in wgsl/store/input_finish.wgsl
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct FinishParams {
    t_old: u32,
    heads: u32,
    row_words: u32,
    _pad0: u32,
    elem_offset: [u32; 2],
    dtype: [u32; 2],
}

/// keep in sync with RingParams in wgsl/store/ring_write.wgsl
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RingParams {
    mode: u32,
    a: u32,
    b: u32,
    src_cap: u32,
    src_first: u32,
    dst_cap: u32,
    row_words: u32,
    _pad0: u32,
}

fn plan(kernel: &'static KernelDef, uniform: &impl bytemuck::Pod, workgroups: u64) -> DispatchPlan {
    DispatchPlan {
        kernel,
        spec: Specialization(Vec::new()),
        uniform: bytemuck::bytes_of(uniform).to_vec(),
        workgroups,
    }
}

/// Builds the pipelines of this module that a layer's appends use
/// ([`crate::KvLayer::prepare`]): the conversion and the finish of GPU input, the norm checks
/// where a side's codec asks for them (`norms`), and the conditional ring writes of recorded
/// appends where the layer has a residual ring (`ring`). Their specialization is empty: the
/// same pipelines every append uses.
pub(crate) fn prepare(ctx: &Context, norms: [bool; 2], ring: bool) -> Result<()> {
    let mut defs: Vec<&'static KernelDef> = vec![&INPUT_CONVERT, &INPUT_FINISH];
    if norms.iter().any(|&n| n) {
        defs.push(&INPUT_NORMS);
    }
    if ring {
        defs.push(&RING_WRITE);
    }
    for def in defs {
        gpu::pipeline::pipeline(ctx, def, PATH, &Specialization(Vec::new()))?;
    }
    Ok(())
}

/// Checks that `input`'s buffer belongs to this context's device (wgpu validates it when a
/// bind group is made; here inside an error scope, before anything is recorded into the
/// caller's encoder, so that a foreign buffer is a typed error and never an invalid encoder).
pub(crate) fn check_device(
    ctx: &Context,
    what: &'static str,
    input: &Bound<'_>,
    placeholder: &wgpu::Buffer,
) -> Result<()> {
    let pipeline = gpu::pipeline::pipeline(ctx, &INPUT_CONVERT, PATH, &Specialization(Vec::new()))?;
    let device = &ctx
        .gpu()
        .ok_or_else(|| Error::Gpu {
            during: what,
            message: "this context has no GPU device".into(),
        })?
        .device;
    let uniform = gpu::uniform_buffer(ctx, "kvpack input check", &[0u8; 32])?;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let _group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("kvpack input check"),
        layout: &pipeline.layout,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: input.bind.buffer,
                    offset: input.bind.offset,
                    size: input.bind.size.and_then(wgpu::BufferSize::new),
                }),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: placeholder.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: placeholder.as_entire_binding(),
            },
        ],
    });
    match pollster::block_on(scope.pop()) {
        None => Ok(()),
        Some(e) => Err(Error::Config(format!(
            "{what}: the buffer cannot be bound on this layer's device (is it from another \
             device?): {e}"
        ))),
    }
}

/// Records the conversion of one append's two sides (`inputs`, `tokens` tokens after `t_old`)
/// into `rows` (one scratch buffer per side, `tokens · row_words` words), the norm checks of
/// the sides in `norms`, and the finish that records a problem in `status`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_convert(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    g: Geometry,
    t_old: usize,
    tokens: usize,
    inputs: [&Bound<'_>; 2],
    rows: [&wgpu::Buffer; 2],
    norms: [bool; 2],
    status: &wgpu::Buffer,
) -> Result<()> {
    // The per-append marks (words 1..5) start clear; the rejected word stays as it is.
    enc.clear_buffer(status, 4, Some(16));
    let rw = g.row_words();
    let words = (tokens * rw) as u64;
    for side in 0..2 {
        let p = ConvertParams {
            words: words as u32,
            row_elems: g.token_elems() as u32,
            row_words: rw as u32,
            elem_offset: inputs[side].elem_offset,
            dtype: inputs[side].dtype.code(),
            side: side as u32,
            _pad: [0; 2],
        };
        let wg = words.div_ceil(256).min(1 << 16);
        gpu::encode_plan_bound(
            ctx,
            enc,
            PATH,
            &plan(&INPUT_CONVERT, &p, wg),
            &[
                inputs[side].bind,
                Bind::from(rows[side]),
                Bind::from(status),
            ],
        )?;
    }
    for side in (0..2).filter(|&s| norms[s]) {
        let vectors = (tokens * g.heads) as u64;
        let p = NormParams {
            vectors: vectors as u32,
            heads: g.heads as u32,
            dim: g.dim as u32,
            row_words: rw as u32,
            side: side as u32,
            _pad: [0; 3],
        };
        gpu::encode_plan_bound(
            ctx,
            enc,
            PATH,
            &plan(&INPUT_NORMS, &p, vectors.div_ceil(64)),
            &[Bind::from(rows[side]), Bind::from(status)],
        )?;
    }
    let p = FinishParams {
        t_old: t_old as u32,
        heads: g.heads as u32,
        row_words: rw as u32,
        _pad0: 0,
        elem_offset: [inputs[0].elem_offset, inputs[1].elem_offset],
        dtype: [inputs[0].dtype.code(), inputs[1].dtype.code()],
    };
    gpu::encode_plan_bound(
        ctx,
        enc,
        PATH,
        &plan(&INPUT_FINISH, &p, 1),
        &[
            inputs[0].bind,
            inputs[1].bind,
            Bind::from(rows[0]),
            Bind::from(rows[1]),
            Bind::from(status),
        ],
    )
}

/// One ring write (see `wgsl/store/ring_write.wgsl`): `relayout` re-lays tokens `[a, b)`
/// from the old ring `src` (`src_cap` rows) into `dst`; else tokens `[a, b)` come from rows
/// `s − src_first` of `src`. `src_at`: the byte of `src` its row 0 is at (bound from there: a
/// multiple of the storage offset alignment, e.g. a staging slot).
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_ring_write(
    ctx: &Context,
    enc: &mut wgpu::CommandEncoder,
    relayout: bool,
    (a, b): (usize, usize),
    (src, src_at): (&wgpu::Buffer, u64),
    src_cap: usize,
    src_first: usize,
    dst: &wgpu::Buffer,
    dst_cap: usize,
    row_words: usize,
    status: &wgpu::Buffer,
) -> Result<()> {
    // A rejected append may make a re-lay copy up to the old ring's every row.
    let rows = if relayout {
        (b - a).max(src_cap)
    } else {
        b - a
    };
    if rows == 0 {
        return Ok(());
    }
    let p = RingParams {
        mode: u32::from(relayout),
        a: a as u32,
        b: b as u32,
        src_cap: src_cap as u32,
        src_first: src_first as u32,
        dst_cap: dst_cap as u32,
        row_words: row_words as u32,
        _pad0: 0,
    };
    let wg = ((rows * row_words) as u64).div_ceil(256).min(1 << 16);
    gpu::encode_plan_bound(
        ctx,
        enc,
        PATH,
        &plan(&RING_WRITE, &p, wg),
        &[
            Bind {
                buffer: src,
                offset: src_at,
                size: None,
            },
            Bind::from(dst),
            Bind::from(status),
        ],
    )
}

/// The error a rejected append's status words describe (`words`: the whole input status),
/// exactly as the host append would have returned it for the same input: [`Error::NonFinite`]
/// for a value, or the codec's own [`crate::codec::Codec::check_rows`] error for a vector
/// whose norm f16 cannot hold (`check`, called with the token's f16 row).
pub(crate) fn rejected_error(
    words: &[u32],
    g: Geometry,
    check: impl Fn(usize, usize, &[f16]) -> Result<()>,
) -> Error {
    let kind = words[status::KIND];
    let index = words[status::INDEX] as usize;
    let side = (kind % 2) as usize;
    if kind < 2 {
        let raw = words[status::RAW];
        let value = if words[status::DTYPE] == 0 {
            f16::from_bits(raw as u16).to_f32()
        } else {
            f32::from_bits(raw)
        };
        return Error::NonFinite {
            what: if side == 0 { "k" } else { "v" },
            index,
            value,
        };
    }
    let t_old = words[status::T_OLD] as usize;
    let token = index / g.heads;
    let row = super::input::words_to_f16_rows(
        g.token_elems(),
        &words[status::ROW..status::ROW + g.row_words()],
        1,
    );
    match check(side, t_old + token, &row) {
        Err(e) => e,
        Ok(()) => Error::Config(format!(
            "the norm of {} token {}, head {} is beyond f16's range (max 65504) in the GPU's \
             f32 arithmetic (the host's differs only at that limit); scale the input down",
            if side == 0 { "key" } else { "value" },
            t_old + token,
            index % g.heads
        )),
    }
}

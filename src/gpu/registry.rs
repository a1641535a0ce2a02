//! Kernel registry: every kernel's sources (embedded at compile time), its bindings and
//! workgroup size, and a lazily built pipeline cache keyed by (kernel, path, specialization).
//!
//! # Binding numbering (WGSL and MSL share it)
//! Every kvpack kernel uses **one bind group (group 0)** whose entries are numbered
//! `0..n` without gaps, in the order of [`KernelDef::bindings`]. wgpu's Metal backend gives
//! each compute-visible buffer the next `[[buffer(N)]]` index in binding order, uniforms
//! included, and kvpack never uses immediates, so **binding i is `[[buffer(i)]]`**
//! ([`msl_buffer_index`]). There is no `arrayLength` in passthrough MSL: every length travels
//! in the uniform at binding 0, and WGSL does the same for symmetry.
//!
//! # Specialization
//! A pipeline may be specialized only on what is fixed for a cache's life (bits, group size,
//! head dim, variant), never on a growing length. Specialization constants are prepended to the
//! source as `const NAME: u32 = Vu;` (WGSL) or `#define NAME Vu` (MSL; `WORKGROUP_SIZE` without the
//! suffix so that it can size `[[max_total_threads_per_threadgroup]]`), so both languages
//! see the same names.

pub use super::cache::{Pipeline, PipelineKey, Specialization};
use crate::path::KernelPath;

/// How a binding is used by the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// A uniform buffer (the kernel's parameters).
    Uniform,
    /// A read-only storage buffer.
    StorageRead,
    /// A read-write storage buffer.
    StorageReadWrite,
}

/// One kernel: its sources on every path, bindings and workgroup size.
#[derive(Debug)]
pub struct KernelDef {
    /// The stem shared by `wgsl/<folder>/<name>.wgsl`, `msl/<folder>/<name>.metal` and
    /// `src/cpu/<folder>/<name>.rs`; also the MSL kernel function's name.
    pub name: &'static str,
    /// The codec (or family) folder its files live in.
    pub folder: &'static str,
    /// WGSL helpers from `wgsl/common/` concatenated before the kernel source.
    pub wgsl_common: &'static [&'static str],
    /// WGSL source of the subgroup variant; `None` when the kernel needs no cross-lane
    /// operation and [`KernelDef::wgsl`] serves both variants.
    pub wgsl_subgroup: Option<&'static str>,
    /// WGSL source of the workgroup-memory variant (or the only one). Entry point `main`.
    pub wgsl: &'static str,
    /// MSL helpers from `msl/<folder>/` concatenated before the kernel source (passthrough
    /// MSL has no include path).
    pub msl_common: &'static [&'static str],
    /// MSL source, when written.
    pub msl: Option<&'static str>,
    /// Bindings of group 0, in binding order (binding i is `[[buffer(i)]]` in MSL).
    pub bindings: &'static [Binding],
    /// Threads per workgroup (x only).
    pub workgroup_size: u32,
}

/// Which `[[buffer(N)]]` index a WGSL `@group(group) @binding(binding)` gets on wgpu's Metal
/// backend, for kvpack's layouts (one group, contiguous bindings, no immediates).
pub fn msl_buffer_index(def: &KernelDef, group: u32, binding: u32) -> Option<u32> {
    (group == 0 && (binding as usize) < def.bindings.len()).then_some(binding)
}

/// `bitpack`: codes (bytes, 4 per u32) → dense LSB-first bitstream.
pub static BITPACK: KernelDef = KernelDef {
    name: "bitpack",
    folder: "bitpack",
    wgsl_common: &[DISPATCH],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/bitpack/bitpack.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../msl/bitpack/bitpack.metal")),
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
    wgsl_common: &[DISPATCH],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/bitpack/bitunpack.wgsl"),
    msl_common: &[],
    msl: Some(include_str!("../../msl/bitpack/bitunpack.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

const DISPATCH: &str = include_str!("../../wgsl/common/dispatch.wgsl");
const KIVI: &str = include_str!("../../wgsl/kivi/kivi_common.wgsl");
const KIVI_QUANT_IO: &str = include_str!("../../wgsl/kivi/kivi_quant_io.wgsl");
const KIVI_DEQUANT_IO: &str = include_str!("../../wgsl/kivi/kivi_dequant_io.wgsl");
const KIVI_VALUES_TAIL: &str = include_str!("../../wgsl/kivi/kivi_values_tail.wgsl");
const MSL_KIVI: &str = include_str!("../../msl/kivi/kivi_common.metal");

/// KIVI per-channel key quantization (specialized on `PARAMS_F16`).
pub static KIVI_QUANT_KEYS: KernelDef = KernelDef {
    name: "kivi_quant_keys",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/kivi/kivi_quant_keys.wgsl"),
    msl_common: &[MSL_KIVI],
    msl: Some(include_str!("../../msl/kivi/kivi_quant_keys.metal")),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI per-token value quantization: 8 slices of 32 invocations per workgroup, one value
/// group per slice (specialized on `PARAMS_F16`).
pub static KIVI_QUANT_VALUES: KernelDef = KernelDef {
    name: "kivi_quant_values",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO, KIVI_VALUES_TAIL],
    wgsl_subgroup: Some(include_str!(
        "../../wgsl/kivi/kivi_quant_values_subgroup.wgsl"
    )),
    wgsl: include_str!("../../wgsl/kivi/kivi_quant_values.wgsl"),
    msl_common: &[MSL_KIVI],
    msl: Some(include_str!("../../msl/kivi/kivi_quant_values.metal")),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 256,
};

/// KIVI per-token value quantization for value groups of at most 64 channels: one
/// invocation per group (specialized on `PARAMS_F16`, `VALUE_GROUP`, `VALUE_BITS`).
pub static KIVI_QUANT_VALUES_THREAD: KernelDef = KernelDef {
    name: "kivi_quant_values_thread",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_QUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/kivi/kivi_quant_values_thread.wgsl"),
    msl_common: &[MSL_KIVI],
    msl: Some(include_str!(
        "../../msl/kivi/kivi_quant_values_thread.metal"
    )),
    bindings: KIVI_QUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI key reconstruction (tests and tools).
pub static KIVI_DEQUANT_KEYS: KernelDef = KernelDef {
    name: "kivi_dequant_keys",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_DEQUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/kivi/kivi_dequant_keys.wgsl"),
    msl_common: &[MSL_KIVI],
    msl: Some(include_str!("../../msl/kivi/kivi_dequant_keys.metal")),
    bindings: KIVI_DEQUANT_BINDINGS,
    workgroup_size: 64,
};

/// KIVI value reconstruction (tests and tools).
pub static KIVI_DEQUANT_VALUES: KernelDef = KernelDef {
    name: "kivi_dequant_values",
    folder: "kivi",
    wgsl_common: &[DISPATCH, KIVI, KIVI_DEQUANT_IO],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/kivi/kivi_dequant_values.wgsl"),
    msl_common: &[MSL_KIVI],
    msl: Some(include_str!("../../msl/kivi/kivi_dequant_values.metal")),
    bindings: KIVI_DEQUANT_BINDINGS,
    workgroup_size: 64,
};

/// `copy`: a vec4<u32> device copy, the memory roofline of a device (`benches/`). A measuring
/// tool, not a kvpack kernel: it is not in [`KERNELS`] and has no MSL.
pub static COPY: KernelDef = KernelDef {
    name: "copy",
    folder: "gpu",
    wgsl_common: &[DISPATCH],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/gpu/copy.wgsl"),
    msl_common: &[],
    msl: None,
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 256,
};

const ATTEND_PARAMS: &str = include_str!("../../wgsl/attend/attend_params.wgsl");
const ATTEND_CORE: &str = include_str!("../../wgsl/attend/attend_core.wgsl");

/// Attention partials over a KIVI region (packed codes reconstructed in registers).
pub static ATTEND_KIVI: KernelDef = KernelDef {
    name: "attend_kivi",
    folder: "attend",
    wgsl_common: &[
        DISPATCH,
        KIVI,
        ATTEND_PARAMS,
        ATTEND_CORE,
        include_str!("../../wgsl/attend/attend_kivi.wgsl"),
    ],
    wgsl_subgroup: Some(include_str!("../../wgsl/attend/attend_subgroup.wgsl")),
    wgsl: include_str!("../../wgsl/attend/attend_workgroup.wgsl"),
    msl_common: &[MSL_KIVI, include_str!("../../msl/attend/attend_core.metal")],
    msl: Some(include_str!("../../msl/attend/attend_kivi.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageRead,
        Binding::StorageRead,
    ],
    workgroup_size: 128,
};

/// Attention partials over f16 rows (the f16 cache, KIVI's residual ring).
pub static ATTEND_F16: KernelDef = KernelDef {
    name: "attend_f16",
    folder: "attend",
    wgsl_common: &[
        DISPATCH,
        ATTEND_PARAMS,
        ATTEND_CORE,
        include_str!("../../wgsl/attend/attend_f16.wgsl"),
    ],
    wgsl_subgroup: Some(include_str!("../../wgsl/attend/attend_subgroup.wgsl")),
    wgsl: include_str!("../../wgsl/attend/attend_workgroup.wgsl"),
    msl_common: &[include_str!("../../msl/attend/attend_core.metal")],
    msl: Some(include_str!("../../msl/attend/attend_f16.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
        Binding::StorageRead,
        Binding::StorageRead,
    ],
    workgroup_size: 128,
};

/// Merge of attention partials across chunks (flash-decoding's second pass).
pub static ATTEND_MERGE: KernelDef = KernelDef {
    name: "attend_merge",
    folder: "attend",
    wgsl_common: &[DISPATCH, ATTEND_PARAMS],
    wgsl_subgroup: None,
    wgsl: include_str!("../../wgsl/attend/attend_merge.wgsl"),
    msl_common: &[include_str!("../../msl/attend/attend_core.metal")],
    msl: Some(include_str!("../../msl/attend/attend_merge.metal")),
    bindings: &[
        Binding::Uniform,
        Binding::StorageRead,
        Binding::StorageReadWrite,
    ],
    workgroup_size: 64,
};

const KIVI_QUANT_BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageReadWrite,
    Binding::StorageReadWrite,
    Binding::StorageReadWrite,
];
const KIVI_DEQUANT_BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageReadWrite,
];

/// Every kernel kvpack has, for [`Context::describe`] and the test harnesses.
pub static KERNELS: &[&KernelDef] = &[
    &BITPACK,
    &BITUNPACK,
    &KIVI_QUANT_KEYS,
    &KIVI_QUANT_VALUES,
    &KIVI_QUANT_VALUES_THREAD,
    &KIVI_DEQUANT_KEYS,
    &KIVI_DEQUANT_VALUES,
    &ATTEND_KIVI,
    &ATTEND_F16,
    &ATTEND_MERGE,
];

/// The WGSL that is compiled for `def` on `path` with `spec`.
pub fn compose_wgsl(def: &KernelDef, path: KernelPath, spec: &Specialization) -> String {
    let body = match path {
        KernelPath::WgslSubgroup => def.wgsl_subgroup.unwrap_or(def.wgsl),
        _ => def.wgsl,
    };
    let mut s = String::new();
    s.push_str(&format!(
        "const WORKGROUP_SIZE: u32 = {}u;\n",
        def.workgroup_size
    ));
    for (name, v) in &spec.0 {
        s.push_str(&format!("const {name}: u32 = {v}u;\n"));
    }
    for c in def.wgsl_common {
        s.push_str(c);
        s.push('\n');
    }
    s.push_str(body);
    s
}

/// The MSL that is compiled for `def` with `spec` (also what the CPU emulator compiles).
pub fn compose_msl(def: &KernelDef, spec: &Specialization) -> Option<String> {
    let body = def.msl?;
    let mut s = String::new();
    s.push_str(&format!("#define WORKGROUP_SIZE {}\n", def.workgroup_size));
    for (name, v) in &spec.0 {
        s.push_str(&format!("#define {name} {v}u\n"));
    }
    for c in def.msl_common {
        s.push_str(c);
        s.push('\n');
    }
    s.push_str(body);
    Some(s)
}

/// Runtime checks naga adds to kvpack's WGSL. Bounds checks on buffer accesses stay on (a
/// kernel bug can never reach memory outside its bindings). Loop bounding is off: it adds a
/// counter to every loop, which keeps the driver from unrolling the constant-trip loops the
/// attention and KIVI kernels rely on to keep arrays in registers and overlap their loads.
/// Integer-division guards are off: every divisor is a constant or a validated uniform.
pub const RUNTIME_CHECKS: wgpu::ShaderRuntimeChecks = wgpu::ShaderRuntimeChecks {
    bounds_checks: true,
    force_loop_bounding: false,
    ray_query_initialization_tracking: true,
    task_shader_dispatch_tracking: true,
    mesh_shader_primitive_indices_clamp: true,
    int_div_checks: false,
};

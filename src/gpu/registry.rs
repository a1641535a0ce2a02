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

/// The shared dispatch helper (`linear_workgroup`): prepend to kernels split over x/y.
pub const DISPATCH: &str = include_str!("../../wgsl/common/dispatch.wgsl");
/// Bit extraction every codec shares (`bits_code`, `bits_unit`): wgsl/common/bits.wgsl.
pub const BITS: &str = include_str!("../../wgsl/common/bits.wgsl");
/// Its MSL twin: msl/common/bits.metal.
pub const MSL_BITS: &str = include_str!("../../msl/common/bits.metal");
/// A sign row assembled in workgroup memory by atomicOr (`sgn_clear`, `sgn_or`, `sgn_word`;
/// the kernel defines `SGN_SW`): wgsl/common/sign_words.wgsl.
pub const SIGN_WORDS: &str = include_str!("../../wgsl/common/sign_words.wgsl");
/// `copy`: a `vec4<u32>` device copy, the memory roofline of a device (`benches/`). A measuring
/// tool, not a kvpack kernel: it is not in [`crate::kernels::all`] and has no MSL.
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

/// The WGSL that is compiled for `def` on `path` with `spec`.
pub fn compose_wgsl(def: &KernelDef, path: KernelPath, spec: &Specialization) -> String {
    let s = compose_wgsl_pieces(def, path, spec);
    if needs_cooperative_matrix(def) {
        // The tensor-core kernels' `tc_axpy(x, y, a)` (src/gpu/coop_emulation.rs).
        unroll_loops(&super::coop_emulation::expand_axpy(&s))
    } else {
        unroll_loops(&s)
    }
}

/// What [`compose_wgsl`] gives with the kernel's cooperative matrices emulated
/// ([`super::coop_emulation::emulate`]), or why it cannot be. Its loops stay loops: unrolled,
/// the emulation's whole-matrix operations made lavapipe's compiler run out of memory.
pub fn compose_wgsl_emulated(
    def: &KernelDef,
    path: KernelPath,
    spec: &Specialization,
) -> std::result::Result<String, String> {
    super::coop_emulation::emulate(&compose_wgsl_pieces(def, path, spec))
}

/// `// @unroll N` loops expanded (src/gpu/unroll.rs); KVPACK_NO_UNROLL=1 keeps them loops
/// (for measuring what unrolling buys).
fn unroll_loops(s: &str) -> String {
    if std::env::var("KVPACK_NO_UNROLL").is_ok_and(|v| v == "1") {
        s.to_string()
    } else {
        super::unroll::unroll(s)
    }
}

/// The kernel's pieces in order, directives hoisted, loops not yet unrolled (what
/// [`super::coop_emulation::emulate`] rewrites; the mutation harness edits this text first).
pub fn compose_wgsl_pieces(def: &KernelDef, path: KernelPath, spec: &Specialization) -> String {
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
    hoist_directives(s)
}

/// Moves WGSL's global directives (`enable …;`, `diagnostic(…);`, which must precede every
/// declaration) from wherever a source piece put them to the top of the composed module.
fn hoist_directives(s: String) -> String {
    let is_directive = |l: &str| l.starts_with("enable ") || l.starts_with("diagnostic(");
    if !s.lines().any(is_directive) {
        return s;
    }
    let mut head = String::new();
    let mut rest = String::with_capacity(s.len());
    for l in s.lines() {
        if is_directive(l) {
            if !head.lines().any(|h| h == l) {
                head.push_str(l);
                head.push('\n');
            }
        } else {
            rest.push_str(l);
            rest.push('\n');
        }
    }
    head + &rest
}

/// Whether `def`'s WGSL uses cooperative matrices (its source enables
/// `wgpu_cooperative_matrix`): such a kernel runs only where [`crate::Context::tensor_cores`]
/// says so.
pub fn needs_cooperative_matrix(def: &KernelDef) -> bool {
    def.wgsl.contains("enable wgpu_cooperative_matrix;")
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

//! The attention kernels, composed per (key codec, value codec) pair: the shared core
//! (`wgsl/attend/`, `msl/attend/`) with the key codec's hooks (`attend_k`) and the value
//! codec's (`attend_v`), built once per pair and cached for the process. Four kernels per
//! pair: `attend_<k>_<v>` (decode: 4 query vectors per workgroup; the partials, or the whole
//! output when one split serves a vector), `attend_prefill_<k>_<v>` (many query vectors per
//! workgroup, tiles read once into workgroup memory: wgsl/attend/attend_prefill.wgsl; always
//! partials), `attend_prefill_tc_<k>_<v>` (the prefill kernel on cooperative matrices: WGSL
//! only, where the device offers them), `attend_decode_tc_<k>_<v>` (the decode kernel on
//! cooperative matrices, for pairs whose codecs have tile hooks; `attend_decode_tc_rows_<k>_<v>`
//! where both sides are f16 rows) and `attend_merge_<k>_<v>` (combines the partials and applies
//! the value codec's finish hook).
//!
//! Bindings (both kernels; WGSL `@binding(i)` is MSL `[[buffer(i)]]`):
//! 0 the core's uniform (`AttendParams`), 1 the key codec's uniform, 2 the value codec's,
//! 3 q (merge: the partials), 4 partials or out (merge: out), 5 key segment, 6 key tables,
//! 7 value segment, 8 value tables, 9 key ring, 10 value ring, 11–14 the key segment, value
//! segment, key ring and value ring again (WGSL's 16-byte views of them; unused by MSL).
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::gpu::registry::{Binding, DISPATCH, KernelDef};

/// A codec's attention hooks: its WGSL and MSL sources (see `wgsl/attend/attend_core.wgsl`
/// for what each side must define).
#[derive(Debug)]
pub struct AttendHooks {
    /// The codec's name (in the composed kernels' names).
    pub name: &'static str,
    /// Helpers both sides use, included once per kernel (e.g. KIVI's group arithmetic).
    pub wgsl_common: &'static [&'static str],
    /// The key side (`wgsl/<codec>/attend_k.wgsl`).
    pub wgsl_k: &'static str,
    /// The value side (`wgsl/<codec>/attend_v.wgsl`).
    pub wgsl_v: &'static str,
    /// MSL helpers both sides use.
    pub msl_common: &'static [&'static str],
    /// The key side in MSL (`msl/<codec>/attend_k.metal`).
    pub msl_k: Option<&'static str>,
    /// The value side in MSL.
    pub msl_v: Option<&'static str>,
    /// Whether the key side transforms the query (its `K_PREP` constant, e.g. TurboQuant's
    /// rotation): it then defines no element reader `k_value`, and the prefill kernel does not
    /// serve it as the key codec ([`prefill`] is not composed for such a pair; asking for it
    /// is [`crate::Error::Config`]).
    pub k_prep: bool,
    /// Whether the codec stores keys only (QJL): it has no value side (`wgsl_v` empty,
    /// `msl_v` `None`) and no pair is composed with it as the value codec.
    pub keys_only: bool,
    /// The key side's tile hooks for the tensor-core decode kernel
    /// (`wgsl/<codec>/attend_kt.wgsl`, see wgsl/attend/attend_decode_tc.wgsl), if it has them.
    pub wgsl_kt: Option<&'static str>,
    /// The value side's tile hooks (`wgsl/<codec>/attend_vt.wgsl`).
    pub wgsl_vt: Option<&'static str>,
    /// Whether the tile hooks give f16 rows that the kernel reads itself (their `KT_CODES` /
    /// `VT_CODES` false): a pair with rows on both sides runs the tensor-core decode kernel
    /// wgsl/attend/attend_decode_tc_rows.wgsl (four subgroups per workgroup), every other pair
    /// with tile hooks wgsl/attend/attend_decode_tc.wgsl (one).
    pub tile_rows: bool,
}

const PARAMS: &str = include_str!("../../wgsl/attend/attend_params.wgsl");
const CORE: &str = include_str!("../../wgsl/attend/attend_core.wgsl");
const SUBGROUP: &str = concat!(
    include_str!("../../wgsl/attend/attend_subgroup.wgsl"),
    include_str!("../../wgsl/attend/attend_subgroup_main.wgsl")
);
const WORKGROUP: &str = include_str!("../../wgsl/attend/attend_workgroup.wgsl");
const WORKGROUP_MAIN: &str = concat!(
    include_str!("../../wgsl/attend/attend_workgroup.wgsl"),
    include_str!("../../wgsl/attend/attend_workgroup_main.wgsl")
);
const MERGE: &str = include_str!("../../wgsl/attend/attend_merge.wgsl");
const PREFILL: &str = include_str!("../../wgsl/attend/attend_prefill.wgsl");
const TENSOR: &str = include_str!("../../wgsl/attend/attend_prefill_tc.wgsl");
const STAGE: &str = include_str!("../../wgsl/attend/attend_stage.wgsl");
/// The prefill kernel's hooks `k_quad` / `v_quad` for a codec that has none (never called).
const NO_K_QUAD: &str = "const K_QUAD: bool = false;\nfn k_quad(row: u32, c: u32, h: u32) -> vec4<f32> {\n    return vec4<f32>(0.0);\n}\n";
/// The prefill kernels' `K_F16_EXACT` for a key codec that does not declare it: its values
/// are not known to be exact in f16.
const NO_K_F16_EXACT: &str = "const K_F16_EXACT: bool = false;\n";
const NO_V_QUAD: &str = "const V_QUAD: bool = false;\nfn v_quad(row: u32, c: u32, h: u32) -> vec4<f32> {\n    return vec4<f32>(0.0);\n}\n";
/// The tensor-core prefill kernel's hooks `k_oct_fetch` / `k_oct_make` and `v_oct_fetch` /
/// `v_oct_make` (eight elements of one code word, loaded, then made) for a codec that has none
/// (never called).
const NO_K_OCT: &str = "const K_OCT: bool = false;\nstruct KOct {\n    w: u32,\n}\nfn k_oct_fetch(row: u32, c: u32, h: u32) -> KOct {\n    return KOct(0u);\n}\nfn k_oct_make(r: KOct, row: u32, c: u32, h: u32) -> array<vec4<f32>, 2> {\n    return array<vec4<f32>, 2>();\n}\n";
const NO_V_OCT: &str = "const V_OCT: bool = false;\nstruct VOct {\n    w: u32,\n}\nfn v_oct_fetch(row: u32, c: u32, h: u32) -> VOct {\n    return VOct(0u);\n}\nfn v_oct_make(r: VOct, row: u32, c: u32, h: u32) -> array<vec4<f32>, 2> {\n    return array<vec4<f32>, 2>();\n}\n";
/// The tensor-core prefill kernel's hooks `k_row8` / `v_row8` (eight f16 channels of a stored
/// row in one load) for a codec that does not store f16 rows (never called).
const NO_K_ROW8: &str = "const K_ROW8: bool = false;\nfn k_row8(row: u32, c: u32, h: u32) -> vec4<u32> {\n    return vec4<u32>(0u);\n}\n";
const NO_V_ROW8: &str = "const V_ROW8: bool = false;\nfn v_row8(row: u32, c: u32, h: u32) -> vec4<u32> {\n    return vec4<u32>(0u);\n}\n";
const TENSOR_COMMON: &str = include_str!("../../wgsl/attend/attend_tc_common.wgsl");
const TENSOR_DECODE: &str = include_str!("../../wgsl/attend/attend_decode_tc.wgsl");
const TENSOR_DECODE_ROWS: &str = include_str!("../../wgsl/attend/attend_decode_tc_rows.wgsl");
const MSL_PREFILL: &str = include_str!("../../msl/attend/attend_prefill.metal");
const MSL_CORE: &str = include_str!("../../msl/attend/attend_core.metal");
const MSL_SHARED: &str = include_str!("../../msl/attend/attend_shared.metal");
const MSL_MAIN: &str = include_str!("../../msl/attend/attend_main.metal");
const MSL_MERGE: &str = include_str!("../../msl/attend/attend_merge.metal");

/// Invocations per workgroup of the decode, prefill and merge kernels (4 slices of 32).
pub const WORKGROUP_SIZE: u32 = 128;

/// Invocations per workgroup of the partials (decode) kernel: [`WORKGROUP_SIZE`], or for
/// measuring builds `KVPACK_ATT_WG` (a multiple of 32 from 32 to 1024, read once; anything
/// else is ignored with a message on stderr). The plan's split target scales by
/// `WORKGROUP_SIZE / this` so that about as many slices run.
pub fn partials_workgroup_size() -> u32 {
    static SIZE: OnceLock<u32> = OnceLock::new();
    *SIZE.get_or_init(|| match std::env::var("KVPACK_ATT_WG") {
        Err(_) => WORKGROUP_SIZE,
        Ok(v) => match v.parse::<u32>() {
            Ok(n) if n % 32 == 0 && (32..=1024).contains(&n) => n,
            _ => {
                eprintln!("kvpack: KVPACK_ATT_WG={v} ignored (a multiple of 32 from 32 to 1024)");
                WORKGROUP_SIZE
            }
        },
    })
}

/// Invocations per workgroup of the tensor-core decode kernel (one subgroup of 32).
pub const TENSOR_DECODE_WORKGROUP: u32 = 32;
/// Invocations per workgroup of the tensor-core decode kernel for f16 rows on both sides (four
/// subgroups of 32: [`AttendHooks::tile_rows`]).
pub const TENSOR_DECODE_ROWS_WORKGROUP: u32 = 128;

/// Whether a pair runs the tensor-core decode kernel's form for f16 rows on both sides
/// (wgsl/attend/attend_decode_tc_rows.wgsl).
pub fn tensor_decode_rows(k: &AttendHooks, v: &AttendHooks) -> bool {
    k.tile_rows && v.tile_rows
}

const BINDINGS: &[Binding] = &[
    Binding::Uniform,
    Binding::Uniform,
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageReadWrite,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageRead,
];

fn leak<T>(v: Vec<T>) -> &'static [T] {
    Box::leak(v.into_boxed_slice())
}

/// The three kernels of a pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Partials,
    Prefill,
    Tensor,
    TensorDecode,
    Merge,
}

fn compose(k: &'static AttendHooks, v: &'static AttendHooks, kind: Kind) -> KernelDef {
    let prefix = match kind {
        Kind::Partials => "attend",
        Kind::Prefill => "attend_prefill",
        Kind::Tensor => "attend_prefill_tc",
        Kind::TensorDecode if tensor_decode_rows(k, v) => "attend_decode_tc_rows",
        Kind::TensorDecode => "attend_decode_tc",
        Kind::Merge => "attend_merge",
    };
    let name: &'static str = Box::leak(format!("{prefix}_{}_{}", k.name, v.name).into_boxed_str());
    let mut wgsl = vec![DISPATCH, PARAMS];
    let mut msl: Vec<&'static str> = Vec::new();
    // Helpers both sides name (e.g. wgsl/common/bits.wgsl) once: by content (a `const`'s
    // address is not unique).
    for c in k.wgsl_common.iter().chain(v.wgsl_common) {
        if !wgsl.contains(c) {
            wgsl.push(c);
        }
    }
    for c in k.msl_common.iter().chain(v.msl_common) {
        if !msl.contains(c) {
            msl.push(c);
        }
    }
    msl.push(MSL_CORE);
    wgsl.extend([k.wgsl_k, v.wgsl_v, CORE]);
    if kind == Kind::Prefill || kind == Kind::Tensor {
        // The prefill kernels' tile staging and its optional readers
        // (wgsl/attend/attend_stage.wgsl): a hook a codec does not declare gets its stub (a
        // false const; a codec without quads is read element by element).
        let stubs = [
            (k.wgsl_k, "fn k_quad(", NO_K_QUAD),
            (v.wgsl_v, "fn v_quad(", NO_V_QUAD),
            (k.wgsl_k, "const K_F16_EXACT:", NO_K_F16_EXACT),
            (k.wgsl_k, "fn k_oct_fetch(", NO_K_OCT),
            (v.wgsl_v, "fn v_oct_fetch(", NO_V_OCT),
            (k.wgsl_k, "fn k_row8(", NO_K_ROW8),
            (v.wgsl_v, "fn v_row8(", NO_V_ROW8),
        ];
        for (src, declared, stub) in stubs {
            if !src.contains(declared) {
                wgsl.push(stub);
            }
        }
        wgsl.push(STAGE);
    }
    if kind == Kind::Tensor || kind == Kind::TensorDecode {
        wgsl.push(TENSOR_COMMON);
    }
    if kind == Kind::TensorDecode {
        // Composed only for pairs with both tile hooks (`tensor_decode`).
        wgsl.extend(k.wgsl_kt.into_iter().chain(v.wgsl_vt));
    }
    let msl_body = match (k.msl_k, v.msl_v) {
        // The tensor-core kernels are WGSL only (Metal has no cooperative matrices in wgpu).
        _ if kind == Kind::Tensor || kind == Kind::TensorDecode => None,
        (Some(mk), Some(mv)) => {
            msl.extend([mk, mv, MSL_SHARED]);
            // The kernel function is named after the pair (the MSL entry point is the name).
            let body = match kind {
                Kind::Partials => MSL_MAIN,
                Kind::Prefill | Kind::Tensor | Kind::TensorDecode => MSL_PREFILL,
                Kind::Merge => MSL_MERGE,
            };
            Some(&*Box::leak(
                body.replace("ATTEND_NAME", name).into_boxed_str(),
            ))
        }
        _ => None,
    };
    if kind != Kind::Partials {
        // The merge and prefill kernels share the core's declarations; the workgroup
        // variant's helpers (unused) complete what the core names.
        wgsl.push(WORKGROUP);
    }
    let (wgsl_subgroup, wgsl_body) = match kind {
        Kind::Partials => (Some(SUBGROUP), WORKGROUP_MAIN),
        // No cross-lane step: one source for both paths.
        Kind::Prefill => (None, PREFILL),
        // One source (it needs subgroups and cooperative matrices: resolved only to the
        // subgroup path, where Context::tensor_cores allows it).
        Kind::Tensor => (Some(TENSOR), TENSOR),
        Kind::TensorDecode if tensor_decode_rows(k, v) => {
            (Some(TENSOR_DECODE_ROWS), TENSOR_DECODE_ROWS)
        }
        Kind::TensorDecode => (Some(TENSOR_DECODE), TENSOR_DECODE),
        Kind::Merge => (None, MERGE),
    };
    let workgroup_size = match kind {
        Kind::TensorDecode if tensor_decode_rows(k, v) => TENSOR_DECODE_ROWS_WORKGROUP,
        Kind::TensorDecode => TENSOR_DECODE_WORKGROUP,
        Kind::Partials => partials_workgroup_size(),
        _ => WORKGROUP_SIZE,
    };
    KernelDef {
        name,
        folder: "attend",
        wgsl_common: leak(wgsl),
        wgsl_subgroup,
        wgsl: wgsl_body,
        msl_common: leak(msl),
        msl: msl_body,
        bindings: BINDINGS,
        workgroup_size,
    }
}

type Cache = Mutex<HashMap<(usize, usize, Kind), &'static KernelDef>>;

fn kernel(k: &'static AttendHooks, v: &'static AttendHooks, kind: Kind) -> &'static KernelDef {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (k as *const _ as usize, v as *const _ as usize, kind);
    let mut map = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    map.entry(key)
        .or_insert_with(|| Box::leak(Box::new(compose(k, v, kind))))
}

/// The partials kernel of a (key codec, value codec) pair.
pub fn partials(k: &'static AttendHooks, v: &'static AttendHooks) -> &'static KernelDef {
    kernel(k, v, Kind::Partials)
}

/// The prefill kernel of a (key codec, value codec) pair (`None` when the key codec transforms
/// the query: [`AttendHooks::k_prep`]).
pub fn prefill(k: &'static AttendHooks, v: &'static AttendHooks) -> Option<&'static KernelDef> {
    (!k.k_prep).then(|| kernel(k, v, Kind::Prefill))
}

/// The tensor-core prefill kernel of a (key codec, value codec) pair
/// (wgsl/attend/attend_prefill_tc.wgsl; `None` when the key codec transforms the query, as for
/// [`prefill`]).
pub fn tensor(k: &'static AttendHooks, v: &'static AttendHooks) -> Option<&'static KernelDef> {
    (!k.k_prep).then(|| kernel(k, v, Kind::Tensor))
}

/// The tensor-core decode kernel of a (key codec, value codec) pair
/// (wgsl/attend/attend_decode_tc.wgsl; `None` unless both codecs have tile hooks:
/// [`AttendHooks::wgsl_kt`], [`AttendHooks::wgsl_vt`]).
pub fn tensor_decode(
    k: &'static AttendHooks,
    v: &'static AttendHooks,
) -> Option<&'static KernelDef> {
    (k.wgsl_kt.is_some() && v.wgsl_vt.is_some()).then(|| kernel(k, v, Kind::TensorDecode))
}

/// The merge kernel of a (key codec, value codec) pair.
pub fn merge(k: &'static AttendHooks, v: &'static AttendHooks) -> &'static KernelDef {
    kernel(k, v, Kind::Merge)
}

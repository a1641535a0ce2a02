//! Every kernel kvpack has, for [`crate::Context::describe`] and the tests that check each
//! has its WGSL, MSL and CPU twin. The attention kernels are composed per (key codec, value
//! codec) pair: every pair of the codecs here is listed (the prefill kernel only for key
//! codecs that do not transform the query: [`AttendHooks::k_prep`]).
//!
//! **Unstable.** This module is kvpack's machinery, public so that its tests, benches and tools
//! can drive single kernels; it is not part of the supported API and may change in any release
//! (the supported surface is what `kvpack`'s crate root re-exports).

use crate::attention::kernel::{self, AttendHooks};
use crate::codecs::{f16, kivi, qjl, turboquant, vecinfer};
use crate::gpu::registry::KernelDef;

/// The codecs' attention hooks.
pub fn attend_hooks() -> [&'static AttendHooks; 6] {
    [
        &f16::kernels::ATTEND_HOOKS,
        &kivi::kernels::ATTEND_HOOKS,
        &turboquant::kernels::ATTEND_HOOKS,
        &qjl::kernels::ATTEND_HOOKS,
        &vecinfer::kernels::ATTEND_HOOKS,
        &turboquant::kernels::PROD_ATTEND_HOOKS,
    ]
}

/// Every kernel: bit packing, each codec's own, and the attention kernels of every codec pair.
pub fn all() -> Vec<&'static KernelDef> {
    let mut out: Vec<&'static KernelDef> = vec![
        &crate::bitpack::BITPACK,
        &crate::bitpack::BITUNPACK,
        &kivi::kernels::KIVI_QUANT_KEYS,
        &kivi::kernels::KIVI_QUANT_VALUES,
        &kivi::kernels::KIVI_QUANT_VALUES_THREAD,
        &kivi::kernels::KIVI_DEQUANT_KEYS,
        &kivi::kernels::KIVI_DEQUANT_VALUES,
        &turboquant::kernels::TURBOQUANT_QUANT,
        &turboquant::kernels::TURBOQUANT_DEQUANT,
        &turboquant::kernels::TURBOQUANT_PROD_QUANT,
        &qjl::kernels::QJL_ENCODE,
        &vecinfer::kernels::VECINFER_QUANT,
        &crate::policy::kernels::EVICT_SCORE,
        &crate::policy::kernels::EVICT_SELECT,
        &crate::policy::kernels::EVICT_COMPACT,
    ];
    for k in attend_hooks() {
        // A keys-only codec (QJL) is never the value codec.
        for v in attend_hooks().into_iter().filter(|v| !v.keys_only) {
            out.push(kernel::partials(k, v));
            out.extend(kernel::prefill(k, v));
            out.extend(kernel::tensor(k, v));
            out.extend(kernel::tensor_decode(k, v));
            out.push(kernel::merge(k, v));
        }
    }
    out
}

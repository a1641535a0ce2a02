//! Cases for the tensor-core decode kernel's direct path (wgsl/attend/attend_decode_tc.wgsl,
//! TD_DIRECT: f16 rows on both sides, no ring, D a multiple of 16 up to 128) that reach each
//! of its branches: 9 tokens (no 16-row block fits: the lanes' path), 96-token splits over 600
//! tokens (the last split's second block moved back to end at the split's end, its repeated
//! rows weightless), and scores that rise along the cache (the running max moves by more
//! than the path's slack after tiles were accumulated: the flush and the rescale; KIVI-4
//! beside it for the staged path's per-tile rescale). Used through layers by
//! tests/tensor_decode.rs and through the kernel-level harness by the mutants
//! (tests/mutants.rs, `Check::TensorDirect`).

use super::attend_plans::Case;
use kvpack::AttendOptions;

/// The cases, each with whether its keys rise ([`rising`]).
pub fn cases() -> Vec<(Case, bool)> {
    let base = Case {
        what: "tensor decode direct: f16, 9 tokens (the lanes' path)",
        method: "f16",
        t: 9,
        tq: 1,
        hq: 8,
        hkv: 2,
        d: 64,
        opts: AttendOptions::default(),
        seg_tokens: 1 << 20,
        ring_extra: 0,
        target: 16,
    };
    vec![
        (base, false),
        (
            Case {
                what: "tensor decode direct: f16, 600 tokens in 96-token splits, Tq 2, a sink",
                t: 600,
                tq: 2,
                hq: 4,
                opts: AttendOptions::default().chunk_tokens(Some(96)).sinks(1),
                ..base
            },
            false,
        ),
        (
            Case {
                what: "tensor decode direct: f16, rising scores, 320-token splits",
                t: 700,
                opts: AttendOptions::default().chunk_tokens(Some(320)),
                ..base
            },
            true,
        ),
        (
            Case {
                what: "tensor decode staged: kivi-4, rising scores, 320-token splits",
                method: "kivi-4",
                t: 700,
                opts: AttendOptions::default().chunk_tokens(Some(320)),
                ..base
            },
            true,
        ),
    ]
}

/// Scales the `[t, hkv, d]` keys `k` so that scores rise along the cache: token i's key by
/// 1 + i/8.
pub fn rising(k: &mut [f32], hkv: usize, d: usize) {
    for (i, x) in k.iter_mut().enumerate() {
        *x *= 1.0 + (i / (hkv * d)) as f32 / 8.0;
    }
}

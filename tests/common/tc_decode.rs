//! Cases for the tensor-core decode kernel's form for f16 rows on both sides
//! (wgsl/attend/attend_decode_tc_rows.wgsl) that reach each of its branches: 9 tokens (one
//! partial tile), 96-token splits over 600 tokens (a partial last split), scores that rise
//! along the cache (a reference max moves by more than the kernel's slack after tiles were
//! accumulated: the flush and the rescale), a ring (ring splits' keys and the values above
//! the codec's end from the ring; D = 32, where two of the four subgroups own no output
//! columns) and D = 256 (16-token tiles, four subgroups per token block, two flush passes);
//! KIVI-4 beside them for the one-subgroup kernel's per-tile rescale. Used through layers by
//! tests/tensor_decode.rs and through the kernel-level harness by the mutants
//! (tests/mutants.rs, `Check::TensorRows`).

use super::attend_plans::Case;
use kvpack::AttendOptions;

/// The cases, each with whether its keys rise ([`rising`]).
pub fn cases() -> Vec<(Case, bool)> {
    let base = Case {
        what: "tensor decode rows: f16, 9 tokens (one partial tile)",
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
                what: "tensor decode rows: f16, 600 tokens in 96-token splits, Tq 2, a sink",
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
                what: "tensor decode rows: f16, rising scores, 320-token splits",
                t: 700,
                opts: AttendOptions::default().chunk_tokens(Some(320)),
                ..base
            },
            true,
        ),
        (
            Case {
                what: "tensor decode rows: f16 with a 32-token ring, D 32, 64-token splits",
                method: "f16:residual=32",
                t: 150,
                d: 32,
                opts: AttendOptions::default().chunk_tokens(Some(64)),
                ..base
            },
            false,
        ),
        (
            Case {
                what: "tensor decode rows: f16, D 256, rising scores, 128-token splits",
                t: 300,
                d: 256,
                opts: AttendOptions::default().chunk_tokens(Some(128)),
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
/// 1 + i/32. On `random_qkv`'s keys over 1,200 tokens (D = 64) that moves the decode kernel's
/// reference max (slack 8, base 2) about 3 times per slice after its first tile (a simulation
/// of the slices' tiles: 87 % of slices move at least once, every case has several query vectors)
/// while the largest scores stay near 80 (base 2; at most ~140). With 1 + i/8 they reached
/// ~260–540, where f32's rounding of a score alone (|s|·2^-24 per operation, summed in another
/// order than the reference's) moved outputs by up to 1.04e-4 relative L2, past the 1e-4
/// bound for some seeds (`KVPACK_SEED=2456953619620219412`, the f32 prefill kernel on
/// lavapipe) with no kernel at fault.
pub fn rising(k: &mut [f32], hkv: usize, d: usize) {
    for (i, x) in k.iter_mut().enumerate() {
        *x *= 1.0 + (i / (hkv * d)) as f32 / 32.0;
    }
}

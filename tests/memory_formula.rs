//! Memory per kind equals each codec's layout formula (issue 19, point 5), one generic body
//! over every codec on main (f16, KIVI, TurboQuant-MSE/RVQ/Prod, QJL keys, VecInfer) and every
//! path.
//!
//! The formulas are written here from the layout docs (../shared/spec/kivi.md,
//! turboquant.md, qjl.md, vecinfer.md; src/codecs/*/layout.rs's module docs), not taken from the
//! codecs' `streams()`: a layout, a stream declaration or the store's accounting that counts a
//! kind twice, in the wrong kind, or with the wrong padding fails here. Per kind (key codes,
//! key params, value codes, value params, residual, tables) the payload must equal the
//! formula exactly; what is held must be at least the payload and within the store's growth
//! slack (1/8 plus one binding alignment per buffer) of it; tables are held exactly once.
//! VecInfer (vecinfer.md) runs on a synthetic calibration of this geometry (`calib=@synthetic`,
//! tests/common/vecinfer_calib.rs).

mod common;

use common::Target;
use kvpack::{Input, Memory};
use rand::Rng;

const H: usize = 2;
const D: usize = 40;

/// One side's stored form, in the terms of its spec.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// f16 rows: ceil(H·D / 2) words per token.
    F16,
    /// KIVI keys: per (block of `group` tokens, head, channel) a bitstream of `group` codes
    /// padded to words, and one (scale, lo) pair of `pair_words` words.
    KiviKeys {
        bits: usize,
        group: usize,
        pair_words: usize,
    },
    /// KIVI values: per (token, head) ceil(D / vgroup) group streams, each padded to words
    /// (the last one ragged), one pair per group; tokens are flushed in blocks of `group`.
    KiviValues {
        bits: usize,
        group: usize,
        vgroup: usize,
        pair_words: usize,
    },
    /// TurboQuant: per token `stages` rows of P codes (P = the power of two ≥ D) per head, one
    /// f16 norm per head (two per word); tables: sign rows of P bits per head and, per stage,
    /// 2^b centroids and 2^b boundary words.
    TurboQuant { bits: usize, stages: usize },
    /// QJL keys: per token and head m sign bits, one f16 norm per head (two per word);
    /// table: the sketch S `[m][D]` f32.
    Qjl { m: usize },
    /// TurboQuant-Prod keys (turboquant.md, "TurboQuant-Prod", b bits in total): per token and
    /// head one row of P stage-1 MSE codes of b − 1 bits and m sketch sign bits (codes); per
    /// head the f16 norm n and the f16 residual norm ρ, each two per word (params); tables:
    /// the key sign rows of P bits per head, the stage-1 codebook (2^(b−1) centroids and
    /// 2^(b−1) boundary words) and the sketch S `[m][P]` f32.
    TurboQuantProd { bits: usize, m: usize },
    /// VecInfer (vecinfer.md): per token and head one row of n_sub = P/d_s indices of
    /// log2 C bits, padded to words (codes; no params); tables: keys λ `[H][D]` f32 and the
    /// codebooks `[H][C][d_s]` f32, values the codebooks only.
    VecInfer {
        sub_dim: usize,
        centroids: usize,
        keys: bool,
    },
}

fn words(bits: usize) -> usize {
    bits.div_ceil(32)
}

impl Form {
    /// Tokens per block along T.
    fn block(self) -> usize {
        match self {
            Form::KiviKeys { group, .. } | Form::KiviValues { group, .. } => group,
            _ => 1,
        }
    }

    /// (codes, params, tables) bytes for `q` quantized tokens.
    fn bytes(self, q: usize) -> (u64, u64, u64) {
        let (codes, params, tables) = match self {
            Form::F16 => (q * (H * D).div_ceil(2), 0, 0),
            Form::KiviKeys {
                bits,
                group,
                pair_words,
            } => {
                let groups = q / group * H * D;
                (groups * words(group * bits), groups * pair_words, 0)
            }
            Form::KiviValues {
                bits,
                vgroup,
                pair_words,
                ..
            } => {
                let row = D / vgroup * words(vgroup * bits) + words(D % vgroup * bits);
                (q * H * row, q * H * D.div_ceil(vgroup) * pair_words, 0)
            }
            Form::TurboQuant { bits, stages } => {
                let p = D.next_power_of_two();
                let levels = 1usize << bits;
                (
                    q * H * stages * words(p * bits),
                    q * H.div_ceil(2),
                    H * words(p) + stages * 2 * levels,
                )
            }
            Form::Qjl { m } => (q * H * (m / 32), q * H.div_ceil(2), m * D),
            Form::VecInfer {
                sub_dim,
                centroids,
                keys,
            } => {
                let n_sub = D.next_power_of_two() / sub_dim;
                let index_bits = centroids.trailing_zeros() as usize;
                let lambda = if keys { H * D } else { 0 };
                (
                    q * H * words(n_sub * index_bits),
                    0,
                    lambda + H * centroids * sub_dim,
                )
            }
            Form::TurboQuantProd { bits, m } => {
                let p = D.next_power_of_two();
                let levels = 1usize << (bits - 1);
                (
                    q * H * (words(p * (bits - 1)) + words(m)),
                    2 * q * H.div_ceil(2),
                    H * words(p) + 2 * levels + m * p,
                )
            }
        };
        (4 * codes as u64, 4 * params as u64, 4 * tables as u64)
    }
}

/// The formula of every spec `codec_tests!(_, with_qjl)` instantiates: (spec, R, keys,
/// values). A spec added there without a formula here fails the body.
const CASES: &[(&str, usize, Form, Form)] = &[
    ("f16", 0, Form::F16, Form::F16),
    (
        "kivi:bits=2,group=32,residual=64",
        64,
        kk(2, 32, 1),
        kv(2, 32, 32, 1),
    ),
    (
        "kivi:kbits=4,vbits=3,group=16,vgroup=24,residual=32,params=f32",
        32,
        kk(4, 16, 2),
        kv(3, 16, 24, 2),
    ),
    (
        "kivi:bits=1,group=32,residual=32",
        32,
        kk(1, 32, 1),
        kv(1, 32, 32, 1),
    ),
    (
        "kivi:bits=4,group=32/f16:residual=32",
        32,
        kk(4, 32, 1),
        Form::F16,
    ),
    (
        "f16/kivi:bits=3,group=8,vgroup=16,residual=16",
        16,
        Form::F16,
        kv(3, 8, 16, 1),
    ),
    (
        "turboquant-mse:bits=3,residual=24",
        24,
        Form::TurboQuant { bits: 3, stages: 1 },
        Form::TurboQuant { bits: 3, stages: 1 },
    ),
    (
        "kivi:bits=2,group=32/turboquant-rvq:bits=2,residual=32",
        32,
        kk(2, 32, 1),
        Form::TurboQuant { bits: 2, stages: 2 },
    ),
    (
        "qjl:m=96/kivi:bits=4,group=32,residual=32",
        32,
        Form::Qjl { m: 96 },
        kv(4, 32, 32, 1),
    ),
    // m defaults to D = 40 rounded up to a multiple of 32; both windows default to 0.
    (
        "qjl/turboquant-mse:bits=3",
        0,
        Form::Qjl { m: 64 },
        Form::TurboQuant { bits: 3, stages: 1 },
    ),
    ("qjl:m=96/f16:residual=8", 8, Form::Qjl { m: 96 }, Form::F16),
    // m defaults to P = 64 (D = 40 padded to a power of two).
    (
        "turboquant-prod:bits=3,residual=24/turboquant-mse:bits=3",
        24,
        Form::TurboQuantProd { bits: 3, m: 64 },
        Form::TurboQuant { bits: 3, stages: 1 },
    ),
    // Presets (vecinfer.md): bits=1 is d_s 8, C 256; bits=2 is d_s 4, C 256.
    (
        "vecinfer:kbits=1,vbits=2,residual=16,calib=@synthetic",
        16,
        Form::VecInfer {
            sub_dim: 8,
            centroids: 256,
            keys: true,
        },
        Form::VecInfer {
            sub_dim: 4,
            centroids: 256,
            keys: false,
        },
    ),
];

const fn kk(bits: usize, group: usize, pair_words: usize) -> Form {
    Form::KiviKeys {
        bits,
        group,
        pair_words,
    }
}

const fn kv(bits: usize, group: usize, vgroup: usize, pair_words: usize) -> Form {
    Form::KiviValues {
        bits,
        group,
        vgroup,
        pair_words,
    }
}

/// The payload by kind of `t` tokens with window `r`.
fn formula(t: usize, r: usize, keys: Form, values: Form) -> Memory {
    let q = |f: Form| t.saturating_sub(r) / f.block() * f.block();
    let (qk, qv) = (q(keys), q(values));
    let (kc, kp, kt) = keys.bytes(qk);
    let (vc, vp, vt) = values.bytes(qv);
    let mut m = Memory::default();
    m.key_codes = kc;
    m.key_params = kp;
    m.value_codes = vc;
    m.value_params = vp;
    m.residual = ((t - qk) + (t - qv)) as u64 * (H * D * 2) as u64;
    m.tables = kt + vt;
    m
}

fn kinds(m: &Memory) -> [(&'static str, u64); 6] {
    [
        ("key_codes", m.key_codes),
        ("key_params", m.key_params),
        ("value_codes", m.value_codes),
        ("value_params", m.value_params),
        ("residual", m.residual),
        ("tables", m.tables),
    ]
}

fn memory_matches_layout_formula(t: &Target, spec: &str) {
    let mut rng = common::rng("memory_matches_layout_formula");
    let &(_, r, keys, values) = CASES
        .iter()
        .find(|c| c.0 == spec)
        .unwrap_or_else(|| panic!("{spec}: no layout formula in tests/memory_formula.rs"));
    {
        let method = common::parse_method(spec, H, D).expect("method");
        assert_eq!(method.residual(), r, "{spec}: the case's window");
        let mut l = method
            .layer(t.ctx(), H, D, t.path())
            .unwrap_or_else(|e| panic!("{} {spec}: {e}", t.name()));
        let row = H * D;
        let mut held_tokens = 0;
        // Short of the window, then across block boundaries in ragged chunks.
        for n in [1, r.max(1) / 2, 1, 31, 70, 3, 200] {
            let k: Vec<f32> = (0..n * row).map(|_| rng.random_range(-2.0..2.0)).collect();
            let v: Vec<f32> = (0..n * row).map(|_| rng.random_range(-1.0..1.0)).collect();
            l.append(Input::F32(&k), Input::F32(&v))
                .unwrap_or_else(|e| panic!("{} {spec}: append: {e}", t.name()));
            held_tokens += n;
            let m = l.memory();
            let what = format!("{} {spec} at T = {held_tokens}", t.name());
            assert_eq!(m.tokens, held_tokens, "{what}: tokens");
            assert_eq!(m.f16_bytes, (2 * held_tokens * row * 2) as u64, "{what}");
            let want = formula(held_tokens, r, keys, values);
            for ((kind, got), (_, w)) in kinds(&m.payload).into_iter().zip(kinds(&want)) {
                assert_eq!(got, w, "{what}: payload {kind} is not the layout formula");
            }
            for ((kind, held), (_, pay)) in kinds(&m.held).into_iter().zip(kinds(&m.payload)) {
                assert!(held >= pay, "{what}: held {kind} {held} < payload {pay}");
                if kind == "tables" {
                    // Uploaded once at their size (a GPU buffer rounds up to a word).
                    assert!(
                        held == pay || (pay == 0 && held <= 16),
                        "{what}: held tables {held} vs {pay}"
                    );
                } else {
                    // Growth: at most 1/8 over the need, plus one block and one binding
                    // alignment (256 bytes) per segment buffer.
                    let slack = pay / 8 + 8 * 1024;
                    assert!(
                        held <= pay + slack,
                        "{what}: held {kind} {held} is beyond payload {pay} + growth slack"
                    );
                }
            }
        }
    }
}
codec_tests!(memory_matches_layout_formula, with_qjl);

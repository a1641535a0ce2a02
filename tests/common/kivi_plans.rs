//! KIVI kernels run one by one from their dispatch plans (tests/kivi_kernels.rs describes the
//! cases; the mutation harness runs the same checks).

use super::{POISON, Target, run_plan};
use half::f16;
use kvpack::KiviConfig;
use kvpack::codecs::kivi::plans::{
    plan_dequant_keys, plan_dequant_values, plan_quant_keys, plan_quant_values, rows_to_words,
};
use kvpack::codecs::kivi::{Layout, ParamStorage};
use kvpack::cpu::kivi::kivi_group as g;
use kvpack::cpu::kivi::{
    kivi_dequant_keys, kivi_dequant_values, kivi_quant_keys, kivi_quant_values,
};
use rand::Rng;

pub struct Case {
    pub l: Layout,
    /// Tokens quantized by this dispatch: [q_old, q_old + n).
    pub q_old: usize,
    pub n: usize,
    /// Tokens < t_old come from the ring.
    pub t_old: usize,
    /// Segment offset (blocks for keys are dst_tokens / Gk).
    pub dst_tokens: usize,
    pub ring: Vec<u32>,
    pub incoming: Vec<u32>,
    /// The f16 input of token q_old + i, as f32 [n][H·D].
    pub x: Vec<f32>,
}

#[allow(clippy::too_many_arguments)]
pub fn case(
    rng: &mut impl Rng,
    cfg: &KiviConfig,
    heads: usize,
    dim: usize,
    blocks: usize,
    from_ring: usize,
    dst_blocks: usize,
    amp: f32,
) -> Case {
    let l = Layout::new(heads, dim, cfg).expect("layout");
    let (gk, row) = (l.key_group, l.token_elems());
    let n = blocks * gk;
    let q_old = 3 * gk; // tokens before were quantized earlier
    let t_old = q_old + from_ring.min(n);
    let c = l.ring_tokens();
    assert!(t_old - q_old <= c);
    let vals: Vec<f16> = (0..n * row)
        .map(|i| {
            let ch = (i % row) as f32;
            let x: f32 = rng.random_range(-1.0..1.0);
            f16::from_f32(
                amp * (0.1 * ch - 2.0
                    + if rng.random_range(0..40) == 0 {
                        6.0 * x
                    } else {
                        x
                    }),
            )
        })
        .collect();
    // Ring slots of tokens [q_old, t_old); every other slot holds NaN so a wrong read shows.
    let rw = l.residual_row_words();
    let mut ring = vec![0x7e00_7e00u32; c * rw];
    let words = rows_to_words(&l, &vals);
    for s in q_old..t_old {
        let slot = s % c;
        ring[slot * rw..(slot + 1) * rw]
            .copy_from_slice(&words[(s - q_old) * rw..(s - q_old + 1) * rw]);
    }
    // Incoming: rows of tokens [t_old, q_old + n) (and a few more the dispatch must not need).
    let mut incoming = words[(t_old - q_old) * rw..].to_vec();
    incoming.extend(std::iter::repeat_n(0x7e00_7e00u32, 2 * rw));
    Case {
        l,
        q_old,
        n,
        t_old,
        dst_tokens: dst_blocks * gk,
        ring,
        incoming,
        x: vals.iter().map(|v| v.to_f32()).collect(),
    }
}

pub fn as_bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

pub fn as_words(b: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(b)
}

/// Outputs of the four kernels for one case (codes and params with the segment prefix).
pub struct Out {
    pub key_codes: Vec<u32>,
    pub key_params: Vec<u32>,
    pub value_codes: Vec<u32>,
    pub value_params: Vec<u32>,
    pub k_hat: Vec<f32>,
    pub v_hat: Vec<f32>,
    pub status: u32,
}

pub fn reference(c: &Case) -> Out {
    let l = &c.l;
    let (row, blocks) = (l.token_elems(), c.n / l.key_group);
    let x = |t: usize, h: usize, d: usize| c.x[t * row + h * l.dim + d];
    let dst_blocks = c.dst_tokens / l.key_group;
    let mut kc = vec![POISON; (dst_blocks + blocks) * l.key_block_words()];
    let mut kp = vec![POISON; (dst_blocks + blocks) * l.key_block_param_words()];
    let mut vc = vec![POISON; (c.dst_tokens + c.n) * l.value_token_words()];
    let mut vp = vec![POISON; (c.dst_tokens + c.n) * l.value_token_param_words()];
    let mut status = 0;
    if kivi_quant_keys::kivi_quant_keys(
        l,
        blocks,
        x,
        &mut kc[dst_blocks * l.key_block_words()..],
        &mut kp[dst_blocks * l.key_block_param_words()..],
    )
    .is_err()
    {
        status = 1;
    }
    if kivi_quant_values::kivi_quant_values(
        l,
        c.n,
        x,
        &mut vc[c.dst_tokens * l.value_token_words()..],
        &mut vp[c.dst_tokens * l.value_token_param_words()..],
    )
    .is_err()
    {
        status = 1;
    }
    let mut k_hat = vec![0f32; c.n * row];
    let mut v_hat = vec![0f32; c.n * row];
    kivi_dequant_keys::kivi_dequant_keys(
        l,
        blocks,
        &kc[dst_blocks * l.key_block_words()..],
        &kp[dst_blocks * l.key_block_param_words()..],
        &mut k_hat,
    );
    kivi_dequant_values::kivi_dequant_values(
        l,
        c.n,
        &vc[c.dst_tokens * l.value_token_words()..],
        &vp[c.dst_tokens * l.value_token_param_words()..],
        &mut v_hat,
    );
    Out {
        key_codes: kc,
        key_params: kp,
        value_codes: vc,
        value_params: vp,
        k_hat,
        v_hat,
        status,
    }
}

pub fn on_target(t: &Target, c: &Case) -> Out {
    let l = &c.l;
    let blocks = c.n / l.key_group;
    let dst_blocks = c.dst_tokens / l.key_group;
    let poison = |words: usize| as_bytes(&vec![POISON; words]);
    let status = as_bytes(&[0]);
    // keys
    let mut sk = vec![
        as_bytes(&c.ring),
        as_bytes(&c.incoming),
        poison((dst_blocks + blocks) * l.key_block_words()),
        poison((dst_blocks + blocks) * l.key_block_param_words()),
        status.clone(),
    ];
    run_plan(
        t,
        &plan_quant_keys(l, blocks, c.q_old, c.t_old, dst_blocks),
        &mut sk,
    )
    .unwrap_or_else(|e| panic!("{}: keys: {e}", t.name()));
    let mut sv = vec![
        as_bytes(&c.ring),
        as_bytes(&c.incoming),
        poison((c.dst_tokens + c.n) * l.value_token_words()),
        poison((c.dst_tokens + c.n) * l.value_token_param_words()),
        status,
    ];
    run_plan(
        t,
        &plan_quant_values(l, c.n, c.q_old, c.t_old, c.dst_tokens),
        &mut sv,
    )
    .unwrap_or_else(|e| panic!("{}: values: {e}", t.name()));
    // dequantize what this target produced (from the segment offset)
    let row = l.token_elems();
    let mut dk = vec![
        sk[2].clone(),
        sk[3].clone(),
        as_bytes(&vec![POISON; c.n * row]),
    ];
    run_plan(t, &plan_dequant_keys(l, c.n, dst_blocks), &mut dk)
        .unwrap_or_else(|e| panic!("{}: dequant keys: {e}", t.name()));
    let mut dv = vec![
        sv[2].clone(),
        sv[3].clone(),
        as_bytes(&vec![POISON; c.n * row]),
    ];
    run_plan(t, &plan_dequant_values(l, c.n, c.dst_tokens), &mut dv)
        .unwrap_or_else(|e| panic!("{}: dequant values: {e}", t.name()));
    Out {
        key_codes: as_words(&sk[2]),
        key_params: as_words(&sk[3]),
        value_codes: as_words(&sv[2]),
        value_params: as_words(&sv[3]),
        k_hat: bytemuck::pod_collect_to_vec(&dk[2]),
        v_hat: bytemuck::pod_collect_to_vec(&dv[2]),
        status: as_words(&sk[4])[0] | as_words(&sv[4])[0],
    }
}

pub fn first_diff(a: &[u32], b: &[u32]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

/// Decoded codes of every element, [n][H][D], from the stored streams.
pub fn decode(l: &Layout, c: &Case, o: &Out) -> (Vec<u32>, Vec<u32>) {
    let (row, gk, wpg) = (l.token_elems(), l.key_group, l.key_group_words());
    let dst_blocks = c.dst_tokens / gk;
    let mut k = vec![0; c.n * row];
    let mut v = vec![0; c.n * row];
    for t in 0..c.n {
        for e in 0..row {
            let gi = (dst_blocks + t / gk) * row + e;
            k[t * row + e] = g::get_code(&o.key_codes[gi * wpg..], t % gk, l.key_bits);
            let (h, d) = (e / l.dim, e % l.dim);
            let j = d / l.value_group;
            let base = ((c.dst_tokens + t) * l.heads + h) * l.value_row_words()
                + j * l.value_group_words();
            v[t * row + e] =
                g::get_code(&o.value_codes[base..], d - j * l.value_group, l.value_bits);
        }
    }
    (k, v)
}

/// The spec, element by element: (x − lo)/scale for every element (for the boundary rule).
pub fn ratios(l: &Layout, c: &Case) -> (Vec<f32>, Vec<f32>) {
    let (row, gk, gv) = (l.token_elems(), l.key_group, l.value_group);
    let mut rk = vec![0f32; c.n * row];
    let mut rv = vec![0f32; c.n * row];
    for t in 0..c.n {
        for e in 0..row {
            let b0 = t / gk * gk;
            let (lo, hi) = g::min_max((b0..b0 + gk).map(|s| c.x[s * row + e]));
            let (scale, lo) = g::group_params(lo, hi, l.key_bits);
            rk[t * row + e] = if scale > 0.0 {
                (c.x[t * row + e] - lo) / scale
            } else {
                0.0
            };
            let (h, d) = (e / l.dim, e % l.dim);
            let (c0, c1) = (d / gv * gv, (d / gv * gv + gv).min(l.dim));
            let (lo, hi) = g::min_max((c0..c1).map(|dd| c.x[t * row + h * l.dim + dd]));
            let (scale, lo) = g::group_params(lo, hi, l.value_bits);
            rv[t * row + e] = if scale > 0.0 {
                (c.x[t * row + e] - lo) / scale
            } else {
                0.0
            };
        }
    }
    (rk, rv)
}

pub fn check(t: &Target, c: &Case, what: &str) -> usize {
    let l = &c.l;
    let r = reference(c);
    let name = t.name();
    let (rk, rv) = ratios(l, c);
    if let Target::Cpu(_) = t {
        // The reference against the spec applied per element.
        let (dk, dv) = decode(l, c, &r);
        for (codes, ratio, bits, kind) in [
            (&dk, &rk, l.key_bits, "key"),
            (&dv, &rv, l.value_bits, "value"),
        ] {
            for i in 0..codes.len() {
                let want = ratio[i]
                    .round_ties_even()
                    .clamp(0.0, ((1u32 << bits) - 1) as f32) as u32;
                assert_eq!(codes[i], want, "cpu {what}: {kind} element {i}");
            }
        }
        assert_eq!(r.status, 0);
        check_own_words(&format!("cpu {what}"), true, c, &r);
        return 0;
    }
    let o = on_target(t, c);
    assert_eq!(o.status, r.status, "{name} {what}: status");
    for (a, b, kind) in [
        (&o.key_params, &r.key_params, "key params"),
        (&o.value_params, &r.value_params, "value params"),
    ] {
        if let Some(i) = first_diff(a, b) {
            panic!(
                "{name} {what}: {kind} word {i}: {:#010x} != {:#010x} (poison {POISON:#x})",
                a[i], b[i]
            );
        }
    }
    let exact = matches!(t, Target::MslEmulated(_));
    let (ok_codes, boundary) = if exact {
        (
            o.key_codes == r.key_codes && o.value_codes == r.value_codes,
            0,
        )
    } else {
        let (gk_, gv_) = (decode(l, c, &o), decode(l, c, &r));
        let mut n = 0;
        for (a, b, ratio) in [(&gk_.0, &gv_.0, &rk), (&gk_.1, &gv_.1, &rv)] {
            for i in 0..a.len() {
                if a[i] != b[i] {
                    let near = ((ratio[i] - ratio[i].floor()) - 0.5).abs() < 1e-4;
                    assert!(
                        near && a[i].abs_diff(b[i]) == 1,
                        "{name} {what}: code {i}: {} vs {} (ratio {})",
                        a[i],
                        b[i],
                        ratio[i]
                    );
                    n += 1;
                }
            }
        }
        // Words outside the decoded codes (segment prefix poison, stream padding) must match.
        (
            n > 0 || (o.key_codes == r.key_codes && o.value_codes == r.value_codes),
            n,
        )
    };
    if !ok_codes {
        let i =
            first_diff(&o.key_codes, &r.key_codes).or(first_diff(&o.value_codes, &r.value_codes));
        panic!("{name} {what}: code words differ at {i:?}");
    }
    // Every element's reconstruction against the spec applied to the target's own stored
    // words and against the input (no element, no case skipped; exact on the emulated MSL).
    check_own_words(&format!("{name} {what}"), exact, c, &o);
    if exact {
        for (a, b, kind) in [(&o.k_hat, &r.k_hat, "k_hat"), (&o.v_hat, &r.v_hat, "v_hat")] {
            for i in 0..a.len() {
                assert_eq!(
                    a[i].to_bits(),
                    b[i].to_bits(),
                    "{name} {what}: {kind}[{i}] {} vs {}",
                    a[i],
                    b[i]
                );
            }
        }
    }
    boundary
}

/// The spec per element over `o`'s own words (the segment prefix stripped): stored (scale, lo)
/// recomputed from the input, every reconstruction from its own code and pair.
fn check_own_words(what: &str, exact: bool, c: &Case, o: &Out) {
    let l = &c.l;
    let dst_blocks = c.dst_tokens / l.key_group;
    let raw = kvpack::codecs::kivi::RawKivi {
        key_codes: o.key_codes[dst_blocks * l.key_block_words()..].to_vec(),
        key_params: o.key_params[dst_blocks * l.key_block_param_words()..].to_vec(),
        value_codes: o.value_codes[c.dst_tokens * l.value_token_words()..].to_vec(),
        value_params: o.value_params[c.dst_tokens * l.value_token_param_words()..].to_vec(),
        residual_k: Vec::new(),
        residual_v: Vec::new(),
    };
    super::kivi_spec::check_param_words(what, l, &raw, &c.x, &c.x);
    let (ke, ve) = super::kivi_spec::elems(l, &raw, &c.x, &c.x);
    super::recon::check_recon(&format!("{what}: k_hat"), exact, &o.k_hat, &ke);
    super::recon::check_recon(&format!("{what}: v_hat"), exact, &o.v_hat, &ve);
}

/// The kernel-level cases (config, heads, dim, blocks, tokens from the ring, destination
/// blocks, amplitude).
pub fn configs() -> Vec<(KiviConfig, usize, usize, usize, usize, usize, f32)> {
    vec![
        (KiviConfig::uniform(2, 32, 128), 3, 64, 2, 40, 1, 1.0),
        (KiviConfig::uniform(4, 32, 32), 2, 80, 3, 10, 0, 1.0),
        (
            KiviConfig::default()
                .key_bits(3)
                .key_group(4)
                .value_bits(5)
                .value_group(32)
                .residual(8)
                .params(ParamStorage::F32),
            2,
            80,
            5,
            9,
            2,
            1.0,
        ),
        (
            KiviConfig::default()
                .key_bits(8)
                .key_group(128)
                .value_bits(1)
                .value_group(16)
                .residual(0)
                .params(ParamStorage::F16),
            1,
            48,
            1,
            0,
            1,
            1.0,
        ),
        (
            KiviConfig::default()
                .key_bits(7)
                .key_group(32)
                .value_bits(6)
                .value_group(128)
                .residual(64)
                .params(ParamStorage::F16),
            2,
            130,
            2,
            64,
            0,
            1.0,
        ),
        // Value groups above 64 channels take the kernel of 32-channel parts (ragged: 96+96+8).
        (
            KiviConfig::default()
                .key_bits(2)
                .key_group(32)
                .value_bits(3)
                .value_group(96)
                .residual(32)
                .params(ParamStorage::F16),
            2,
            200,
            2,
            7,
            1,
            1.0,
        ),
        (
            KiviConfig::default()
                .key_bits(5)
                .key_group(32)
                .value_bits(2)
                .value_group(256)
                .residual(0)
                .params(ParamStorage::F32),
            1,
            256,
            1,
            0,
            0,
            1.0,
        ),
        // Parts of large value groups: H·D odd, so every other head's parts start inside a
        // word (the element-wise loads), 5-bit codes straddling words inside a part, a ragged
        // last group of 5 channels (80 + 80 + 5: one part of four holds them).
        (
            KiviConfig::default()
                .key_bits(2)
                .key_group(32)
                .value_bits(5)
                .value_group(80)
                .residual(32)
                .params(ParamStorage::F16),
            3,
            165,
            2,
            21,
            1,
            1.0,
        ),
        // Eight parts a group (160 channels: five hold channels), 8-bit codes (a part is 8 words).
        (
            KiviConfig::default()
                .key_bits(4)
                .key_group(32)
                .value_bits(8)
                .value_group(160)
                .residual(32)
                .params(ParamStorage::F32),
            2,
            320,
            2,
            30,
            0,
            1.0,
        ),
        // 1-bit codes of a 128-channel group (a part's codes are one word).
        (
            KiviConfig::default()
                .key_bits(1)
                .key_group(32)
                .value_bits(1)
                .value_group(128)
                .residual(0)
                .params(ParamStorage::F32),
            2,
            128,
            1,
            0,
            0,
            1.0,
        ),
        // H·D odd: the last channel pair of a row has one channel.
        (
            KiviConfig::default()
                .key_bits(4)
                .key_group(4)
                .value_bits(3)
                .value_group(8)
                .residual(8)
                .params(ParamStorage::F32),
            3,
            41,
            3,
            5,
            1,
            1.0,
        ),
        // Tiny inputs: f16-subnormal scales and lo, so the f16 rounding of the parameters is
        // exercised below 2^-14.
        (KiviConfig::uniform(8, 32, 32), 2, 64, 2, 20, 1, 2e-4),
        (KiviConfig::uniform(3, 32, 0), 2, 64, 2, 0, 0, 1e-6),
    ]
}

//! VecInfer's fused quantize kernel `vecinfer_quant` on every path (../shared/spec/vecinfer.md,
//! "Quantize"), from its dispatch plans: inputs split between the residual ring and the
//! incoming rows, a destination inside the segment, poisoned outputs (nothing outside the
//! tokens written may change). Against the CPU reference (`vecinfer_quant`): the emulated MSL
//! bit-identical; WGSL by the spec's rule (an index may differ only where the two distances
//! are within 1e-5 relative; counted and printed). D = 64, 80 (padded to 128), 128, 256;
//! presets bits=1 (d_s 8) and bits=2 (d_s 4), C = 256 and a small C = 16 with 4-bit indices;
//! keys (÷ λ) and values; odd H. The codebooks are made of the data's own transformed
//! sub-vectors with duplicated rows (exact ties, inside one lane's scan and across lanes), so
//! the tie rule is exercised on every path. Planted bugs caught: ties to the higher index, λ
//! multiplied instead of divided.

mod common;

use common::{POISON, Target, run_plan};
use half::f16;
use kvpack::PathChoice;
use kvpack::codecs::vecinfer::kernels::VECINFER_QUANT;
use kvpack::codecs::vecinfer::plans::{EncodeFrom, QuantLayout, plan_quant};
use kvpack::cpu::vecinfer::Preset;
use kvpack::cpu::vecinfer::transform::{padded_dim, transform_key, transform_value};
use kvpack::cpu::vecinfer::vecinfer_quant::{index_at, vecinfer_quant};
use kvpack::gpu::registry::KernelDef;
use rand::Rng;

const Q_OLD: usize = 5;

struct Case {
    heads: usize,
    dim: usize,
    preset: Preset,
    keys: bool,
    n: usize,
    from_ring: usize,
    seg_token: usize,
}

impl Case {
    fn what(&self) -> String {
        format!(
            "H {} D {} d_s {} C {} {} n {} (ring {}) at {}",
            self.heads,
            self.dim,
            self.preset.sub_dim,
            self.preset.centroids,
            if self.keys { "keys" } else { "values" },
            self.n,
            self.from_ring,
            self.seg_token
        )
    }

    fn layout(&self) -> QuantLayout {
        QuantLayout {
            heads: self.heads,
            dim: self.dim,
            padded: padded_dim(self.dim).unwrap(),
            preset: self.preset,
            keys: self.keys,
        }
    }
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    let b1 = Preset::for_bits(1).unwrap();
    let b2 = Preset::for_bits(2).unwrap();
    let small = Preset::new(4, 16).unwrap();
    for (dim, preset, keys) in [
        (64, b1, true),
        (64, b2, false),
        (80, b2, true),
        (128, b1, false),
        (128, b2, true),
        (256, b1, true),
        (256, b2, false),
        (128, small, true),
    ] {
        out.push(Case {
            heads: 3,
            dim,
            preset,
            keys,
            n: 13,
            from_ring: 4,
            seg_token: 2,
        });
    }
    out
}

fn bytes(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}

fn words(b: &[u8]) -> Vec<u32> {
    bytemuck::pod_collect_to_vec(b)
}

/// Inputs `[n][H][D]` (f16-rounded), λ `[H][D]` (keys), codebooks `[H][C][d_s]`.
struct Data {
    x: Vec<f32>,
    lambda: Vec<f32>,
    codebooks: Vec<f32>,
}

fn transformed(c: &Case, d: &Data, t: usize, h: usize) -> Vec<f32> {
    let l = c.layout();
    let v = &d.x[(t * c.heads + h) * c.dim..][..c.dim];
    let mut out = Vec::new();
    if c.keys {
        transform_key(v, &d.lambda[h * c.dim..][..c.dim], l.padded, &mut out);
    } else {
        transform_value(v, l.padded, &mut out);
    }
    out
}

fn data(rng: &mut impl Rng, c: &Case) -> Data {
    let l = c.layout();
    let x: Vec<f32> = (0..c.n * c.heads * c.dim)
        .map(|i| {
            let ch = (i % c.dim) as f32;
            f16::from_f32(rng.random_range(-2.0f32..2.0) * (1.0 + ch / 16.0)).to_f32()
        })
        .collect();
    let lambda: Vec<f32> = (0..c.heads * c.dim)
        .map(|i| (1.0 + (i % c.dim) as f32 / 16.0).sqrt() * rng.random_range(0.8f32..1.5))
        .collect();
    let mut d = Data {
        x,
        lambda,
        codebooks: Vec::new(),
    };
    let (ds, cn) = (c.preset.sub_dim, c.preset.centroids);
    for h in 0..c.heads {
        // The head's own sub-vectors first (distance 0 to their rows), random ones after.
        let mut rows: Vec<f32> = (0..c.n)
            .flat_map(|t| transformed(c, &d, t, h))
            .collect::<Vec<_>>();
        rows.truncate(cn * ds);
        while rows.len() < cn * ds {
            rows.push(rng.random_range(-1.5f32..1.5));
        }
        // Exact ties: row c + 1 (another lane) and row c + 8 (the same lane) = row c.
        for r in (0..cn).step_by(32) {
            for dup in [r + 1, r + 8] {
                if dup < cn {
                    let src = rows[r * ds..][..ds].to_vec();
                    rows[dup * ds..][..ds].copy_from_slice(&src);
                }
            }
        }
        d.codebooks.extend(rows);
    }
    let _ = l;
    d
}

/// Runs `def` on `t`; the rows of the tokens written, after checking nothing else changed.
fn quant_on(t: &Target, def: &'static KernelDef, c: &Case, d: &Data) -> Vec<u32> {
    let l = c.layout();
    let row = c.heads * c.dim;
    let x16: Vec<f16> = d.x.iter().map(|&v| f16::from_f32(v)).collect();
    let rows = kvpack::store::input::f16_rows_to_words(row, &x16);
    let rw = row.div_ceil(2);
    let t_old = Q_OLD + c.from_ring;
    let cap = c.from_ring + 3;
    let mut ring = vec![0x7e00_7e00u32; cap * rw];
    for s in Q_OLD..t_old {
        ring[(s % cap) * rw..][..rw].copy_from_slice(&rows[(s - Q_OLD) * rw..][..rw]);
    }
    let incoming = rows[c.from_ring * rw..].to_vec();
    let per = c.heads * l.row_words();
    let total = c.seg_token + c.n + 2;
    let mut plan = plan_quant(
        &l,
        c.n,
        EncodeFrom {
            start: Q_OLD,
            t_old,
            inc_start: t_old,
            ring_tokens: cap,
        },
        c.seg_token,
    );
    plan.kernel = def;
    let tables: Vec<u32> = if c.keys { &d.lambda[..] } else { &[][..] }
        .iter()
        .chain(&d.codebooks)
        .map(|v| v.to_bits())
        .collect();
    let mut bufs = vec![
        bytes(&ring),
        bytes(&incoming),
        bytes(&vec![POISON; total * per]),
        bytes(&tables),
    ];
    run_plan(t, &plan, &mut bufs).unwrap_or_else(|e| panic!("{} {}: {e}", t.name(), c.what()));
    let w = words(&bufs[2]);
    let (a, b) = (c.seg_token * per, (c.seg_token + c.n) * per);
    assert!(
        w[..a].iter().chain(&w[b..]).all(|&x| x == POISON),
        "{} {}: codes written outside the tokens",
        t.name(),
        c.what()
    );
    w[a..b].to_vec()
}

fn dist(x: &[f32], row: &[f32]) -> f32 {
    x.iter()
        .zip(row)
        .fold(0.0f32, |a, (p, q)| a + (p - q) * (p - q))
}

/// Compares `got` with the reference: Err on a difference the spec does not excuse; Ok(the
/// near-tie differences).
fn agree(c: &Case, d: &Data, got: &[u32], exact: bool) -> Result<usize, String> {
    let l = c.layout();
    let want = vecinfer_quant(
        &d.x,
        c.heads,
        c.dim,
        c.keys.then_some(&d.lambda[..]),
        &d.codebooks,
        c.preset,
        l.padded,
    );
    let (rw, ds, bits) = (l.row_words(), c.preset.sub_dim, c.preset.index_bits());
    let cb_len = c.preset.centroids * ds;
    let mut near = 0;
    for t in 0..c.n {
        for h in 0..c.heads {
            let at = (t * c.heads + h) * rw;
            let (g, w) = (&got[at..at + rw], &want[at..at + rw]);
            if g == w {
                continue;
            }
            if exact {
                return Err(format!(
                    "token {t} head {h}: words {g:x?}, reference {w:x?}"
                ));
            }
            let x = transformed(c, d, t, h);
            let cb = &d.codebooks[h * cb_len..][..cb_len];
            for s in 0..l.n_sub() {
                let (gi, wi) = (index_at(g, s, bits), index_at(w, s, bits));
                if gi == wi {
                    continue;
                }
                let sub = &x[s * ds..][..ds];
                let (rg, rw) = (&cb[gi * ds..][..ds], &cb[wi * ds..][..ds]);
                if rg == rw && gi > wi {
                    return Err(format!(
                        "token {t} head {h} sub {s}: index {gi}, an exact tie with {wi} (identical rows) taken by the higher index"
                    ));
                }
                let (dg, dw) = (dist(sub, rg), dist(sub, rw));
                if (dg - dw).abs() > 1e-5 * dw.max(dg).max(f32::MIN_POSITIVE) {
                    return Err(format!(
                        "token {t} head {h} sub {s}: index {gi} (distance {dg}), reference {wi} ({dw})"
                    ));
                }
                near += 1;
            }
        }
    }
    Ok(near)
}

fn vecinfer_quant_matches_reference(t: &Target) {
    if matches!(t, Target::Cpu(_)) {
        eprintln!("vecinfer_quant: the CPU reference is the oracle (tests/vecinfer_cpu.rs)");
        return;
    }
    let mut rng = common::rng("vecinfer_quant_matches_reference");
    let exact = matches!(t, Target::MslEmulated(_));
    for c in cases() {
        let d = data(&mut rng, &c);
        let got = quant_on(t, &VECINFER_QUANT, &c, &d);
        match agree(&c, &d, &got, exact) {
            Ok(near) => eprintln!(
                "vecinfer_quant[{}] {}: {} indices, {near} differ at near-ties",
                t.name(),
                c.what(),
                c.n * c.heads * c.layout().n_sub()
            ),
            Err(e) => panic!("vecinfer_quant[{}] {}: {e}", t.name(), c.what()),
        }
    }
}
parity_tests!(vecinfer_quant_matches_reference, msl);

/// A copy of vecinfer_quant with `from` replaced by `to` in the variant's source or its shared
/// WGSL declarations; `None` where neither has it.
fn planted(t: &Target, name: &str, from: &str, to: &str) -> Option<&'static KernelDef> {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let full = leak(format!("vecinfer_quant_planted_{name}"));
    let d = &VECINFER_QUANT;
    let msl = matches!(t, Target::MslEmulated(_));
    let body = match t {
        Target::MslEmulated(_) => d.msl.expect("msl"),
        Target::Wgsl(_, PathChoice::WgslSubgroup) => d.wgsl_subgroup.expect("subgroup"),
        _ => d.wgsl,
    };
    let common: Vec<&'static str> = d
        .wgsl_common
        .iter()
        .map(|s| {
            leak(if msl {
                s.to_string()
            } else {
                s.replace(from, to)
            })
        })
        .collect();
    let in_common = !msl && d.wgsl_common.iter().any(|s| s.contains(from));
    if !body.contains(from) && !in_common {
        return None;
    }
    let body = leak(body.replace(from, to).replace(
        "kernel void vecinfer_quant(",
        &format!("kernel void {full}("),
    ));
    Some(Box::leak(Box::new(KernelDef {
        name: full,
        folder: d.folder,
        wgsl_common: Box::leak(common.into_boxed_slice()),
        wgsl_subgroup: d.wgsl_subgroup.map(|_| body),
        wgsl: body,
        msl_common: d.msl_common,
        msl: Some(body),
        bindings: d.bindings,
        workgroup_size: d.workgroup_size,
    })))
}

fn vecinfer_quant_planted_bugs_are_caught(t: &Target) {
    if matches!(t, Target::Cpu(_)) {
        return;
    }
    let mut rng = common::rng("vecinfer_quant_planted_bugs_are_caught");
    let case = cases().remove(0); // keys, d_s 8, C 256, D 64
    let d = data(&mut rng, &case);
    let bugs: [(&str, &[(&str, &str)]); 2] = [
        (
            "ties_to_higher",
            &[("(d < best[r]) { // @vi-tie", "(d <= best[r]) { // @vi-tie")],
        ),
        ("lambda_multiplied", &[("x = x / ", "x = x * ")]),
    ];
    for (name, subs) in bugs {
        let mut caught = false;
        let mut planted_any = false;
        for &(from, to) in subs {
            let Some(def) = planted(t, name, from, to) else {
                continue;
            };
            planted_any = true;
            let got = quant_on(t, def, &case, &d);
            caught |= agree(&case, &d, &got, matches!(t, Target::MslEmulated(_))).is_err();
        }
        assert!(planted_any, "{}: bug {name} could not be planted", t.name());
        assert!(caught, "{}: planted bug {name} was not caught", t.name());
        eprintln!("vecinfer_quant[{}]: planted bug {name} caught", t.name());
    }
}
parity_tests!(vecinfer_quant_planted_bugs_are_caught, msl);

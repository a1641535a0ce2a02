//! Every kernel's composed WGSL (both variants, the specializations the library uses) through
//! naga — wgpu's own shader compiler — front end, validator and SPIR-V writer: a shader that
//! would make wgpu fail (or panic inside naga, as some valid WGSL does) fails here, by name,
//! without a device.

use kvpack::gpu::registry::{Specialization, compose_wgsl};
use kvpack::path::KernelPath;

fn check(name: &str, src: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    let opts = naga::back::spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    let written = std::panic::catch_unwind(|| {
        naga::back::spv::write_vec(&module, &info, &opts, None).map_err(|e| e.to_string())
    });
    match written {
        Ok(r) => r.map(|_| ()),
        Err(_) => Err(format!("{name}: naga's SPIR-V writer panicked")),
    }
}

/// The specializations of an attention kernel in the library's attention tests' shapes.
fn attend_specs() -> Vec<Specialization> {
    let kivi = |kb: u32, vb: u32, g: u32| {
        vec![
            ("ATT_KBITS", kb),
            ("ATT_KGROUP", g),
            ("ATT_KPARAMS_F16", 1),
            ("ATT_VBITS", vb),
            ("ATT_VGROUP", g),
            ("ATT_VPARAMS_F16", 1),
            ("PARAMS_F16", 1),
        ]
    };
    // TurboQuant's hooks (both sides): P, log2 P, bits, stages, c = f32(1/√P).
    let tq = |dim: u32, kb: u32, ks: u32, vb: u32, vs: u32| {
        let p = dim.next_power_of_two();
        let c = (1.0 / f64::from(p).sqrt()) as f32;
        let mut s = Vec::new();
        for (side, b, st) in [("K", kb, ks), ("V", vb, vs)] {
            let name = |x: &str| -> &'static str {
                Box::leak(format!("ATT_{side}TQ_{x}").into_boxed_str())
            };
            s.extend([
                (name("P"), p),
                (name("LOG2P"), p.trailing_zeros()),
                (name("BITS"), b),
                (name("STAGES"), st),
                (name("C"), c.to_bits()),
            ]);
        }
        // VecInfer (both sides): P, log2 P, d_s, log2 C, c; keys an f32 LUT with the 3-bit
        // TurboQuant set (d_s 8, C 256), an f16 one with the 4-bit set (d_s 4, C 32: 5-bit
        // indices straddle words).
        let (ds, lb, lut16) = if kb == 3 { (8, 8, 0) } else { (4, 5, 1) };
        let p = p.max(8);
        for side in ["K", "V"] {
            let name = |x: &str| -> &'static str {
                Box::leak(format!("ATT_{side}VI_{x}").into_boxed_str())
            };
            s.extend([
                (name("P"), p),
                (name("LOG2P"), p.trailing_zeros()),
                (name("DS"), ds),
                (name("BITS"), lb),
                (name("C"), c.to_bits()),
            ]);
        }
        // The codebook form (no LUT) at D ≥ 128 with the 4-bit set, where the f16 LUT stands
        // otherwise.
        let cb = u32::from(lut16 == 1 && dim >= 128);
        s.push(("ATT_KVI_LUT16", lut16 & (1 - cb)));
        s.push(("ATT_KVI_CB", cb));
        // QJL keys: m = 64 (a lane's 8 bits inside a word) by masked sums, or 256 (a whole
        // word per lane) by the nibble table.
        s.extend([
            ("ATT_KQJL_M", if kb == 3 { 64 } else { 256 }),
            ("ATT_KQJL_C", 0.02f32.to_bits()),
            ("ATT_KQJL_LUT", u32::from(kb != 3)),
        ]);
        s
    };
    let mut out = Vec::new();
    for dim in [41u32, 64, 128, 256] {
        for wide in [0u32, 1] {
            for (i, extra) in [kivi(4, 2, 32), kivi(3, 8, 16)].into_iter().enumerate() {
                // A ring everywhere but at D = 64 (both forms compile); positions (a layer
                // under eviction) at D = 64 and 128.
                let ring = u32::from(dim != 64);
                let mut s = vec![
                    ("ATT_DIM", dim),
                    ("ATT_SG_WIDE", wide),
                    ("ATT_RING", ring),
                    ("ATT_POS", u32::from(dim == 64 || dim == 128)),
                    // The tensor-core kernels' measuring floors (0 to 3 over D, width
                    // class and codec pair): all compile.
                    ("ATT_TC_NOLOAD", (dim / 64 + wide + i as u32) % 4),
                    ("ATT_TC_PAD", u32::from(dim == 128)),
                    // The tensor-core prefill kernel's fixed-cost floors (0 to 2).
                    ("ATT_TC_FIXED", (dim / 64 + 2 * wide + i as u32) % 3),
                    ("ATT_TC_PF", (dim / 64) % 3),
                    // The tensor-core prefill kernel's sides loaded a tile ahead (0 to 5).
                    ("ATT_TC_PREF", (dim / 64 + 3 * wide + 2 * i as u32) % 6),
                    // The tensor-core prefill kernel's measuring score splits (0 to 2).
                    ("ATT_TC_SPLIT", (dim / 64 + i as u32) % 3),
                    // The tensor-core prefill kernel's measuring barrier forms (0 to 3).
                    ("ATT_TC_BAR", (dim / 64 + wide + i as u32) % 4),
                    // The prefill kernel's measuring variants (0 to 5 over D, width class
                    // and codec pair): all compile.
                    ("ATT_PF_VARIANT", (dim / 64 + 4 * wide + 2 * i as u32) % 6),
                    // The decode kernel's measuring variants: ring rows in a loop (1) where
                    // there is a ring: D = 41 (rows read channel by channel) and 256 (16-byte
                    // loads); the exact running max (2) at D = 128.
                    (
                        "ATT_DEC_VARIANT",
                        if dim == 256 || dim == 41 {
                            1
                        } else if dim == 128 {
                            2
                        } else {
                            0
                        },
                    ),
                ];
                s.extend(extra);
                // 3-bit MSE / 2+2 RVQ (windows funnel-shifted), then 4-bit / 8+8 (whole words).
                s.extend(if i == 0 {
                    tq(dim, 3, 1, 2, 2)
                } else {
                    tq(dim, 4, 1, 8, 2)
                });
                out.push(Specialization(s));
            }
        }
    }
    out
}

/// The specializations of TurboQuant's own kernels: a small P with 3-bit codes straddling
/// words, and the largest P the GPU kernels hold with 8+8-bit RVQ (with PQ_M for
/// turboquant_prod_quant).
fn turboquant_specs() -> Vec<Specialization> {
    [
        (4u32, 2u32, 3u32, 1u32),
        (128, 7, 3, 2),
        (128, 7, 4, 1),
        (1024, 10, 8, 2),
    ]
    .into_iter()
    .map(|(p, lg, b, s)| {
        Specialization(vec![
            ("TQ_P", p),
            ("TQ_LOG2P", lg),
            ("TQ_BITS", b),
            ("TQ_STAGES", s),
            // TurboQuant-Prod's sketch rows (the other kernels ignore it): P rounded up to 32,
            // and its tokens per workgroup (plans::prod_tokens_per_workgroup: 4 at P ≤ 128).
            ("PQ_M", p.next_multiple_of(32)),
            ("PQ_TOKENS_PER_WG", (512 / p).clamp(1, 4)),
        ])
    })
    .collect()
}

#[test]
fn every_composed_wgsl_kernel_compiles() {
    // Every (kernel, path, specialization), then checked on every core (naga is the cost).
    let mut work = Vec::new();
    for k in kvpack::kernels::all() {
        let specs = if k.folder == "attend" {
            attend_specs()
        } else if k.folder == "turboquant" {
            turboquant_specs()
        } else if k.folder == "vecinfer" {
            // (P, d_s, C, log2 C, keys): both presets at D = 64 .. 256, a small C.
            [
                (64u32, 8u32, 256u32, 8u32, 1u32),
                (128, 4, 256, 8, 0),
                (256, 8, 256, 8, 0),
                (256, 4, 256, 8, 1),
                (128, 4, 16, 4, 1),
            ]
            .into_iter()
            .map(|(p, ds, c, b, keys)| {
                Specialization(vec![
                    ("VI_P", p),
                    ("VI_DS", ds),
                    ("VI_C", c),
                    ("VI_BITS", b),
                    ("VI_KEYS", keys),
                    ("VI_TPW", 8),
                ])
            })
            .collect()
        } else if k.name == "evict_compact" {
            vec![Specialization(Vec::new())]
        } else if k.name == "evict_select" {
            (0..2u32)
                .map(|oldest| Specialization(vec![("OLDEST", oldest)]))
                .collect()
        } else if k.folder == "policy" {
            (0..2u32)
                .map(|norm| Specialization(vec![("SCORE_NORM", norm)]))
                .collect()
        } else if k.folder == "qjl" {
            [(64u32, 32u32), (80, 96), (128, 128), (256, 512)]
                .into_iter()
                .map(|(d, m)| Specialization(vec![("QJL_DIM", d), ("QJL_M", m)]))
                .collect()
        } else {
            vec![Specialization(vec![
                ("PARAMS_F16", 1),
                ("KEY_GROUP", 32),
                ("KEY_BITS", 3),
                ("VALUE_GROUP", 32),
                ("VALUE_BITS", 2),
            ])]
        };
        for path in [KernelPath::WgslSubgroup, KernelPath::WgslWorkgroup] {
            for spec in &specs {
                work.push((k, path, spec.clone()));
            }
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures: Vec<String> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut failed = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((k, path, spec)) = work.get(i) else {
                            return failed;
                        };
                        let src = compose_wgsl(k, *path, spec);
                        if let Err(e) = check(k.name, &src) {
                            failed.push(format!("{} [{path}] {:?}: {e}", k.name, spec.0));
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a checking thread panicked"))
            .collect()
    });
    let checked = work.len();
    eprintln!("every_composed_wgsl_kernel_compiles: {checked} compositions on {threads} threads");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Each codec's `k_prep` flag says what its WGSL and MSL key hooks declare (`K_PREP`): the
/// prefill kernel's absence for such keys rests on it.
#[test]
fn k_prep_flags_match_the_hooks() {
    for h in kvpack::kernels::attend_hooks() {
        let wgsl = h.wgsl_k.contains("const K_PREP: bool = true;");
        assert!(
            wgsl || h.wgsl_k.contains("const K_PREP: bool = false;"),
            "{}: no K_PREP in its WGSL key hooks",
            h.name
        );
        assert_eq!(wgsl, h.k_prep, "{}: k_prep flag vs WGSL K_PREP", h.name);
        if let Some(m) = h.msl_k {
            let msl = format!("#define K_PREP {}\n", h.k_prep);
            assert!(m.contains(&msl), "{}: k_prep flag vs MSL K_PREP", h.name);
        }
        assert_eq!(
            kvpack::attention::kernel::prefill(h, h).is_some(),
            !h.k_prep,
            "{}: a prefill kernel exactly when the keys do not transform the query",
            h.name
        );
    }
}

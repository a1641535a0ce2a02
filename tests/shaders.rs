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
    let mut out = Vec::new();
    for dim in [41u32, 64, 128, 256] {
        for wide in [0u32, 1] {
            for extra in [kivi(4, 2, 32), kivi(3, 8, 16)] {
                // A ring everywhere but at D = 64 (both forms compile).
                let ring = u32::from(dim != 64);
                let mut s = vec![("ATT_DIM", dim), ("ATT_SG_WIDE", wide), ("ATT_RING", ring)];
                s.extend(extra);
                out.push(Specialization(s));
            }
        }
    }
    out
}

#[test]
fn every_composed_wgsl_kernel_compiles() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for k in kvpack::kernels::all() {
        let specs = if k.folder == "attend" {
            attend_specs()
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
                let src = compose_wgsl(k, path, spec);
                if let Err(e) = check(k.name, &src) {
                    failures.push(format!("{} [{path}] {:?}: {e}", k.name, spec.0));
                }
                checked += 1;
            }
        }
    }
    eprintln!("every_composed_wgsl_kernel_compiles: {checked} compositions");
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

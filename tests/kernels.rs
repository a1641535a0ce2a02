//! The naming rule (DESIGN.md): every kernel has its WGSL (`wgsl/<folder>/<name>.wgsl`), its
//! MSL (`msl/<folder>/<name>.metal`, a `kernel void <name>` in the composed source) and its
//! CPU twin (`src/cpu/<folder>/<name>.rs`); every codec's attention hooks have theirs
//! (`wgsl/<codec>/attend_{k,v}.wgsl`, `msl/<codec>/attend_{k,v}.metal`,
//! `src/cpu/<codec>/attend_{k,v}.rs`). The attention kernels are composed per codec pair:
//! their CPU twin is the core, src/cpu/attend.rs.

use std::path::Path;

fn exists(rel: &str) -> bool {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel).is_file()
}

#[test]
fn every_kernel_has_its_three_twins() {
    let mut checked = 0;
    for k in kvpack::kernels::all() {
        let composed = k.folder == "attend";
        let (wgsl, cpu) = if composed {
            (
                "wgsl/attend/attend_core.wgsl".to_string(),
                "src/cpu/attend.rs".to_string(),
            )
        } else {
            (
                format!("wgsl/{}/{}.wgsl", k.folder, k.name),
                format!("src/cpu/{}/{}.rs", k.folder, k.name),
            )
        };
        assert!(exists(&wgsl), "{}: no {wgsl}", k.name);
        assert!(exists(&cpu), "{}: no CPU twin {cpu}", k.name);
        if !composed {
            assert!(
                exists(&format!("msl/{}/{}.metal", k.folder, k.name)),
                "{}: no msl/{}/{}.metal",
                k.name,
                k.folder,
                k.name
            );
        }
        if kvpack::gpu::registry::needs_cooperative_matrix(k) {
            // The tensor-core kernel (issue 12's tier 3) is WGSL only: Metal's matrices are
            // 8×8 simdgroup_matrix, a kernel of its own that is not written yet. Its CPU twin
            // is the core, like every attention kernel's.
            assert!(k.msl.is_none(), "{}: an MSL source appeared", k.name);
            eprintln!(
                "NOTE {}: WGSL only (no MSL twin of the tensor-core kernel yet)",
                k.name
            );
            checked += 1;
            continue;
        }
        let msl = kvpack::gpu::registry::compose_msl(k, &Default::default())
            .unwrap_or_else(|| panic!("{}: no MSL source", k.name));
        assert!(
            msl.contains(&format!("kernel void {}(", k.name)),
            "{}: the composed MSL has no `kernel void {}(`",
            k.name,
            k.name
        );
        checked += 1;
    }
    for hooks in kvpack::kernels::attend_hooks() {
        // A keys-only codec (QJL) has no value side.
        let sides: &[&str] = if hooks.keys_only { &["k"] } else { &["k", "v"] };
        for side in sides {
            for f in [
                format!("wgsl/{}/attend_{side}.wgsl", hooks.name),
                format!("msl/{}/attend_{side}.metal", hooks.name),
                format!("src/cpu/{}/attend_{side}.rs", hooks.name),
            ] {
                assert!(exists(&f), "{} hooks: no {f}", hooks.name);
            }
        }
        assert!(
            hooks.msl_k.is_some() && (hooks.keys_only || hooks.msl_v.is_some()),
            "{}: no MSL hooks",
            hooks.name
        );
        checked += 1;
    }
    eprintln!("every_kernel_has_its_three_twins: {checked} kernels and hook sets checked");
}

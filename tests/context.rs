//! Context construction, path resolution and `describe()`.

mod common;

use kvpack::bitpack::BITPACK;
use kvpack::{Context, KernelPath, Origin, PathChoice};

#[test]
fn cpu_context_runs_everything_on_the_cpu() {
    let ctx = Context::cpu();
    assert_eq!(ctx.origin(), &Origin::CpuRequested);
    assert!(ctx.device().is_none());
    for k in kvpack::kernels::all() {
        assert_eq!(
            ctx.resolve(k, PathChoice::Auto).expect("auto"),
            KernelPath::Cpu
        );
        assert_eq!(
            ctx.resolve(k, PathChoice::Cpu).expect("cpu"),
            KernelPath::Cpu
        );
    }
    let text = ctx.describe().to_string();
    assert!(text.contains("CPU only (requested)"), "{text}");
    assert!(
        text.contains("bitpack") && text.contains("-> cpu"),
        "{text}"
    );
}

#[test]
fn auto_picks_the_subgroup_variant_when_subgroups_are_enabled() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(r) => return common::skip("auto_picks_subgroup", &r),
    };
    let info = ctx.adapter_info().expect("adapter").clone();
    let expected = if info.backend == wgpu::Backend::Metal
        && ctx.features().contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        KernelPath::Msl
    } else if ctx.features().contains(wgpu::Features::SUBGROUP) {
        KernelPath::WgslSubgroup
    } else {
        KernelPath::WgslWorkgroup
    };
    assert_eq!(
        ctx.resolve(&BITPACK, PathChoice::Auto).expect("auto"),
        expected
    );
    assert_eq!(
        ctx.resolve(&BITPACK, PathChoice::WgslWorkgroup)
            .expect("wg"),
        KernelPath::WgslWorkgroup
    );
    let d = ctx.describe();
    let gpu = d.gpu.as_ref().expect("gpu facts");
    assert_eq!(gpu.adapter, info.name);
    assert_eq!(
        gpu.subgroup_sizes,
        (info.subgroup_min_size, info.subgroup_max_size)
    );
    let text = d.to_string();
    println!("{text}");
    assert!(
        text.contains(&info.name) && text.contains("max_storage_buffer_binding_size"),
        "{text}"
    );
    assert_eq!(d.kernels.len(), kvpack::kernels::all().len());
}

#[test]
fn auto_picks_the_workgroup_variant_without_subgroups() {
    let ctx = match common::gpu_context_without_subgroups() {
        Ok(c) => c,
        Err(r) => return common::skip("auto_picks_workgroup", &r),
    };
    assert!(!ctx.features().contains(wgpu::Features::SUBGROUP));
    for k in kvpack::kernels::all() {
        assert_eq!(
            ctx.resolve(k, PathChoice::Auto).expect("auto"),
            KernelPath::WgslWorkgroup
        );
        assert_eq!(
            ctx.resolve(k, PathChoice::Wgsl).expect("wgsl"),
            KernelPath::WgslWorkgroup
        );
    }
}

#[test]
fn from_device_wraps_the_apps_device() {
    let headless = match common::gpu_context() {
        Ok(c) => c,
        Err(r) => return common::skip("from_device_wraps_the_apps_device", &r),
    };
    let device = headless.device().expect("device").clone();
    let queue = headless.queue().expect("queue").clone();
    let ctx = Context::from_device(device.clone(), queue);
    assert_eq!(ctx.origin(), &Origin::AppDevice);
    assert_eq!(ctx.features(), device.features());
    assert!(
        ctx.describe()
            .to_string()
            .contains("application's own device")
    );
    let p = kvpack::BitPacker::new(&ctx).expect("packer");
    assert_eq!(p.pack(&[1, 0, 1, 1], 1).expect("pack"), vec![0b1101]);
}

#[test]
fn with_path_keeps_the_device_and_changes_the_default() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(r) => return common::skip("with_path", &r),
    };
    let cpu = ctx.with_path(PathChoice::Cpu).expect("cpu");
    assert!(cpu.device().is_some());
    assert_eq!(
        kvpack::BitPacker::new(&cpu).expect("packer").pack_path(),
        KernelPath::Cpu
    );
    let wg = ctx.with_path(PathChoice::WgslWorkgroup).expect("wg");
    assert_eq!(
        kvpack::BitPacker::new(&wg).expect("packer").pack_path(),
        KernelPath::WgslWorkgroup
    );
}

#[test]
fn no_adapter_gives_a_cpu_context_that_says_so() {
    // No backend enabled: no adapter can exist.
    let opts = kvpack::HeadlessOptions {
        backends: Some(wgpu::Backends::empty()),
        ..Default::default()
    };
    let ctx = Context::headless_with(&opts).expect("a CPU context");
    assert!(
        matches!(ctx.origin(), Origin::CpuNoAdapter(_)),
        "{:?}",
        ctx.origin()
    );
    assert!(ctx.device().is_none());
    assert_eq!(
        ctx.resolve(&BITPACK, PathChoice::Auto).expect("auto"),
        KernelPath::Cpu
    );
    let text = ctx.describe().to_string();
    assert!(text.contains("CPU only: no adapter"), "{text}");
    let strict = kvpack::HeadlessOptions {
        require_gpu: true,
        ..opts
    };
    assert!(matches!(
        Context::headless_with(&strict),
        Err(kvpack::Error::NoAdapter(_))
    ));
}

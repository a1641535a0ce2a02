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
        if kvpack::gpu::registry::needs_cooperative_matrix(k) {
            // The tensor-core kernel needs subgroups: unavailable here, with the reason.
            for choice in [PathChoice::Auto, PathChoice::Wgsl] {
                match ctx.resolve(k, choice) {
                    Err(kvpack::Error::PathUnavailable { reason, .. }) => {
                        assert!(!reason.is_empty())
                    }
                    other => panic!("{} on {choice}: {other:?}", k.name),
                }
            }
            continue;
        }
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
    let ctx = Context::from_device(device.clone(), queue).expect("from_device");
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
    let opts = kvpack::HeadlessOptions::default().backends(Some(wgpu::Backends::empty()));
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
    let strict = opts.require_gpu(true);
    assert!(matches!(
        Context::headless_with(&strict),
        Err(kvpack::Error::NoAdapter(_))
    ));
}

/// `required_features()` is empty, `required_limits()` covers every kernel's bindings and
/// workgroup size, and `from_device` refuses a device whose limits are below it with
/// `Error::MissingCapabilities` naming each limit (an app that requested too little), while a
/// device made with exactly `required_limits()` is accepted and runs a kernel.
#[test]
fn from_device_checks_the_required_limits() {
    assert!(kvpack::required_features().is_empty());
    let need = kvpack::required_limits();
    for k in kvpack::kernels::all() {
        assert!(
            k.bindings.len() as u32 <= need.max_bindings_per_bind_group,
            "{}",
            k.name
        );
        let storage = k
            .bindings
            .iter()
            .filter(|b| !matches!(b, kvpack::gpu::registry::Binding::Uniform))
            .count() as u32;
        assert!(
            storage <= need.max_storage_buffers_per_shader_stage,
            "{}",
            k.name
        );
        assert!(
            k.workgroup_size <= need.max_compute_invocations_per_workgroup,
            "{}",
            k.name
        );
    }
    let headless = match common::gpu_context() {
        Ok(c) => c,
        Err(r) => return common::skip("from_device_checks_the_required_limits", &r),
    };
    let adapter_limits = headless.device().expect("device").limits();
    assert!(
        kvpack::context::missing_capabilities(headless.features(), &adapter_limits).is_empty(),
        "the test adapter itself lacks kvpack's limits"
    );
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle().with_env());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .expect("an adapter (the headless context found one)");
    let device_with = |limits: wgpu::Limits| {
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("app device"),
            required_limits: limits,
            ..Default::default()
        }))
        .expect("request_device")
    };

    let (device, queue) = device_with(need.clone());
    let ctx = Context::from_device(device, queue).expect("a device with required_limits()");
    let p = kvpack::BitPacker::new(&ctx).expect("packer");
    assert_eq!(p.pack(&[1, 0, 1, 1], 1).expect("pack"), vec![0b1101]);

    let low = wgpu::Limits {
        max_storage_buffers_per_shader_stage: 1,
        max_compute_invocations_per_workgroup: 32,
        max_compute_workgroup_size_x: 32,
        ..need.clone()
    };
    let (device, queue) = device_with(low);
    match Context::from_device(device, queue) {
        Err(kvpack::Error::MissingCapabilities { missing, .. }) => {
            let text = missing.join("\n");
            for name in [
                "max_storage_buffers_per_shader_stage",
                "max_compute_invocations_per_workgroup",
                "max_compute_workgroup_size_x",
            ] {
                assert!(text.contains(name), "{name} not named in {text}");
            }
            assert_eq!(missing.len(), 3, "{text}");
        }
        Err(e) => panic!("expected MissingCapabilities, got {e}"),
        Ok(_) => panic!("a device below required_limits() was accepted"),
    }
}

/// The f16 subnormal probe (`Context::f16_subnormals_kept`, the precondition of the decode
/// kernel's two-codes-per-mask reading of KIVI's codes, `KVPACK_DEC_VARIANT=4`) answers on
/// every GPU, the same on a second ask; lavapipe keeps f16 subnormals (LLVM's widening is exact),
/// so there it must say so.
#[test]
fn f16_subnormal_probe_answers() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(r) => return common::skip("f16_subnormal_probe_answers", &r),
    };
    let info = ctx.adapter_info().expect("adapter").clone();
    let kept = ctx.f16_subnormals_kept();
    println!("{}: f16 subnormals kept: {kept}", info.name);
    assert_eq!(ctx.f16_subnormals_kept(), kept, "a second ask");
    if info.name.starts_with("llvmpipe") {
        assert!(kept, "lavapipe widens f16 subnormals exactly");
    }
    let ctx2 = ctx.with_own_pipeline_cache();
    assert_eq!(
        ctx2.f16_subnormals_kept(),
        kept,
        "another handle of the device"
    );
}

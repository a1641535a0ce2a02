//! Bad input on every public entry point so far gets a typed error, never a panic.

mod common;

use kvpack::gpu::registry::{Binding, KernelDef, Specialization};
use kvpack::{BitPacker, Context, Error, HeadlessOptions, KernelPath, PathChoice, gpu};

fn packers() -> Vec<(String, BitPacker)> {
    let mut v = vec![(
        "cpu".to_string(),
        BitPacker::new(&Context::cpu()).expect("cpu packer"),
    )];
    match common::gpu_context() {
        Ok(ctx) => v.push((
            "wgsl".into(),
            BitPacker::with_path(&ctx, PathChoice::Wgsl).expect("wgsl packer"),
        )),
        Err(reason) => common::skip("bad_input GPU packers", &reason),
    }
    v
}

#[test]
fn bits_out_of_range() {
    for (name, p) in packers() {
        for bits in [0u32, 9, 32, u32::MAX] {
            assert!(
                matches!(p.pack(&[0, 1], bits), Err(Error::BitsOutOfRange { bits: b }) if b == bits),
                "{name} pack {bits}"
            );
            assert!(
                matches!(p.unpack(&[0], bits, 1), Err(Error::BitsOutOfRange { .. })),
                "{name} unpack {bits}"
            );
        }
    }
    assert!(matches!(
        kvpack::packed_words(3, 0),
        Err(Error::BitsOutOfRange { bits: 0 })
    ));
}

#[test]
fn code_too_large_is_reported_with_its_index() {
    for (name, p) in packers() {
        for bits in 1..=7u32 {
            let mut codes = vec![0u8; 40];
            codes[17] = 1 << bits;
            match p.pack(&codes, bits) {
                Err(Error::CodeOutOfRange {
                    index: 17,
                    code,
                    bits: b,
                    limit,
                }) => {
                    assert_eq!((code, b, limit), (1 << bits, bits, 1 << bits), "{name}");
                }
                other => panic!("{name} b={bits}: expected CodeOutOfRange, got {other:?}"),
            }
        }
    }
}

#[test]
fn word_count_mismatch_and_corrupt_padding() {
    for (name, p) in packers() {
        // 5 codes of 3 bits need exactly one word.
        assert!(
            matches!(
                p.unpack(&[0, 0], 3, 5),
                Err(Error::LengthMismatch {
                    expected: 1,
                    actual: 2,
                    ..
                })
            ),
            "{name} too many words"
        );
        assert!(
            matches!(
                p.unpack(&[], 3, 5),
                Err(Error::LengthMismatch {
                    expected: 1,
                    actual: 0,
                    ..
                })
            ),
            "{name} too few"
        );
        assert!(
            matches!(
                p.unpack(&[1 << 15], 3, 5),
                Err(Error::NonZeroPadding { bits_used: 15, .. })
            ),
            "{name} padding bit 15 set"
        );
        assert!(
            p.unpack(&[1 << 14], 3, 5).is_ok(),
            "{name} bit 14 belongs to code 4"
        );
    }
    let mut out = [0u32; 2];
    assert!(matches!(
        kvpack::cpu::bitpack::bitpack(&[1, 2, 3], 4, &mut out),
        Err(Error::LengthMismatch {
            what: "packed words",
            expected: 1,
            actual: 2
        })
    ));
}

#[test]
fn encode_checks_buffers_and_path() {
    let cpu = BitPacker::new(&Context::cpu()).expect("cpu packer");
    assert_eq!(cpu.pack_path(), KernelPath::Cpu);
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(reason) => return common::skip("encode_checks_buffers_and_path", &reason),
    };
    let p = BitPacker::with_path(&ctx, PathChoice::Wgsl).expect("packer");
    let device = ctx.device().expect("device");
    let mut enc = device.create_command_encoder(&Default::default());
    let small = gpu::storage_buffer(&ctx, "small", 4).expect("buffer");
    let big = gpu::storage_buffer(&ctx, "big", 4096).expect("buffer");
    // 100 codes need 100 bytes of input and 13 words of output at 4 bits... input too small:
    assert!(matches!(
        p.encode_pack(&mut enc, &small, 100, 4, &big),
        Err(Error::LengthMismatch { .. })
    ));
    // output too small:
    assert!(matches!(
        p.encode_pack(&mut enc, &big, 100, 4, &small),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        p.encode_unpack(&mut enc, &big, 100, 4, &small),
        Err(Error::LengthMismatch { .. })
    ));
    assert!(matches!(
        p.encode_pack(&mut enc, &big, 10, 0, &big),
        Err(Error::BitsOutOfRange { .. })
    ));
    // a buffer without STORAGE usage:
    let mappable = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 4096,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    assert!(matches!(
        p.encode_pack(&mut enc, &mappable, 10, 4, &big),
        Err(Error::Config(_))
    ));
    // a CPU packer cannot record GPU work:
    let cpu_on_gpu = BitPacker::with_path(&ctx, PathChoice::Cpu).expect("cpu packer");
    assert!(matches!(
        cpu_on_gpu.encode_pack(&mut enc, &big, 10, 4, &big),
        Err(Error::PathUnavailable { .. })
    ));
    drop(enc);
    // a storage buffer above the device's binding limit:
    assert!(matches!(
        gpu::storage_buffer(&ctx, "huge", 1 << 40),
        Err(Error::Limit { .. })
    ));
}

#[test]
fn unavailable_paths_are_errors_not_fallbacks() {
    let cpu = Context::cpu();
    for choice in [
        PathChoice::Wgsl,
        PathChoice::WgslSubgroup,
        PathChoice::WgslWorkgroup,
        PathChoice::Msl,
    ] {
        assert!(
            matches!(cpu.with_path(choice), Err(Error::PathUnavailable { .. })),
            "cpu context, {choice}"
        );
        assert!(
            matches!(
                BitPacker::with_path(&cpu, choice),
                Err(Error::PathUnavailable { .. })
            ),
            "{choice}"
        );
    }
    assert!(matches!(PathChoice::parse("gpu"), Err(Error::Config(_))));
    assert_eq!(
        PathChoice::parse("WGSL-Workgroup").expect("parse"),
        PathChoice::WgslWorkgroup
    );
    assert!(matches!(
        cpu.with_max_workgroups_per_dimension(0),
        Err(Error::Config(_))
    ));
    match common::gpu_context() {
        Ok(ctx)
            if ctx
                .adapter_info()
                .is_some_and(|i| i.backend != wgpu::Backend::Metal) =>
        {
            match BitPacker::with_path(&ctx, PathChoice::Msl) {
                Err(Error::PathUnavailable {
                    kernel: "bitpack",
                    reason,
                    ..
                }) => assert!(reason.contains("Metal"), "{reason}"),
                other => panic!("expected PathUnavailable, got {other:?}"),
            }
        }
        Ok(_) => {}
        Err(reason) => common::skip("msl unavailable check", &reason),
    }
    match common::gpu_context_without_subgroups() {
        Ok(ctx) => {
            assert!(matches!(
                ctx.with_path(PathChoice::WgslSubgroup),
                Err(Error::PathUnavailable { .. })
            ));
            assert!(matches!(
                BitPacker::with_path(&ctx, PathChoice::WgslSubgroup),
                Err(Error::PathUnavailable { .. })
            ));
        }
        Err(reason) => common::skip("subgroup unavailable check", &reason),
    }
}

#[test]
fn unknown_adapter_name_is_an_error() {
    let opts = HeadlessOptions::default().adapter_name(Some("no such adapter 7f3a".into()));
    match Context::headless_with(&opts) {
        Err(Error::NoAdapter(msg)) => assert!(msg.contains("no such adapter 7f3a"), "{msg}"),
        other => panic!("expected NoAdapter, got {other:?}"),
    }
}

static BROKEN: KernelDef = KernelDef {
    name: "broken_for_test",
    folder: "tests",
    wgsl_common: &[],
    wgsl_subgroup: None,
    wgsl: "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
           @compute @workgroup_size(WORKGROUP_SIZE) fn main() { out[0] = undefined_name; }\n",
    msl_common: &[],
    msl: None,
    bindings: &[Binding::StorageReadWrite],
    workgroup_size: 64,
};

#[test]
fn bad_shader_is_a_typed_error() {
    let ctx = match common::gpu_context() {
        Ok(c) => c,
        Err(reason) => return common::skip("bad_shader_is_a_typed_error", &reason),
    };
    match kvpack::gpu::pipeline::pipeline(
        &ctx,
        &BROKEN,
        KernelPath::WgslWorkgroup,
        &Specialization::default(),
    ) {
        Err(Error::Shader {
            kernel: "broken_for_test",
            message,
            ..
        }) => {
            assert!(message.contains("undefined_name"), "{message}")
        }
        other => panic!("expected Error::Shader, got {other:?}"),
    }
    // The device is still usable afterwards.
    let p = BitPacker::with_path(&ctx, PathChoice::Wgsl).expect("packer");
    assert_eq!(p.pack(&[3, 1], 2).expect("pack"), vec![0b01_11]);
}

#[test]
fn cache_and_context_knobs_reject_bad_values() {
    use kvpack::{Cache, Input, KiviConfig, Method};
    let ctx = Context::cpu();
    assert!(matches!(
        Cache::new(&ctx, 2, 8, &[], PathChoice::Cpu),
        Err(Error::Config(_))
    ));
    let mut cache = Cache::uniform(
        &ctx,
        2,
        2,
        8,
        &Method::kivi(&KiviConfig::uniform(2, 4, 4)).expect("method"),
        PathChoice::Cpu,
    )
    .expect("cache");
    let x = vec![0.5f32; 16];
    assert!(matches!(
        cache.append(2, Input::F32(&x), Input::F32(&x)),
        Err(Error::Shape {
            what: "layer index",
            ..
        })
    ));
    cache
        .append(1, Input::F32(&x), Input::F32(&x))
        .expect("append to layer 1");
    assert_eq!(cache.layer(1).map(|l| l.len()), Some(1));
    assert_eq!(cache.layer(0).map(|l| l.len()), Some(0));
    // Value groups above 256 channels are refused (the GPU kernels hold a group per slice).
    let cfg = KiviConfig::uniform(2, 32, 0).value_group(512);
    assert!(matches!(
        Cache::uniform(
            &ctx,
            1,
            1,
            512,
            &Method::kivi(&cfg).expect("method"),
            PathChoice::Cpu
        ),
        Err(Error::Config(_))
    ));
    match common::gpu_context() {
        Ok(g) => {
            assert!(matches!(
                g.with_max_storage_binding_size(16),
                Err(Error::Config(_))
            ));
            let lowered = g.with_max_storage_binding_size(4096).expect("lower");
            assert_eq!(lowered.max_storage_binding_size(), 4096);
            assert!(matches!(
                gpu::storage_buffer(&lowered, "too big", 8192),
                Err(Error::Limit { limit: 4096, .. })
            ));
            // It can only lower the device's limit.
            assert_eq!(
                g.with_max_storage_binding_size(u64::MAX)
                    .expect("same")
                    .max_storage_binding_size(),
                g.max_storage_binding_size()
            );
        }
        Err(reason) => common::skip(
            "cache_and_context_knobs_reject_bad_values (GPU part)",
            &reason,
        ),
    }
}

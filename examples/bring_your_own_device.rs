//! An application that owns its wgpu device hands it to kvpack, records kvpack's work into
//! its own command encoder next to its own commands, and submits it itself.
//!
//! `cargo run --release --example bring_your_own_device`

use kvpack::{BitPacker, Context, gpu};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. The application creates its device as it always does (kvpack is not involved).
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle().with_env());
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| {
        format!("this example needs a GPU adapter (on Linux without one, install lavapipe: {e})")
    })?;
    // The app enables what it wants; kvpack uses SUBGROUP when the app enabled it.
    let features = adapter.features() & (wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("my app's device"),
        required_features: features,
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;

    // 2. It hands clones of its handles to kvpack. kvpack reads features and limits only.
    let ctx = Context::from_device(device.clone(), queue.clone())?;
    println!("{}", ctx.describe());

    // 3. kvpack's buffers live on the app's device.
    let codes: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 29) as u8)
        .collect();
    let bits = 3;
    let packer = BitPacker::new(&ctx)?;
    let input = gpu::upload(&ctx, "app codes", &codes)?;
    let packed = gpu::storage_buffer(
        &ctx,
        "app packed",
        (kvpack::packed_words(codes.len(), bits)? * 4) as u64,
    )?;
    let unpacked = gpu::storage_buffer(&ctx, "app unpacked", codes.len().div_ceil(4) as u64 * 4)?;
    let staging = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("app staging"),
        size: unpacked.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });

    // 4. One encoder of the app's: kvpack records its two dispatches, the app adds a copy.
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("app frame"),
    });
    packer.encode_pack(&mut encoder, &input, codes.len(), bits, &packed)?;
    packer.encode_unpack(&mut encoder, &packed, codes.len(), bits, &unpacked)?;
    encoder.copy_buffer_to_buffer(&unpacked, 0, &staging, 0, unpacked.size());
    // 5. The app submits when it wants to.
    queue.submit([encoder.finish()]);

    staging.map_async(wgpu::MapMode::Read, .., |r| r.expect("map"));
    device.poll(wgpu::PollType::Wait {
        submission_index: None,
        timeout: None,
    })?;
    let back = staging.get_mapped_range(..)?[..codes.len()].to_vec();
    let ok = back == codes;
    println!(
        "packed {} codes of {bits} bits on {} inside the app's encoder; round trip {}",
        codes.len(),
        packer.pack_path(),
        if ok { "exact" } else { "WRONG" }
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

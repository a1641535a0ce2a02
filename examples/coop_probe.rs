//! Probes of wgpu's cooperative matrices on the device (a diagnostic for the tensor-core
//! attention kernel): each small kernel computes O = A·B over 16×16 tiles in a way the kernel
//! does (A from a function-scope array of matrices, accumulators in an array, workgroup memory
//! reused across loop iterations behind barriers) and is compared with the CPU.
//! `cargo run --release --example coop_probe` (needs an adapter with 16×16 f16 cooperative
//! matrices; prints why not elsewhere).

use kvpack::{Context, gpu};

const HEAD: &str = "enable f16;\nenable wgpu_cooperative_matrix;\ndiagnostic(off, derivative_uniformity);\n\
alias MA = coop_mat16x16<f16, A>;\nalias MB = coop_mat16x16<f16, B>;\nalias MC = coop_mat16x16<f32, C>;\n\
@group(0) @binding(0) var<storage, read> a: array<f32>;\n\
@group(0) @binding(1) var<storage, read> b: array<f32>;\n\
@group(0) @binding(2) var<storage, read_write> o: array<f32>;\n";

/// A: [16][64] (row-major), B: [NT tiles][64][16]; O = Σ_tiles A·B_tile : [16][16].
/// Every variant: 4 tiles, K = 64 (4 k-steps).
const PROBES: &[(&str, &str)] = &[
    (
        "straight: A, B staged per tile, one accumulator var",
        "var<workgroup> wa: array<f16, 1024>;\nvar<workgroup> wb: array<f16, 1024>;\nvar<workgroup> wo: array<f32, 256>;\n\
@compute @workgroup_size(32) fn main(@builtin(local_invocation_index) lid: u32) {\n\
  for (var e = lid; e < 1024u; e += 32u) { wa[e] = f16(a[e]); }\n\
  var acc = MC();\n\
  for (var t = 0u; t < 4u; t++) {\n\
    for (var e = lid; e < 1024u; e += 32u) { wb[e] = f16(b[t * 1024u + e]); }\n\
    workgroupBarrier();\n\
    for (var k = 0u; k < 4u; k++) {\n\
      let x = coopLoadT<MA>(&wa[k * 16u], 64u);\n\
      let y = coopLoadT<MB>(&wb[k * 256u], 16u);\n\
      acc = coopMultiplyAdd(x, y, acc);\n\
    }\n\
    workgroupBarrier();\n\
  }\n\
  coopStoreT(acc, &wo[0], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 32u) { o[e] = wo[e]; }\n\
}\n",
    ),
    (
        "A from a function array of 4 matrices",
        "var<workgroup> wa: array<f16, 1024>;\nvar<workgroup> wb: array<f16, 1024>;\nvar<workgroup> wo: array<f32, 256>;\n\
@compute @workgroup_size(32) fn main(@builtin(local_invocation_index) lid: u32) {\n\
  for (var e = lid; e < 1024u; e += 32u) { wa[e] = f16(a[e]); }\n\
  workgroupBarrier();\n\
  var qa: array<MA, 4>;\n\
  { let k = 0u; qa[k] = coopLoadT<MA>(&wa[k * 16u], 64u); }\n\
  { let k = 1u; qa[k] = coopLoadT<MA>(&wa[k * 16u], 64u); }\n\
  { let k = 2u; qa[k] = coopLoadT<MA>(&wa[k * 16u], 64u); }\n\
  { let k = 3u; qa[k] = coopLoadT<MA>(&wa[k * 16u], 64u); }\n\
  var acc = MC();\n\
  for (var t = 0u; t < 4u; t++) {\n\
    workgroupBarrier();\n\
    for (var e = lid; e < 1024u; e += 32u) { wb[e] = f16(b[t * 1024u + e]); }\n\
    workgroupBarrier();\n\
    { let k = 0u; acc = coopMultiplyAdd(qa[k], coopLoadT<MB>(&wb[k * 256u], 16u), acc); }\n\
    { let k = 1u; acc = coopMultiplyAdd(qa[k], coopLoadT<MB>(&wb[k * 256u], 16u), acc); }\n\
    { let k = 2u; acc = coopMultiplyAdd(qa[k], coopLoadT<MB>(&wb[k * 256u], 16u), acc); }\n\
    { let k = 3u; acc = coopMultiplyAdd(qa[k], coopLoadT<MB>(&wb[k * 256u], 16u), acc); }\n\
  }\n\
  coopStoreT(acc, &wo[0], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 32u) { o[e] = wo[e]; }\n\
}\n",
    ),
    (
        "accumulator in a function array (init by MC())",
        "var<workgroup> wa: array<f16, 1024>;\nvar<workgroup> wb: array<f16, 1024>;\nvar<workgroup> wo: array<f32, 256>;\n\
@compute @workgroup_size(32) fn main(@builtin(local_invocation_index) lid: u32) {\n\
  for (var e = lid; e < 1024u; e += 32u) { wa[e] = f16(a[e]); }\n\
  var acc: array<MC, 2>;\n\
  { let j = 0u; acc[j] = MC(); }\n\
  { let j = 1u; acc[j] = MC(); }\n\
  for (var t = 0u; t < 4u; t++) {\n\
    workgroupBarrier();\n\
    for (var e = lid; e < 1024u; e += 32u) { wb[e] = f16(b[t * 1024u + e]); }\n\
    workgroupBarrier();\n\
    for (var k = 0u; k < 4u; k++) {\n\
      { let j = 1u; acc[j] = coopMultiplyAdd(coopLoadT<MA>(&wa[k * 16u], 64u), coopLoadT<MB>(&wb[k * 256u], 16u), acc[j]); }\n\
    }\n\
  }\n\
  coopStoreT(acc[1], &wo[0], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 32u) { o[e] = wo[e]; }\n\
}\n",
    ),
    (
        "accumulator array through a pointer to a function (rescale by 1 via workgroup memory)",
        "var<workgroup> wa: array<f16, 1024>;\nvar<workgroup> wb: array<f16, 1024>;\nvar<workgroup> wo: array<f32, 256>;\n\
fn rescale(acc: ptr<function, array<MC, 2>>, lid: u32) {\n\
  coopStoreT((*acc)[0], &wo[0], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 32u) { wo[e] = wo[e] * 1.0; }\n\
  workgroupBarrier();\n\
  (*acc)[0] = coopLoadT<MC>(&wo[0], 16u);\n\
  workgroupBarrier();\n\
}\n\
@compute @workgroup_size(32) fn main(@builtin(local_invocation_index) lid: u32) {\n\
  for (var e = lid; e < 1024u; e += 32u) { wa[e] = f16(a[e]); }\n\
  var acc: array<MC, 2>;\n\
  acc[0] = MC();\n\
  acc[1] = MC();\n\
  for (var t = 0u; t < 4u; t++) {\n\
    workgroupBarrier();\n\
    for (var e = lid; e < 1024u; e += 32u) { wb[e] = f16(b[t * 1024u + e]); }\n\
    workgroupBarrier();\n\
    for (var k = 0u; k < 4u; k++) {\n\
      acc[0] = coopMultiplyAdd(coopLoadT<MA>(&wa[k * 16u], 64u), coopLoadT<MB>(&wb[k * 256u], 16u), acc[0]);\n\
    }\n\
    rescale(&acc, lid);\n\
  }\n\
  coopStoreT(acc[0], &wo[0], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 32u) { o[e] = wo[e]; }\n\
}\n",
    ),
    (
        "B column-major (Kᵀ) from a [16 tokens][64] tile, 4 subgroups by subgroup_id",
        "var<workgroup> wa: array<f16, 1024>;\nvar<workgroup> wk: array<f16, 1024>;\nvar<workgroup> wo: array<f32, 1024>;\n\
@compute @workgroup_size(128) fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32) {\n\
  for (var e = lid; e < 1024u; e += 128u) { wa[e] = f16(a[e]); }\n\
  var acc = MC();\n\
  for (var t = 0u; t < 4u; t++) {\n\
    workgroupBarrier();\n\
    // K tile [16][64] = transpose of B tile [64][16]\n\
    for (var e = lid; e < 1024u; e += 128u) { let tok = e / 64u; let c = e % 64u; wk[e] = f16(b[t * 1024u + c * 16u + tok]); }\n\
    workgroupBarrier();\n\
    for (var k = 0u; k < 4u; k++) {\n\
      acc = coopMultiplyAdd(coopLoadT<MA>(&wa[k * 16u], 64u), coopLoad<MB>(&wk[k * 16u], 64u), acc);\n\
    }\n\
  }\n\
  coopStoreT(acc, &wo[sg * 256u], 16u);\n\
  workgroupBarrier();\n\
  for (var e = lid; e < 256u; e += 128u) { o[e] = wo[3u * 256u + e]; }\n\
}\n",
    ),
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::headless()?;
    if let Err(e) = ctx.tensor_cores() {
        println!("coop_probe: no tensor cores here: {e}; validating the probes with naga only");
        for (name, body) in PROBES {
            let src = format!("{HEAD}{body}");
            let m = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::all(),
            )
            .validate(&m)
            .map_err(|e| format!("{name}: {e:?}"))?;
            println!("  {name}: valid");
        }
        return Ok(());
    }
    let dev = ctx.device().expect("device");
    // Inputs: small integers / 8 so that f16 and f32 products are exact.
    let a: Vec<f32> = (0..1024)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
        .collect();
    let b: Vec<f32> = (0..4096)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
        .collect();
    let mut want = vec![0f32; 256];
    for t in 0..4 {
        for r in 0..16 {
            for c in 0..16 {
                for k in 0..64 {
                    want[r * 16 + c] += a[r * 64 + k] * b[t * 1024 + k * 16 + c];
                }
            }
        }
    }
    let ab = gpu::upload(&ctx, "a", bytemuck::cast_slice(&a))?;
    let bb = gpu::upload(&ctx, "b", bytemuck::cast_slice(&b))?;
    for (name, body) in PROBES {
        let src = format!("{HEAD}{body}");
        let module = dev.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(name),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let pipe = dev.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let ob = gpu::storage_buffer(&ctx, "o", 1024)?;
        let bg = dev.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipe.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: ab.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: bb.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: ob.as_entire_binding(),
                },
            ],
        });
        gpu::submit_blocking(&ctx, "probe", |enc| {
            let mut pass = enc.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipe);
            pass.set_bind_group(0, &bg, &[]);
            pass.dispatch_workgroups(1, 1, 1);
            Ok(())
        })?;
        let got: Vec<f32> = bytemuck::pod_collect_to_vec(&gpu::readback(&ctx, &ob, 1024)?);
        let err = got[..256]
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        println!(
            "coop_probe {}: max abs err {err:e} (out[0..4] {:?}, want {:?})",
            name,
            &got[..4],
            &want[..4]
        );
    }
    Ok(())
}

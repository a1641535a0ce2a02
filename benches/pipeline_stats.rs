//! What the Vulkan driver made of kvpack's attention kernels: the statistics of
//! `VK_KHR_pipeline_executable_properties` (on NVIDIA: registers, local memory (spills), shared
//! memory, instruction counts; on lavapipe: LLVM's) for the partial kernel of each method, with
//! the `// @unroll` expansion on and off (src/gpu/unroll.rs), its two tensor-core kernels and
//! its f32 prefill kernel (variants `tensor-decode`, `tensor-prefill`, `prefill`, and
//! `prefill-but-pft-pfc` with its output step's token loop and its score step's channel loop
//! kept as loops). A measuring tool, not a test.
//!
//! ```text
//! cargo bench --bench pipeline_stats [-- --dim 128 --methods f16,kivi-4,kivi-2 --dump DIR
//!     --variants unroll,tensor-prefill]
//! ```
//! `--variants` keeps the named variants only (default: all of them).
//! `--dump DIR` also writes each kernel's WGSL, any internal representation the driver
//! offers (`VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_KHR`) and the data of a
//! pipeline cache that holds only that pipeline (`pipeline-cache.bin`: the driver's own format;
//! on NVIDIA it may embed the machine code, which `scripts/sass-from-cache.py` looks for)
//! under DIR.
//!
//! The SPIR-V is naga's, with the options wgpu's Vulkan backend uses for kvpack's kernels
//! (`wgpu-hal` `vulkan/adapter.rs`; kvpack's `RUNTIME_CHECKS`): local-array indices clamped
//! (`Restrict`), buffer accesses left to the driver's robustness, no loop bounding, no division
//! checks, workgroup memory zeroed natively. The pipeline is built by this tool's own Vulkan
//! device (wgpu cannot ask for statistics), so the driver sees the same module, not the same
//! pipeline object.

use std::ffi::CStr;
use std::path::PathBuf;

use ash::vk;
use kvpack::attention::{gpu::specialization, kernel, plan::Call};
use kvpack::gpu::registry::{Specialization, compose_wgsl};
use kvpack::{AttendOptions, Context, KernelPath, Layer, Method, PathChoice, store::Side};

struct Opts {
    dim: usize,
    methods: Vec<String>,
    dump: Option<PathBuf>,
    variants: Option<Vec<String>>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        dim: 128,
        methods: ["f16", "kivi-4", "kivi-2"].map(String::from).to_vec(),
        dump: None,
        variants: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => {}
            "--dim" => {
                o.dim = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--dim needs a number")?
            }
            "--methods" => {
                o.methods = it
                    .next()
                    .ok_or("--methods needs a list")?
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            "--dump" => o.dump = Some(it.next().ok_or("--dump needs a path")?.into()),
            "--variants" => {
                o.variants = Some(
                    it.next()
                        .ok_or("--variants needs a list")?
                        .split(',')
                        .map(String::from)
                        .collect(),
                )
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(o)
}

/// Unrolling variants: (name, KVPACK_NO_UNROLL, KVPACK_UNROLL_SKIP) — src/gpu/unroll.rs.
/// The variant name under which the tensor-core decode kernel (`attend_decode_tc`, unrolled)
/// is reported, where the device offers cooperative matrices.
const TENSOR_DECODE: &str = "tensor-decode";
/// Likewise the tensor-core prefill kernel (`attend_prefill_tc`).
const TENSOR_PREFILL: &str = "tensor-prefill";
const PREFILL: &str = "prefill";

const VARIANTS: [(&str, bool, &str); 9] = [
    (TENSOR_DECODE, false, ""),
    (TENSOR_PREFILL, false, ""),
    (PREFILL, false, ""),
    // The prefill kernel with its output step's token loop and its score step's channel loop
    // left as loops (a smaller tile loop body; src/gpu/unroll.rs tags).
    ("prefill-but-pft-pfc", false, "pft,pfc"),
    ("loops", true, ""),
    ("unroll", false, ""),
    ("unroll-but-kch", false, "kch"),
    ("unroll-but-f16dot", false, "f16dot"),
    ("unroll-but-kch-f16dot-vrow", false, "kch,f16dot,vrow"),
];

/// The composed WGSL of `method`'s partial kernel (subgroup path, 32-wide subgroups).
fn kernel_source(
    method: &str,
    dim: usize,
    (name, loops, skip): (&str, bool, &str),
) -> Result<(String, String), String> {
    let m = Method::parse(method).map_err(|e| e.to_string())?;
    let ctx = Context::cpu();
    let layer = Layer::new(&ctx, 8, dim, &m, PathChoice::Cpu).map_err(|e| e.to_string())?;
    let (k, v) = (layer.codec(Side::Keys), layer.codec(Side::Values));
    let call = Call {
        tq: 1,
        hq: 32,
        hkv: 8,
        dim,
        tokens: 1,
        opts: AttendOptions::default(),
    };
    let spec: Specialization = specialization(&call, k, v, true, layer.has_ring(), false);
    let def = if name == TENSOR_DECODE {
        kernel::tensor_decode(k.attend_hooks(), v.attend_hooks())
            .ok_or("no tile hooks for the tensor-core decode kernel")?
    } else if name == TENSOR_PREFILL {
        kernel::tensor(k.attend_hooks(), v.attend_hooks())
            .ok_or("the tensor-core prefill kernel does not serve this key codec")?
    } else if name.starts_with(PREFILL) {
        kernel::prefill(k.attend_hooks(), v.attend_hooks())
            .ok_or("the prefill kernel does not serve this key codec")?
    } else {
        kernel::partials(k.attend_hooks(), v.attend_hooks())
    };
    // SAFETY: single-threaded here; compose_wgsl reads the variable (src/gpu/registry.rs).
    unsafe {
        if loops {
            std::env::set_var("KVPACK_NO_UNROLL", "1");
        } else {
            std::env::remove_var("KVPACK_NO_UNROLL");
        }
        std::env::set_var("KVPACK_UNROLL_SKIP", skip);
    }
    Ok((
        def.name.to_string(),
        compose_wgsl(def, KernelPath::WgslSubgroup, &spec),
    ))
}

fn spirv(src: &str, robust2: bool) -> Result<Vec<u32>, String> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("{e:?}"))?;
    let opts = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::empty(),
        bounds_check_policies: BoundsCheckPolicies {
            // Array indices unclamped where kvpack builds the kernel so (src/gpu/checks.rs: a
            // marked kernel on a device whose driver checks buffers).
            index: if robust2 && kvpack::gpu::checks::unclamped(src) {
                BoundsCheckPolicy::Unchecked
            } else {
                BoundsCheckPolicy::Restrict
            },
            buffer: if robust2 {
                BoundsCheckPolicy::Unchecked
            } else {
                BoundsCheckPolicy::Restrict
            },
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Native,
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..Default::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    spv::write_vec(&module, &info, &opts, Some(&pipeline)).map_err(|e| e.to_string())
}

/// The descriptor bindings of `src`'s group 0 (uniform or storage buffers), from naga.
fn bindings(src: &str) -> Vec<vk::DescriptorSetLayoutBinding<'static>> {
    let module = naga::front::wgsl::parse_str(src).expect("parsed before");
    let mut out = Vec::new();
    for (_, g) in module.global_variables.iter() {
        let Some(b) = &g.binding else { continue };
        let ty = match g.space {
            naga::AddressSpace::Uniform => vk::DescriptorType::UNIFORM_BUFFER,
            naga::AddressSpace::Storage { .. } => vk::DescriptorType::STORAGE_BUFFER,
            _ => continue,
        };
        out.push(
            vk::DescriptorSetLayoutBinding::default()
                .binding(b.binding)
                .descriptor_type(ty)
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE),
        );
    }
    out
}

/// A driver's internal representation of an executable: (name, bytes).
type Repr = (String, Vec<u8>);
/// Statistics ((name, value)) and internal representations of a pipeline.
type Stats = (Vec<(String, String)>, Vec<Repr>);

struct Vk {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    exec: ash::khr::pipeline_executable_properties::Device,
    name: String,
    robust2: bool,
}

fn vulkan() -> Result<Vk, String> {
    let entry = unsafe { ash::Entry::load() }.map_err(|e| format!("no Vulkan loader: {e}"))?;
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )
    }
    .map_err(|e| format!("vkCreateInstance: {e}"))?;
    let pds = unsafe { instance.enumerate_physical_devices() }.map_err(|e| e.to_string())?;
    let props = |pd| unsafe { instance.get_physical_device_properties(pd) };
    let pd = *pds
        .iter()
        .max_by_key(|&&pd| props(pd).device_type == vk::PhysicalDeviceType::DISCRETE_GPU)
        .ok_or("no Vulkan device")?;
    let p = props(pd);
    let name = unsafe { CStr::from_ptr(p.device_name.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let exts =
        unsafe { instance.enumerate_device_extension_properties(pd) }.map_err(|e| e.to_string())?;
    let has = |n: &CStr| {
        exts.iter()
            .any(|e| unsafe { CStr::from_ptr(e.extension_name.as_ptr()) } == n)
    };
    let exec_name = ash::khr::pipeline_executable_properties::NAME;
    if !has(exec_name) {
        return Err(format!("{name}: no VK_KHR_pipeline_executable_properties"));
    }
    let robust2 = has(ash::ext::robustness2::NAME);
    let qf = unsafe { instance.get_physical_device_queue_family_properties(pd) }
        .iter()
        .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .ok_or("no compute queue")? as u32;
    let prio = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(qf)
        .queue_priorities(&prio)];
    let mut ext_names = vec![exec_name.as_ptr()];
    let mut r2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default().robust_buffer_access2(true);
    if robust2 {
        ext_names.push(ash::ext::robustness2::NAME.as_ptr());
    }
    let coop = has(ash::khr::cooperative_matrix::NAME);
    if coop {
        ext_names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
    }
    let mut exec_f = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    let features = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
    let mut f13 =
        vk::PhysicalDeviceVulkan13Features::default().shader_zero_initialize_workgroup_memory(true);
    let mut ci = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&ext_names)
        .enabled_features(&features)
        .push_next(&mut exec_f)
        .push_next(&mut f13);
    if robust2 {
        ci = ci.push_next(&mut r2);
    }
    // The tensor-core kernels: cooperative matrices, f16 arithmetic and storage, the Vulkan
    // memory model (what wgpu asks for with EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16).
    let mut cm = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default()
        .storage_buffer16_bit_access(true)
        .uniform_and_storage_buffer16_bit_access(true);
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default()
        .shader_float16(true)
        .vulkan_memory_model(true)
        .vulkan_memory_model_device_scope(true);
    if coop {
        ci = ci
            .push_next(&mut cm)
            .push_next(&mut f11)
            .push_next(&mut f12);
    }
    let device = unsafe { instance.create_device(pd, &ci, None) }
        .map_err(|e| format!("vkCreateDevice: {e}"))?;
    let exec = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
    Ok(Vk {
        _entry: entry,
        instance,
        device,
        exec,
        name,
        robust2,
    })
}

/// Builds a compute pipeline from `words` and returns (statistic, value) pairs and the
/// internal representations ((name, text)).
fn stats(v: &Vk, words: &[u32], binds: &[vk::DescriptorSetLayoutBinding]) -> Result<Stats, String> {
    let d = &v.device;
    let e = |what: &str| {
        let what = what.to_string();
        move |r: vk::Result| format!("{what}: {r}")
    };
    unsafe {
        let module = d
            .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
            .map_err(e("vkCreateShaderModule"))?;
        let dsl = d
            .create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(binds),
                None,
            )
            .map_err(e("set layout"))?;
        let layouts = [dsl];
        let pl = d
            .create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts),
                None,
            )
            .map_err(e("pipeline layout"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let ci = vk::ComputePipelineCreateInfo::default()
            .flags(
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
            )
            .stage(stage)
            .layout(pl);
        // A cache of its own, so that its data afterwards holds this pipeline only.
        let cache = d
            .create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None)
            .map_err(e("pipeline cache"))?;
        let pipeline = d
            .create_compute_pipelines(cache, &[ci], None)
            .map_err(|(_, r)| format!("vkCreateComputePipelines: {r}"))?[0];
        let blob = d.get_pipeline_cache_data(cache).unwrap_or_default();
        d.destroy_pipeline_cache(cache, None);
        let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
        let n = v
            .exec
            .get_pipeline_executable_properties(&info)
            .map_err(e("executable properties"))?
            .len();
        let mut out = Vec::new();
        let mut reprs = Vec::new();
        for i in 0..n as u32 {
            let ei = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline)
                .executable_index(i);
            let st = v
                .exec
                .get_pipeline_executable_statistics(&ei)
                .map_err(e("statistics"))?;
            for s in &st {
                let name = CStr::from_ptr(s.name.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                let val = match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                    _ => format!("{:.3}", s.value.f64),
                };
                out.push((name, val));
            }
            reprs.extend(internal_representations(v, &ei));
        }
        reprs.push(("pipeline-cache.bin".into(), blob));
        d.destroy_pipeline(pipeline, None);
        d.destroy_pipeline_layout(pl, None);
        d.destroy_descriptor_set_layout(dsl, None);
        d.destroy_shader_module(module, None);
        Ok((out, reprs))
    }
}

/// The driver's internal representations of one executable (name, bytes): the spec's
/// three-call protocol (count; sizes; data), which ash's wrapper does not do.
unsafe fn internal_representations(
    v: &Vk,
    ei: &vk::PipelineExecutableInfoKHR,
) -> Vec<(String, Vec<u8>)> {
    let f = v
        .exec
        .fp()
        .get_pipeline_executable_internal_representations_khr;
    let dev = v.exec.device();
    let mut n = 0u32;
    unsafe {
        if f(dev, ei, &mut n, std::ptr::null_mut()) != vk::Result::SUCCESS || n == 0 {
            return Vec::new();
        }
        let mut rs = vec![vk::PipelineExecutableInternalRepresentationKHR::default(); n as usize];
        if f(dev, ei, &mut n, rs.as_mut_ptr()) != vk::Result::SUCCESS {
            return Vec::new();
        }
        let mut bufs: Vec<Vec<u8>> = rs.iter().map(|r| vec![0u8; r.data_size]).collect();
        for (r, b) in rs.iter_mut().zip(&mut bufs) {
            r.p_data = b.as_mut_ptr().cast();
        }
        if f(dev, ei, &mut n, rs.as_mut_ptr()) != vk::Result::SUCCESS {
            return Vec::new();
        }
        rs.iter()
            .zip(bufs)
            .map(|(r, b)| {
                let name = CStr::from_ptr(r.name.as_ptr())
                    .to_string_lossy()
                    .into_owned();
                (name, b)
            })
            .collect()
    }
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pipeline_stats: {e}");
            std::process::exit(2);
        }
    };
    let v = match vulkan() {
        Ok(v) => v,
        Err(e) => {
            println!("pipeline_stats: skipped: {e}");
            return;
        }
    };
    println!(
        "pipeline_stats: {} (robustBufferAccess2: {}), D = {}",
        v.name, v.robust2, o.dim
    );
    for m in &o.methods {
        for variant in VARIANTS {
            if o.variants
                .as_ref()
                .is_some_and(|l| !l.iter().any(|x| x == variant.0))
            {
                continue;
            }
            let (name, src) = match kernel_source(m, o.dim, variant) {
                Ok(x) => x,
                Err(e) => {
                    println!("{m}: {e}");
                    continue;
                }
            };
            let tag = format!("{m} {name} {}", variant.0);
            let words = match spirv(&src, v.robust2) {
                Ok(w) => w,
                Err(e) => {
                    println!("{tag}: naga: {e}");
                    continue;
                }
            };
            match stats(&v, &words, &bindings(&src)) {
                Ok((st, reprs)) => {
                    println!(
                        "{tag}: SPIR-V {} words, WGSL {} bytes",
                        words.len(),
                        src.len()
                    );
                    for (n, val) in &st {
                        println!("    {n:<40} {val}");
                    }
                    if let Some(dir) = &o.dump {
                        let base = dir.join(format!("{m}-{}", variant.0));
                        let _ = std::fs::create_dir_all(&base);
                        let _ = std::fs::write(base.join("kernel.wgsl"), &src);
                        for (i, (n, data)) in reprs.iter().enumerate() {
                            let f: String = n
                                .chars()
                                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                                .collect();
                            let file = if n.ends_with(".bin") {
                                n.clone()
                            } else {
                                format!("{i}-{f}.txt")
                            };
                            let _ = std::fs::write(base.join(file), data);
                        }
                        println!("    internal representations: {}", reprs.len());
                    }
                }
                Err(e) => println!("{tag}: {e}"),
            }
        }
    }
    unsafe {
        v.device.destroy_device(None);
        v.instance.destroy_instance(None);
    }
}

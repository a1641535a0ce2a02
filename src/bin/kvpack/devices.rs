//! `kvpack devices`: every adapter wgpu enumerates on the backends of this build (or those of
//! `--backends`), what it offers kvpack (subgroup sizes, workgroup storage, the features and
//! limits kvpack needs: `kvpack::missing_capabilities`), and the path each kernel would take
//! on a device kvpack creates there (`PathChoice::Auto` and `PathChoice::Wgsl`: the subgroup
//! or the workgroup-memory WGSL variant, MSL on Metal), summarized per kind of kernel.

use kvpack::gpu::registry::KernelDef;
use kvpack::wgpu;
use kvpack::{Context, PathChoice};
use serde_json::{Value, json};

/// The kind of a kernel, from its name (the registry's naming rule).
fn kind(name: &str) -> &'static str {
    if name.starts_with("attend_prefill_tc_") {
        "attention prefill (tensor cores)"
    } else if name.starts_with("attend_decode_tc_") {
        "attention decode (tensor cores)"
    } else if name.starts_with("attend_prefill_") {
        "attention prefill"
    } else if name.starts_with("attend_merge_") {
        "attention merge"
    } else if name.starts_with("attend_") {
        "attention decode"
    } else if name.starts_with("bit") {
        "bitpack"
    } else if name.contains("dequant") {
        "codec decode"
    } else {
        "codec encode"
    }
}

/// The kinds in the order they are printed.
const KINDS: [&str; 8] = [
    "codec encode",
    "codec decode",
    "attention decode",
    "attention decode (tensor cores)",
    "attention prefill",
    "attention prefill (tensor cores)",
    "attention merge",
    "bitpack",
];

const CHOICES: [PathChoice; 2] = [PathChoice::Auto, PathChoice::Wgsl];

fn feature_names(f: wgpu::Features) -> Vec<&'static str> {
    [
        (wgpu::Features::SUBGROUP, "SUBGROUP"),
        (wgpu::Features::SHADER_F16, "SHADER_F16"),
        (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
        (wgpu::Features::PASSTHROUGH_SHADERS, "PASSTHROUGH_SHADERS"),
        (
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            "EXPERIMENTAL_COOPERATIVE_MATRIX",
        ),
    ]
    .into_iter()
    .filter(|(k, _)| f.contains(*k))
    .map(|(_, n)| n)
    .collect()
}

/// The path of every kernel for each choice on `ctx`, and the distinct paths per kind.
fn kernel_paths(ctx: &Context) -> (Vec<Value>, Value) {
    let kernels: Vec<&'static KernelDef> = kvpack::kernels::all();
    let mut rows = Vec::new();
    let mut kinds = serde_json::Map::new();
    for def in kernels {
        let mut row = json!({ "kernel": def.name, "kind": kind(def.name) });
        for choice in CHOICES {
            let path = match ctx.resolve(def, choice) {
                Ok(p) => p.to_string(),
                Err(e) => format!("unavailable: {e}"),
            };
            let entry = kinds
                .entry(kind(def.name))
                .or_insert_with(|| json!({ "auto": [], "wgsl": [] }));
            let list = entry[choice.to_string()]
                .as_array_mut()
                .expect("an array per choice");
            // Per kind, "unavailable" once (each kernel's row keeps its reason).
            let short = if path.starts_with("unavailable") {
                "unavailable"
            } else {
                path.as_str()
            };
            if !list.iter().any(|p| p == &Value::from(short)) {
                list.push(Value::from(short));
            }
            row[choice.to_string()] = Value::from(path);
        }
        rows.push(row);
    }
    (rows, Value::Object(kinds))
}

fn report(index: usize, adapter: &wgpu::Adapter) -> Value {
    let info = adapter.get_info();
    let features = adapter.features();
    let limits = adapter.limits();
    let missing = kvpack::missing_capabilities(features, &limits);
    let mut r = json!({
        "index": index,
        "name": info.name,
        "backend": format!("{:?}", info.backend),
        "device_type": format!("{:?}", info.device_type),
        "driver": info.driver,
        "driver_info": info.driver_info,
        "vendor": info.vendor,
        "device": info.device,
        "subgroup_min_size": info.subgroup_min_size,
        "subgroup_max_size": info.subgroup_max_size,
        "max_compute_workgroup_storage_size": limits.max_compute_workgroup_storage_size,
        "max_storage_buffer_binding_size": limits.max_storage_buffer_binding_size,
        // What kvpack would enable there (it requests no others).
        "features": feature_names(features & kvpack::context::wanted_features(info.backend)),
        "meets_requirements": missing.is_empty(),
        "missing": missing,
    });
    match Context::from_adapter(adapter) {
        Ok(ctx) => {
            let (kernels, kinds) = kernel_paths(&ctx);
            // Probed on the device (null without subgroups).
            r["subgroups_in_order"] = if ctx.features().contains(wgpu::Features::SUBGROUP) {
                Value::from(ctx.subgroups_in_order())
            } else {
                Value::Null
            };
            r["kinds"] = kinds;
            r["tensor_cores"] = match ctx.tensor_cores() {
                Ok(()) => Value::Bool(true),
                Err(why) => Value::from(why),
            };
            r["kernels"] = Value::from(kernels);
        }
        Err(e) => r["device_error"] = Value::from(e.to_string()),
    }
    r
}

/// Every adapter on `backends` (all of this build's when `None`), as JSON objects.
pub fn list(backends: Option<&str>) -> Vec<Value> {
    let backends = backends.map_or(wgpu::Backends::all(), wgpu::Backends::from_comma_list);
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let adapters = pollster::block_on(instance.enumerate_adapters(backends));
    adapters
        .iter()
        .enumerate()
        .map(|(i, a)| report(i, a))
        .collect()
}

/// The report as text.
pub fn text(adapters: &[Value]) -> String {
    if adapters.is_empty() {
        return "no adapter found (kvpack would run on the CPU reference)\n".into();
    }
    let mut s = String::new();
    for a in adapters {
        let str_of = |k: &str| a[k].as_str().unwrap_or_default().to_string();
        s += &format!("[{}] {}\n", a["index"], str_of("name"));
        s += &format!(
            "    backend {}, type {}, driver {}\n",
            str_of("backend"),
            str_of("device_type"),
            format!("{} {}", str_of("driver"), str_of("driver_info")).trim()
        );
        s += &format!(
            "    subgroups {}..{}{}, workgroup storage {} bytes, features [{}]\n",
            a["subgroup_min_size"],
            a["subgroup_max_size"],
            match a["subgroups_in_order"].as_bool() {
                Some(false) => " (not in invocation order)",
                _ => "",
            },
            a["max_compute_workgroup_storage_size"],
            a["features"]
                .as_array()
                .map(|f| f
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "))
                .unwrap_or_default()
        );
        if a["meets_requirements"] == true {
            s += "    kvpack's required features and limits: met\n";
        } else {
            s += "    kvpack's required features and limits: NOT met:\n";
            for m in a["missing"].as_array().into_iter().flatten() {
                s += &format!("      {}\n", m.as_str().unwrap_or_default());
            }
        }
        if let Some(e) = a["device_error"].as_str() {
            s += &format!("    no device: {e}\n");
            continue;
        }
        s += "    kernel paths (--path auto | --path wgsl):\n";
        for k in KINDS {
            let paths = |c: &str| {
                a["kinds"][k][c]
                    .as_array()
                    .map(|p| {
                        p.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" / ")
                    })
                    .unwrap_or_default()
            };
            s += &format!("      {k:<32} {} | {}\n", paths("auto"), paths("wgsl"));
        }
        match &a["tensor_cores"] {
            Value::Bool(true) => s += "    tensor cores: yes (attend_prefill_tc kernels)\n",
            Value::String(why) => s += &format!("    tensor cores: no: {why}\n"),
            _ => {}
        }
    }
    s
}

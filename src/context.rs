//! [`Context`]: the handle every kvpack operation takes.
//!
//! A context wraps either an application's own `wgpu::Device`/`Queue`
//! ([`Context::from_device`]), a device kvpack created headlessly ([`Context::headless`]), or
//! no GPU at all ([`Context::cpu`]). It decides, per kernel, which of the three paths runs
//! (CPU reference, portable WGSL, hand-written MSL) and never falls back silently: asking for
//! a path this device cannot run is [`Error::PathUnavailable`].

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::gpu::cache::PipelineCache;
pub use crate::path::{KernelPath, PathChoice};
impl PathChoice {
    /// Parses `auto | cpu | wgsl | wgsl-subgroup | wgsl-workgroup | msl`.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "auto" => Self::Auto,
            "cpu" => Self::Cpu,
            "wgsl" => Self::Wgsl,
            "wgsl-subgroup" => Self::WgslSubgroup,
            "wgsl-workgroup" => Self::WgslWorkgroup,
            "msl" => Self::Msl,
            other => {
                return Err(Error::Config(format!(
                    "unknown path `{other}` (expected auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup or msl)"
                )));
            }
        })
    }
}

impl std::str::FromStr for PathChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// Where the context's device came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// The application handed kvpack its own device and queue.
    AppDevice,
    /// kvpack created a device on the best adapter it found.
    Headless,
    /// CPU only, on request.
    CpuRequested,
    /// CPU only because no usable adapter was found (the reason is kept).
    CpuNoAdapter(String),
}

/// Options for [`Context::headless_with`]: `HeadlessOptions::new().require_gpu(true)` (the
/// type is `#[non_exhaustive]`: build it with [`HeadlessOptions::new`] and the setters).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HeadlessOptions {
    /// Backends to consider; `None` reads `WGPU_BACKEND` (all backends when unset).
    pub backends: Option<wgpu::Backends>,
    /// Substring of the adapter name (case-insensitive); `None` reads `WGPU_ADAPTER_NAME`.
    pub adapter_name: Option<String>,
    /// Features kvpack must not request even when offered (e.g. `SUBGROUP`, to exercise the
    /// workgroup-memory variants on an adapter that has subgroups).
    pub withhold_features: wgpu::Features,
    /// Fail with [`Error::NoAdapter`] instead of returning a CPU context.
    pub require_gpu: bool,
}

impl Default for HeadlessOptions {
    fn default() -> Self {
        Self {
            backends: None,
            adapter_name: None,
            withhold_features: wgpu::Features::empty(),
            require_gpu: false,
        }
    }
}

impl HeadlessOptions {
    /// The defaults: backends from `WGPU_BACKEND`, adapter from `WGPU_ADAPTER_NAME`, nothing
    /// withheld, a CPU context when no adapter is found.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the backends to consider (`None`: `WGPU_BACKEND`, else all).
    pub fn backends(mut self, backends: impl Into<Option<wgpu::Backends>>) -> Self {
        self.backends = backends.into();
        self
    }

    /// Sets a substring of the adapter name to pick (`None`: `WGPU_ADAPTER_NAME`).
    pub fn adapter_name(mut self, name: impl Into<Option<String>>) -> Self {
        self.adapter_name = name.into();
        self
    }

    /// Sets the features kvpack must not request even when offered.
    pub fn withhold_features(mut self, features: wgpu::Features) -> Self {
        self.withhold_features = features;
        self
    }

    /// Sets whether a missing adapter is [`Error::NoAdapter`] instead of a CPU context.
    pub fn require_gpu(mut self, require: bool) -> Self {
        self.require_gpu = require;
        self
    }
}

/// The wgpu features an application's device must have for kvpack: none. Every kernel has a
/// variant without subgroups (workgroup memory), f16 data travels as `u32` words, and timings
/// are optional; [`optional_features`] lists what kvpack uses when the device has it.
pub fn required_features() -> wgpu::Features {
    wgpu::Features::empty()
}

/// The features kvpack uses when a device has them (an app enables those it wants on its own
/// device before [`Context::from_device`]): `SUBGROUP` (the subgroup variants of the WGSL
/// kernels; without it the workgroup-memory variants run), `SHADER_F16`, `TIMESTAMP_QUERY`
/// (GPU timings of the benches) and, on Metal, `PASSTHROUGH_SHADERS` (the MSL kernels). The
/// same as [`wanted_features`].
pub fn optional_features(backend: wgpu::Backend) -> wgpu::Features {
    wanted_features(backend)
}

/// The limits an application's device must have for kvpack's kernels: wgpu's
/// `Limits::downlevel_defaults()` (what every native adapter offers), raised where a kernel
/// needs more (bindings of one bind group, storage and uniform buffers per stage, workgroup
/// size). Pass it, or larger limits, as `required_limits` when requesting the device;
/// [`Context::from_device`] checks the limits kvpack's kernels depend on
/// ([`Error::MissingCapabilities`] names each one that is too low). Storage binding sizes,
/// workgroup storage beyond this and the dispatch grid adapt to the device's own limits
/// (a cache too large for them is [`Error::Limit`]).
pub fn required_limits() -> wgpu::Limits {
    use crate::gpu::registry::Binding;
    let mut l = wgpu::Limits::downlevel_defaults();
    for def in crate::kernels::all() {
        let count = |f: fn(&Binding) -> bool| def.bindings.iter().filter(|b| f(b)).count() as u32;
        let storage = count(|b| matches!(b, Binding::StorageRead | Binding::StorageReadWrite));
        let uniform = count(|b| matches!(b, Binding::Uniform));
        l.max_storage_buffers_per_shader_stage =
            l.max_storage_buffers_per_shader_stage.max(storage);
        l.max_uniform_buffers_per_shader_stage =
            l.max_uniform_buffers_per_shader_stage.max(uniform);
        l.max_bindings_per_bind_group =
            l.max_bindings_per_bind_group.max(def.bindings.len() as u32);
        l.max_compute_workgroup_size_x = l.max_compute_workgroup_size_x.max(def.workgroup_size);
        l.max_compute_invocations_per_workgroup = l
            .max_compute_invocations_per_workgroup
            .max(def.workgroup_size);
    }
    l
}

/// What `device` lacks of [`required_features`] and [`required_limits`] (the limits kvpack's
/// kernels depend on), one line each; empty when it has everything.
pub fn missing_capabilities(features: wgpu::Features, limits: &wgpu::Limits) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    let lacking = required_features() - features;
    if !lacking.is_empty() {
        missing.push(format!("features {lacking:?}"));
    }
    let need = required_limits();
    macro_rules! at_least {
        ($($field:ident),*) => {$(
            if limits.$field < need.$field {
                missing.push(format!(
                    "limit {}: {} needed, the device has {}",
                    stringify!($field),
                    need.$field,
                    limits.$field
                ));
            }
        )*};
    }
    at_least!(
        max_bind_groups,
        max_bindings_per_bind_group,
        max_storage_buffers_per_shader_stage,
        max_uniform_buffers_per_shader_stage,
        max_compute_workgroup_size_x,
        max_compute_invocations_per_workgroup,
        max_compute_workgroup_storage_size
    );
    missing
}

/// The features kvpack can use; it requests no others.
pub fn wanted_features(backend: wgpu::Backend) -> wgpu::Features {
    let mut f =
        wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY;
    if backend == wgpu::Backend::Metal {
        f |= wgpu::Features::PASSTHROUGH_SHADERS;
    }
    f
}

#[derive(Clone)]
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    pub features: wgpu::Features,
    pub limits: wgpu::Limits,
    /// Whether subgroups tile workgroups in invocation order (probed once, on first need).
    pub subgroup_order: Arc<std::sync::OnceLock<bool>>,
    /// Whether widening f16 to f32 keeps f16 subnormals exact (probed once, on first need).
    pub f16_subnormals: Arc<std::sync::OnceLock<bool>>,
    /// Shared by every handle made from this one (`with_path` and friends).
    pub pipelines: Arc<Mutex<PipelineCache>>,
    /// Every pipeline built into `pipelines` (kernel, path, specialization), in order: for
    /// tests that a call after [`crate::KvLayer::prepare`] builds nothing
    /// ([`Context::built_pipelines`]).
    pub built: Arc<Mutex<Vec<String>>>,
    /// Whether the adapter lists 16×16×16 cooperative matrices with f16 operands and an f32
    /// accumulator (the one configuration the tensor-core kernel uses), and kvpack enabled
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` for it (false on application devices: kvpack cannot
    /// see their adapter's list).
    pub coop16: bool,
    /// Whether the tensor-core prefill kernel runs with its cooperative matrices emulated
    /// ([`Context::with_emulated_tensor_cores`]).
    pub coop_emulated: bool,
    /// wgpu's reason once the device is lost (set by the device-lost callback kvpack installs
    /// on devices it creates; an application's own device keeps its own callback, which
    /// forwards the loss through [`Context::report_device_lost`]: until then kvpack sees the
    /// loss only as failed operations, [`crate::Error::Gpu`]).
    pub lost: Arc<std::sync::OnceLock<String>>,
    /// MSL kernels the Metal driver rejected, and those asked for explicitly
    /// ([`crate::gpu::msl_fallback`]).
    pub msl: Arc<Mutex<crate::gpu::msl_fallback::MslState>>,
    /// Uniform buffers by content ([`crate::gpu::uniforms`]).
    pub uniforms: Arc<Mutex<crate::gpu::uniforms::UniformCache>>,
    /// Host rows staged for recorded copies ([`crate::gpu::staging`]).
    pub staging: Arc<crate::gpu::staging::StagingArena>,
    /// Bind groups served by the owners' caches and made by them, `(hits, misses)`
    /// ([`crate::gpu::bind_cache`]; every cache of the device together).
    pub bind_groups: Arc<Mutex<(u64, u64)>>,
}

/// The dispatches of [`Context::with_dispatch_log`]: (kernel, x, y).
type DispatchLog = Arc<std::sync::Mutex<Vec<(&'static str, u32, u32)>>>;

struct Inner {
    origin: Origin,
    gpu: Option<Gpu>,
    path: PathChoice,
    max_workgroups_per_dim: u32,
    /// Largest storage binding kvpack creates: the device's limit, or lower on request.
    max_storage_binding: u64,
    /// Workgroup storage kvpack's kernels may use: the device's limit, or lower on request.
    max_workgroup_storage: u32,
    /// Test hook: the n-th next buffer allocation on this context fails (0: none).
    fail_allocation: Arc<std::sync::atomic::AtomicUsize>,
    /// Bytes of every buffer allocated on this device handle and its clones.
    allocated: Arc<std::sync::atomic::AtomicU64>,
    /// Test hook: when set, every dispatch recorded on this context (kernel, x, y).
    dispatch_log: Option<DispatchLog>,
}

/// The handle every kvpack operation takes. Cheap to clone (shared state).
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("origin", &self.inner.origin)
            .field("adapter", &self.inner.gpu.as_ref().map(|g| &g.info.name))
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Context {
    /// A context without a GPU: every kernel runs the CPU reference.
    pub fn cpu() -> Self {
        Self::build(Origin::CpuRequested, None, PathChoice::Cpu)
    }

    /// Wraps the application's own device and queue. kvpack reads their features and limits,
    /// never creates another device and never installs an uncaptured-error handler.
    ///
    /// Fails with [`Error::MissingCapabilities`], naming each, when the device lacks a feature
    /// of [`required_features`] or has a limit below [`required_limits`].
    pub fn from_device(device: wgpu::Device, queue: wgpu::Queue) -> Result<Self> {
        let info = device.adapter_info();
        let features = device.features();
        let limits = device.limits();
        let missing = missing_capabilities(features, &limits);
        if !missing.is_empty() {
            return Err(Error::MissingCapabilities {
                adapter: info.name.clone(),
                missing,
            });
        }
        let gpu = Gpu {
            device,
            queue,
            info,
            features,
            limits,
            pipelines: Arc::default(),
            built: Arc::default(),
            subgroup_order: Arc::default(),
            f16_subnormals: Arc::default(),
            lost: Arc::default(),
            msl: Arc::default(),
            uniforms: Arc::default(),
            staging: Arc::default(),
            bind_groups: Arc::default(),
            coop16: false,
            coop_emulated: false,
        };
        Ok(Self::build(Origin::AppDevice, Some(gpu), PathChoice::Auto))
    }

    /// Headless context on the best adapter (see [`HeadlessOptions`] defaults: honours
    /// `WGPU_BACKEND` and `WGPU_ADAPTER_NAME`). Without any adapter it returns a CPU context
    /// and says so in [`Context::describe`].
    pub fn headless() -> Result<Self> {
        Self::headless_with(&HeadlessOptions::default())
    }

    /// Headless context with explicit options (blocking).
    pub fn headless_with(opts: &HeadlessOptions) -> Result<Self> {
        pollster::block_on(Self::headless_async(opts))
    }

    /// Headless context with explicit options.
    pub async fn headless_async(opts: &HeadlessOptions) -> Result<Self> {
        let backends = opts
            .backends
            .or_else(wgpu::Backends::from_env)
            .unwrap_or(wgpu::Backends::all());
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = backends;
        let instance = wgpu::Instance::new(desc);
        let wanted_name = opts
            .adapter_name
            .clone()
            .or_else(|| std::env::var("WGPU_ADAPTER_NAME").ok())
            .filter(|s| !s.is_empty());
        let adapters = instance.enumerate_adapters(backends).await;
        let listed: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} ({:?})", i.name, i.backend)
            })
            .collect();
        let mut candidates: Vec<wgpu::Adapter> = match &wanted_name {
            Some(name) => {
                let needle = name.to_lowercase();
                let found: Vec<_> = adapters
                    .into_iter()
                    .filter(|a| a.get_info().name.to_lowercase().contains(&needle))
                    .collect();
                if found.is_empty() {
                    return Err(Error::NoAdapter(format!(
                        "WGPU_ADAPTER_NAME=`{name}` matches none of the adapters [{}]",
                        listed.join(", ")
                    )));
                }
                found
            }
            None => adapters,
        };
        candidates.sort_by_key(|a| std::cmp::Reverse(adapter_rank(&a.get_info())));
        let Some(adapter) = candidates.into_iter().next() else {
            let reason = format!("no adapter for backends {backends:?}");
            if opts.require_gpu {
                return Err(Error::NoAdapter(reason));
            }
            log::warn!("kvpack: {reason}; using the CPU reference");
            return Ok(Self::build(
                Origin::CpuNoAdapter(reason),
                None,
                PathChoice::Cpu,
            ));
        };
        Self::from_adapter_async(&adapter, opts.withhold_features).await
    }

    /// A context on a device kvpack creates on `adapter` (blocking; see
    /// [`Self::from_adapter_async`]). For tools that look at every adapter (`kvpack devices`)
    /// and apps that pick the adapter themselves but let kvpack own the device.
    pub fn from_adapter(adapter: &wgpu::Adapter) -> Result<Self> {
        pollster::block_on(Self::from_adapter_async(adapter, wgpu::Features::empty()))
    }

    /// A context on a device kvpack creates on `adapter` with the features it can use
    /// ([`wanted_features`]) less `withhold_features`, and the adapter's own limits; as
    /// [`Self::headless_async`] does for the adapter it picks. Its origin is
    /// [`Origin::Headless`].
    pub async fn from_adapter_async(
        adapter: &wgpu::Adapter,
        withhold_features: wgpu::Features,
    ) -> Result<Self> {
        let info = adapter.get_info();
        let coop16 = adapter
            .cooperative_matrix_properties()
            .iter()
            .any(is_coop16_f32);
        let mut wanted = wanted_features(info.backend);
        if coop16 {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        let features = adapter.features() & wanted & !withhold_features;
        let coop16 = coop16 && features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        let experimental_features = if coop16 {
            // SAFETY: wgpu asks callers of experimental features to accept that its
            // implementation may have bugs. kvpack uses this one only in the tensor-core
            // kernel (wgsl/attend/attend_prefill_tc.wgsl), in the one configuration the
            // adapter lists (checked just above: wgpu does not check it, and an unlisted one
            // loses the device), loading matrices only from arrays of their own scalar type;
            // an application that does not want it withholds the feature
            // (`HeadlessOptions::withhold_features`).
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("kvpack"),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| {
                Error::NoAdapter(format!("request_device on {} failed: {e}", info.name))
            })?;
        let gpu = Gpu {
            device,
            queue,
            info,
            features,
            limits,
            pipelines: Arc::default(),
            built: Arc::default(),
            subgroup_order: Arc::default(),
            f16_subnormals: Arc::default(),
            lost: Arc::default(),
            msl: Arc::default(),
            uniforms: Arc::default(),
            staging: Arc::default(),
            bind_groups: Arc::default(),
            coop16,
            coop_emulated: false,
        };
        let lost = gpu.lost.clone();
        gpu.device.set_device_lost_callback(move |reason, message| {
            let _ = lost.set(format!("{reason:?}: {message}"));
        });
        Ok(Self::build(Origin::Headless, Some(gpu), PathChoice::Auto))
    }

    fn build(origin: Origin, gpu: Option<Gpu>, path: PathChoice) -> Self {
        let max_workgroups_per_dim = gpu
            .as_ref()
            .map_or(65_535, |g| g.limits.max_compute_workgroups_per_dimension);
        let max_storage_binding = gpu.as_ref().map_or(u64::MAX, |g| {
            g.limits
                .max_storage_buffer_binding_size
                .min(g.limits.max_buffer_size)
        });
        let max_workgroup_storage = gpu
            .as_ref()
            .map_or(16_384, |g| g.limits.max_compute_workgroup_storage_size);
        Self {
            inner: Arc::new(Inner {
                origin,
                gpu,
                path,
                max_workgroups_per_dim,
                max_storage_binding,
                max_workgroup_storage,
                fail_allocation: Arc::default(),
                allocated: Arc::default(),
                dispatch_log: None,
            }),
        }
    }

    /// The same device with another default path choice. Fails when the choice cannot run
    /// at all on this context (e.g. `Msl` off Metal, or any GPU path without a device).
    pub fn with_path(&self, path: PathChoice) -> Result<Self> {
        let mut inner = self.clone_inner();
        inner.path = path;
        let probe = Self {
            inner: Arc::new(inner),
        };
        probe.check_choice(path)?;
        Ok(probe)
    }

    /// Lowers the per-dimension workgroup limit used to split dispatches over x and y
    /// (it can only lower the device's own limit). Meant for tests of the split itself.
    pub fn with_max_workgroups_per_dimension(&self, n: u32) -> Result<Self> {
        if n == 0 {
            return Err(Error::Config(
                "max workgroups per dimension must be at least 1".into(),
            ));
        }
        let mut inner = self.clone_inner();
        inner.max_workgroups_per_dim = n.min(self.inner.max_workgroups_per_dim);
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Lowers the largest storage binding kvpack will create (it can only lower the device's
    /// own limit). Caches then split their storage into more segments, as they would on an
    /// adapter with small bindings (WebGPU's default is 128 MiB). Meant for tests and for
    /// apps that want to bound kvpack's allocations.
    pub fn with_max_storage_binding_size(&self, bytes: u64) -> Result<Self> {
        if bytes < 256 {
            return Err(Error::Config(
                "max storage binding size must be at least 256 bytes".into(),
            ));
        }
        let mut inner = self.clone_inner();
        inner.max_storage_binding = bytes.min(self.inner.max_storage_binding);
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The largest storage binding kvpack creates on this context.
    pub fn max_storage_binding_size(&self) -> u64 {
        self.inner.max_storage_binding
    }

    /// Lowers the workgroup storage kvpack's kernels may use (it can only lower the device's
    /// own limit): kernels that size their workgroups by it (attention's rows per workgroup,
    /// VecInfer's LUT precision) then plan as on a smaller device (WebGPU's default is 16 KiB).
    /// On a context without a device (the CPU) there is no device limit: it sets the size
    /// codecs built on it plan their GPU kernels for (the kernel tests that run those kernels
    /// elsewhere, e.g. on the MSL emulator). For tests and apps.
    pub fn with_max_workgroup_storage_size(&self, bytes: u32) -> Result<Self> {
        if bytes < 4096 {
            return Err(Error::Config(
                "max workgroup storage size must be at least 4096 bytes".into(),
            ));
        }
        let mut inner = self.clone_inner();
        inner.max_workgroup_storage = if self.inner.gpu.is_some() {
            bytes.min(self.inner.max_workgroup_storage)
        } else {
            bytes
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The workgroup storage (bytes) kvpack's kernels may use on this context (WebGPU's
    /// default, 16 KiB, on a CPU context).
    pub fn max_workgroup_storage_size(&self) -> u32 {
        self.inner.max_workgroup_storage
    }

    fn clone_inner(&self) -> Inner {
        // Device, queue and pipeline cache are shared handles.
        Inner {
            origin: self.inner.origin.clone(),
            gpu: self.inner.gpu.clone(),
            path: self.inner.path,
            max_workgroups_per_dim: self.inner.max_workgroups_per_dim,
            max_storage_binding: self.inner.max_storage_binding,
            max_workgroup_storage: self.inner.max_workgroup_storage,
            fail_allocation: self.inner.fail_allocation.clone(),
            allocated: self.inner.allocated.clone(),
            dispatch_log: self.inner.dispatch_log.clone(),
        }
    }

    /// A handle to the same device that records every dispatch made through it or its
    /// clones (the kernel, and the x and y workgroup counts after the split over
    /// [`Self::with_max_workgroups_per_dimension`]): [`Self::dispatches`]. For tests that a
    /// kernel really ran split over x and y.
    #[doc(hidden)]
    pub fn with_dispatch_log(&self) -> Self {
        let mut inner = self.clone_inner();
        inner.dispatch_log = Some(Arc::default());
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The dispatches recorded since [`Self::with_dispatch_log`] (empty without it).
    #[doc(hidden)]
    pub fn dispatches(&self) -> Vec<(&'static str, u32, u32)> {
        self.inner
            .dispatch_log
            .as_ref()
            .map(|l| l.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Records one dispatch in the log of [`Self::with_dispatch_log`], if any.
    pub(crate) fn log_dispatch(&self, kernel: &'static str, x: u32, y: u32) {
        if let Some(l) = &self.inner.dispatch_log {
            if let Ok(mut v) = l.lock() {
                v.push((kernel, x, y));
            }
        }
    }

    /// A handle to the same device on which the tensor-core prefill kernel
    /// ([`crate::AttendKernel::Tensor`]) runs with its cooperative matrices **emulated**: 8
    /// elements of each 16 × 16 matrix per invocation, products on the f32 pipe through
    /// workgroup scratch between barriers (src/gpu/coop_emulation.rs).
    /// Correct and far slower than any other kernel: for testing that kernel's logic on a
    /// device without tensor cores (lavapipe in CI), never for speed. It needs f16 shaders and
    /// subgroups laid out in invocation order (any width); the tensor-core decode kernels are
    /// not emulated (refused where the device has no cooperative matrices). The handle has a
    /// pipeline cache of its own (its kernels differ from the real ones of the same name);
    /// `Auto` never picks the emulated kernel. The same handle on a CPU context.
    #[doc(hidden)]
    pub fn with_emulated_tensor_cores(&self) -> Self {
        self.with_gpu_edit(|g| {
            g.coop_emulated = true;
            g.pipelines = Arc::default();
            g.built = Arc::default();
        })
    }

    /// Whether this handle emulates cooperative matrices ([`Self::with_emulated_tensor_cores`]).
    pub fn tensor_cores_emulated(&self) -> bool {
        self.gpu().is_some_and(|g| g.coop_emulated)
    }

    /// A handle to the same device with a pipeline cache of its own (empty), shared by its
    /// clones and the layers built on it but not by the handle it was made from: every
    /// pipeline a call through it needs is built again, and [`Self::built_pipelines`] lists
    /// exactly those. For tests that [`crate::KvLayer::prepare`] leaves nothing to build
    /// (other handles of the device, e.g. tests running in parallel, cannot hide a pipeline
    /// it missed). The same handle on a CPU context.
    #[doc(hidden)]
    pub fn with_own_pipeline_cache(&self) -> Self {
        self.with_gpu_edit(|g| {
            g.pipelines = Arc::default();
            g.built = Arc::default();
        })
    }

    /// A handle to the same device with `edit` applied to its GPU state (the same handle on
    /// a CPU context).
    pub(crate) fn with_gpu_edit(&self, edit: impl FnOnce(&mut Gpu)) -> Self {
        let mut inner = self.clone_inner();
        if let Some(g) = &mut inner.gpu {
            edit(g);
        }
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Every pipeline built into this handle's pipeline cache so far, in order, as
    /// `kernel path [SPEC=V, ...]` (empty without a GPU). With
    /// [`Self::with_own_pipeline_cache`], the pipelines built through that handle; else those
    /// of every handle of the device.
    #[doc(hidden)]
    pub fn built_pipelines(&self) -> Vec<String> {
        self.gpu()
            .map(|g| g.built.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default()
    }

    /// A handle to the same device with its own allocation-failure switch (see
    /// [`Self::fail_allocation_after`]), shared by its clones (and the caches built on it) but
    /// not by the handle it was made from. For tests of the rule that a failed append loses
    /// nothing.
    #[doc(hidden)]
    pub fn with_fault_injection(&self) -> Self {
        let mut inner = self.clone_inner();
        inner.fail_allocation = Arc::default();
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Makes the `n`-th next allocation (counting from 1; 0 disarms) of buffers and growing
    /// host vectors on this handle and its clones fail with [`Error::OutOfMemory`], as an
    /// allocation the device refuses would.
    #[doc(hidden)]
    pub fn fail_allocation_after(&self, n: usize) {
        self.inner
            .fail_allocation
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// Bytes of every GPU buffer allocated so far through this handle or its clones (storage,
    /// uploads, read-backs, uniforms made by kvpack's buffer helpers). For tests of a kernel's
    /// scratch memory (e.g. VecInfer's quantize: O(N), no `[N, C, d_s]` tensor).
    #[doc(hidden)]
    pub fn allocated_bytes(&self) -> u64 {
        self.inner
            .allocated
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn count_allocation(&self, bytes: u64) {
        self.inner
            .allocated
            .fetch_add(bytes, std::sync::atomic::Ordering::SeqCst);
    }

    /// Counts one allocation against [`Self::fail_allocation_after`]; true when this one
    /// must fail.
    pub(crate) fn take_injected_allocation_failure(&self) -> bool {
        use std::sync::atomic::Ordering;
        let c = &self.inner.fail_allocation;
        c.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n > 0).then(|| n - 1)
        })
        .is_ok_and(|n| n == 1)
    }

    /// The alignment of a storage binding's offset on this device (256 without a GPU).
    pub fn storage_offset_alignment(&self) -> u64 {
        self.gpu().map_or(256, |g| {
            u64::from(g.limits.min_storage_buffer_offset_alignment)
        })
    }

    /// The default path choice of this context.
    pub fn path(&self) -> PathChoice {
        self.inner.path
    }

    /// Where the device came from.
    pub fn origin(&self) -> &Origin {
        &self.inner.origin
    }

    /// The wgpu device, when there is one.
    pub fn device(&self) -> Option<&wgpu::Device> {
        self.inner.gpu.as_ref().map(|g| &g.device)
    }

    /// Tells kvpack that the device was lost, for an application's own device
    /// ([`Context::from_device`]): wgpu keeps one device-lost callback per device, and kvpack
    /// does not replace the application's. Call it from that callback (the arguments are the
    /// callback's own); from then on every kvpack call that needs the device, on this context
    /// and its clones and every layer made on them, is [`crate::Error::DeviceLost`] naming
    /// the reason, and what needs no device (`len`, `memory`, the CPU path) still works.
    /// Without the report, work on a lost application device fails with
    /// [`crate::Error::Gpu`] (wgpu's message), and buffers made after the loss are not
    /// detected at all (wgpu raises no errors on a lost device). The first report is kept;
    /// a context without a device ignores it. kvpack's own devices ([`Context::headless`])
    /// report their loss themselves.
    ///
    /// ```no_run
    /// # fn demo(device: wgpu::Device, queue: wgpu::Queue) -> kvpack::Result<()> {
    /// let ctx = kvpack::Context::from_device(device.clone(), queue)?;
    /// let kv = ctx.clone();
    /// device.set_device_lost_callback(move |reason, message| {
    ///     kv.report_device_lost(reason, &message);
    ///     // ... the application's own handling
    /// });
    /// # Ok(()) }
    /// ```
    pub fn report_device_lost(&self, reason: wgpu::DeviceLostReason, message: &str) {
        if let Some(g) = &self.inner.gpu {
            let _ = g.lost.set(format!("{reason:?}: {message}"));
        }
    }

    /// wgpu's reason once the device is known to be lost (see
    /// [`Context::report_device_lost`]), else `None`.
    pub fn device_lost(&self) -> Option<&str> {
        self.inner.gpu.as_ref()?.lost.get().map(String::as_str)
    }

    /// The wgpu queue, when there is one.
    pub fn queue(&self) -> Option<&wgpu::Queue> {
        self.inner.gpu.as_ref().map(|g| &g.queue)
    }

    /// Features enabled on the device (empty without a GPU).
    pub fn features(&self) -> wgpu::Features {
        self.inner
            .gpu
            .as_ref()
            .map_or(wgpu::Features::empty(), |g| g.features)
    }

    /// Adapter information, when there is a GPU.
    pub fn adapter_info(&self) -> Option<&wgpu::AdapterInfo> {
        self.inner.gpu.as_ref().map(|g| &g.info)
    }

    pub(crate) fn gpu(&self) -> Option<&Gpu> {
        self.inner.gpu.as_ref()
    }

    pub(crate) fn max_workgroups_per_dim(&self) -> u32 {
        self.inner.max_workgroups_per_dim
    }

    pub(crate) fn msl_available(&self) -> std::result::Result<(), String> {
        let Some(g) = self.gpu() else {
            return Err("no GPU device".into());
        };
        if self.simulates_metal() {
            return Ok(());
        }
        if g.info.backend != wgpu::Backend::Metal {
            return Err(format!("backend is {:?}, MSL needs Metal", g.info.backend));
        }
        if !g.features.contains(wgpu::Features::PASSTHROUGH_SHADERS) {
            return Err("PASSTHROUGH_SHADERS is not enabled on the device".into());
        }
        if !g.features.contains(wgpu::Features::SUBGROUP) {
            return Err(
                "SUBGROUP is not enabled on the device (MSL kernels use simdgroup functions)"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether the tensor-core attention kernel
    /// ([`crate::attention::AttendKernel::Tensor`]) can run here, or why not: it needs a GPU
    /// device kvpack created on an adapter that lists 16×16×16 cooperative matrices of f16
    /// with an f32 accumulator (wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX`, not withheld), f16
    /// shaders, subgroups in invocation order and subgroups exactly 32 wide (its mapping: four
    /// subgroups of 32 per workgroup).
    pub fn tensor_cores(&self) -> std::result::Result<(), String> {
        let Some(g) = self.gpu() else {
            return Err("no GPU device".into());
        };
        // An emulating handle (Context::with_emulated_tensor_cores) needs no cooperative
        // matrices and subgroups of any width, the rest alike.
        if !g.coop16 && !g.coop_emulated {
            return Err(
                if g.features
                    .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
                {
                    "an application-owned device: kvpack cannot see whether its adapter lists 16×16 f16 cooperative matrices (wgpu does not check a shader's configuration; an unlisted one loses the device)".into()
                } else {
                    format!(
                        "{} does not offer 16×16×16 f16 cooperative matrices with an f32 accumulator through wgpu (EXPERIMENTAL_COOPERATIVE_MATRIX), or it was withheld",
                        g.info.name
                    )
                },
            );
        }
        for (f, name) in [
            (wgpu::Features::SHADER_F16, "SHADER_F16"),
            (wgpu::Features::SUBGROUP, "SUBGROUP"),
        ] {
            if !g.features.contains(f) {
                return Err(format!("{name} is not enabled on the device"));
            }
        }
        if !g.coop_emulated && (g.info.subgroup_min_size != 32 || g.info.subgroup_max_size != 32) {
            return Err(format!(
                "subgroups are {}..{} wide; the tensor-core kernel's mapping needs exactly 32",
                g.info.subgroup_min_size, g.info.subgroup_max_size
            ));
        }
        if !self.subgroups_in_order() {
            return Err("subgroups are not laid out in invocation order".into());
        }
        Ok(())
    }

    pub(crate) fn check_choice(&self, choice: PathChoice) -> Result<()> {
        let err = |reason: String| Error::PathUnavailable {
            kernel: "*",
            requested: choice.to_string(),
            reason,
        };
        match choice {
            PathChoice::Auto | PathChoice::Cpu => Ok(()),
            PathChoice::Wgsl | PathChoice::WgslWorkgroup => self
                .gpu()
                .map(|_| ())
                .ok_or_else(|| err("no GPU device".into())),
            PathChoice::WgslSubgroup => {
                let g = self.gpu().ok_or_else(|| err("no GPU device".into()))?;
                if g.features.contains(wgpu::Features::SUBGROUP) {
                    Ok(())
                } else {
                    Err(err("SUBGROUP is not enabled on the device".into()))
                }
            }
            PathChoice::Msl => self.msl_available().map_err(err),
        }
    }
}

/// The cooperative-matrix configuration the tensor-core kernel uses: 16×16×16, f16 A and B,
/// f32 C.
fn is_coop16_f32(p: &wgpu::CooperativeMatrixProperties) -> bool {
    (p.m_size, p.n_size, p.k_size) == (16, 16, 16)
        && p.ab_type == wgpu::CooperativeScalarType::F16
        && p.cr_type == wgpu::CooperativeScalarType::F32
}

/// Prefer real GPUs over software ones, and native backends over GL (no subgroups there).
fn adapter_rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let ty = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 4,
        wgpu::DeviceType::IntegratedGpu => 3,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 1,
        wgpu::DeviceType::Other => 0,
    };
    let backend = match info.backend {
        wgpu::Backend::Metal | wgpu::Backend::Vulkan | wgpu::Backend::Dx12 => 2,
        wgpu::Backend::Gl | wgpu::Backend::BrowserWebGpu => 1,
        _ => 0,
    };
    (backend, ty)
}

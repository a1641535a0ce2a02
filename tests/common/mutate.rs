//! Source mutations for the mutation harness (tests/mutants.rs): while a [`Mutant`] is active
//! on a thread ([`with_mutant`]), [`super::run_plan`] compiles the kernels it names from their
//! composed source with the mutant's textual replacement applied (WGSL: its own pipeline, built
//! here, never the context's cache; MSL: the emulator), and counts how many replacements it made
//! so that a mutant whose text no longer occurs in any kernel fails the harness instead of
//! passing as "caught".

use std::cell::RefCell;

/// Which composed source a mutant edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    /// The WGSL that wgpu compiles (after `@unroll` expansion), subgroup or workgroup variant.
    Wgsl,
    /// The MSL the emulator compiles (and wgpu's Metal backend would).
    Msl,
}

/// One textual mutation of the composed source of the kernels whose name starts with `kernel`.
#[derive(Clone, Copy, Debug)]
pub struct Mutant {
    /// What the mutation models (printed).
    pub name: &'static str,
    pub lang: Lang,
    /// Kernel-name prefix (`attend_kivi`, `kivi_quant_keys`, `bitpack`, ...).
    pub kernel: &'static str,
    /// Text replaced (every occurrence, or only occurrence `nth` counting from 0) ...
    pub find: &'static str,
    pub nth: Option<usize>,
    /// ... by this.
    pub replace: &'static str,
}

impl Mutant {
    /// The mutated source, and how many replacements were made.
    pub fn apply(&self, src: &str) -> (String, usize) {
        match self.nth {
            None => {
                let n = src.matches(self.find).count();
                (src.replace(self.find, self.replace), n)
            }
            Some(k) => match src.match_indices(self.find).nth(k) {
                Some((at, _)) => {
                    let mut out = src[..at].to_string();
                    out.push_str(self.replace);
                    out.push_str(&src[at + self.find.len()..]);
                    (out, 1)
                }
                None => (src.to_string(), 0),
            },
        }
    }
}

thread_local! {
    static ACTIVE: RefCell<Option<(Mutant, usize)>> = const { RefCell::new(None) };
}

/// The mutant active on this thread, if it applies to `kernel` in `lang`.
pub fn active_for(kernel: &str, lang: Lang) -> Option<Mutant> {
    ACTIVE.with(|a| {
        a.borrow()
            .as_ref()
            .and_then(|(m, _)| (m.lang == lang && kernel.starts_with(m.kernel)).then_some(*m))
    })
}

/// Records `n` replacements made by the active mutant.
pub fn record(n: usize) {
    ACTIVE.with(|a| {
        if let Some((_, count)) = a.borrow_mut().as_mut() {
            *count += n;
        }
    });
}

/// Runs `f` with `m` active on this thread; returns `f`'s result (Err: it panicked, i.e. the
/// mutant was caught) and the number of replacements made in the sources that ran.
pub fn with_mutant<R>(m: Mutant, f: impl FnOnce() -> R) -> (std::thread::Result<R>, usize) {
    ACTIVE.with(|a| *a.borrow_mut() = Some((m, 0)));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let n = ACTIVE.with(|a| a.borrow_mut().take().map_or(0, |(_, n)| n));
    (r, n)
}

/// A WGSL pipeline built from `src` for `def` (the registry's binding layout), outside the
/// context's pipeline cache.
pub fn wgsl_pipeline(
    ctx: &kvpack::Context,
    def: &kvpack::gpu::registry::KernelDef,
    src: &str,
) -> kvpack::Result<kvpack::gpu::registry::Pipeline> {
    let device = ctx.device().expect("a GPU target has a device");
    // kvpack's own layout (uniform bindings with dynamic offsets), as the real kernel's.
    let entries = kvpack::gpu::pipeline::layout_entries(def);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("mutant"),
        entries: &entries,
    });
    let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("mutant"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mutant"),
        source: wgpu::ShaderSource::Wgsl(std::borrow::Cow::Owned(src.to_string())),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("mutant"),
        layout: Some(&pl),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    if let Some(e) = pollster::block_on(scope.pop()) {
        return Err(kvpack::Error::Shader {
            kernel: def.name,
            path: kvpack::KernelPath::WgslSubgroup,
            message: e.to_string(),
        });
    }
    Ok(kvpack::gpu::registry::Pipeline {
        pipeline,
        layout,
        bindings: def.bindings,
    })
}

//! kvpack-msl-emu: a test-only emulator for Metal Shading Language compute kernels.
//!
//! [`MslKernel::compile`] rewrites a real `.metal` source a little (see `preprocess`), compiles
//! it as C++ with clang against this crate's `include/metal_stdlib`, links it with the
//! executor (`runtime/runtime.cpp`) into a shared object cached by content hash, and loads it.
//! [`MslKernel::dispatch`] runs one dispatch on the CPU with Metal's execution model: every
//! thread of a threadgroup is a fiber, SIMD groups of 32 lanes exchange values at every
//! SIMD-group function, lanes meet at `threadgroup_barrier`, device/constant buffer accesses
//! are bounds-checked. See README.md for the subset and the blind spots.
//!
//! Needs clang >= 15 at test time (`MSL_EMU_CLANG` overrides the search).

mod preprocess;

use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use preprocess::ParamKind;

/// Errors from compiling or running a kernel.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// clang rejected the source (message: clang's diagnostics, lines of the given source).
    #[error("MSL compile error:\n{0}")]
    Compile(String),
    /// The kernel signature cannot be mapped to buffers and builtins.
    #[error("kernel signature: {0}")]
    Signature(String),
    /// A device/constant buffer access out of range. `offset` is the byte offset of the
    /// access from the buffer start (a negative offset appears wrapped; Display shows it signed).
    #[error(
        "out-of-bounds access to [[buffer({buffer})]]: {size} bytes at byte offset {} of a {len}-byte buffer, threadgroup {threadgroup:?}, thread {thread:?} (thread_position_in_threadgroup)",
        *offset as isize
    )]
    OutOfBounds {
        buffer: u32,
        offset: usize,
        size: usize,
        len: usize,
        threadgroup: [u32; 3],
        thread: [u32; 3],
    },
    /// A threadgroup array indexed out of range.
    #[error(
        "out-of-bounds index {index} into threadgroup array `{name}` of {len} elements, threadgroup {threadgroup:?}, thread {thread:?}"
    )]
    ThreadgroupOutOfBounds {
        name: String,
        index: i64,
        len: usize,
        threadgroup: [u32; 3],
        thread: [u32; 3],
    },
    /// Lanes of one SIMD group or threadgroup reached different synchronization points.
    #[error("divergence: {0}")]
    Divergence(String),
    /// A barrier that some lanes never reach.
    #[error("deadlock: {0}")]
    Deadlock(String),
    /// Dispatch arguments that real Metal would reject or silently skip.
    #[error("invalid dispatch: {0}")]
    Dispatch(String),
    /// Another failure while running (threadgroup memory over 32 KiB, unbound buffer, ...).
    #[error("runtime error: {0}")]
    Runtime(String),
    /// No usable clang, I/O or loading failure.
    #[error("toolchain: {0}")]
    Toolchain(String),
}

/// Order in which the lanes of a threadgroup (and the threadgroups of a dispatch) run between
/// synchronization points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LaneOrder {
    /// Lane 0 first.
    #[default]
    InOrder,
    /// Last lane first.
    Reversed,
    /// A seeded random permutation, drawn anew after every synchronization point.
    Random(u64),
}

/// Options of one dispatch.
#[derive(Clone, Debug, Default)]
pub struct DispatchOptions {
    /// Lane order between synchronization points.
    pub lane_order: LaneOrder,
}

// ---- ABI with runtime/runtime.cpp ----
#[repr(C)]
struct EmuBuffer {
    ptr: *mut u8,
    len: u64,
}
#[repr(C)]
struct EmuDesc {
    buffers: *const EmuBuffer,
    nbuffers: u32,
    groups: [u32; 3],
    threads: [u32; 3],
    order: u32,
    seed: u64,
}
#[repr(C)]
struct RawError {
    kind: u32,
    buffer: u32,
    offset: i64,
    size: u64,
    len: u64,
    group: [u32; 3],
    thread: [u32; 3],
    line: u32,
    message: [c_char; 2048],
}
type DispatchFn = unsafe extern "C" fn(*const EmuDesc, *mut RawError) -> i32;

/// A compiled kernel, ready to dispatch.
pub struct MslKernel {
    dispatch_fn: DispatchFn,
    max_total_threads: u32,
    buffers: Vec<(u32, String)>,
    name: String,
    _lib: libloading::Library,
}

impl std::fmt::Debug for MslKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MslKernel")
            .field("name", &self.name)
            .field("max_total_threads", &self.max_total_threads)
            .field("buffers", &self.buffers)
            .finish()
    }
}

const HEADER: &str = include_str!("../include/metal_stdlib");
const RUNTIME: &str = include_str!("../runtime/runtime.cpp");

struct Toolchain {
    clang: PathBuf,
    version: String,
    major: u32,
}

fn toolchain() -> Result<&'static Toolchain, EmuError> {
    static TC: OnceLock<Result<Toolchain, String>> = OnceLock::new();
    TC.get_or_init(|| {
        let candidates: Vec<String> = match std::env::var("MSL_EMU_CLANG") {
            Ok(c) if !c.is_empty() => vec![c],
            _ => ["clang++-19", "clang++-18", "clang++-17", "clang++-16", "clang++-15", "clang++"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        };
        let mut tried = Vec::new();
        for c in candidates {
            let Ok(out) = Command::new(&c).arg("--version").output() else {
                tried.push(format!("{c}: not found"));
                continue;
            };
            let v = String::from_utf8_lossy(&out.stdout).to_string();
            let major = v
                .split("clang version ")
                .nth(1)
                .and_then(|r| r.split('.').next())
                .and_then(|m| m.trim().parse::<u32>().ok())
                .unwrap_or(0);
            if major >= 15 {
                return Ok(Toolchain { clang: PathBuf::from(c), version: v.lines().next().unwrap_or("").to_string(), major });
            }
            tried.push(format!("{c}: version {major} < 15"));
        }
        Err(format!(
            "no clang >= 15 found (tried {}); install clang-15 (Debian: apt-get install -y clang-15) or set MSL_EMU_CLANG",
            tried.join("; ")
        ))
    })
    .as_ref()
    .map_err(|e| EmuError::Toolchain(e.clone()))
}

fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("MSL_EMU_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .ok()
        .map(PathBuf::from)
        .or_else(|| {
            option_env!("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .or_else(|| {
                    let exe = std::env::current_exe().ok()?;
                    exe.ancestors()
                        .find(|a| a.join("CACHEDIR.TAG").exists())
                        .map(Path::to_path_buf)
                })
        });
    target
        .unwrap_or_else(std::env::temp_dir)
        .join("msl-emu-cache")
}

/// 128-bit FNV-1a (two lanes), hex.
fn hash(parts: &[&str]) -> String {
    let mut a: u64 = 0xcbf29ce484222325;
    let mut b: u64 = 0x84222325cbf29ce4;
    for p in parts {
        for &c in p.as_bytes().iter().chain(&[0xffu8]) {
            a = (a ^ c as u64).wrapping_mul(0x100000001b3);
            b = (b ^ (c as u64))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
        }
    }
    format!("{a:016x}{b:016x}")
}

fn unique_tmp(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".tmp{}-{n}", std::process::id()));
    PathBuf::from(s)
}

fn run_clang(tc: &Toolchain, args: &[String], what: &str) -> Result<(), EmuError> {
    let out = Command::new(&tc.clang)
        .args(args)
        .output()
        .map_err(|e| EmuError::Toolchain(format!("running {}: {e}", tc.clang.display())))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr).to_string();
        return Err(if what == "kernel" {
            EmuError::Compile(msg)
        } else {
            EmuError::Toolchain(format!("compiling the {what}: {msg}"))
        });
    }
    Ok(())
}

fn include_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include")
}

fn common_flags(tc: &Toolchain) -> Vec<String> {
    let mut f: Vec<String> = [
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-fno-exceptions",
        "-fno-rtti",
        "-fvisibility=hidden",
        "-fno-strict-aliasing",
        "-ffp-contract=off",
        "-fno-math-errno",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if tc.major >= 16 {
        // round half arithmetic after every operation, as Metal does
        f.extend(["-Xclang".into(), "-ffloat16-excess-precision=none".into()]);
    }
    f
}

fn kernel_flags(tc: &Toolchain) -> Vec<String> {
    let mut f = common_flags(tc);
    f.extend(
        [
            "-nostdinc",
            "-nostdinc++",
            "-Wno-unknown-attributes",
            "-Wno-duplicate-decl-specifier",
            "-flax-vector-conversions=none",
            "-ferror-limit=20",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    f.push(format!("-I{}", include_dir().display()));
    f
}

impl MslKernel {
    /// Compile `source` (full MSL text incl. `#include <metal_stdlib>`) and find
    /// `kernel void fn_name(...)`. The shared object is cached by a hash of everything that goes
    /// into it, under `<target dir>/msl-emu-cache/` (or `$MSL_EMU_CACHE_DIR`, or the temp dir).
    pub fn compile(source: &str, fn_name: &str) -> Result<Self, EmuError> {
        let tc = toolchain()?;
        let prepared = preprocess::prepare(source, fn_name)?;
        let adapter = preprocess::adapter(fn_name, &prepared);
        let tu = format!(
            "#line 1 \"{fn_name}.metal\"\n{}\n{adapter}",
            prepared.source
        );

        let dir = cache_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| EmuError::Toolchain(format!("creating {}: {e}", dir.display())))?;

        // runtime object, shared by every kernel
        let rflags = common_flags(tc);
        let rt_key = hash(&[&tc.version, &rflags.join(" "), RUNTIME]);
        let rt_obj = dir.join(format!("runtime-{rt_key}.o"));
        if !rt_obj.exists() {
            let src = dir.join(format!("runtime-{rt_key}.cpp"));
            let tmp_src = unique_tmp(&src);
            std::fs::write(&tmp_src, RUNTIME).map_err(|e| EmuError::Toolchain(e.to_string()))?;
            let tmp = unique_tmp(&rt_obj);
            let mut args = rflags.clone();
            args.extend([
                "-x".into(),
                "c++".into(),
                "-c".into(),
                tmp_src.display().to_string(),
                "-o".into(),
                tmp.display().to_string(),
            ]);
            let r = run_clang(tc, &args, "emulator runtime");
            let _ = std::fs::remove_file(&tmp_src);
            r?;
            std::fs::rename(&tmp, &rt_obj).map_err(|e| EmuError::Toolchain(e.to_string()))?;
        }

        let kflags = kernel_flags(tc);
        let key = hash(&[&tc.version, &kflags.join(" "), HEADER, &rt_key, &tu]);
        let so = dir.join(format!("{fn_name}-{key}.so"));
        if !so.exists() {
            let cpp = dir.join(format!("{fn_name}-{key}.cpp"));
            let tmp_cpp = unique_tmp(&cpp);
            std::fs::write(&tmp_cpp, &tu).map_err(|e| EmuError::Toolchain(e.to_string()))?;
            let tmp = unique_tmp(&so);
            let mut args = kflags.clone();
            args.extend([
                "-x".into(),
                "c++".into(),
                tmp_cpp.display().to_string(),
                "-x".into(),
                "none".into(),
                rt_obj.display().to_string(),
                "-shared".into(),
                "-nostdlib++".into(),
                "-Wl,-z,defs".into(),
                "-Wl,-Bsymbolic".into(),
                "-lm".into(),
                "-o".into(),
                tmp.display().to_string(),
            ]);
            let r = run_clang(tc, &args, "kernel");
            let _ = std::fs::remove_file(&tmp_cpp);
            if let Err(e) = r {
                let _ = std::fs::remove_file(&tmp);
                return Err(match e {
                    EmuError::Compile(m) => {
                        EmuError::Compile(m.replace(&tmp_cpp.display().to_string(), "kernel.cpp"))
                    }
                    e => e,
                });
            }
            std::fs::rename(&tmp, &so).map_err(|e| EmuError::Toolchain(e.to_string()))?;
        }

        // SAFETY: the library is our own freshly built shared object; its initialisers only set
        // constants.
        let lib = unsafe { libloading::Library::new(&so) }
            .map_err(|e| EmuError::Toolchain(format!("loading {}: {e}", so.display())))?;
        // SAFETY: symbol types match runtime.cpp / the generated adapter.
        let (dispatch_fn, max_total_threads) = unsafe {
            let f: libloading::Symbol<DispatchFn> = lib
                .get(b"msl_emu_dispatch\0")
                .map_err(|e| EmuError::Toolchain(e.to_string()))?;
            let m: libloading::Symbol<*const u32> = lib
                .get(b"msl_emu_max_total_threads\0")
                .map_err(|e| EmuError::Toolchain(e.to_string()))?;
            (*f, **m)
        };
        let buffers = prepared
            .params
            .iter()
            .filter_map(|p| match p.kind {
                ParamKind::Buffer(n) => Some((n, p.name.clone())),
                _ => None,
            })
            .collect();
        Ok(MslKernel {
            dispatch_fn,
            max_total_threads,
            buffers,
            name: fn_name.to_string(),
            _lib: lib,
        })
    }

    /// The value of `[[max_total_threads_per_threadgroup(N)]]`, if the kernel has one.
    pub fn max_total_threads_per_threadgroup(&self) -> Option<u32> {
        (self.max_total_threads > 0).then_some(self.max_total_threads)
    }

    /// Run one dispatch (`dispatchThreadgroups`). `buffers[i]` is `[[buffer(i)]]` (bytes;
    /// uniform/constant buffers included); written buffers are copied back, also on error.
    pub fn dispatch(
        &self,
        buffers: &mut [&mut [u8]],
        threadgroups: [u32; 3],
        threads_per_threadgroup: [u32; 3],
        opts: &DispatchOptions,
    ) -> Result<(), EmuError> {
        for (n, name) in &self.buffers {
            if *n as usize >= buffers.len() {
                return Err(EmuError::Dispatch(format!(
                    "kernel `{}` reads [[buffer({n})]] (`{name}`) but only {} buffers were given",
                    self.name,
                    buffers.len()
                )));
            }
        }
        let total: u64 = threads_per_threadgroup.iter().map(|&x| x as u64).product();
        if total == 0 || total > 1024 {
            return Err(EmuError::Dispatch(format!(
                "threads per threadgroup {threads_per_threadgroup:?} = {total}: Metal needs 1..=1024"
            )));
        }
        if self.max_total_threads > 0 && total > self.max_total_threads as u64 {
            return Err(EmuError::Dispatch(format!(
                "{total} threads per threadgroup exceed [[max_total_threads_per_threadgroup({})]]: Metal would not run this dispatch",
                self.max_total_threads
            )));
        }
        if threadgroups.contains(&0) {
            return Ok(());
        }
        // Aligned copies (Metal buffers are at least 16-byte aligned; slices need not be).
        let mut copies: Vec<AlignedBuf> = buffers.iter().map(|b| AlignedBuf::from(b)).collect();
        let raw: Vec<EmuBuffer> = copies
            .iter_mut()
            .map(|c| EmuBuffer {
                ptr: c.ptr,
                len: c.len as u64,
            })
            .collect();
        let (order, seed) = match opts.lane_order {
            LaneOrder::InOrder => (0, 0),
            LaneOrder::Reversed => (1, 0),
            LaneOrder::Random(s) => (2, s),
        };
        let desc = EmuDesc {
            buffers: raw.as_ptr(),
            nbuffers: raw.len() as u32,
            groups: threadgroups,
            threads: threads_per_threadgroup,
            order,
            seed,
        };
        // SAFETY: RawError is plain old data; all-zero is valid.
        let mut err: Box<RawError> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: desc points at live buffers for the duration of the call; the runtime
        // bounds-checks every access through them.
        let rc = unsafe { (self.dispatch_fn)(&desc, &mut *err) };
        for (b, c) in buffers.iter_mut().zip(&copies) {
            b.copy_from_slice(c.as_slice());
        }
        if rc == 0 {
            return Ok(());
        }
        let msg = {
            let bytes: Vec<u8> = err
                .message
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).to_string()
        };
        Err(match err.kind {
            1 => EmuError::OutOfBounds {
                buffer: err.buffer,
                offset: err.offset as usize,
                size: err.size as usize,
                len: err.len as usize,
                threadgroup: err.group,
                thread: err.thread,
            },
            2 => EmuError::ThreadgroupOutOfBounds {
                name: msg,
                index: err.offset,
                len: err.len as usize,
                threadgroup: err.group,
                thread: err.thread,
            },
            3 => EmuError::Divergence(msg),
            4 => EmuError::Deadlock(msg),
            _ => EmuError::Runtime(msg),
        })
    }
}

struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    layout: std::alloc::Layout,
}
impl AlignedBuf {
    fn from(b: &[u8]) -> Self {
        let layout = std::alloc::Layout::from_size_align(b.len().max(1), 64).expect("layout");
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: ptr has room for b.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), ptr, b.len()) };
        AlignedBuf {
            ptr,
            len: b.len(),
            layout,
        }
    }
    fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr holds len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}
impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

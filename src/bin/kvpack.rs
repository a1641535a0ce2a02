//! `kvpack`: the command-line tool.
//!
//! ```text
//! kvpack roundtrip --method kivi:bits=2,group=32,residual=128 \
//!     --input kv.safetensors --output kv_hat.safetensors [--path auto] [--chunk N]
//! kvpack attend --method SPEC --input qkv.safetensors --queries N [--window W] [--sinks S] \
//!     [--scale X] [--path auto] --output out.safetensors
//! kvpack eval --model stories260K.bin|model.gguf|smollm2|qwen2.5-coder-0.5b|qwen2.5-coder-1.5b \
//!     [--tokenizer FILE] --text FILE|--ids FILE --method f16 --method kivi-4 [--path auto] \
//!     [--json OUT.json] [--plot OUT.png] [--max-tokens N]
//! kvpack dump-kv --model M [--tokenizer FILE] --text FILE --out qkv.safetensors \
//!     [--max-tokens N] [--dtype f16|f32] [--chunk N]
//! kvpack cache save --method SPEC --input kv.safetensors --out cache.kvc [--path auto]
//! kvpack cache inspect cache.kvc       # JSON: version, method, geometry, tokens, sections, checksums
//! kvpack attend --cache cache.kvc --input qkv.safetensors --queries N --output out.safetensors
//! kvpack calibrate --model M --text F --out FILE [--for vecinfer,qfilters] [--bits 1,2] \
//!     [--seed N] [--max-tokens N]
//! kvpack methods        # every method, its options and defaults
//! kvpack describe
//! kvpack devices [--json] [--backends vulkan,gl]   # every adapter and each kernel's path on it
//! ```
//! (`--k-bits`, `--v-bits`, `--group`, `--residual`, `--params` remain as aliases of
//! `kivi` options; `--methods a,b` of repeated `--method`.)
//! ```text
//! ```

#[path = "kvpack/attend.rs"]
mod attend;
#[path = "kvpack/cache.rs"]
mod cache;
#[path = "kvpack/calibrate.rs"]
mod calibrate;
#[path = "kvpack/devices.rs"]
mod devices;
#[path = "kvpack/dump_kv.rs"]
mod dump_kv;
#[path = "kvpack/eval.rs"]
mod eval;
#[path = "kvpack/eval_evict.rs"]
mod eval_evict;
#[path = "kvpack/io.rs"]
mod io;
#[path = "kvpack/roundtrip.rs"]
mod roundtrip;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kvpack::{Context, PathChoice};

#[derive(Parser)]
#[command(
    name = "kvpack",
    version,
    about = "Compressed KV cache for transformer LLMs (CPU, WGSL, MSL)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The KIVI flags of older versions, kept as aliases for `--method kivi:...`.
#[derive(clap::Args, Clone, Debug, Default)]
struct KiviFlags {
    /// Alias: key bits of `--method kivi` (1..=8).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    k_bits: Option<u32>,
    /// Alias: value bits of `--method kivi` (1..=8).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    v_bits: Option<u32>,
    /// Alias: group G of `--method kivi` (tokens per key group, channels per value group).
    #[arg(long)]
    group: Option<usize>,
    /// Alias: the residual window R (tokens kept in f16).
    #[arg(long)]
    residual: Option<usize>,
    /// Alias: (scale, lo) storage of `--method kivi`: f16 or f32.
    #[arg(long)]
    params: Option<String>,
}

/// The method of `--method SPEC` and the alias flags (only with a bare `kivi`).
fn method_of(spec: &str, f: &KiviFlags) -> Result<kvpack::Method, String> {
    let mut opts = Vec::new();
    if let Some(b) = f.k_bits {
        opts.push(format!("kbits={b}"));
    }
    if let Some(b) = f.v_bits {
        opts.push(format!("vbits={b}"));
    }
    if let Some(g) = f.group {
        opts.push(format!("group={g}"));
    }
    if let Some(p) = &f.params {
        opts.push(format!("params={p}"));
    }
    let spec = spec.trim();
    let full = if opts.is_empty() {
        match f.residual {
            Some(r) if !spec.contains('/') => {
                let sep = if spec.contains(':') { "," } else { ":" };
                format!("{spec}{sep}residual={r}")
            }
            Some(_) => {
                return Err(
                    "--residual cannot modify a KEYS/VALUES spec: write residual=R in it".into(),
                );
            }
            None => spec.to_string(),
        }
    } else {
        if spec != "kivi" {
            return Err(format!(
                "--k-bits, --v-bits, --group and --params are aliases for options of `--method kivi`; with                  --method {spec} write them in the spec (e.g. kivi:kbits=4,vbits=2,group=32)"
            ));
        }
        if let Some(r) = f.residual {
            opts.push(format!("residual={r}"));
        }
        format!("kivi:{}", opts.join(","))
    };
    kvpack::Method::parse(&full).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
enum Command {
    /// Print the device, its features and limits, and the path each kernel runs on.
    Describe,
    /// List every adapter wgpu finds (all backends of this build): name, backend, type,
    /// driver, subgroup sizes, workgroup storage, whether kvpack's required features and
    /// limits are met, and the path each kind of kernel takes there with `--path auto` and
    /// `--path wgsl` (kvpack creates a device on each adapter to resolve them).
    Devices {
        /// Print JSON (`{"adapters": [...]}`, one object per adapter) instead of text.
        #[arg(long)]
        json: bool,
        /// Only these backends (comma-separated: vulkan, metal, dx12, gl); default all.
        #[arg(long)]
        backends: Option<String>,
    },
    /// List every cache method, its options and their defaults.
    Methods,
    /// Compress K and V of a safetensors file, reconstruct them, and report size and error.
    Roundtrip {
        /// Cache method spec (`kvpack methods`): kivi, kivi:bits=4,group=32,residual=128,
        /// kivi:kbits=4,vbits=2, kivi-4, f16, kivi:bits=4/f16, ...
        #[arg(long, default_value = "kivi")]
        method: String,
        #[command(flatten)]
        kivi: KiviFlags,
        /// auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup or msl.
        #[arg(long, default_value = "auto", value_parser = PathChoice::parse)]
        path: PathChoice,
        /// Safetensors file with `k` and `v`, [T, H, D] or [L, T, H, D], f16 or f32.
        #[arg(long)]
        input: PathBuf,
        /// Safetensors file to write `k_hat` and `v_hat` (f32, the input's shape) to.
        #[arg(long)]
        output: PathBuf,
        /// Append N tokens at a time instead of one prefill.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        chunk: Option<u64>,
    },
    /// Save and inspect cache files (format: the `kvpack::persist` docs, README "Saved caches").
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Fill one cache per layer with K and V (or load it from `--cache`), attend with the last
    /// N queries, and report the error against exact attention on the original K/V.
    Attend {
        /// A saved cache file (`kvpack cache save`) to attend instead of filling caches from
        /// `k`/`v`: it must hold every layer and all T tokens of the input; its method is
        /// used (--method and its aliases must not be given).
        #[arg(long, conflicts_with_all = ["method", "k_bits", "v_bits", "group", "residual", "params"])]
        cache: Option<PathBuf>,
        /// Cache method spec (`kvpack methods`), as for roundtrip.
        #[arg(long, default_value = "kivi")]
        method: String,
        #[command(flatten)]
        kivi: KiviFlags,
        /// auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup or msl.
        #[arg(long, default_value = "auto", value_parser = PathChoice::parse)]
        path: PathChoice,
        /// Safetensors file with `q` [T, Hq, D] or [L, T, Hq, D] and `k`, `v` [T, Hkv, D] or
        /// [L, T, Hkv, D], f16 or f32.
        #[arg(long)]
        input: PathBuf,
        /// The last N rows of `q` attend (positions T−N .. T−1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        queries: u64,
        /// Sliding window W in tokens.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        window: Option<u64>,
        /// Attention sinks: the first S tokens stay visible under a window.
        #[arg(long, default_value_t = 0)]
        sinks: usize,
        /// Score scale (default 1/√D).
        #[arg(long)]
        scale: Option<f32>,
        /// Safetensors file to write `out` (f32, [N, Hq, D] or [L, N, Hq, D]) to.
        #[arg(long)]
        output: PathBuf,
    },
    /// Teacher-forced decoding of a text through each cache method on a real model: a table of
    /// bits per value (measured from bytes held), perplexity, its change against f16, mean KL
    /// of next-token distributions to the f16 run, and top-1 agreement with it.
    Eval {
        /// A `.gguf` file, a llama2.c `.bin` checkpoint, or a model fetched by
        /// scripts/fetch-models.sh: smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b.
        #[arg(long)]
        model: String,
        /// Tokenizer of a llama2.c checkpoint (default: a `tok*.bin` beside it).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Text file, encoded with the model's tokenizer (BOS first for llama2.c models).
        #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
        text: Option<PathBuf>,
        /// Token ids: a JSON array, or a safetensors file with `token_ids`.
        #[arg(long)]
        ids: Option<PathBuf>,
        /// A cache method spec (repeat for several; `kvpack methods` lists them). f16, the
        /// reference, runs first and is added when missing.
        #[arg(long = "method")]
        method: Vec<String>,
        /// Alias: comma-separated method specs without commas of their own (f16,kivi-4,kivi-2).
        #[arg(long, value_delimiter = ',')]
        methods: Vec<String>,
        /// auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup or msl.
        #[arg(long, default_value = "auto", value_parser = PathChoice::parse)]
        path: PathChoice,
        /// Write the results as a JSON list of objects (method, bits_per_value, perplexity,
        /// delta_pct, kl, top1).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write a PNG of perplexity against bits per value.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Use only the first N tokens.
        #[arg(long, value_parser = clap::value_parser!(u64).range(2..))]
        max_tokens: Option<u64>,
        /// An eviction policy (repeat for several): each adds a row METHOD+POLICY for every
        /// method, e.g. `qfilters:budget=128,calib=FILE`, `streaming:budget=128`,
        /// `knorm:budget=128` (CPU path). Q-Filters rows also report the Spearman correlation
        /// of the filter's scores with the attention each key receives (and the flipped
        /// filter's, a negative control).
        #[arg(long)]
        evict: Vec<String>,
        /// Write a PNG of perplexity against tokens held per KV head, one line per policy.
        #[arg(long)]
        evict_plot: Option<PathBuf>,
    },
    /// Run a real model over a text and write every layer's post-RoPE q, k and v as
    /// safetensors in the layout `roundtrip` and `attend` read (plus `token_ids` and
    /// `logits_last`), with the f16 cache; prints a JSON summary.
    DumpKv(DumpKvArgs),
    /// Runs a model over a text and writes the calibration file of VecInfer (λ and codebooks)
    /// and Q-Filters (filters; the orientation report per head is printed in the JSON).
    Calibrate(CalibrateArgs),
}

/// `kvpack calibrate`'s arguments.
#[derive(clap::Args)]
struct CalibrateArgs {
    /// A `.gguf` file, a llama2.c `.bin` checkpoint, or a fetched model name (smollm2, ...).
    #[arg(long)]
    model: String,
    /// Tokenizer of a llama2.c checkpoint (default: a `tok*.bin` beside it).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// The calibration text (use another text than the one you evaluate on).
    #[arg(long)]
    text: PathBuf,
    /// The calibration file to write (safetensors).
    #[arg(long)]
    out: PathBuf,
    /// What to calibrate: vecinfer, qfilters or both (comma-separated).
    #[arg(long = "for", default_value = "vecinfer,qfilters")]
    for_: String,
    /// VecInfer presets to train (1: d_s 8, C 256; 2: d_s 4, C 256), comma-separated.
    #[arg(long, default_value = "1,2", value_delimiter = ',')]
    bits: Vec<u32>,
    /// SplitMix64 seed of k-means++ (default 0x6B7670616B).
    #[arg(long, default_value_t = 0x6B_7670_616B)]
    seed: u64,
    /// Use only the first N tokens of the text.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: Option<u64>,
    /// Tokens per forward chunk.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    chunk: u64,
}

/// `kvpack cache ...`.
#[derive(Subcommand)]
enum CacheCommand {
    /// Fill one cache per layer with K and V of a safetensors file and save them to a cache
    /// file (written atomically: a temporary file renamed over --out); prints its inspection.
    Save {
        /// Cache method spec (`kvpack methods`).
        #[arg(long)]
        method: String,
        /// auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup or msl.
        #[arg(long, default_value = "auto", value_parser = PathChoice::parse)]
        path: PathChoice,
        /// Safetensors file with `k` and `v`, [T, H, D] or [L, T, H, D], f16 or f32.
        #[arg(long)]
        input: PathBuf,
        /// The cache file to write.
        #[arg(long)]
        out: PathBuf,
    },
    /// Print what a cache file holds as JSON (version, writer, metadata, each layer's method,
    /// geometry and tokens, each section's bytes and checksum); fails when a checksum does not
    /// match (after printing) or the file is not a sound cache file.
    Inspect {
        /// The cache file.
        file: PathBuf,
    },
}

/// Output precision of `dump-kv`.
#[derive(Clone, Copy, ValueEnum)]
enum DumpDtype {
    F16,
    F32,
}

/// `kvpack dump-kv`'s arguments (a separate struct so that the subcommand stays one line in
/// [`Command`]).
#[derive(clap::Args)]
struct DumpKvArgs {
    /// A `.gguf` file, a llama2.c `.bin` checkpoint, or a model fetched by
    /// scripts/fetch-models.sh: smollm2, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b.
    #[arg(long)]
    model: String,
    /// Tokenizer of a llama2.c checkpoint (default: a `tok*.bin` beside it).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Text file, encoded with the model's tokenizer (BOS first for llama2.c models).
    #[arg(long)]
    text: PathBuf,
    /// Safetensors file to write: `q` [L, T, Hq, D], `k` and `v` [L, T, Hkv, D], `token_ids`,
    /// `logits_last`.
    #[arg(long)]
    out: PathBuf,
    /// Use only the first N tokens.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_tokens: Option<u64>,
    /// Precision of q, k and v in the file.
    #[arg(long, value_enum, default_value = "f16")]
    dtype: DumpDtype,
    /// Tokens per forward chunk (bounds the memory of the logits: chunk × vocab floats).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    chunk: u64,
}

fn main() -> ExitCode {
    // RUST_LOG filters (e.g. RUST_LOG=kvpack=debug,wgpu_hal=info); warnings by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvpack: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn context(path: PathChoice) -> Result<Context, kvpack::Error> {
    // The CPU reference needs no device: do not start one.
    if path == PathChoice::Cpu {
        Ok(Context::cpu())
    } else {
        Context::headless()
    }
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Describe => {
            let ctx = Context::headless().map_err(|e| e.to_string())?;
            print!("{}", ctx.describe());
            Ok(())
        }
        Command::Devices { json, backends } => {
            let adapters = devices::list(backends.as_deref());
            if json {
                let v = serde_json::json!({ "adapters": adapters });
                let text = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
                println!("{text}");
            } else {
                print!("{}", devices::text(&adapters));
            }
            Ok(())
        }
        Command::Methods => {
            print!("{}", kvpack::method::describe_methods());
            Ok(())
        }
        Command::Roundtrip {
            method,
            kivi,
            path,
            input,
            output,
            chunk,
        } => {
            // Check the method before reading anything.
            let method = method_of(&method, &kivi)?;
            let chunk = chunk.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
            let (k, v) = io::read_kv(&input)?;
            let ctx = context(path).map_err(|e| e.to_string())?;
            let out =
                roundtrip::run(&ctx, path, &method, &k, &v, chunk).map_err(|e| e.to_string())?;
            let meta = HashMap::from([
                ("method".to_string(), method.to_string()),
                ("config".to_string(), out.summary["config"].to_string()),
                (
                    "path".to_string(),
                    out.summary["path"].as_str().unwrap_or_default().to_string(),
                ),
                ("input".to_string(), input.display().to_string()),
            ]);
            io::write_hat(&output, &k.shape, out.k_hat.as_deref(), &out.v_hat, meta)?;
            let text = serde_json::to_string_pretty(&out.summary).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Cache(CacheCommand::Save {
            method,
            path,
            input,
            out,
        }) => {
            let method = kvpack::Method::parse(&method).map_err(|e| e.to_string())?;
            let (k, v) = io::read_kv(&input)?;
            let ctx = context(path).map_err(|e| e.to_string())?;
            let s = cache::save(&ctx, path, &method, &k, &v, &input, &out)?;
            let text = serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Cache(CacheCommand::Inspect { file }) => {
            let s = cache::inspect(&file)?;
            let text = serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?;
            println!("{text}");
            if s["checksums_ok"] == false {
                return Err(format!(
                    "{}: a section's checksum does not match (see `checksum_ok` above)",
                    file.display()
                ));
            }
            Ok(())
        }
        Command::Attend {
            cache: cache_file,
            method,
            kivi,
            path,
            input,
            queries,
            window,
            sinks,
            scale,
            output,
        } => {
            let mut method = method_of(&method, &kivi)?;
            if let Some(s) = scale.filter(|s| !s.is_finite()) {
                return Err(format!("--scale {s} is not finite"));
            }
            let big = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
            let opts = kvpack::AttendOptions::default()
                .scale(scale)
                .window(window.map(big))
                .sinks(sinks);
            let n = big(queries);
            let (q, k, v) = io::read_qkv(&input)?;
            attend::check_shapes(&q, &k, n)?;
            let ctx = context(path).map_err(|e| e.to_string())?;
            let cached = match &cache_file {
                Some(file) => {
                    let (m, layers) = cache::load_for(&ctx, path, file, &k)?;
                    method = m;
                    Some(layers)
                }
                None => None,
            };
            let out = attend::run(&ctx, path, &method, &q, &k, &v, n, &opts, cached)?;
            let s = &out.summary;
            let meta = HashMap::from([
                (
                    "method".to_string(),
                    s["method"].as_str().unwrap_or_default().to_string(),
                ),
                ("config".to_string(), s["config"].to_string()),
                (
                    "path".to_string(),
                    s["path"].as_str().unwrap_or_default().to_string(),
                ),
                ("queries".to_string(), n.to_string()),
                ("options".to_string(), s["options"].to_string()),
                ("input".to_string(), input.display().to_string()),
                (
                    "cache".to_string(),
                    cache_file.map_or(String::new(), |c| c.display().to_string()),
                ),
            ]);
            let mut shape = q.shape.clone();
            let rank = shape.len();
            shape[rank - 3] = n;
            io::write_f32(&output, "out", &shape, &out.out, meta)?;
            let text = serde_json::to_string_pretty(s).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Eval {
            model,
            tokenizer,
            text,
            ids,
            method,
            methods,
            path,
            json,
            plot,
            max_tokens,
            evict,
            evict_plot,
        } => {
            let methods: Vec<String> = method.into_iter().chain(methods).collect();
            if methods.is_empty() {
                return Err("give at least one --method SPEC (or --methods a,b,c)".into());
            }
            let source = match (text, ids) {
                (Some(t), None) => eval::Source::Text(t),
                (None, Some(i)) => eval::Source::Ids(i),
                _ => return Err("give exactly one of --text and --ids".into()),
            };
            let opts = eval::Options {
                model,
                tokenizer,
                source,
                methods,
                path,
                json,
                plot,
                max_tokens: max_tokens.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
                evict,
                evict_plot,
            };
            eval::run(&opts, context)
        }
        Command::Calibrate(a) => {
            let big = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
            let (vecinfer, qfilters) = calibrate::parse_for(&a.for_)?;
            let opts = calibrate::Options {
                model: a.model,
                tokenizer: a.tokenizer,
                text: a.text,
                out: a.out,
                vecinfer,
                qfilters,
                bits: a.bits,
                seed: a.seed,
                max_tokens: a.max_tokens.map(big),
                chunk: big(a.chunk),
            };
            let summary = calibrate::run(&opts)?;
            let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::DumpKv(a) => {
            let big = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
            let opts = dump_kv::Options {
                model: a.model,
                tokenizer: a.tokenizer,
                text: a.text,
                out: a.out,
                max_tokens: a.max_tokens.map(big),
                f32: matches!(a.dtype, DumpDtype::F32),
                chunk: big(a.chunk),
            };
            let summary = dump_kv::run(&opts)?;
            let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
    }
}

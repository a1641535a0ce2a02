//! `kvpack`: the command-line tool.
//!
//! ```text
//! kvpack roundtrip --method kivi --k-bits 2 --v-bits 2 --group 32 --residual 128 \
//!     --input kv.safetensors --output kv_hat.safetensors [--params f16] [--path auto] [--chunk N]
//! kvpack attend --method kivi|f16 [--k-bits B --v-bits B --group G --residual R --params f16] \
//!     --input qkv.safetensors --queries N [--window W] [--sinks S] [--scale X] [--path auto] \
//!     --output out.safetensors
//! kvpack eval --model stories260K.bin|model.gguf|smollm2|qwen2.5-coder-0.5b|qwen2.5-coder-1.5b \
//!     [--tokenizer FILE] --text FILE|--ids FILE --methods f16,kivi-4,kivi-2 [--path auto] \
//!     [--json OUT.json] [--plot OUT.png] [--max-tokens N]
//! kvpack dump-kv --model M [--tokenizer FILE] --text FILE --out qkv.safetensors \
//!     [--max-tokens N] [--dtype f16|f32] [--chunk N]
//! kvpack describe
//! ```

#[path = "kvpack/attend.rs"]
mod attend;
#[path = "kvpack/dump_kv.rs"]
mod dump_kv;
#[path = "kvpack/eval.rs"]
mod eval;
#[path = "kvpack/io.rs"]
mod io;
#[path = "kvpack/roundtrip.rs"]
mod roundtrip;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use kvpack::kivi::Layout;
use kvpack::{Context, KiviConfig, ParamStorage, PathChoice};

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

#[derive(Clone, Copy, ValueEnum)]
enum Method {
    Kivi,
}

/// The cache methods `attend` runs.
#[derive(Clone, Copy, ValueEnum)]
enum AttendMethod {
    /// KIVI with the configuration of --k-bits, --v-bits, --group, --residual, --params.
    Kivi,
    /// The uncompressed f16 baseline (ignores the KIVI flags).
    F16,
}

#[derive(Subcommand)]
enum Command {
    /// Print the device, its features and limits, and the path each kernel runs on.
    Describe,
    /// Compress K and V of a safetensors file, reconstruct them, and report size and error.
    Roundtrip {
        /// Compression method.
        #[arg(long, value_enum, default_value = "kivi")]
        method: Method,
        /// Key bits (1..=8).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
        k_bits: u32,
        /// Value bits (1..=8).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
        v_bits: u32,
        /// Group size G: tokens per key group, channels per value group.
        #[arg(long, default_value_t = 32)]
        group: usize,
        /// Residual window R in tokens kept in f16 (a multiple of G; may be 0).
        #[arg(long, default_value_t = 128)]
        residual: usize,
        /// Storage of each group's (scale, lo): f16 or f32.
        #[arg(long, default_value = "f16", value_parser = ParamStorage::parse)]
        params: ParamStorage,
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
    /// Fill one cache per layer with K and V, attend with the last N queries, and report the
    /// error against exact attention on the original K/V.
    Attend {
        /// Cache method.
        #[arg(long, value_enum, default_value = "kivi")]
        method: AttendMethod,
        /// Key bits (1..=8; KIVI only).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
        k_bits: u32,
        /// Value bits (1..=8; KIVI only).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
        v_bits: u32,
        /// Group size G (KIVI only).
        #[arg(long, default_value_t = 32)]
        group: usize,
        /// Residual window R in tokens kept in f16 (KIVI only).
        #[arg(long, default_value_t = 128)]
        residual: usize,
        /// Storage of each group's (scale, lo): f16 or f32 (KIVI only).
        #[arg(long, default_value = "f16", value_parser = ParamStorage::parse)]
        params: ParamStorage,
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
        /// Comma-separated cache methods: f16, kivi-B, kivi-B-G-R (f16, the reference, runs
        /// first and is added when missing).
        #[arg(long, value_delimiter = ',', required = true)]
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
    },
    /// Run a real model over a text and write every layer's post-RoPE q, k and v as
    /// safetensors in the layout `roundtrip` and `attend` read (plus `token_ids` and
    /// `logits_last`), with the f16 cache; prints a JSON summary.
    DumpKv(DumpKvArgs),
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
        Command::Roundtrip {
            method: Method::Kivi,
            k_bits,
            v_bits,
            group,
            residual,
            params,
            path,
            input,
            output,
            chunk,
        } => {
            let cfg = KiviConfig {
                key_bits: k_bits,
                key_group: group,
                value_bits: v_bits,
                value_group: group,
                residual,
                params,
            };
            // Check the configuration before reading anything.
            Layout::new(1, 1, &cfg).map_err(|e| e.to_string())?;
            let chunk = chunk.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
            let (k, v) = io::read_kv(&input)?;
            let ctx = context(path).map_err(|e| e.to_string())?;
            let out = roundtrip::run(&ctx, path, &cfg, &k, &v, chunk).map_err(|e| e.to_string())?;
            let meta = HashMap::from([
                ("method".to_string(), "kivi".to_string()),
                ("config".to_string(), out.summary["config"].to_string()),
                (
                    "path".to_string(),
                    out.summary["path"].as_str().unwrap_or_default().to_string(),
                ),
                ("input".to_string(), input.display().to_string()),
            ]);
            io::write_hat(&output, &k.shape, &out.k_hat, &out.v_hat, meta)?;
            let text = serde_json::to_string_pretty(&out.summary).map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Attend {
            method,
            k_bits,
            v_bits,
            group,
            residual,
            params,
            path,
            input,
            queries,
            window,
            sinks,
            scale,
            output,
        } => {
            let method = match method {
                AttendMethod::F16 => kvpack::Method::F16,
                AttendMethod::Kivi => {
                    let cfg = KiviConfig {
                        key_bits: k_bits,
                        key_group: group,
                        value_bits: v_bits,
                        value_group: group,
                        residual,
                        params,
                    };
                    Layout::new(1, 1, &cfg).map_err(|e| e.to_string())?;
                    kvpack::Method::Kivi(cfg)
                }
            };
            if let Some(s) = scale.filter(|s| !s.is_finite()) {
                return Err(format!("--scale {s} is not finite"));
            }
            let big = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
            let opts = kvpack::AttendOptions {
                scale,
                window: window.map(big),
                sinks,
                ..Default::default()
            };
            let n = big(queries);
            let (q, k, v) = io::read_qkv(&input)?;
            attend::check_shapes(&q, &k, n)?;
            let ctx = context(path).map_err(|e| e.to_string())?;
            let out = attend::run(&ctx, path, &method, &q, &k, &v, n, &opts)?;
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
            methods,
            path,
            json,
            plot,
            max_tokens,
        } => {
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
            };
            eval::run(&opts, context)
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

//! Generate text with a real model whose KV cache is kvpack's (f16, KIVI, TurboQuant, ... on the CPU or the
//! GPU), printing the text as it comes, the speed, and the KV bytes held against f16.
//!
//! ```sh
//! scripts/fetch-models.sh    # SmolLM2-135M-Instruct into ~/.cache/kvpack (once)
//! cargo run --release --features cli --example generate -- --method kivi-4 "Once upon a time"
//! scripts/fetch-models.sh qwen2.5-coder-0.5b && cargo run --release --features cli --example generate -- \
//!     --model qwen2.5-coder-0.5b --method kivi-4 "def quicksort(xs):"
//! cargo run --release --features cli --example generate -- --model ../shared/models/stories260K/stories260K.bin \
//!     --method kivi-2 --path cpu --tokens 200 "Once upon a time"
//! cargo run --release --features cli --example generate -- --method turboquant-mse:bits=4,residual=32 "Once upon a time"
//! ```

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use kvpack::model::{Sampler, Session, load_model};
use kvpack::{Context, Method, PathChoice};

#[derive(Parser, Debug)]
#[command(about = "Generate text with a real model and a kvpack KV cache")]
struct Args {
    /// A model fetched by scripts/fetch-models.sh (`smollm2`, `qwen2.5-coder-0.5b`,
    /// `qwen2.5-coder-1.5b`), a .gguf path, or a llama2.c .bin path.
    #[arg(long, default_value = "smollm2")]
    model: String,
    /// Tokenizer for a llama2.c model (default: a tok*.bin beside it).
    #[arg(long)]
    tokenizer: Option<std::path::PathBuf>,
    /// KV cache method: f16, kivi-4, kivi-2, kivi-B-G-R, turboquant-mse:bits=B, ... (any spec of
    /// `kvpack methods`).
    #[arg(long, default_value = "kivi-4")]
    method: String,
    /// Where the cache and attention run: auto, cpu, wgsl, wgsl-subgroup, wgsl-workgroup, msl.
    #[arg(long, default_value = "auto")]
    path: String,
    /// New tokens to generate at most (the default goes past KIVI's 128-token f16 residual
    /// window, so the cache shows compression).
    #[arg(long, default_value_t = 320)]
    tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-p (nucleus) for sampling.
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    /// Sampler seed.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The prompt.
    prompt: String,
}

fn main() {
    // RUST_LOG filters (e.g. RUST_LOG=kvpack=debug,wgpu_hal=info); warnings by default.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn kib(b: u64) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

fn run(args: &Args) -> kvpack::Result<()> {
    let method = Method::parse(&args.method)?;
    let path = PathChoice::parse(&args.path)?;
    let t0 = Instant::now();
    let m = load_model(&args.model, args.tokenizer.as_deref())?;
    let ctx = match path {
        PathChoice::Cpu => Context::cpu(),
        _ => Context::headless()?,
    };
    let c = &m.config;
    eprintln!(
        "{}: {} layers, d_model {}, {}/{} heads, vocab {}, loaded in {:.2} s",
        m.name,
        c.layers,
        c.dim,
        c.heads,
        c.kv_heads,
        c.vocab,
        t0.elapsed().as_secs_f64()
    );
    let mut s = Session::new(Arc::new(m.weights), &ctx, method, path)?;
    let ran = if path == PathChoice::Auto {
        ctx.path()
    } else {
        path
    };
    let d = ctx.describe();
    let device = match &d.gpu {
        Some(g) => format!("{} ({})", g.adapter, g.backend),
        None => format!("{:?}", d.origin),
    };
    eprintln!("cache {} on path {ran}, device {device}", args.method);
    let tok = &m.tokenizer;
    let prompt = tok.encode(&args.prompt);
    let mut sampler = if args.temperature > 0.0 {
        Sampler::new(args.temperature, args.top_p, args.seed)
    } else {
        Sampler::greedy()
    };

    // Print the prompt, then each new piece as it decodes (the whole text is decoded each step
    // so that multi-byte characters and llama2.c's leading-space rule come out right).
    let mut all = prompt.clone();
    let mut shown = tok.decode(&all);
    print!("{shown}");
    std::io::stdout().flush().ok();
    let t1 = Instant::now();
    let mut first: Option<f64> = None;
    let out = s.generate(
        &prompt,
        args.tokens,
        &tok.stop_tokens(),
        &mut sampler,
        |id| {
            first.get_or_insert_with(|| t1.elapsed().as_secs_f64());
            all.push(id);
            let text = tok.decode(&all);
            if !text.ends_with('\u{fffd}') && text.len() >= shown.len() {
                if let Some(new) = text.get(shown.len()..) {
                    print!("{new}");
                    std::io::stdout().flush().ok();
                }
                shown = text;
            }
        },
    )?;
    let total = t1.elapsed().as_secs_f64();
    println!();
    let prefill = first.unwrap_or(total);
    let decode_tokens = out.len().saturating_sub(1);
    let decode_s = total - prefill;
    eprintln!(
        "prompt {} tokens in {:.2} s ({:.1} tok/s); generated {} tokens, decode {:.1} tok/s",
        prompt.len(),
        prefill,
        prompt.len() as f64 / prefill.max(1e-9),
        out.len(),
        if decode_s > 0.0 {
            decode_tokens as f64 / decode_s
        } else {
            0.0
        }
    );
    let mem = s.memory();
    eprintln!(
        "KV cache ({}): {} tokens x {} layers ({} token-layers quantized): {} held, {} in use, \
         vs {} in f16 (held = {:.1} % of f16)",
        args.method,
        s.pos(),
        c.layers,
        mem.quantized,
        kib(mem.held.total()),
        kib(mem.payload.total()),
        kib(mem.f16_bytes),
        100.0 * mem.held.total() as f64 / mem.f16_bytes.max(1) as f64
    );
    if mem.quantized == 0 && s.pos() > 0 && args.method != "f16" {
        eprintln!(
            "note: nothing is compressed yet: all {} tokens sit in {}'s f16 residual window \
             (generate more with --tokens, or pick a smaller window, e.g. kivi:bits=4,residual=32)",
            s.pos(),
            args.method
        );
    }
    Ok(())
}

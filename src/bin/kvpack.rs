//! `kvpack`: the command-line tool.
//!
//! ```text
//! kvpack roundtrip --method kivi --k-bits 2 --v-bits 2 --group 32 --residual 128 \
//!     --input kv.safetensors --output kv_hat.safetensors [--params f16] [--path auto] [--chunk N]
//! kvpack describe
//! ```

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
    }
}

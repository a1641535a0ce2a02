//! The models `scripts/fetch-models.sh` fetches, by the names that `--model` and
//! [`super::load_model`] accept, and where they live ([`super::gguf::models_dir`]).

use std::path::PathBuf;

use super::gguf::{self, SMOLLM2_FILE};
use crate::error::{Error, Result};

/// File name of Qwen2.5-Coder-0.5B-Instruct (official Q4_K_M GGUF) in the model cache.
pub const QWEN25_CODER_05B_FILE: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
/// File name of Qwen2.5-Coder-1.5B-Instruct (official Q4_K_M GGUF) in the model cache.
pub const QWEN25_CODER_15B_FILE: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";

/// `(name, file name)` of every model `scripts/fetch-models.sh NAME` fetches.
pub const FETCHED: [(&str, &str); 3] = [
    ("smollm2", SMOLLM2_FILE),
    ("qwen2.5-coder-0.5b", QWEN25_CODER_05B_FILE),
    ("qwen2.5-coder-1.5b", QWEN25_CODER_15B_FILE),
];

/// The names in [`FETCHED`], comma-separated (for messages).
pub fn names() -> String {
    FETCHED.map(|(n, _)| n).join(", ")
}

/// Where a fetched model's GGUF lives (present or not); `None` for a name not in [`FETCHED`]
/// (compared ignoring ASCII case).
pub fn path(name: &str) -> Option<PathBuf> {
    FETCHED
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, file)| gguf::models_dir().join(file))
}

/// [`path`] if the file is there; an error that says how to fetch it when it is not, or that
/// lists the known names when `name` is not one.
pub fn find(name: &str) -> Result<PathBuf> {
    let Some(p) = path(name) else {
        return Err(Error::Config(format!(
            "`{name}` is not a model that scripts/fetch-models.sh fetches ({})",
            names()
        )));
    };
    if p.is_file() {
        return Ok(p);
    }
    let name = name.to_ascii_lowercase();
    let arg = if name == "smollm2" {
        String::new()
    } else {
        format!(" {name}")
    };
    Err(Error::Config(format!(
        "model `{name}` is not at {} (run scripts/fetch-models.sh{arg}, or set KVPACK_MODELS to \
         the folder that holds {})",
        p.display(),
        p.file_name().unwrap_or_default().to_string_lossy()
    )))
}

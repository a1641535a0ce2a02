//! QJL keys (Zandieh, Daliri, Han 2024; docs/contracts/qjl.md): each (token, head) key is
//! stored as the m sign bits of a Gaussian projection `S k` plus its f16 norm, and attention
//! estimates ⟨q, k⟩ from them without reconstructing k (`√(π/2)/m · n · ⟨S q, 2σ − 1⟩`, S q
//! once per query row). Keys only: a value method is required (`qjl:m=128/kivi:bits=4`).
//!
//! - [`config`]: the side's settings ([`QjlSide`]: m, seed);
//! - [`kernels`], [`plans`]: `qjl_encode` (WGSL subgroup-ballot and workgroup variants, MSL
//!   `simd_ballot`) and the attention hooks, and their dispatch plans;
//! - [`codec`]: the [`crate::codec::Codec`] of the key side;
//! - [`method`]: its row of the method table (`qjl`).
//!
//! The CPU references are in [`crate::cpu::qjl`].

pub mod codec;
pub mod config;
pub mod kernels;
pub mod method;
pub mod plans;

pub use codec::QjlCodec;
pub use config::QjlSide;
pub use method::ROW;

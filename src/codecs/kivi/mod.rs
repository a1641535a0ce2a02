//! KIVI (Liu et al., ICML 2024): keys quantized per channel over blocks of `G` tokens, values
//! per token over groups of channels, the newest tokens kept in f16 by the shared store
//! (docs/contracts/kivi.md).
//!
//! - [`config`]: [`KiviConfig`], both sides' settings in one struct (the convenient form;
//!   [`crate::Method::kivi`] turns it into a method), and [`KiviSide`], one side's;
//! - [`layout`]: how codes and parameters sit in u32 words;
//! - [`plans`]: the kernels' dispatch plans;
//! - [`codec`]: the [`crate::codec::Codec`] of one side;
//! - [`method`]: its row of the method table (`kivi`, `kivi-4`, `kivi-2-32-128`);
//! - [`raw`]: a snapshot's words in KIVI's terms (tests and tools).

pub mod codec;
pub mod config;
pub mod kernels;
pub mod layout;
pub mod method;
pub mod plans;
pub mod raw;

pub use config::{KiviConfig, KiviSide};
pub use layout::{Layout, ParamStorage};
pub use method::ROW;
pub use raw::RawKivi;

//! CPU references of the bit-packing kernels (docs/contracts/bitpack.md).

// The kernel stem is the file stem (`bitpack` in the `bitpack` family folder).
#[allow(clippy::module_inception)]
pub mod bitpack;
pub mod bitunpack;

pub use self::bitpack::{bitpack, check_bits, check_codes, packed_words};

//! The method table and the one method grammar (library `FromStr`/`Display`, CLI, eval,
//! benches, examples).
//!
//! ```text
//! METHOD   := SPEC ['+' POLICY]               POLICY: an eviction policy (crate::policy)
//! SPEC     := SIDE | SIDE '/' SIDE            one method for K and V, or KEYS/VALUES
//! SIDE     := NAME [':' KEY '=' VALUE (',' KEY '=' VALUE)*]  |  a short form (kivi-4, kivi-2-32-128)
//! ```
//! `f16`, `kivi:bits=4,group=32,residual=128`, `kivi:kbits=4,vbits=2`, `kivi-4`,
//! `kivi:bits=4/f16`. The residual window R is one number per layer: `residual=` on either
//! side of a pair applies to both (two different values are an error); without it, the larger
//! of the two methods' defaults. Unknown names and keys are typed errors that list what is
//! valid. `Display` writes a canonical spec that parses back to the same method.
//!
//! The table ([`METHODS`], one [`MethodRow`] per method, in the style of ggml's type traits)
//! is what the CLI, eval and the benches read: adding a method is one row plus its folder
//! under `src/codecs/`.

pub mod table;
pub mod types;

pub use table::{METHODS, describe_methods, row};
pub use types::{Method, MethodRow, OptionDef, Options, SideConfig, Sides};

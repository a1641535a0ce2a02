//! CPU twin of `wgsl/f16/attend_v.wgsl`: the value of token `j` is its stored f16 row (the
//! same reader as the key side: [`super::attend_k::f16_row`]), in the output space.

pub use super::attend_k::f16_row as value_row;

//! CPU twins of the f16 codec's attention hooks (`wgsl/f16/attend_{k,v}.wgsl`).

pub mod attend_k;
pub mod attend_v;

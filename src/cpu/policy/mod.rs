//! CPU references of the eviction kernels (../shared/spec/qfilters.md): the scoring at append.

pub mod evict_score;

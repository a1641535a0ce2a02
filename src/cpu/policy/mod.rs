//! CPU references of the eviction kernels (../shared/spec/qfilters.md): the scoring at append
//! and the compaction of a stream's words.

pub mod evict_compact;
pub mod evict_score;

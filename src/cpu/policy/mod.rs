//! CPU references of the eviction kernels (../shared/spec/qfilters.md): the scoring at append,
//! the selection of the kept units and the compaction of a stream's words.

pub mod evict_compact;
pub mod evict_score;
pub mod evict_select;

//! A snapshot's words in KIVI's terms, for tests and tools that check KIVI's layout directly.

use half::f16;

use crate::store::Snapshot;

/// The stored words of a layer whose keys and values are both KIVI (see
/// [`super::layout`] for each stream's layout).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RawKivi {
    /// `[Q/Gk][H][D][key_group_words]`.
    pub key_codes: Vec<u32>,
    /// `[Q/Gk][H][D][param words]`.
    pub key_params: Vec<u32>,
    /// `[Q][H][value_row_words]`.
    pub value_codes: Vec<u32>,
    /// `[Q][H][value_groups][param words]`.
    pub value_params: Vec<u32>,
    /// f16 K of tokens `[Q, T)`.
    pub residual_k: Vec<f16>,
    /// f16 V of tokens `[Q, T)`.
    pub residual_v: Vec<f16>,
}

impl RawKivi {
    /// The words of a KIVI/KIVI layer's snapshot (streams `codes`, `params` of each side).
    pub fn from_snapshot(s: &Snapshot) -> Self {
        let get = |v: &Vec<Vec<u32>>, i: usize| v.get(i).cloned().unwrap_or_default();
        Self {
            key_codes: get(&s.keys.streams, 0),
            key_params: get(&s.keys.streams, 1),
            value_codes: get(&s.values.streams, 0),
            value_params: get(&s.values.streams, 1),
            residual_k: s.keys.residual.clone(),
            residual_v: s.values.residual.clone(),
        }
    }
}

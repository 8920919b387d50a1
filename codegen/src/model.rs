//! SPEC §10: model presets and the shape read from a Hugging Face `config.json`.

use serde::{Deserialize, Serialize};

/// The basis the key store is kept in (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Raw channels (models with QK-norm).
    Raw,
    /// KLT coordinates: keys rotated by a per-(layer, KV head) orthonormal basis.
    Klt,
}

/// The attention shape of a model: everything kernel generation and the store depend on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelShape {
    /// Preset name, or the `model_type` of a parsed `config.json`.
    pub name: String,
    /// `L`, decoder layers.
    pub layers: usize,
    /// `H_q`, query heads per layer.
    pub query_heads: usize,
    /// `H_kv`, KV heads per layer.
    pub kv_heads: usize,
    /// `D`, channels per head.
    pub head_dim: usize,
    /// Whether the model normalises queries and keys (QK-norm).
    pub qk_norm: bool,
    /// The store basis.
    pub basis: Basis,
}

impl ModelShape {
    /// `G`, query heads per KV head.
    pub fn group_size(&self) -> usize {
        self.query_heads / self.kv_heads
    }
}

//! SPEC §11: real activations captured from a model.
//!
//! A capture is a safetensors file with a JSON description beside it (same name, `.json`):
//! tensors `layer{l}.k` and `layer{l}.v` of shape `[H_kv, n, d]` (post-RoPE keys and the values of
//! every token) and `layer{l}.q` of shape `[H_q, Q, d]` (the queries of the last `Q` positions),
//! all fp16; query head `h` belongs to KV head `h / G`. The JSON gives the shapes, the captured
//! layers, the first query position and each layer's softmax scale.
//!
//! Keys and values are converted to bf16 on loading: a serving stack holds its K/V cache in
//! bf16, the store of §2 encodes bf16 keys and attention reads bf16 rows, so the reference must
//! see the values the kernels see. The conversion is fp16 → f32 (exact) → bf16 rounded to nearest
//! even; bf16 keeps 8 significant bits to fp16's 11, so each value moves by at most 2^-8 of
//! itself, and fp16's range lies inside bf16's (nothing overflows). Queries stay exact (fp16
//! values are f32 and f64 values), since kernels take queries in f32.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;
use thiserror::Error;

/// File name of the capture of SmolLM2-135M-Instruct over 8,192 tokens of Python (§11).
pub const SMOLLM2_CODE_8K: &str = "smollm2-135m-code-8k.safetensors";

/// The directory holding the captures: `$FATHOM_DATA_DIR` when set, else `shared/data` beside
/// the workspace (`<workspace>/../shared/data`).
pub fn data_dir() -> PathBuf {
    match std::env::var_os("FATHOM_DATA_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data"),
    }
}

/// Why a capture could not be loaded.
#[derive(Debug, Error)]
pub enum ActivationsError {
    #[error(
        "activation file {path} does not exist (set FATHOM_DATA_DIR to the directory holding it)"
    )]
    MissingFile { path: PathBuf },
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("description {path} is not valid: {reason}")]
    Metadata { path: PathBuf, reason: String },
    #[error("{path} is not a readable safetensors file: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("tensor {name} is missing from {path}")]
    MissingTensor { name: String, path: PathBuf },
    #[error("tensor {name} is {got}; captures hold float16 (F16) tensors")]
    WrongDtype { name: String, got: String },
    #[error("tensor {name} has shape {got:?}; the description says {expected:?}")]
    WrongShape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("layer {layer} was not captured; captured layers: {available:?}")]
    UnknownLayer { layer: usize, available: Vec<usize> },
}

#[derive(Deserialize, Debug, Clone)]
struct Description {
    config: ConfigDescription,
    layers: Vec<usize>,
    n_tokens: usize,
    queries: QueriesDescription,
    layer_info: Vec<LayerDescription>,
}

#[derive(Deserialize, Debug, Clone)]
struct ConfigDescription {
    head_dim: usize,
    num_kv_heads: usize,
    num_q_heads: usize,
}

#[derive(Deserialize, Debug, Clone)]
struct QueriesDescription {
    count: usize,
    first_position: usize,
}

#[derive(Deserialize, Debug, Clone)]
struct LayerDescription {
    layer: usize,
    scale: f64,
}

/// An opened capture: the file's bytes, checked against its description.
#[derive(Debug)]
pub struct Activations {
    path: PathBuf,
    bytes: Vec<u8>,
    description: Description,
    scales: HashMap<usize, f64>,
}

/// The keys, values and queries of one captured layer.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerActivations {
    /// The model layer index.
    pub layer: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Query heads per KV head `G`.
    pub group: usize,
    /// Tokens `n`.
    pub tokens: usize,
    /// Position of the first captured query (query `j` sits at `first_query_position + j`).
    pub first_query_position: usize,
    /// The model's softmax scale for this layer.
    pub scale: f64,
    /// Post-RoPE keys per KV head, token-major `[n][D]`, bf16.
    pub keys: Vec<Vec<bf16>>,
    /// Values per KV head, token-major `[n][D]`, bf16.
    pub values: Vec<Vec<bf16>>,
    /// Queries `[H_q][Q][D]`, exact fp16 values.
    pub queries: Vec<Vec<Vec<f64>>>,
}

impl LayerActivations {
    /// The KV head query head `query_head` reads.
    pub fn kv_head_of(&self, query_head: usize) -> usize {
        query_head / self.group
    }

    /// Captured query positions `Q`.
    pub fn query_count(&self) -> usize {
        self.queries.first().map_or(0, Vec::len)
    }

    /// The token position of captured query `index`; it attends causally to tokens
    /// `0..=position`.
    pub fn query_position(&self, index: usize) -> usize {
        self.first_query_position + index
    }

    /// The `G` queries of KV head `kv_head`'s query group at captured query `index`.
    pub fn group_queries(&self, kv_head: usize, index: usize) -> Vec<Vec<f64>> {
        (kv_head * self.group..(kv_head + 1) * self.group)
            .map(|h| self.queries[h][index].clone())
            .collect()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, ActivationsError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ActivationsError::MissingFile {
                path: path.to_path_buf(),
            }
        } else {
            ActivationsError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

impl Activations {
    /// Opens a capture and its `.json` description, and checks that every tensor the
    /// description promises is there, fp16, with the described shape.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ActivationsError> {
        let path = path.as_ref().to_path_buf();
        let json_path = path.with_extension("json");
        let bytes = read(&path)?;
        let json = read(&json_path)?;
        let description: Description =
            serde_json::from_slice(&json).map_err(|e| ActivationsError::Metadata {
                path: json_path.clone(),
                reason: e.to_string(),
            })?;
        let config = &description.config;
        if config.num_kv_heads == 0
            || config.num_q_heads == 0
            || !config.num_q_heads.is_multiple_of(config.num_kv_heads)
        {
            return Err(ActivationsError::Metadata {
                path: json_path,
                reason: format!(
                    "{} query heads are not a positive multiple of {} KV heads",
                    config.num_q_heads, config.num_kv_heads
                ),
            });
        }
        let scales: HashMap<usize, f64> = description
            .layer_info
            .iter()
            .map(|l| (l.layer, l.scale))
            .collect();
        if let Some(l) = description.layers.iter().find(|l| !scales.contains_key(l)) {
            return Err(ActivationsError::Metadata {
                path: json_path,
                reason: format!("layer {l} has no entry in layer_info"),
            });
        }
        let activations = Activations {
            path,
            bytes,
            description,
            scales,
        };
        activations.check_tensors()?;
        Ok(activations)
    }

    fn tensors(&self) -> Result<SafeTensors<'_>, ActivationsError> {
        SafeTensors::deserialize(&self.bytes).map_err(|e| ActivationsError::Format {
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }

    /// Expected tensor names and shapes of one layer: k, v, q.
    fn expected(&self, layer: usize) -> [(String, Vec<usize>); 3] {
        let c = &self.description.config;
        let (n, q) = (self.description.n_tokens, self.description.queries.count);
        [
            (
                format!("layer{layer}.k"),
                vec![c.num_kv_heads, n, c.head_dim],
            ),
            (
                format!("layer{layer}.v"),
                vec![c.num_kv_heads, n, c.head_dim],
            ),
            (
                format!("layer{layer}.q"),
                vec![c.num_q_heads, q, c.head_dim],
            ),
        ]
    }

    fn check_tensors(&self) -> Result<(), ActivationsError> {
        let tensors = self.tensors()?;
        for &layer in &self.description.layers {
            for (name, shape) in self.expected(layer) {
                fp16_tensor(&tensors, &self.path, &name, &shape)?;
            }
        }
        Ok(())
    }

    /// The captured layer indices.
    pub fn layers(&self) -> &[usize] {
        &self.description.layers
    }

    /// Head dimension `D`.
    pub fn head_dim(&self) -> usize {
        self.description.config.head_dim
    }

    /// KV heads `H_kv`.
    pub fn kv_heads(&self) -> usize {
        self.description.config.num_kv_heads
    }

    /// Query heads `H_q`.
    pub fn query_heads(&self) -> usize {
        self.description.config.num_q_heads
    }

    /// Query heads per KV head `G`.
    pub fn group(&self) -> usize {
        self.query_heads() / self.kv_heads()
    }

    /// Tokens `n` of the captured sequence.
    pub fn tokens(&self) -> usize {
        self.description.n_tokens
    }

    /// Loads one captured layer.
    pub fn layer(&self, layer: usize) -> Result<LayerActivations, ActivationsError> {
        if !self.layers().contains(&layer) {
            return Err(ActivationsError::UnknownLayer {
                layer,
                available: self.layers().to_vec(),
            });
        }
        let tensors = self.tensors()?;
        let [(k_name, k_shape), (v_name, v_shape), (q_name, q_shape)] = self.expected(layer);
        let d = self.head_dim();
        let to_bf16 = |x: f16| bf16::from_f32(x.to_f32());
        let per_head_bf16 = |values: Vec<f16>| -> Vec<Vec<bf16>> {
            values
                .chunks_exact(self.tokens() * d)
                .map(|head| head.iter().copied().map(to_bf16).collect())
                .collect()
        };
        let keys = per_head_bf16(fp16_tensor(&tensors, &self.path, &k_name, &k_shape)?);
        let values = per_head_bf16(fp16_tensor(&tensors, &self.path, &v_name, &v_shape)?);
        let q = fp16_tensor(&tensors, &self.path, &q_name, &q_shape)?;
        let queries = q
            .chunks_exact(q_shape[1] * d)
            .map(|head| {
                head.chunks_exact(d)
                    .map(|row| row.iter().map(|x| x.to_f64()).collect())
                    .collect()
            })
            .collect();
        Ok(LayerActivations {
            layer,
            head_dim: d,
            group: self.group(),
            tokens: self.tokens(),
            first_query_position: self.description.queries.first_position,
            scale: self.scales[&layer],
            keys,
            values,
            queries,
        })
    }
}

/// Reads tensor `name`, checking that it is fp16 of shape `shape`.
fn fp16_tensor(
    tensors: &SafeTensors<'_>,
    path: &Path,
    name: &str,
    shape: &[usize],
) -> Result<Vec<f16>, ActivationsError> {
    let view = tensors
        .tensor(name)
        .map_err(|_| ActivationsError::MissingTensor {
            name: name.to_string(),
            path: path.to_path_buf(),
        })?;
    if view.dtype() != Dtype::F16 {
        return Err(ActivationsError::WrongDtype {
            name: name.to_string(),
            got: format!("{:?}", view.dtype()),
        });
    }
    if view.shape() != shape {
        return Err(ActivationsError::WrongShape {
            name: name.to_string(),
            got: view.shape().to_vec(),
            expected: shape.to_vec(),
        });
    }
    Ok(view
        .data()
        .chunks_exact(2)
        .map(|b| f16::from_le_bytes([b[0], b[1]]))
        .collect())
}

#[cfg(test)]
mod tests;

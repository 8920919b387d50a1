//! [`Calibration`]: what some methods need measured once per (layer, KV head) on calibration
//! keys and queries: `σ²` per channel (§3), the fixed channels of `double_sparsity` (§4) and
//! the KLT rotation of a rotated store (§5).

use std::ops::Range;

use thiserror::Error;

/// Calibration data that cannot be used.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CalibrationError {
    #[error("calibration {what} hold {got} values; [{shape}] = {want} expected")]
    Shape {
        what: &'static str,
        shape: String,
        got: usize,
        want: usize,
    },
    #[error("calibration {what}, element {index}, is {value}; {allowed}")]
    Value {
        what: &'static str,
        index: usize,
        value: f32,
        allowed: &'static str,
    },
    #[error(
        "double_sparsity masks of layer {layer}, KV head {head} select {got} channels; each \
         (layer, head) must select exactly r = {r}"
    )]
    MaskCount {
        layer: usize,
        head: usize,
        got: usize,
        r: usize,
    },
    #[error("double_sparsity(r = {r}) on {head_dim} channels; allowed: 1 to {head_dim}")]
    ChannelCount { r: usize, head_dim: usize },
    #[error("KV heads {start}..{end} of a calibration of {kv_heads}; a non-empty range within it is needed")]
    Heads {
        start: usize,
        end: usize,
        kv_heads: usize,
    },
    #[error(
        "the calibration is for (layers, KV heads, head dim) = {got:?}; the model has {want:?}"
    )]
    Model {
        got: (usize, usize, usize),
        want: (usize, usize, usize),
    },
}

/// Per-(layer, KV head) calibration of one model. Every part is optional; a method that needs
/// a missing part is refused at the step ([`super::StepError::MissingCalibration`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    sigma2: Option<Vec<f32>>,
    double_sparsity: Option<(usize, Vec<u8>)>,
    rotation: Option<Vec<f32>>,
}

impl Calibration {
    /// An empty calibration of a model of `layers` layers of `kv_heads` KV heads of `head_dim`
    /// channels.
    pub fn new(layers: usize, kv_heads: usize, head_dim: usize) -> Self {
        Calibration {
            layers,
            kv_heads,
            head_dim,
            sigma2: None,
            double_sparsity: None,
            rotation: None,
        }
    }

    fn heads(&self) -> usize {
        self.layers * self.kv_heads
    }

    fn check_len(
        &self,
        what: &'static str,
        got: usize,
        per_head: usize,
    ) -> Result<(), CalibrationError> {
        let want = self.heads() * per_head;
        if got == want {
            return Ok(());
        }
        let shape = match per_head / self.head_dim.max(1) {
            0 | 1 => format!(
                "L={}][H={}][D={}",
                self.layers, self.kv_heads, self.head_dim
            ),
            _ => format!(
                "L={}][H={}][D={}][D={}",
                self.layers, self.kv_heads, self.head_dim, self.head_dim
            ),
        };
        Err(CalibrationError::Shape {
            what,
            shape,
            got,
            want,
        })
    }

    /// `σ²` of every channel in the store basis, `[L][H][D]`: finite and `>= 0`.
    pub fn with_sigma2(mut self, sigma2: Vec<f32>) -> Result<Self, CalibrationError> {
        self.check_len("σ²", sigma2.len(), self.head_dim)?;
        if let Some(index) = sigma2.iter().position(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(CalibrationError::Value {
                what: "σ²",
                index,
                value: sigma2[index],
                allowed: "variances must be finite and >= 0",
            });
        }
        self.sigma2 = Some(sigma2);
        Ok(self)
    }

    /// The fixed channels of `double_sparsity(r)`, `[L][H][D]` bytes, nonzero = read (the
    /// reference's `DoubleSparsityCalibration::mask` of each head, concatenated); each head
    /// selects exactly `r` channels.
    pub fn with_double_sparsity(
        mut self,
        r: usize,
        masks: Vec<u8>,
    ) -> Result<Self, CalibrationError> {
        if r == 0 || r > self.head_dim {
            return Err(CalibrationError::ChannelCount {
                r,
                head_dim: self.head_dim,
            });
        }
        self.check_len("double_sparsity masks", masks.len(), self.head_dim)?;
        for (i, head) in masks.chunks(self.head_dim).enumerate() {
            let got = head.iter().filter(|&&m| m != 0).count();
            if got != r {
                return Err(CalibrationError::MaskCount {
                    layer: i / self.kv_heads,
                    head: i % self.kv_heads,
                    got,
                    r,
                });
            }
        }
        self.double_sparsity = Some((r, masks));
        Ok(self)
    }

    /// The KLT bases of a rotated store, `[L][H][D][D]`, `R[i*D + j]` = component `i` of basis
    /// vector `j` (the reference's `Klt::basis_row_major`). Orthonormality is the fitter's
    /// promise and is not checked here; finiteness is.
    pub fn with_rotation(mut self, rotation: Vec<f32>) -> Result<Self, CalibrationError> {
        self.check_len("rotations", rotation.len(), self.head_dim * self.head_dim)?;
        if let Some(index) = rotation.iter().position(|v| !v.is_finite()) {
            return Err(CalibrationError::Value {
                what: "rotations",
                index,
                value: rotation[index],
                allowed: "basis components must be finite",
            });
        }
        self.rotation = Some(rotation);
        Ok(self)
    }

    /// The same calibration for the KV heads `heads` of every layer only: what a
    /// tensor-parallel rank holding those heads needs ([`crate::shard::HeadShard`]).
    pub fn kv_heads(&self, heads: Range<usize>) -> Result<Calibration, CalibrationError> {
        if heads.is_empty() || heads.end > self.kv_heads {
            return Err(CalibrationError::Heads {
                start: heads.start,
                end: heads.end,
                kv_heads: self.kv_heads,
            });
        }
        // Each part is [L][H][per_head]: keep heads `heads` of every layer.
        let slice = |values: &[f32], per_head: usize| -> Vec<f32> {
            values
                .chunks(self.kv_heads * per_head)
                .flat_map(|layer| &layer[heads.start * per_head..heads.end * per_head])
                .copied()
                .collect()
        };
        let d = self.head_dim;
        Ok(Calibration {
            layers: self.layers,
            kv_heads: heads.len(),
            head_dim: d,
            sigma2: self.sigma2.as_deref().map(|s| slice(s, d)),
            double_sparsity: self.double_sparsity.as_ref().map(|(r, masks)| {
                let kept = masks
                    .chunks(self.kv_heads * d)
                    .flat_map(|layer| &layer[heads.start * d..heads.end * d])
                    .copied()
                    .collect();
                (*r, kept)
            }),
            rotation: self.rotation.as_deref().map(|s| slice(s, d * d)),
        })
    }

    /// `(layers, kv_heads, head_dim)` it was made for.
    pub fn dims(&self) -> (usize, usize, usize) {
        (self.layers, self.kv_heads, self.head_dim)
    }

    /// `σ²` of `layer`, `[H][D]`.
    pub fn sigma2(&self, layer: usize) -> Option<&[f32]> {
        let per_layer = self.kv_heads * self.head_dim;
        self.sigma2
            .as_ref()
            .filter(|_| layer < self.layers)
            .map(|s| &s[layer * per_layer..(layer + 1) * per_layer])
    }

    /// `r` and the fixed-channel masks of `layer`, `[H][D]`.
    pub fn double_sparsity(&self, layer: usize) -> Option<(usize, &[u8])> {
        let per_layer = self.kv_heads * self.head_dim;
        self.double_sparsity
            .as_ref()
            .filter(|_| layer < self.layers)
            .map(|(r, m)| (*r, &m[layer * per_layer..(layer + 1) * per_layer]))
    }

    /// The rotations of `layer`, `[H][D][D]`.
    pub fn rotation(&self, layer: usize) -> Option<&[f32]> {
        let per_layer = self.kv_heads * self.head_dim * self.head_dim;
        self.rotation
            .as_ref()
            .filter(|_| layer < self.layers)
            .map(|r| &r[layer * per_layer..(layer + 1) * per_layer])
    }
}

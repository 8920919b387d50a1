//! The set-up the decode-step tests share (`gpu_step.rs` over views built by hand,
//! `gpu_decode.rs` and `gpu_pariskv_step.rs` over the key store): the model's geometry, the
//! decoder's configuration, the transfers a step runs with, and the calibration of a model
//! fitted on random rows, so that every test steps the same kind of model the same way. Also
//! the real model that the longer runs step (`gpu_faults.rs`, `gpu_tuning.rs`, `fathom-soak`):
//! qwen3-8b's shape, decoded with `fathom` and nothing but `σ²` calibrated.

use std::sync::Arc;

use codegen::model::{preset, Basis, ModelShape};
use codegen::spec::Placement;
use rand::Rng;
use reference::klt::Klt;
use reference::plans::DoubleSparsityCalibration;
use runtime::gpu::Gpu;
use runtime::step::{Calibration, Decoder, DecoderConfig, Method, StepError, Transfer};

use crate::inputs::calibration_rows;
use crate::step_check::is_plane_method;

/// KV heads of every step test's model.
pub const KV_HEADS: usize = 2;
/// Layers of the model: the one stepped, and another with other data, so that a view, an
/// index or a calibration slice of the wrong layer shows.
pub const LAYERS: usize = 2;
/// The layer every step is of.
pub const LAYER: usize = 1;
pub const BLOCK: usize = 64;
/// Words per plane per segment: 8,192-token segments.
pub const SEGMENT_WORDS: usize = 128;
pub const K_MAX: usize = 512;
/// The largest attention relative error a step may have against the f64 reference.
pub const MAX_RELATIVE_ERROR: f64 = 1e-3;
/// Channels of `double_sparsity`'s calibration.
const DOUBLE_SPARSITY_CHANNELS: usize = 32;

/// A model called `name` of the step tests' geometry with head dimension `d` and group
/// `group`; a raw store is a QK-norm model's, a KLT one a rotated model's.
pub fn model(name: String, d: usize, group: usize, basis: Basis) -> ModelShape {
    ModelShape {
        name,
        layers: LAYERS,
        query_heads: KV_HEADS * group,
        kv_heads: KV_HEADS,
        head_dim: d,
        qk_norm: basis == Basis::Raw,
        basis,
    }
}

/// qwen3-8b's attention shape (8 KV heads, G = 4, D = 128) with `layers` layers.
pub fn qwen3_8b(layers: usize) -> ModelShape {
    ModelShape {
        layers,
        ..preset("qwen3-8b").expect("a preset of SPEC §10")
    }
}

/// A decoder of `model` in the default configuration whose only calibration is `σ²`
/// `[L][H][D]`: what `fathom` reads.
pub fn sigma2_decoder(
    gpu: Arc<Gpu>,
    model: ModelShape,
    sigma2: Vec<f32>,
) -> Result<Decoder, StepError> {
    let calibration =
        Calibration::new(model.layers, model.kv_heads, model.head_dim).with_sigma2(sigma2)?;
    Decoder::new(gpu, model, DecoderConfig::default())?.with_calibration(calibration)
}

/// The decoder's configuration for the step tests' stores.
pub fn decoder_config() -> DecoderConfig {
    DecoderConfig {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        k_max: K_MAX,
        ..DecoderConfig::default()
    }
}

/// The transfers a step of `method` runs with in `placement`: every one for a plane method
/// over host memory, else none.
pub fn transfers(placement: Placement, method: Method) -> Vec<Option<Transfer>> {
    if placement == Placement::Host && is_plane_method(method) {
        vec![
            Some(Transfer::Fused),
            Some(Transfer::CopyKernel),
            Some(Transfer::Memcpy),
        ]
    } else {
        vec![None]
    }
}

/// The short lengths of a step test's batch: one under 100 tokens (every token is selected) and
/// one of a few thousand that is not a multiple of the block (a tail); the test adds a long one.
pub fn short_lengths(rng: &mut impl Rng) -> Vec<usize> {
    vec![
        rng.gen_range(40..100),
        loop {
            let n = rng.gen_range(3_000..9_000);
            if n % BLOCK != 0 {
                break n;
            }
        },
    ]
}

/// What is fitted for every KV head of [`LAYER`] on random calibration rows.
pub struct HeadCalibration {
    /// `[h]` the KLT, rotated stores only.
    pub klts: Vec<Klt>,
    /// `[h]` the KLT's basis as f32 rows, as the store and the decoder read it.
    pub rotations: Vec<Vec<f32>>,
    /// `[h]` `double_sparsity`'s fixed channels.
    pub double_sparsity: Vec<DoubleSparsityCalibration>,
}

impl HeadCalibration {
    /// Fits every KV head on `2·d` keys and `8·group` queries drawn from `rng`; the KLT only
    /// when `rotated`.
    pub fn fit(rng: &mut impl Rng, d: usize, group: usize, rotated: bool) -> HeadCalibration {
        let mut klts = Vec::new();
        let mut double_sparsity = Vec::new();
        for _ in 0..KV_HEADS {
            let cal_keys = calibration_rows(rng, 2 * d, d);
            let cal_queries = calibration_rows(rng, 8 * group, d);
            if rotated {
                klts.push(Klt::fit(&cal_keys, &cal_queries).expect("calibration rows are valid"));
            }
            double_sparsity.push(
                DoubleSparsityCalibration::fit(&cal_queries, &cal_keys, DOUBLE_SPARSITY_CHANNELS)
                    .expect("calibration rows are valid"),
            );
        }
        let rotations = klts
            .iter()
            .map(|k| k.basis_row_major().iter().map(|&x| x as f32).collect())
            .collect();
        HeadCalibration {
            klts,
            rotations,
            double_sparsity,
        }
    }

    /// The decoder's calibration of every layer: [`LAYER`] holds the fitted data, the other
    /// layer other data that would show if it were read. `σ²` is drawn from `rng` for every
    /// layer, and a rotated model's calibration carries it and the rotations; returned is
    /// `σ²` of [`LAYER`] `[H][d]` when the calibration carries it (else a step is passed the
    /// uncalibrated stand-in).
    pub fn decoder_calibration(
        &self,
        rng: &mut impl Rng,
        d: usize,
        rotated: bool,
    ) -> (Calibration, Option<Vec<f32>>) {
        let per_layer = KV_HEADS * d;
        let mut masks = vec![0u8; LAYERS * per_layer];
        let mut rotation = vec![0f32; LAYERS * KV_HEADS * d * d];
        let sigma2: Vec<f32> = (0..LAYERS * per_layer)
            .map(|_| rng.gen_range(0.01f32..4.0))
            .collect();
        for l in 0..LAYERS {
            for h in 0..KV_HEADS {
                let mask = if l == LAYER {
                    self.double_sparsity[h].mask()
                } else {
                    let mut m = vec![0u8; d];
                    m[d - DOUBLE_SPARSITY_CHANNELS..]
                        .iter_mut()
                        .for_each(|x| *x = 1);
                    m
                };
                masks[(l * KV_HEADS + h) * d..][..d].copy_from_slice(&mask);
                if rotated && l == LAYER {
                    rotation[(l * KV_HEADS + h) * d * d..][..d * d]
                        .copy_from_slice(&self.rotations[h]);
                }
            }
        }
        let calibration = Calibration::new(LAYERS, KV_HEADS, d)
            .with_double_sparsity(DOUBLE_SPARSITY_CHANNELS, masks)
            .expect("fitted masks select 32 channels");
        if !rotated {
            return (calibration, None);
        }
        let calibration = calibration
            .with_sigma2(sigma2.clone())
            .expect("random variances are valid")
            .with_rotation(rotation)
            .expect("fitted bases are finite");
        (
            calibration,
            Some(sigma2[LAYER * per_layer..][..per_layer].to_vec()),
        )
    }
}

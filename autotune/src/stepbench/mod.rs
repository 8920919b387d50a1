//! `step-bench`: the SPEC §9 decode-step benchmark of issue #6.
//!
//! For a preset, every cell (method, context, batch, placement) steps all `L` layers per
//! decode step (each layer one captured [`runtime::step::Decoder`] step, replayed), timed with
//! CUDA events (median of `--steps` after warm-up) and wall-clock, against the link or HBM
//! floor measured in the same run, with the ratio to sparq(32) and the fidelity and recall@k
//! of a sampled step against the f64 reference.
//!
//! Data: `--slots` synthetic layers (§11) per store at the largest context, layer `l` of
//! sequence `b` reading slot `(l + b) % slots`; smaller contexts are views of the first `n`
//! tokens of the same stores, queries moved by RoPE to position `n`.
//!
//! - [`args`]: the command line and its validation;
//! - [`data`]: the synthetic slots, their calibration, queries at a context;
//! - [`mod@reference`]: the f64 truth of the sample and how a step compares with it;
//! - [`figures`]: medians, floors, ratios, bytes per step, recall;
//! - [`record`]: the JSON record and its file name;
//! - [`plots`]: the SVG plots;
//! - [`targets`]: the targets, met or missed by how much;
//! - [`stores`]: the key stores and the composed per-layer views (GPU);
//! - [`run`]: the cells on the GPU.

pub mod args;
pub mod data;
pub mod figures;
pub mod plots;
pub mod record;
pub mod reference;
pub mod run;
pub mod stores;
pub mod table;
pub mod targets;

#[cfg(test)]
mod tests;

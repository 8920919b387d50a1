//! [`StepError`]: why a decode step cannot run, or what its device-side checks found.

use codegen::spec::launch::SizeError;
use codegen::spec::SpecError;
use thiserror::Error;

use crate::gpu::GpuError;
use crate::jit::JitError;

/// A failure of the step API. Input errors say what was wrong and what is allowed.
#[derive(Debug, Error)]
pub enum StepError {
    #[error(
        "queries hold {got} floats; a step over this view needs [B={batch}][H_kv={kv_heads}]\
         [G={group}][D={head_dim}] = {want} (query head h of KV head h/G)"
    )]
    QueryShape {
        got: usize,
        want: usize,
        batch: usize,
        kv_heads: usize,
        group: usize,
        head_dim: usize,
    },
    #[error(
        "query of sequence {sequence}, query head {query_head}, channel {channel} is {value}; \
         queries must be finite"
    )]
    NonFiniteQuery {
        sequence: usize,
        query_head: usize,
        channel: usize,
        value: f32,
    },
    #[error(
        "fathom({bits}) is not a budget this store can plan: it must be finite and at least \
         {min} bits per token (one channel at depth 1 plus its fp16 block scale)"
    )]
    Budget { bits: f64, min: f64 },
    #[error("{method} reads {r} channels of a {head_dim}-channel head; allowed: 1 to {head_dim}")]
    ChannelCount {
        method: String,
        r: usize,
        head_dim: usize,
    },
    #[error("uniform({t}) is not a read depth; allowed: 1 to 4 planes")]
    Depth { t: u8 },
    #[error("k = {k} exceeds the decoder's k_max = {k_max}; allowed: 0 to {k_max}")]
    K { k: usize, k_max: usize },
    #[error("the view is of layer {layer}, but the model has {layers} layers (0 to {last})", last = layers.saturating_sub(1))]
    Layer { layer: usize, layers: usize },
    #[error("the view's {field} is {got}; this decoder needs {want}")]
    ViewShape {
        field: &'static str,
        got: usize,
        want: String,
    },
    #[error("the view holds an empty batch; a step needs at least one sequence")]
    EmptyBatch,
    #[error("the landmark method needs the view's landmark means; the store keeps none")]
    MissingLandmarks,
    #[error(
        "pariskv(k) needs a head dimension of 64, 80, 96, 128, 192 or 256; this model's \
         {head_dim} {rule}"
    )]
    PariskvHeadDim { head_dim: usize, rule: &'static str },
    #[error(
        "pariskv(k) reads the store's ParisKV index, and the view has none; build the store with \
         StoreConfig::pariskv_index = true"
    )]
    MissingPariskvIndex,
    #[error(
        "{method} on layer {layer} needs {what} from calibration; give a Calibration that holds \
         it (Decoder::with_calibration)"
    )]
    MissingCalibration {
        method: String,
        what: &'static str,
        layer: usize,
    },
    #[error(
        "double_sparsity({r}) asked, but the calibration's fixed channel sets hold {fitted} \
         channels; fit them with the same r"
    )]
    CalibrationMismatch { r: usize, fitted: usize },
    #[error(
        "loki reads the first KLT coordinates, so it needs a model with a rotated (klt) store"
    )]
    NeedsRotatedStore,
    #[error("σ² holds {got} floats; the plan reads [B][H][D] = {want}")]
    Sigma2Shape { got: usize, want: usize },
    #[error(transparent)]
    Calibration(#[from] super::calibration::CalibrationError),
    #[error("invalid decoder config: {field} is {got}; allowed: {allowed}")]
    Config {
        field: &'static str,
        got: String,
        allowed: String,
    },
    #[error("invalid model shape: {0}")]
    Model(String),
    #[error("the tuning record gave {family} the tile {tile}, which is not a {family} tile")]
    Tuning { family: &'static str, tile: String },
    #[error(
        "the memcpy transfer reads the plan back to the host to issue one copy per run, so it \
         cannot be captured in a CUDA graph; capture with the copy-kernel or fused transfer"
    )]
    NotCapturable,
    #[error(
        "the graph was captured for at most {capacity} tokens per sequence and this view holds \
         up to {tokens}; capture again"
    )]
    GraphCapacity { capacity: usize, tokens: usize },
    #[error("a graph replays only on the Gpu (stream) it was captured on")]
    WrongGpu,
    #[error("no step has run with this scratch yet, so there are no selections to read")]
    NoStepYet,
    #[error(
        "the plan of sequence {sequence}, KV head {head} needs more planes than the staging \
         holds; this is a bug of the step's staging size"
    )]
    StagingOverflow { sequence: usize, head: usize },
    #[error(
        "the output of sequence {sequence}, query head {query_head} is not finite: a query, key \
         or value was not finite"
    )]
    NonFiniteOutput { sequence: usize, query_head: usize },
    /// A lent tensor that cannot be read as the step needs.
    #[error(transparent)]
    Tensor(#[from] crate::foreign::TensorError),
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Size(#[from] SizeError),
    /// A kernel could not be had: NVRTC missing ([`JitError::Nvrtc`]), a compile or load
    /// failure, naming the kernel.
    #[error(transparent)]
    Jit(#[from] JitError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    SelectArgs(#[from] crate::abi::SelectArgsError),
}

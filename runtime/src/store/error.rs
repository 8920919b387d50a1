//! What the key store refuses, and why.

use thiserror::Error;

use super::ledger::SequenceId;
use crate::gpu::GpuError;
use crate::jit::JitError;

/// A failure of a [`super::KeyStore`] call. Every variant says what was wrong and what is
/// allowed; after any of them the store is still usable.
#[derive(Debug, Error)]
pub enum StoreError {
    #[error("the store configuration is invalid: {reason}")]
    Config { reason: String },
    #[error(
        "host memory `{mode}` is not available here ({reason}); use pinned, or leave \
         require_host_memory off to fall back to it"
    )]
    HostMemory {
        mode: super::HostMemory,
        reason: String,
    },
    #[error("{id} does not exist in this store; use an id returned by create_sequence")]
    UnknownSequence { id: SequenceId },
    #[error("{id} was freed; create a new sequence")]
    FreedSequence { id: SequenceId },
    #[error("{id} appears twice in one batch; each sequence may appear once")]
    DuplicateSequence { id: SequenceId },
    #[error("the batch is empty; give at least one sequence")]
    EmptyBatch,
    #[error("a batch of {batch} sequences exceeds the store's max_batch of {max_batch}")]
    BatchTooLarge { batch: usize, max_batch: usize },
    #[error("layer {layer} is out of range; the model has layers 0..{layers}")]
    LayerOutOfRange { layer: usize, layers: usize },
    #[error(
        "{what} hold {got} bf16 values; expected {expected} ({shape}), bf16 bits as u16 on the device"
    )]
    Shape {
        what: &'static str,
        got: usize,
        expected: usize,
        shape: String,
    },
    #[error(
        "{requested} more tokens would exceed the store's capacity of {capacity} tokens \
         ({used} in use over all resident sequences); free sequences or build the store with a \
         larger capacity_tokens"
    )]
    CapacityExceeded {
        requested: usize,
        used: usize,
        capacity: usize,
    },
    #[error(
        "key of {sequence}, layer {layer}, KV head {head}, token {token}, channel {channel} is \
         not finite; keys must be finite"
    )]
    NonFiniteKey {
        sequence: SequenceId,
        layer: usize,
        head: usize,
        token: usize,
        channel: usize,
    },
    #[error(
        "block of {sequence}, layer {layer}, KV head {head} starting at token {token} has \
         channel {channel} (store basis) too large: its scale max|x|/8 does not fit an fp16; \
         |x| must stay below 524160"
    )]
    ScaleOverflow {
        sequence: SequenceId,
        layer: usize,
        head: usize,
        token: usize,
        channel: usize,
    },
    #[error(
        "key of {sequence}, layer {layer}, KV head {head}, token {token} is not finite (found \
         by the ParisKV index build); keys must be finite"
    )]
    IndexNonFiniteKey {
        sequence: SequenceId,
        layer: usize,
        head: usize,
        token: usize,
    },
    #[error(
        "key of {sequence}, layer {layer}, KV head {head}, token {token} has a ParisKV weight \
         ||k|| r_b / α_b that overflows bf16; the key's norm must stay well below 3.4e38"
    )]
    IndexWeightOverflow {
        sequence: SequenceId,
        layer: usize,
        head: usize,
        token: usize,
    },
    /// A kernel could not be had: NVRTC missing ([`JitError::Nvrtc`]), a compile or load
    /// failure, naming the kernel.
    #[error(transparent)]
    Jit(#[from] JitError),
    #[error("internal error of the key store: {0}")]
    Internal(String),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

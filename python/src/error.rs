//! Every Rust error as the kind of Python exception it becomes, carrying the Rust message.

use runtime::foreign::TensorError;
use runtime::gpu::GpuError;
use runtime::jit::JitError;
use runtime::step::StepError;
use runtime::store::StoreError;

/// The Python exception classes (`fathom.<Kind>Error`), all subclasses of `FathomError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    DeviceUnavailable,
    InvalidInput,
    Config,
    Method,
    Sequence,
    Capacity,
    Calibration,
    Kernel,
}

/// A failure on its way to Python.
#[derive(Debug)]
pub struct Failure {
    pub kind: Kind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

pub type Outcome<T> = Result<T, Failure>;

fn gpu_kind(e: &GpuError) -> Kind {
    match e {
        GpuError::NoDriver | GpuError::NoDevice { .. } => Kind::DeviceUnavailable,
        GpuError::OutOfMemory { .. } => Kind::Capacity,
        GpuError::Nvrtc(_) => Kind::DeviceUnavailable,
        GpuError::ForeignContext { .. } => Kind::InvalidInput,
        _ => Kind::Kernel,
    }
}

fn jit_kind(e: &JitError) -> Kind {
    match e {
        JitError::Nvrtc(_) => Kind::DeviceUnavailable,
        _ => Kind::Kernel,
    }
}

impl From<TensorError> for Failure {
    fn from(e: TensorError) -> Self {
        let kind = match e {
            TensorError::Driver { .. } => Kind::Kernel,
            _ => Kind::InvalidInput,
        };
        Failure::new(kind, e.to_string())
    }
}

impl From<GpuError> for Failure {
    fn from(e: GpuError) -> Self {
        Failure::new(gpu_kind(&e), e.to_string())
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let kind = match &e {
            StoreError::Config { .. } => Kind::Config,
            StoreError::UnknownSequence { .. } | StoreError::FreedSequence { .. } => Kind::Sequence,
            StoreError::BatchTooLarge { .. } | StoreError::CapacityExceeded { .. } => {
                Kind::Capacity
            }
            StoreError::Jit(j) => jit_kind(j),
            StoreError::Gpu(g) => gpu_kind(g),
            StoreError::Internal(_) => Kind::Kernel,
            _ => Kind::InvalidInput,
        };
        Failure::new(kind, e.to_string())
    }
}

impl From<StepError> for Failure {
    fn from(e: StepError) -> Self {
        let kind = match &e {
            StepError::Budget { .. }
            | StepError::ChannelCount { .. }
            | StepError::Depth { .. }
            | StepError::MissingLandmarks
            | StepError::MissingPariskvIndex
            | StepError::NeedsRotatedStore
            | StepError::PariskvHeadDim { .. } => Kind::Method,
            StepError::K { .. } => Kind::Capacity,
            StepError::MissingCalibration { .. }
            | StepError::CalibrationMismatch { .. }
            | StepError::Calibration(_) => Kind::Calibration,
            StepError::Config { .. } | StepError::Model(_) => Kind::Config,
            StepError::Jit(j) => jit_kind(j),
            StepError::Gpu(g) => gpu_kind(g),
            StepError::Tensor(_)
            | StepError::QueryShape { .. }
            | StepError::NonFiniteQuery { .. }
            | StepError::Layer { .. }
            | StepError::EmptyBatch
            | StepError::ViewShape { .. } => Kind::InvalidInput,
            _ => Kind::Kernel,
        };
        Failure::new(kind, e.to_string())
    }
}

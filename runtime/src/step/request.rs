//! What one step is asked to do ([`StepRequest`]) and its validation into the scoring path the
//! launch plan follows ([`Scoring`]).

use codegen::model::Basis;
use codegen::spec::PlanMethod;

use super::StepError;
use crate::gpu::DeviceBuffer;
pub use crate::tuning::Transfer;
pub use codegen::spec::method::Method;

/// One step's parameters.
///
/// ```
/// use runtime::step::{Method, StepRequest, Transfer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let request = StepRequest {
///     transfer: Some(Transfer::CopyKernel), // host placement only
///     scale: Some(0.125),
///     ..StepRequest::new(Method::Sparq { r: 32 }, 512)
/// };
/// assert_eq!((request.k, request.sigma2.is_none()), (512, true));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct StepRequest<'a> {
    /// The method of §4.
    pub method: Method,
    /// The host-placement transfer; `None` takes the tuning record's, else [`Transfer::Fused`].
    pub transfer: Option<Transfer>,
    /// Top-k per query head beside the sink and the local window (at most the decoder's
    /// `k_max`; ignored by `dense`, and by `pariskv(k)`, which carries its own).
    pub k: usize,
    /// The softmax scale; `None` is `1/sqrt(D)`.
    pub scale: Option<f32>,
    /// `σ²` `[B][H][D]` in the store basis for `fathom` (e.g. the uncalibrated stand-in, the
    /// mean over stored blocks of `Δ²`, which the store knows); `None` takes the calibration's.
    pub sigma2: Option<&'a DeviceBuffer<f32>>,
    /// Whether the step writes the union of each KV head's sets and every row's position in it
    /// (`uni`, `uni_count`, `sel_pos`) where nothing of the step needs them: in HBM, when
    /// attention reads the store's rows by token (`Tiles::attention_rows = store`). `true` (the
    /// default) keeps the whole output; a decode loop that reads only `out` and `sel` sets
    /// `false` and saves the union's launch. From host memory, and wherever rows are fetched,
    /// the union is always written: the fetch reads it.
    pub union: bool,
}

impl<'a> StepRequest<'a> {
    /// A request for `method` with top-`k`, every other field at its default.
    pub fn new(method: Method, k: usize) -> Self {
        StepRequest {
            method,
            transfer: None,
            k,
            scale: None,
            sigma2: None,
            union: true,
        }
    }
}

/// How a validated method scores the tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scoring {
    /// A depth plan over the bit-plane store, then the plane scan.
    Planes {
        /// The plan kernel's method.
        method: PlanMethod,
        /// Bits per token (fathom; 0 otherwise).
        budget: f32,
        /// The most planes a plan of this method reads per (sequence, head, segment): the
        /// staging capacity of the copy transfers.
        max_planes: usize,
        /// `r` of `double_sparsity`, which the calibration must match.
        fixed_r: Option<usize>,
    },
    /// Scores from the fp16 landmark means.
    Landmark,
    /// Exact scores of every token.
    Oracle,
    /// Attention over every token.
    Dense,
    /// ParisKV retrieval (§12) over the store's index: the group's top-`k` of the reranked
    /// candidates, beside the sink and the local window.
    Pariskv {
        /// Winners per query group.
        k: usize,
    },
}

/// Why `head_dim` cannot be indexed by ParisKV, if it cannot: the subspaces need a multiple of
/// 8, and the kernels exist for the head dimensions of §1 (the Hadamard transform zero-pads
/// 80, 96 and 192 to a power of two).
fn pariskv_head_dim(head_dim: usize) -> Result<(), StepError> {
    let rule = if !head_dim.is_multiple_of(8) {
        "is not a multiple of 8 (the index splits a head into subspaces of 8 coordinates)"
    } else if !codegen::spec::pariskv::supports_head_dim(head_dim) {
        "is outside the sizes the kernels are built for"
    } else {
        return Ok(());
    };
    Err(StepError::PariskvHeadDim { head_dim, rule })
}

impl Scoring {
    /// Validates `method` for a store of `head_dim` channels, `block`-token scale blocks and
    /// basis `basis`.
    pub fn of(
        method: Method,
        head_dim: usize,
        block: usize,
        basis: Basis,
    ) -> Result<Scoring, StepError> {
        let channels = |r: usize| {
            if (1..=head_dim).contains(&r) {
                Ok(r)
            } else {
                Err(StepError::ChannelCount {
                    method: method.to_string(),
                    r,
                    head_dim,
                })
            }
        };
        let planes = |method: PlanMethod, max_planes: usize| Scoring::Planes {
            method,
            budget: 0.0,
            max_planes,
            fixed_r: None,
        };
        Ok(match method {
            Method::Fathom { bits } => {
                let min = 1.0 + 16.0 / block as f64;
                if !bits.is_finite() || bits < min {
                    return Err(StepError::Budget { bits, min });
                }
                // Planes never exceed the cost, which never exceeds the budget.
                let max_planes = (bits.floor() as usize).min(4 * head_dim);
                Scoring::Planes {
                    method: PlanMethod::Fathom,
                    budget: bits as f32,
                    max_planes,
                    fixed_r: None,
                }
            }
            Method::Sparq { r } => planes(PlanMethod::Sparq { r: channels(r)? }, 4 * r),
            Method::DoubleSparsity { r } => Scoring::Planes {
                method: PlanMethod::DoubleSparsity,
                budget: 0.0,
                max_planes: 4 * channels(r)?,
                fixed_r: Some(r),
            },
            Method::Loki { r } => {
                let r = channels(r)?;
                if basis != Basis::Klt {
                    return Err(StepError::NeedsRotatedStore);
                }
                planes(PlanMethod::Loki { r }, 4 * r)
            }
            Method::Thumbnail => planes(PlanMethod::Thumbnail, 2 * head_dim),
            Method::Uniform { t } => {
                if !(1..=4).contains(&t) {
                    return Err(StepError::Depth { t });
                }
                planes(PlanMethod::Uniform { t: t as usize }, t as usize * head_dim)
            }
            Method::Landmark => Scoring::Landmark,
            Method::Oracle => Scoring::Oracle,
            Method::Dense => Scoring::Dense,
            Method::Pariskv { k } => {
                pariskv_head_dim(head_dim)?;
                Scoring::Pariskv { k }
            }
        })
    }
}

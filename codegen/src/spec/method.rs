//! The methods of SPEC §4 and §12 by their benchmark names (`fathom(48)`, `sparq(32)`, ...),
//! with the bits per token each one's scan reads.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::landmark::TOKENS_PER_GROUP;
use super::layout::{BlockSize, PLANES};

/// Tokens averaged into one landmark key (§4).
pub const LANDMARK_TOKENS: usize = TOKENS_PER_GROUP as usize;

/// A method of §4, by its benchmark name (`fathom(48)`, `sparq(32)`, ...).
///
/// The one vocabulary of methods: the f64 reference plans them (`reference::plans`) and the
/// runtime's step runs them (`runtime::step::Method` is this type).
///
/// ```
/// use codegen::spec::method::Method;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let method: Method = "fathom(48)".parse()?;
/// assert_eq!(method, Method::Fathom { bits: 48.0 });
/// assert_eq!(Method::DoubleSparsity { r: 32 }.to_string(), "double_sparsity(32)");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// Per-query water-filling (§3) into `bits` bits per token.
    Fathom {
        /// The budget `B`, bits per token per KV head.
        bits: f64,
    },
    /// Top-`r` channels of `Σ_h |q_h[c]|` per query group, depth 4.
    Sparq {
        /// Channels read.
        r: usize,
    },
    /// Top-`r` channels of `mean_h |q_h[c]| · mean |k[c]|` on calibration, fixed per (layer, KV
    /// head), depth 4.
    DoubleSparsity {
        /// Channels read.
        r: usize,
    },
    /// The first `r` coordinates of the rotated (KLT) store, depth 4.
    Loki {
        /// Leading coordinates read.
        r: usize,
    },
    /// Every channel at depth 2.
    Thumbnail,
    /// Every channel at depth `t` (1..=4).
    Uniform {
        /// Planes read of every channel.
        t: u8,
    },
    /// Scores from the fp16 mean key of each 8-token group.
    Landmark,
    /// Exact scores from the bf16 keys.
    Oracle,
    /// Full attention over every token.
    Dense,
    /// ParisKV retrieval (§12) over its own index: the group's top-`k` by the reranked
    /// estimate, beside the sink and the local window. Not a plan over the bit-plane store:
    /// the reference's `depth_plan` refuses it; its f64 reference is `reference::pariskv`.
    Pariskv {
        /// Winners per query group (the step's top-k).
        k: usize,
    },
}

impl Method {
    /// The nominal bits per token per KV head of the method's scan (§4): the budget of
    /// `fathom(B)`, `r (4 + 16/BLK)` for the top-r scans, `D (t + 16/BLK)` for the all-channel
    /// ones, `16 D / 8` for landmark, `16 D` for oracle, and `None` for dense (no scan).
    /// `pariskv(k)` reads `8 B` bits of centroid ids for every retrievable token plus the codes
    /// and weights (`8 (D/2 + 2B)` bits) of its `C = β N_r` candidates; the figure here is at
    /// `N_r >= 30k` (`β = 0.1`), where it no longer depends on the context (§12).
    pub fn bits_per_token(&self, head_dim: usize, block: BlockSize) -> Option<f64> {
        let per_plane_channel = |t: u8| f64::from(t) + block.scale_bits_per_token();
        let d = head_dim as f64;
        match *self {
            Method::Fathom { bits } => Some(bits),
            Method::Sparq { r } | Method::DoubleSparsity { r } | Method::Loki { r } => {
                Some(r as f64 * per_plane_channel(PLANES as u8))
            }
            Method::Thumbnail => Some(d * per_plane_channel(2)),
            Method::Uniform { t } => Some(d * per_plane_channel(t)),
            Method::Landmark => Some(16.0 * d / LANDMARK_TOKENS as f64),
            Method::Oracle => Some(16.0 * d),
            Method::Dense => None,
            Method::Pariskv { .. } => {
                let b = super::pariskv::subspaces(head_dim as u32) as f64;
                let padded = f64::from(super::pariskv::padded_dim(head_dim as u32));
                Some(8.0 * b + 0.1 * 8.0 * (padded / 2.0 + 2.0 * b))
            }
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Method::Fathom { bits } => write!(f, "fathom({bits})"),
            Method::Sparq { r } => write!(f, "sparq({r})"),
            Method::DoubleSparsity { r } => write!(f, "double_sparsity({r})"),
            Method::Loki { r } => write!(f, "loki({r})"),
            Method::Thumbnail => f.write_str("thumbnail"),
            Method::Uniform { t } => write!(f, "uniform({t})"),
            Method::Landmark => f.write_str("landmark"),
            Method::Oracle => f.write_str("oracle"),
            Method::Dense => f.write_str("dense"),
            Method::Pariskv { k } => write!(f, "pariskv({k})"),
        }
    }
}

/// A method name that does not parse.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "`{input}` is not a method ({reason}); valid forms: fathom(B) with B > 0 bits per token, \
     sparq(r), double_sparsity(r), loki(r) with r >= 1 channels, thumbnail, uniform(t) with t \
     in 1..=4, landmark, oracle, dense, pariskv(k) with k >= 1 winners"
)]
pub struct MethodParseError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Method {
    type Err = MethodParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| MethodParseError {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim();
        let (name, arg) = match s.split_once('(') {
            None => (s, None),
            Some((name, rest)) => {
                let arg = rest
                    .strip_suffix(')')
                    .ok_or_else(|| fail("missing closing parenthesis"))?;
                (name, Some(arg.trim()))
            }
        };
        let channels = |arg: Option<&str>| -> Result<usize, MethodParseError> {
            let arg = arg.ok_or_else(|| fail("needs a channel count in parentheses"))?;
            match arg.parse::<usize>() {
                Ok(r) if r >= 1 => Ok(r),
                _ => Err(fail("the channel count must be a whole number >= 1")),
            }
        };
        let no_arg = |method: Method| match arg {
            None => Ok(method),
            Some(_) => Err(fail("takes no argument")),
        };
        match name {
            "fathom" => {
                let arg = arg.ok_or_else(|| fail("needs a budget in parentheses"))?;
                match arg.parse::<f64>() {
                    Ok(bits) if bits.is_finite() && bits > 0.0 => Ok(Method::Fathom { bits }),
                    _ => Err(fail("the budget must be a finite number of bits > 0")),
                }
            }
            "sparq" => Ok(Method::Sparq { r: channels(arg)? }),
            "double_sparsity" => Ok(Method::DoubleSparsity { r: channels(arg)? }),
            "loki" => Ok(Method::Loki { r: channels(arg)? }),
            "uniform" => {
                let arg = arg.ok_or_else(|| fail("needs a depth in parentheses"))?;
                match arg.parse::<u8>() {
                    Ok(t) if (1..=PLANES as u8).contains(&t) => Ok(Method::Uniform { t }),
                    _ => Err(fail("the depth must be 1, 2, 3 or 4 planes")),
                }
            }
            "thumbnail" => no_arg(Method::Thumbnail),
            "landmark" => no_arg(Method::Landmark),
            "oracle" => no_arg(Method::Oracle),
            "dense" => no_arg(Method::Dense),
            "pariskv" => {
                let arg = arg.ok_or_else(|| fail("needs a top-k in parentheses"))?;
                match arg.parse::<usize>() {
                    Ok(k) if k >= 1 => Ok(Method::Pariskv { k }),
                    _ => Err(fail("the top-k must be a whole number >= 1")),
                }
            }
            _ => Err(fail("unknown method name")),
        }
    }
}

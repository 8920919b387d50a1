//! How the planes of a host-placement store reach the scan: a choice autotune measures and a
//! record names, and a step request may fix.

use serde::{Deserialize, Serialize};

/// How the planes reach the scan when the store lives in host memory (§7). The HBM placement
/// ignores it: its scan reads the store in place.
///
/// ```
/// use runtime::step::{Method, StepRequest, Transfer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Fused is the default without a tuning record; memcpy cannot be captured in a graph.
/// let request = StepRequest {
///     transfer: Some(Transfer::Fused),
///     ..StepRequest::new(Method::Fathom { bits: 48.0 }, 256)
/// };
/// assert_eq!(Transfer::CopyKernel.as_str(), "copy-kernel");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transfer {
    /// One asynchronous copy per active run into HBM staging, then the HBM scan. The runs are
    /// known only on the device, so this strategy reads the plan back (one host
    /// synchronisation per step) and cannot be captured in a graph.
    Memcpy,
    /// The gather kernel copies the active runs into HBM staging, then the HBM scan.
    CopyKernel,
    /// The scan reads the planes straight from mapped host memory.
    Fused,
}

impl Transfer {
    /// The name used by tuning records and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Transfer::Memcpy => "memcpy",
            Transfer::CopyKernel => "copy-kernel",
            Transfer::Fused => "fused",
        }
    }
}

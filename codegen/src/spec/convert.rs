//! The `convert` family: bf16 ↔ f32 over a contiguous array, for a foreign caller's bf16
//! queries and attention output (`runtime::step::foreign`). It specialises nothing but its
//! block size, and is a template family so that it is compiled and cached by the JIT like
//! every other kernel, never by a side road.

use super::{checks, Family, SpecError};
use serde::{Deserialize, Serialize};

/// Spec of the conversion kernels.
///
/// Launch ABI, two entry points (any grid; the threads stride over the elements):
///
/// - `<name>_bf16_to_f32(const unsigned short* src, float* dst, unsigned long long n)`:
///   exact (a bf16 is the high half of an f32).
/// - `<name>_f32_to_bf16(const float* src, unsigned short* dst, unsigned long long n)`:
///   round to nearest even; infinities stay infinities, NaNs stay (quiet) NaNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvertSpec {
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
}

impl Default for ConvertSpec {
    /// The 256 threads the foreign step has always launched the conversions with.
    fn default() -> Self {
        ConvertSpec { threads: 256 }
    }
}

impl ConvertSpec {
    /// The entry point that widens bf16 to f32.
    pub fn to_f32_entry(&self) -> String {
        format!("{}_bf16_to_f32", self.kernel_name())
    }

    /// The entry point that rounds f32 to bf16.
    pub fn to_bf16_entry(&self) -> String {
        format!("{}_f32_to_bf16", self.kernel_name())
    }
}

impl Family for ConvertSpec {
    const FAMILY: &'static str = "convert";

    fn validate(&self) -> Result<(), SpecError> {
        checks::threads(Self::FAMILY, self.threads)
    }

    fn kernel_name(&self) -> String {
        format!("fathom_convert_t{}", self.threads)
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("threads", &self.threads);
        c
    }
}

//! Launch geometry of a kernel for given run-time sizes, and the error for sizes it cannot serve.

use thiserror::Error;

/// Grid, block and dynamic shared memory of one kernel launch.
///
/// The kernels of this crate size their shared memory statically, so `shared_bytes` (the
/// dynamic amount to pass at launch) is 0 for them; the field is there so every family answers
/// with the same shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Launch {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

impl Launch {
    /// A launch of `threads` threads per block over `grid` blocks, with no dynamic shared memory.
    pub fn new(grid: [u32; 3], threads: u32) -> Self {
        Launch {
            grid,
            block: [threads, 1, 1],
            shared_bytes: 0,
        }
    }
}

/// A run-time size (batch, heads, tokens, k) that a launch of this spec cannot serve.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("invalid run-time size for {family}: `{field}` is {got}; allowed: {allowed}")]
pub struct SizeError {
    /// The family whose launch was asked for.
    pub family: &'static str,
    /// The run-time size at fault.
    pub field: &'static str,
    /// Its value.
    pub got: String,
    /// What the launch accepts.
    pub allowed: String,
}

/// CUDA's limit on `gridDim.y` and `gridDim.z`.
pub const MAX_GRID_YZ: u64 = 65_535;
/// CUDA's limit on `gridDim.x`.
pub const MAX_GRID_X: u64 = (1 << 31) - 1;

/// Checks that `value` lies in `1..=max` and returns it as a grid dimension.
pub(crate) fn grid_dim(
    family: &'static str,
    field: &'static str,
    value: u64,
    max: u64,
) -> Result<u32, SizeError> {
    if value == 0 || value > max {
        return Err(SizeError {
            family,
            field,
            got: value.to_string(),
            allowed: format!("1..={max}"),
        });
    }
    Ok(value as u32)
}

/// `ceil(a / b)`, at least 1, for `b > 0`.
pub(crate) fn blocks_for(a: u64, b: u64) -> u64 {
    a.div_ceil(b).max(1)
}

/// Rows a warp loads before it computes, in the row kernels (oracle, landmark, fetch): mapped
/// host memory has several times the latency of HBM, so more loads are kept in flight.
pub(crate) fn rows_in_flight(placement: super::Placement) -> u32 {
    match placement {
        super::Placement::Hbm => 2,
        super::Placement::Host => 4,
    }
}

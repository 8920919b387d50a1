//! Field checks shared by the kernel families of the selection pipeline.

use super::select::MAX_K;
use super::shape::{self, HEAD_DIMS};
use super::SpecError;

/// [`HEAD_DIMS`] as an error message says it.
pub(crate) const HEAD_DIMS_ALLOWED: &str = "64, 80, 96, 128, 192 or 256";
/// Largest query group (`G`), in the width of the row families' fields.
pub(crate) const MAX_GROUP: u32 = shape::MAX_GROUP as u32;

pub(crate) fn head_dim(family: &'static str, value: u32) -> Result<(), SpecError> {
    head_dim_allowing(family, value.into(), HEAD_DIMS_ALLOWED)
}

/// `head_dim` in [`HEAD_DIMS`] (the row kernels need a row to be a whole number of 16-byte
/// loads and at least 8 of them, one writer lane per query head), for families of any integer width whose error explains the
/// choice in its own words (`allowed`).
pub(crate) fn head_dim_allowing(
    family: &'static str,
    value: u64,
    allowed: &str,
) -> Result<(), SpecError> {
    if HEAD_DIMS.iter().any(|&d| d as u64 == value) {
        Ok(())
    } else {
        Err(SpecError::new(family, "head_dim", value, allowed))
    }
}

pub(crate) fn group(family: &'static str, value: u32) -> Result<(), SpecError> {
    one_to(family, "group", value, MAX_GROUP)
}

/// Threads per block: whole warps, at most CUDA's 1024.
pub(crate) fn threads(family: &'static str, value: u32) -> Result<(), SpecError> {
    if value.is_multiple_of(32) && (32..=1024).contains(&value) {
        Ok(())
    } else {
        Err(SpecError::new(
            family,
            "threads",
            value,
            "a multiple of 32 in 32..=1024",
        ))
    }
}

/// Largest run-time `k` a spec is generated for: `1..=`[`MAX_K`].
pub(crate) fn k_max(family: &'static str, value: u32) -> Result<(), SpecError> {
    one_to(family, "k_max", value, MAX_K)
}

/// `value` in `1..=max`, else an error naming `field` and that range.
fn one_to(
    family: &'static str,
    field: &'static str,
    value: u32,
    max: u32,
) -> Result<(), SpecError> {
    if (1..=max).contains(&value) {
        Ok(())
    } else {
        Err(SpecError::new(family, field, value, format!("1..={max}")))
    }
}

//! Fathom's runtime: what a serving stack links against.
//!
//! - [`store`]: the key store of every sequence, on the GPU or in mapped host memory (§2, §7);
//! - [`step`]: the decode step of one layer for a batch of sequences (§8), over a [`view`] of
//!   the store;
//! - [`jit`]: kernels compiled by NVRTC for the device on first use and cached on disk;
//! - [`reference`]: the f64 CPU implementation of the whole step that every kernel is tested
//!   against;
//! - [`gpu`], [`launch`], [`ceilings`]: the checked driver layer, typed device pointers, and the
//!   copy rates kernels are measured against.

pub mod ceilings;
pub mod gpu;
pub mod jit;
pub mod launch;
pub mod reference;
pub mod step;
pub mod store;
pub mod view;

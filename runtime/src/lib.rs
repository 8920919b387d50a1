//! Fathom's runtime: what a serving stack links against.
//!
//! Today it holds [`reference`], the f64 CPU implementation of the whole decode step of
//! `SPEC.md` (encode, plan, scan, select, attention, metrics) that every generated kernel is
//! tested against. The JIT loader, the key store on the GPU and the step API build on it.

pub mod ceilings;
pub mod gpu;
pub mod launch;
pub mod reference;
pub mod step;
pub mod view;

//! Fathom's kernel generator: from a model shape to specialised CUDA kernels.
//!
//! `config.json` or a preset ([`model`]) gives a shape; a kernel spec per family names every
//! specialisation parameter; a strict Tera template per family (in `templates/`) renders it to
//! CUDA C; NVRTC ([`nvrtc`]) compiles that to PTX, and [`resources`] reads what ptxas says each
//! entry point uses (registers, shared memory, spills). Rendering is a pure function of the spec and
//! compilation a pure function of the source and the compiler, so the same spec always gives the
//! same source and the same PTX.

pub mod emit;
pub mod kernels;
pub mod machine_code;
pub mod model;
pub mod nvrtc;
pub mod render;
pub mod resources;
pub mod signature;
pub mod spec;

pub use kernels::{kernels_for, KernelSetOptions};
pub use render::render_any;
pub use spec::KernelSpec;

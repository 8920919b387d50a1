//! The f64 CPU reference of the whole decode step, written for clarity, not speed.
//!
//! Every GPU kernel is checked against these functions, so each follows `SPEC.md` to the letter;
//! the section each module implements is named in its documentation.
//!
//! | module | SPEC | what |
//! | --- | --- | --- |
//! | [`store`] | §2 | 4-bit codes, bit planes, fp16 block scales, the segment layout |
//! | [`planner`] | §3 | per-query reverse water-filling, flat and per-layer budgets |
//! | [`plans`] | §4 | every method as a plan over the same store, with its bits per token |
//! | [`klt`] | §5 | the rotated (KLT) store basis |
//! | [`score`], [`select`], [`attention`] | §6 | scoring, selection and union, exact attention |
//! | [`metrics`] | §9 | fidelity, recall@k, bytes per step |
//! | [`model`] | §10 | model presets and Hugging Face `config.json` parsing |
//! | [`synthetic`], [`activations`] | §11 | seeded synthetic keys, real activations |
//! | [`pariskv`] | §12 | ParisKV retrieval: the Hadamard-rotated centroid index, tiers, votes, rerank |
//! | [`drift`] | #8 | long-generation drift: decode keys and queries that move away from the prefill |

pub mod activations;
pub mod attention;
pub mod drift;
pub mod klt;
pub mod metrics;
pub mod pariskv;
pub mod planner;
pub mod plans;
pub mod queries;
pub mod score;
pub mod select;
pub mod step;
pub mod store;
pub mod synthetic;

/// §10 model presets and `config.json` parsing live in `codegen` (kernel generation needs them
/// too); they are re-exported here so that the reference is complete on its own.
pub use codegen::model;

//! Fathom's research programs: measurements of the methods on the f64 reference
//! (`fathom-reference`), apart from the serving runtime, which does not link them.
//!
//! - [`fidelity`]: §9 fidelity and recall@k of every method on real activations (the
//!   `fathom-fidelity` program);
//! - [`drift`]: issue #8's long-generation drift scenario, recall@k of Fathom and ParisKV over
//!   thousands of decode steps whose keys move away from the prefill's (the `fathom-drift`
//!   program), and [`plot`], the SVG line chart it draws;
//! - [`provenance`]: the commit and date a result file is named after;
//! - [`parallel`]: the scoped parallel map both programs run their cases on.

pub mod drift;
pub mod fidelity;
pub mod parallel;
pub mod plot;
pub mod provenance;

//! `autotune`: benchmarks kernel variants in host (PCIe) and HBM placements and records the
//! winners per GPU model (SPEC §9, DESIGN "Tuning and its records").
//!
//! - [`candidates`]: the cases of a run and the candidate variants of each;
//! - [`tuner`]: verify, time, disqualify, and pick the simplest candidate within noise, through
//!   the [`tuner::Bench`] trait (GPU-free; tested on a fake timer);
//! - [`stats`]: quartiles and the relative spread of repeated timings;
//! - [`selection`]: the cases a run tunes (`--model`, `--config`, `--only`, `--quick`);
//! - [`records`]: where records are written and how a run merges into one;
//! - [`report`]: the summary table and the SVG plot of achieved bandwidth;
//! - [`gpu`]: the [`tuner::Bench`] of the GPU: stores and plans, random scores and K/V rows,
//!   a ParisKV index of random keys, every candidate checked against the f64 reference, then
//!   timed with events.
//!
//! Every kernel family the step looks a tile up for is tuned: scan (host, HBM), gather,
//! transfer, plan, select, attention, oracle, landmark, fetch (host, HBM), and the ParisKV
//! vote and rerank (host, HBM) and top-C (HBM); see [`candidates`] for the grids and why they
//! leave out some values the specs accept.
//!
//! The record types themselves live in `runtime::tuning`, which reads them.

pub mod candidates;
pub mod gpu;
pub mod machine_code;
pub mod records;
pub mod report;
pub mod selection;
pub mod stats;
pub mod stepbench;
pub mod tuner;

#[cfg(test)]
mod opt_in_tests;
#[cfg(test)]
mod tests;

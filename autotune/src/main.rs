//! `autotune`: benchmarks kernel variants on the GPU, in host (PCIe) and HBM placements, and
//! records the winners per GPU model.
fn main() {}

//! The scan specs of 512-word segments that the grid tests draw from, shared by the test files
//! that compile them and that compare their names.

use codegen::spec::{Placement, ScanSpec};

/// Every scan spec of 512-word segments over `groups` and the `(tile_words, threads)` pairs
/// `tiles`, at every head dimension, block size and placement; valid or not.
pub fn scan_cells(groups: &[usize], tiles: &[(usize, usize)]) -> Vec<ScanSpec> {
    let mut specs = Vec::new();
    for head_dim in [64, 80, 96, 128, 192, 256] {
        for &group in groups {
            for block in [32, 64, 128] {
                for &(tile_words, threads) in tiles {
                    for placement in [Placement::Hbm, Placement::Host] {
                        specs.push(ScanSpec {
                            head_dim,
                            group,
                            block,
                            segment_words: 512,
                            tile_words,
                            threads,
                            placement,
                            tensor_cores: false,
                            peaks: false,
                        });
                    }
                }
            }
        }
    }
    specs
}

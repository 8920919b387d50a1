//! What is tuned: the cases (subject, shape, placement, context) of a run and the candidate
//! variants of each, drawn from one fixed grid and kept where the family's spec validates.

use codegen::spec::{Family, GatherSpec, Placement, ScanSpec};
use runtime::step::tuning::context_bucket;
use runtime::step::{Tile, Transfer, TunedFamily};
use runtime::tuning::{EntryKey, Subject, Variant};
use sha2::{Digest, Sha256};

/// Tokens per block and words per plane per segment of every store the tuner builds: the
/// runtime's defaults (`DecoderConfig`), which the recorded tiles are valid for.
pub const BLOCK: usize = 64;
/// See [`BLOCK`].
pub const SEGMENT_WORDS: usize = 512;

/// The scan's words per tile tried.
pub const SCAN_TILE_WORDS: [usize; 6] = [4, 8, 16, 32, 64, 128];
/// Threads per block tried for the scan (with the tile, they set tokens per thread).
pub const SCAN_THREADS: [usize; 5] = [64, 128, 256, 512, 1024];
/// The gather's 16-byte loads in flight per thread tried.
pub const GATHER_LOADS: [usize; 4] = [1, 2, 4, 8];
/// Threads per block tried for the gather.
pub const GATHER_THREADS: [usize; 3] = [128, 256, 512];
/// Transfers tried. `memcpy` is left out: it reads the plan back to the host every step (the
/// runs are known only on the device) and cannot be captured in a graph, so it is never the
/// runtime's choice for a decode loop; `StepRequest::transfer` still selects it explicitly.
pub const TRANSFERS: [Transfer; 2] = [Transfer::Fused, Transfer::CopyKernel];

/// The context lengths tuned by default: 32k, 128k and 1M tokens.
pub const CONTEXTS: [usize; 3] = [1 << 15, 1 << 17, 1 << 20];
/// The contexts of `--quick`.
pub const QUICK_CONTEXTS: [usize; 2] = [1 << 15, 1 << 17];

/// One key to tune, with what the bench needs to build its inputs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Case {
    pub subject: Subject,
    pub head_dim: usize,
    pub group: usize,
    /// KV heads of the layer timed (the preset's): sets the grid size, not the key.
    pub kv_heads: usize,
    pub placement: Placement,
    pub tokens: usize,
}

impl Case {
    /// The record key of this case.
    pub fn key(&self) -> EntryKey {
        EntryKey {
            subject: self.subject,
            head_dim: self.head_dim,
            group: self.group,
            placement: self.placement,
            context_bucket: context_bucket(self.tokens),
        }
    }
}

/// The subjects and placements tuned: the scan in both placements, and, where the store is in
/// host memory, the gather (the copy-kernel transfer) and the choice of transfer. In this
/// order: the three host-placement subjects share one store and plan, and the transfer is
/// timed with the scan and gather tiles tuned before it.
pub const SUBJECTS: [(Subject, Placement); 4] = [
    (Subject::Kernel(TunedFamily::Scan), Placement::Hbm),
    (Subject::Kernel(TunedFamily::Scan), Placement::Host),
    (Subject::Kernel(TunedFamily::Gather), Placement::Host),
    (Subject::Transfer, Placement::Host),
];

/// Every candidate of the grid for `subject` in `placement`, before any shape is applied.
fn grid(subject: Subject, placement: Placement) -> Vec<Variant> {
    match subject {
        Subject::Kernel(TunedFamily::Scan) => SCAN_TILE_WORDS
            .iter()
            .flat_map(|&tile_words| {
                SCAN_THREADS.iter().map(move |&threads| {
                    Variant::Tile(Tile::Scan {
                        tile_words,
                        threads,
                    })
                })
            })
            .collect(),
        Subject::Kernel(TunedFamily::Gather) => GATHER_LOADS
            .iter()
            .flat_map(|&loads_in_flight| {
                GATHER_THREADS.iter().map(move |&threads| {
                    Variant::Tile(Tile::Gather {
                        loads_in_flight,
                        threads,
                    })
                })
            })
            .collect(),
        Subject::Transfer if placement == Placement::Host => {
            TRANSFERS.iter().map(|&t| Variant::Transfer(t)).collect()
        }
        _ => Vec::new(),
    }
}

/// The candidates of `case`: the grid's variants whose spec validates for its shape.
pub fn enumerate(case: &Case) -> Vec<Variant> {
    grid(case.subject, case.placement)
        .into_iter()
        .filter(|v| valid(case, v))
        .collect()
}

fn valid(case: &Case, variant: &Variant) -> bool {
    match *variant {
        Variant::Tile(Tile::Scan {
            tile_words,
            threads,
        }) => scan_spec(case, tile_words, threads).validate().is_ok(),
        Variant::Tile(Tile::Gather {
            loads_in_flight,
            threads,
        }) => gather_spec(case, loads_in_flight, threads)
            .validate()
            .is_ok(),
        Variant::Transfer(_) => true,
        _ => false,
    }
}

/// The scan spec of a case and tile.
pub fn scan_spec(case: &Case, tile_words: usize, threads: usize) -> ScanSpec {
    ScanSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        tile_words,
        threads,
        ..ScanSpec::new(case.head_dim, case.group, case.placement)
    }
}

/// The gather spec of a case and tile.
pub fn gather_spec(case: &Case, loads_in_flight: usize, threads: usize) -> GatherSpec {
    GatherSpec {
        block: BLOCK,
        segment_words: SEGMENT_WORDS,
        loads_in_flight,
        threads,
        ..GatherSpec::new(case.head_dim)
    }
}

/// sha256 (hex) of the sorted names of the whole grid (every subject and placement, with the
/// context lists and the store's block and segment): it changes exactly when what a run may
/// try changes, whatever `--model`, `--config` or `--quick` narrowed it to, so that runs
/// narrowed differently merge into one record.
pub fn candidate_checksum() -> String {
    let mut names: Vec<String> = SUBJECTS
        .iter()
        .flat_map(|&(subject, placement)| {
            grid(subject, placement)
                .into_iter()
                .map(move |v| format!("{subject} {} {}", placement.as_str(), v.name()))
        })
        .collect();
    names.extend(CONTEXTS.iter().map(|t| format!("context {t}")));
    names.extend(QUICK_CONTEXTS.iter().map(|t| format!("quick context {t}")));
    names.push(format!("store b{BLOCK} s{SEGMENT_WORDS}"));
    names.sort();
    let mut hash = Sha256::new();
    for name in &names {
        hash.update(name.as_bytes());
        hash.update(b"\n");
    }
    hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(subject: Subject, placement: Placement, group: usize) -> Case {
        Case {
            subject,
            head_dim: 128,
            group,
            kv_heads: 8,
            placement,
            tokens: 1 << 15,
        }
    }

    #[test]
    fn scan_candidates_are_the_valid_part_of_the_grid() {
        for placement in [Placement::Hbm, Placement::Host] {
            let c = case(Subject::Kernel(TunedFamily::Scan), placement, 4);
            let all = grid(c.subject, c.placement);
            let valid = enumerate(&c);
            assert!(!valid.is_empty() && valid.len() < all.len());
            for v in &all {
                let Variant::Tile(Tile::Scan {
                    tile_words,
                    threads,
                }) = *v
                else {
                    panic!("{v:?}")
                };
                let ok = scan_spec(&c, tile_words, threads).validate().is_ok();
                assert_eq!(valid.contains(v), ok, "{}", v.name());
                // Tokens per thread outside 1, 2, 4, 8 never survive.
                if ok {
                    assert!([1, 2, 4, 8].contains(&(tile_words * 64 / threads)));
                }
            }
        }
    }

    #[test]
    fn gather_and_transfer_candidates() {
        let g = enumerate(&case(
            Subject::Kernel(TunedFamily::Gather),
            Placement::Host,
            4,
        ));
        assert_eq!(g.len(), GATHER_LOADS.len() * GATHER_THREADS.len());
        let t = enumerate(&case(Subject::Transfer, Placement::Host, 4));
        assert_eq!(
            t,
            [
                Variant::Transfer(Transfer::Fused),
                Variant::Transfer(Transfer::CopyKernel)
            ]
        );
        // The transfer is a host-placement choice only.
        assert!(enumerate(&case(Subject::Transfer, Placement::Hbm, 4)).is_empty());
    }

    #[test]
    fn names_are_distinct_and_the_checksum_is_stable_hex() {
        for &(s, p) in &SUBJECTS {
            let mut names: Vec<String> = grid(s, p).iter().map(Variant::name).collect();
            let n = names.len();
            names.sort();
            names.dedup();
            assert_eq!(names.len(), n);
        }
        let sum = candidate_checksum();
        assert_eq!(sum.len(), 64);
        assert!(sum.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(sum, candidate_checksum());
    }

    #[test]
    fn keys_carry_the_context_bucket() {
        let mut c = case(Subject::Kernel(TunedFamily::Scan), Placement::Hbm, 7);
        c.tokens = 1 << 20;
        assert_eq!(c.key().context_bucket, 20);
        assert_eq!(c.key().group, 7);
    }
}

//! The rerank's many-block top-k in the default grid (it was `--opt-in
//! pariskv-select-multiblock` until it ran on the H200): tried beside every rerank tile whose
//! spec validates, as the step would build it, and the one-block top-k winning a tie. The scan
//! on the tensor cores likewise (it was `--opt-in scan-tc`).

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{Family, KernelSpec, Placement};
use runtime::tuning::{Subject, Tile, TunedFamily, Variant};

use crate::candidates::{
    bench_k_max, enumerate, grid, tile_spec, Case, OptIn, PARISKV_THREADS, RERANK_DECODE_TABLES,
    RERANK_VECTOR_LOADS,
};
use crate::tuner::simplicity;

fn rerank_case(placement: Placement) -> Case {
    Case {
        opt_in: OptIn::default(),
        grid: Default::default(),
        subject: Subject::Kernel(TunedFamily::PariskvRerank),
        head_dim: 128,
        group: 4,
        kv_heads: 8,
        placement,
        tokens: 1 << 20,
    }
}

#[test]
fn the_default_rerank_grid_has_both_top_k_variants_of_every_tile() {
    for placement in [Placement::Hbm, Placement::Host] {
        let all = grid(Subject::Kernel(TunedFamily::PariskvRerank), placement);
        assert_eq!(
            all.len(),
            PARISKV_THREADS.len() * RERANK_VECTOR_LOADS.len() * 2 * RERANK_DECODE_TABLES.len()
        );
        for v in &all {
            if let Variant::Tile(Tile::Rerank {
                threads,
                vector_loads,
                multiblock: true,
                decode_table: false,
            }) = *v
            {
                let single = Variant::Tile(Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock: false,
                    decode_table: false,
                });
                assert!(all.contains(&single), "{}", single.name());
            }
        }
    }
}

#[test]
fn multiblock_candidates_are_the_valid_rerank_specs() {
    for placement in [Placement::Hbm, Placement::Host] {
        let c = rerank_case(placement);
        let valid = enumerate(&c);
        let mut many = 0;
        for &threads in &PARISKV_THREADS {
            for &vector_loads in &RERANK_VECTOR_LOADS {
                let tile = Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock: true,
                    decode_table: false,
                };
                let variant = Variant::Tile(tile);
                let spec = match tile_spec(&c, &variant).unwrap() {
                    KernelSpec::PariskvRerank(s) => s,
                    other => panic!("{other:?}"),
                };
                assert_eq!(spec.select, RerankSelect::Multiblock);
                assert_eq!(
                    (spec.threads, spec.vector_loads, spec.placement),
                    (threads, vector_loads, placement)
                );
                assert_eq!(spec.k_max as usize, bench_k_max());
                // 64 threads cannot hold two k_max = 2048 a block (32 candidates a thread).
                assert_eq!(valid.contains(&variant), spec.validate().is_ok());
                assert_eq!(spec.validate().is_ok(), threads >= 128, "{threads}");
                many += usize::from(valid.contains(&variant));
                assert!(variant.name().ends_with(" mb"), "{}", variant.name());
                // The one-block top-k wins a tie with the many-block one.
                let single = Variant::Tile(Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock: false,
                    decode_table: false,
                });
                assert!(simplicity(&single) < simplicity(&variant));
            }
        }
        assert_eq!(many, 2 * (PARISKV_THREADS.len() - 1));
    }
}

/// The default scan grid has the tensor-core twin of every tile (`--opt-in scan-tc` until it ran
/// on the H200), each kept exactly when its spec validates, and the plain tile wins a tie; the
/// old opt-in's name is refused as graduated.
#[test]
fn the_default_scan_grid_has_the_tensor_core_twin_of_every_tile() {
    use crate::candidates::{scan_spec, SCAN_THREADS, SCAN_TILE_WORDS};
    let e = OptIn::parse(&["scan-tc".to_string()]).unwrap_err();
    assert!(e.contains("default grid") && e.contains("drop"), "{e}");
    for placement in [Placement::Hbm, Placement::Host] {
        let subject = Subject::Kernel(TunedFamily::Scan);
        let all = grid(subject, placement);
        assert_eq!(all.len(), 2 * SCAN_TILE_WORDS.len() * SCAN_THREADS.len());
        let case = Case {
            opt_in: OptIn::default(),
            grid: Default::default(),
            subject,
            head_dim: 128,
            group: 4,
            kv_heads: 8,
            placement,
            tokens: 1 << 20,
        };
        let kept = enumerate(&case);
        let mut tc_kept = 0;
        for v in &all {
            let Variant::Tile(Tile::Scan {
                tile_words,
                threads,
                tensor_cores,
            }) = *v
            else {
                panic!("{v:?}")
            };
            let spec = scan_spec(&case, tile_words, threads, tensor_cores);
            assert_eq!(kept.contains(v), spec.validate().is_ok(), "{}", v.name());
            assert_eq!(OptIn::needed_for(v), OptIn::default(), "{}", v.name());
            if tensor_cores {
                assert!(v.name().ends_with(" tc"), "{}", v.name());
                let twin = Variant::Tile(Tile::Scan {
                    tile_words,
                    threads,
                    tensor_cores: false,
                });
                assert!(all.contains(&twin), "{}", v.name());
                assert!(simplicity(&twin) < simplicity(v), "{}", v.name());
                tc_kept += usize::from(kept.contains(v));
            }
        }
        // 4 tokens a thread at 64 to 512 threads, and more.
        assert!(
            tc_kept >= 4,
            "{placement:?}: {tc_kept} tensor-core tiles kept"
        );
    }
}

/// The default grid tries every rerank tile also with `_score`'s operands in tables
/// (`PariskvRerankSpec::decode_table`, graduated from `--opt-in pariskv-decode-table`): each
/// tile with tables has its twin without, the simpler one winning a tie, and needs no opt-in.
#[test]
fn every_rerank_tile_is_tried_with_and_without_decode_tables() {
    for placement in [Placement::Hbm, Placement::Host] {
        let subject = Subject::Kernel(TunedFamily::PariskvRerank);
        let all = grid(subject, placement);
        let c = rerank_case(placement);
        let with_tables = all
            .iter()
            .filter(|v| {
                matches!(
                    v,
                    Variant::Tile(Tile::Rerank {
                        decode_table: true,
                        ..
                    })
                )
            })
            .count();
        assert_eq!(2 * with_tables, all.len());
        for v in &all {
            let Variant::Tile(Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
                decode_table,
            }) = *v
            else {
                panic!("{v:?}");
            };
            assert_eq!(v.name().ends_with(" dt"), decode_table, "{}", v.name());
            assert_eq!(OptIn::needed_for(v), OptIn::default());
            if !decode_table {
                continue;
            }
            let plain = Variant::Tile(Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
                decode_table: false,
            });
            assert!(all.contains(&plain), "{}", v.name());
            assert!(simplicity(&plain) < simplicity(v));
            match tile_spec(&c, v).unwrap() {
                KernelSpec::PariskvRerank(s) => {
                    assert_eq!(
                        (s.threads, s.vector_loads, s.decode_table, s.placement),
                        (threads, vector_loads, true, placement)
                    );
                    assert_eq!(s.select == RerankSelect::Multiblock, multiblock);
                    assert!(s.kernel_name().ends_with("_dt"), "{}", s.kernel_name());
                    // The same tiles validate with and without the tables.
                    assert_eq!(enumerate(&c).contains(v), enumerate(&c).contains(&plain));
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

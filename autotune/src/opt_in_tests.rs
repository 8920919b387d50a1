//! The rerank's many-block top-k as an opt-in candidate (`--opt-in pariskv-select-multiblock`):
//! named, absent from the default grid (whose checksum it leaves alone), and when asked for,
//! tried beside every rerank tile whose spec validates, as the step would build it.

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{Family, KernelSpec, Placement};
use runtime::tuning::{Subject, Tile, TunedFamily, Variant};

use crate::candidates::{
    bench_k_max, candidate_checksum, enumerate, grid, grid_with, tile_spec, Case, OptIn,
    PARISKV_THREADS, RERANK_VECTOR_LOADS, SUBJECTS,
};
use crate::tuner::simplicity;

fn multiblock() -> OptIn {
    OptIn::parse(&["pariskv-select-multiblock".to_string()]).unwrap()
}

fn rerank_case(placement: Placement, opt_in: OptIn) -> Case {
    Case {
        opt_in,
        subject: Subject::Kernel(TunedFamily::PariskvRerank),
        head_dim: 128,
        group: 4,
        kv_heads: 8,
        placement,
        tokens: 1 << 20,
    }
}

#[test]
fn the_multiblock_opt_in_is_named_and_only_grows_the_rerank_grid() {
    let opt_in = multiblock();
    assert!(opt_in.pariskv_select_multiblock);
    assert!(OptIn::NAMES.contains(&"pariskv-select-multiblock"));
    let e = OptIn::parse(&["pariskv-select".to_string()]).unwrap_err();
    assert!(e.contains("pariskv-select-multiblock"), "{e}");
    assert_ne!(
        candidate_checksum(opt_in),
        candidate_checksum(OptIn::default())
    );
    for &(subject, placement) in &SUBJECTS {
        let (default, opted) = (
            grid(subject, placement),
            grid_with(subject, placement, opt_in),
        );
        if subject == Subject::Kernel(TunedFamily::PariskvRerank) {
            assert_eq!(opted.len(), 2 * default.len());
            assert!(default.iter().all(|v| opted.contains(v)));
            // Without the opt-in no candidate runs the many-block top-k.
            assert!(default.iter().all(|v| !matches!(
                v,
                Variant::Tile(Tile::Rerank {
                    multiblock: true,
                    ..
                })
            )));
        } else {
            assert_eq!(opted, default, "{subject}");
        }
    }
}

#[test]
fn multiblock_candidates_are_the_valid_rerank_specs() {
    for placement in [Placement::Hbm, Placement::Host] {
        let c = rerank_case(placement, multiblock());
        let valid = enumerate(&c);
        let mut many = 0;
        for &threads in &PARISKV_THREADS {
            for &vector_loads in &RERANK_VECTOR_LOADS {
                let tile = Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock: true,
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
                });
                assert!(simplicity(&single) < simplicity(&variant));
            }
        }
        assert_eq!(many, 2 * (PARISKV_THREADS.len() - 1));
    }
}

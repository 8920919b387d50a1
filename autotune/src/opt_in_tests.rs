//! The rerank's many-block top-k in the default grid (it was `--opt-in
//! pariskv-select-multiblock` until it ran on the H200): tried beside every rerank tile whose
//! spec validates, as the step would build it, and the one-block top-k winning a tie.

use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{Family, KernelSpec, Placement};
use runtime::tuning::{Subject, Tile, TunedFamily, Variant};

use crate::candidates::{
    bench_k_max, enumerate, grid, tile_spec, Case, OptIn, PARISKV_THREADS, RERANK_VECTOR_LOADS,
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
            PARISKV_THREADS.len() * RERANK_VECTOR_LOADS.len() * 2
        );
        for v in &all {
            if let Variant::Tile(Tile::Rerank {
                threads,
                vector_loads,
                multiblock: true,
            }) = *v
            {
                let single = Variant::Tile(Tile::Rerank {
                    threads,
                    vector_loads,
                    multiblock: false,
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

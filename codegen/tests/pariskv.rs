//! The ParisKV families: names, validation (the head dimension error says why), rendering of
//! every entry point, launches, and NVRTC compiling a sampled grid without a warning.

mod family_checks;

use codegen::render::render;
use codegen::spec::pariskv::{
    candidate_capacity, padded_dim, vote_bins, RerankSelect, QUERY_THREADS,
};
use codegen::spec::{
    Family, KernelSpec, KvRows, PariskvIndexSpec, PariskvQuerySpec, PariskvRerankSpec,
    PariskvTopcSpec, PariskvVoteSpec, Placement,
};
use family_checks::{assert_compiles, assert_renders};
use serde_json::json;

/// The head dimensions ParisKV serves, in the width of the specs.
fn head_dims() -> Vec<u32> {
    codegen::spec::pariskv::head_dims()
        .map(|d| d as u32)
        .collect()
}

fn index() -> PariskvIndexSpec {
    PariskvIndexSpec {
        head_dim: 128,
        threads: 256,
        placement: Placement::Hbm,
        kv_rows: KvRows::Separate,
    }
}

fn query() -> PariskvQuerySpec {
    PariskvQuerySpec::new(128, 4)
}

fn vote() -> PariskvVoteSpec {
    PariskvVoteSpec {
        head_dim: 128,
        threads: 256,
        placement: Placement::Hbm,
    }
}

fn topc() -> PariskvTopcSpec {
    PariskvTopcSpec {
        head_dim: 128,
        threads: 256,
    }
}

fn rerank() -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim: 128,
        group: 4,
        k_max: 2048,
        threads: 256,
        placement: Placement::Hbm,
        vector_loads: false,
        select: RerankSelect::Single,
        decode_table: false,
    }
}

/// Every spec of a sampled grid over the fields, each family with its entry points.
fn grid() -> Vec<(KernelSpec, Vec<String>)> {
    let mut specs: Vec<(KernelSpec, Vec<String>)> = Vec::new();
    for head_dim in head_dims() {
        for (i, placement) in [Placement::Hbm, Placement::Host].into_iter().enumerate() {
            for threads in [32, 256, 1024] {
                let s = PariskvIndexSpec {
                    head_dim,
                    threads,
                    placement,
                    kv_rows: KvRows::Separate,
                };
                specs.push((s.into(), vec![s.kernel_name()]));
                if threads == 256 {
                    let s = PariskvIndexSpec {
                        kv_rows: KvRows::Adjacent,
                        ..s
                    };
                    specs.push((s.into(), vec![s.kernel_name()]));
                }
                let s = PariskvVoteSpec {
                    head_dim,
                    threads,
                    placement,
                };
                specs.push((s.into(), vec![s.kernel_name()]));
                let s = PariskvRerankSpec {
                    head_dim,
                    group: [1, 16][i],
                    k_max: [1, 4096][i],
                    threads,
                    placement,
                    vector_loads: false,
                    select: RerankSelect::Single,
                    decode_table: false,
                };
                specs.push((s.into(), vec![s.score_entry(), s.select_entry()]));
                // The many-block top-k wherever a block holds two k_max.
                let s = PariskvRerankSpec {
                    select: RerankSelect::Multiblock,
                    k_max: [1, 512][i],
                    ..s
                };
                let mut entries = vec![s.score_entry()];
                entries.extend(s.select_entries());
                specs.push((s.into(), entries));
            }
        }
        for group in [1, 4, 7, 8, 16] {
            let s = PariskvQuerySpec::new(head_dim, group);
            specs.push((s.into(), vec![s.kernel_name()]));
        }
        for threads in [32, 256, 1024] {
            let s = PariskvTopcSpec { head_dim, threads };
            specs.push((s.into(), vec![s.count_entry(), s.write_entry()]));
        }
    }
    specs
}

mod index_family {
    use super::*;
    family_checks::family_tests! {
        base: index(),
        grid: [index(), PariskvIndexSpec { head_dim: 64, ..index() }, PariskvIndexSpec { head_dim: 96, ..index() }],
        alternatives: [
            ("head_dim", json!(256)),
            ("threads", json!(512)),
            ("placement", json!("host")),
            ("kv_rows", json!("adjacent")),
        ],
        bad_fields: [("head_dim", json!(72)), ("head_dim", json!(120)), ("threads", json!(48))],
    }
}

mod query_family {
    use super::*;
    family_checks::family_tests! {
        base: query(),
        grid: [query(), PariskvQuerySpec { group: 7, ..query() }],
        alternatives: [("head_dim", json!(64)), ("group", json!(7))],
        bad_fields: [("head_dim", json!(72)), ("group", json!(0)), ("group", json!(17))],
    }
}

mod vote_family {
    use super::*;
    family_checks::family_tests! {
        base: vote(),
        grid: [vote(), PariskvVoteSpec { placement: Placement::Host, ..vote() }],
        alternatives: [
            ("head_dim", json!(64)),
            ("threads", json!(1024)),
            ("placement", json!("host")),
        ],
        bad_fields: [("head_dim", json!(100)), ("threads", json!(0))],
    }
}

mod topc_family {
    use super::*;
    family_checks::family_tests! {
        base: topc(),
        grid: [topc(), PariskvTopcSpec { threads: 32, ..topc() }],
        alternatives: [("head_dim", json!(256)), ("threads", json!(64))],
        bad_fields: [("head_dim", json!(8)), ("threads", json!(2048))],
    }
}

mod rerank_family {
    use super::*;
    family_checks::family_tests! {
        base: rerank(),
        grid: family_checks::grid4(
            &head_dims(),
            &[1, 4, 8],
            &[1, 512, 4096],
            &[Placement::Hbm, Placement::Host],
            |head_dim, group, k_max, placement| PariskvRerankSpec {
                head_dim,
                group,
                k_max,
                threads: 256,
                placement,
                vector_loads: false,
                select: if k_max == 512 {
                    RerankSelect::Multiblock
                } else {
                    RerankSelect::Single
                },
                decode_table: head_dim == 128 && group == 4,
            },
        ),
        alternatives: [
            ("head_dim", json!(64)),
            ("group", json!(8)),
            ("k_max", json!(128)),
            ("threads", json!(512)),
            ("placement", json!("host")),
            ("vector_loads", json!(true)),
            ("select", json!("multiblock")),
            ("decode_table", json!(true)),
        ],
        bad_fields: [
            ("head_dim", json!(136)),
            ("group", json!(0)),
            ("k_max", json!(0)),
            ("k_max", json!(4097)),
            ("threads", json!(100)),
        ],
    }
}

#[test]
fn the_names_spell_the_fields() {
    assert_eq!(index().kernel_name(), "fathom_pariskv_index_d128_t256_hbm");
    assert_eq!(query().kernel_name(), "fathom_pariskv_query_d128_g4");
    assert_eq!(vote().kernel_name(), "fathom_pariskv_vote_d128_t256_hbm");
    assert_eq!(topc().count_entry(), "fathom_pariskv_topc_d128_t256_count");
    assert_eq!(
        rerank().select_entry(),
        "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_select"
    );
    assert_eq!(
        whole_rows(rerank()).score_entry(),
        "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_v16_score"
    );
}

fn whole_rows(spec: PariskvRerankSpec) -> PariskvRerankSpec {
    PariskvRerankSpec {
        vector_loads: true,
        ..spec
    }
}

/// The whole-row variant reads the code and weight rows as `uint4`s, `D/32` lanes a candidate,
/// and leaves `_select` as it was; the plain one has no 16-byte loads of the index.
#[test]
fn the_whole_row_variant_loads_16_bytes_and_keeps_the_select() {
    for head_dim in head_dims() {
        for placement in [Placement::Hbm, Placement::Host] {
            let plain = PariskvRerankSpec {
                head_dim,
                placement,
                ..rerank()
            };
            let wide = whole_rows(plain);
            let (a, b) = (render(&plain).unwrap(), render(&wide).unwrap());
            assert!(!a.contains("uint4"), "{}", plain.kernel_name());
            assert!(b.contains("load_index(code_rows + (size_t)t * LANES + part)"));
            assert!(b.contains(&format!(
                "constexpr int LANES = {};",
                head_dim.next_power_of_two() / 32
            )));
            let select = |s: &str| s[s.find("_select(").unwrap()..].to_string();
            assert_eq!(
                select(&a).replace(&plain.kernel_name(), "K"),
                select(&b).replace(&wide.kernel_name(), "K")
            );
        }
    }
}

/// Four candidates per lane group instead of per thread; any grid still covers the candidates.
#[test]
fn the_whole_row_score_launch_counts_lane_groups() {
    let wide = whole_rows(rerank());
    // 256 threads at D = 128: 64 groups of 4 lanes, 256 candidates a block per pass.
    assert_eq!(wide.launch_score(1, 8, 1000).unwrap().grid, [4, 8, 1]);
    assert_eq!(rerank().launch_score(1, 8, 1000).unwrap().grid, [1, 8, 1]);
    assert_eq!(wide.launch_score(1, 8, 1000).unwrap().block, [256, 1, 1]);
}

/// Every head dimension, both placements, the smallest and largest block: compiles quietly for
/// sm_90 with no register spills in either entry point.
#[test]
fn the_whole_row_variant_compiles_without_spills() {
    for head_dim in head_dims() {
        for (placement, threads) in [(Placement::Hbm, 32), (Placement::Host, 1024)] {
            let spec = whole_rows(PariskvRerankSpec {
                head_dim,
                threads,
                placement,
                ..rerank()
            });
            let entries = vec![spec.score_entry(), spec.select_entry()];
            assert_compiles(&spec, &entries);
            let source = render(&spec).unwrap();
            let used = codegen::resources::measure(
                &source,
                &format!("{}.cu", spec.kernel_name()),
                "sm_90",
                &[],
                &entries,
            )
            .unwrap();
            for (entry, r) in entries.iter().zip(&used) {
                assert!(!r.spills(), "{entry}: {r:?}");
            }
            // The rows are read as 16-byte vectors, past the caches from host memory.
            let ptx = codegen::nvrtc::compile(&source, "v16.cu", "sm_90", &[])
                .unwrap()
                .ptx;
            let load = match placement {
                Placement::Host => "ld.global.cs.v4.u32",
                Placement::Hbm => "ld.global.nc.v4.u32",
            };
            assert!(ptx.contains(load), "{}: no {load}", spec.kernel_name());
        }
    }
}

#[test]
fn a_head_dimension_off_the_subspaces_is_refused_with_the_reason() {
    for d in [60, 72, 100, 512] {
        let e = PariskvIndexSpec {
            head_dim: d,
            ..index()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("head_dim")
                && e.contains("multiple of 8")
                && e.contains("64, 80, 96, 128, 192 or 256"),
            "{e}"
        );
    }
}

/// The query kernel's blocks a head: 1 to one a subspace (`NS = D_pad / 8`); none, or more
/// than the subspaces, is refused naming the field and the range; the split's name says it.
#[test]
fn query_subspace_blocks_out_of_range_are_refused_with_the_range() {
    for (d, ns) in [(64, 8), (96, 16), (128, 16), (256, 32)] {
        for blocks in [1, 3, ns] {
            let q = PariskvQuerySpec {
                subspace_blocks: blocks,
                ..PariskvQuerySpec::new(d, 4)
            };
            q.validate().unwrap();
            assert_eq!(
                q.kernel_name().ends_with(&format!("_s{blocks}")),
                blocks > 1
            );
            assert_eq!(q.launch(2, 3).unwrap().grid, [3, 2, blocks]);
        }
        for blocks in [0, ns + 1] {
            let e = PariskvQuerySpec {
                subspace_blocks: blocks,
                ..PariskvQuerySpec::new(d, 4)
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("subspace_blocks") && e.contains(&format!("1..={ns}")),
                "{d} {blocks}: {e}"
            );
        }
    }
}

#[test]
fn every_spec_of_the_grid_renders_its_entries() {
    for (spec, entries) in grid() {
        spec.validate().unwrap();
        let source = spec.render().unwrap();
        assert_eq!(spec.entry_points(), entries);
        for entry in &entries {
            assert!(source.contains(&format!("{entry}(")), "{entry}");
        }
    }
    // The family check's rendering test, on one spec of each.
    assert_renders(&index(), &[index().kernel_name()]);
    assert_renders(&query(), &[query().kernel_name()]);
    assert_renders(&vote(), &[vote().kernel_name()]);
    assert_renders(&topc(), &[topc().count_entry(), topc().write_entry()]);
    assert_renders(
        &rerank(),
        &[rerank().score_entry(), rerank().select_entry()],
    );
}

/// §12: a head dimension that is not a power of two is zero-padded for the transform; the
/// kernels of a power of two render no padding at all.
#[test]
fn a_head_dimension_off_a_power_of_two_is_padded_for_the_transform() {
    for (d, padded) in [(80, 128), (96, 128), (192, 256)] {
        assert_eq!(padded_dim(d), padded);
        let index = render(&PariskvIndexSpec {
            head_dim: d,
            ..index()
        })
        .unwrap();
        let query = render(&PariskvQuerySpec {
            head_dim: d,
            ..query()
        })
        .unwrap();
        for source in [&index, &query] {
            assert!(
                source.contains(&format!("constexpr int KEY_DIM = {d};")),
                "{d}"
            );
            assert!(
                source.contains(&format!("constexpr int D = {padded};")),
                "{d}"
            );
        }
        assert!(index.contains("keys + (size_t)t * KEY_DIM"), "{d}");
        assert!(query.contains("* KEY_DIM + tid]"), "{d}");
    }
    for source in [render(&index()).unwrap(), render(&query()).unwrap()] {
        assert!(!source.contains("KEY_DIM"));
    }
}

#[test]
fn the_placement_reaches_the_loads() {
    let hbm = render(&index()).unwrap();
    let host = render(&PariskvIndexSpec {
        placement: Placement::Host,
        ..index()
    })
    .unwrap();
    assert!(hbm.contains("__ldg(") && !hbm.contains("__ldcs("));
    assert!(host.contains("__ldcs("));
}

#[test]
fn launches_follow_the_abi() {
    let l = index().launch(2, 8, 1000).unwrap();
    assert_eq!(l.grid, [32, 8, 2]);
    assert_eq!(l.block, [256, 1, 1]);
    assert_eq!(query().launch(3, 8).unwrap().grid, [8, 3, 1]);
    assert_eq!(query().launch(3, 8).unwrap().block, [QUERY_THREADS, 1, 1]);
    // Votes: 1000 tokens have 964 retrievable ones, one block of 256 x 8.
    assert_eq!(vote().launch(1, 4, 1000).unwrap().grid, [1, 4, 1]);
    let (l, words) = topc().launch(2, 4, 1 << 20).unwrap();
    assert_eq!(u64::from(l.grid[0]), ((1u64 << 20) - 32).div_ceil(4096));
    assert_eq!(words, u64::from(l.grid[0]) * 8);
    assert_eq!(rerank().launch_select(2, 4).unwrap().grid, [4, 2, 1]);
    assert!(rerank().launch_score(0, 4, 10).is_err());
    assert_eq!(vote_bins(128), 97);
    // D = 80 and 96 pad to 128 (16 subspaces), 192 to 256 (32).
    assert_eq!(
        [vote_bins(80), vote_bins(96), vote_bins(192)],
        [97, 97, 193]
    );
    assert_eq!(
        candidate_capacity(1 << 20),
        ((1u64 << 20) - 36).div_ceil(10)
    );
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for (i, (spec, entries)) in grid().into_iter().enumerate() {
        // Thin the grid: every family and head dimension, not every thread count.
        if i % 3 != 0 && !matches!(spec, KernelSpec::PariskvQuery(_)) {
            continue;
        }
        match spec {
            KernelSpec::PariskvIndex(s) => assert_compiles(&s, &entries),
            KernelSpec::PariskvQuery(s) => assert_compiles(&s, &entries),
            KernelSpec::PariskvVote(s) => assert_compiles(&s, &entries),
            KernelSpec::PariskvTopc(s) => assert_compiles(&s, &entries),
            KernelSpec::PariskvRerank(s) => assert_compiles(&s, &entries),
            other => panic!("not a ParisKV spec: {}", other.kernel_name()),
        }
    }
}

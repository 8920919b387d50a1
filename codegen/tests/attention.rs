//! The attention family: names, validation, rendering.

mod family_checks;

use codegen::spec::attention::{AttentionRows, AttentionSpec};
use codegen::spec::{Family, KvRows};
use family_checks::{assert_compiles, assert_compiles_for, assert_renders, grid4};
use serde_json::json;

fn base() -> AttentionSpec {
    AttentionSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        rows_per_warp: 4,
        rows: AttentionRows::Fetched,
        kv_rows: KvRows::Separate,
        splits: 1,
        cluster_merge: false,
        prefetch_rows: false,
    }
}

fn grid() -> Vec<AttentionSpec> {
    grid4(
        &[64, 80, 96, 128, 192, 256],
        &[1, 2, 3, 4, 5, 6, 7, 8, 16],
        &[32, 256, 1024],
        &[1, 4, 8],
        |head_dim, group, threads, rows_per_warp| AttentionSpec {
            head_dim,
            group,
            threads,
            rows_per_warp,
            ..base()
        },
    )
}

/// The store-reading variants beside the fetched one: both layouts of the store's rows.
fn store_variants(spec: AttentionSpec) -> [AttentionSpec; 2] {
    KvRows::ALL.map(|kv_rows| AttentionSpec {
        rows: AttentionRows::Store,
        kv_rows,
        ..spec
    })
}

/// The family checks' base: the store-reading variant over two blocks a query head, so that
/// each of its fields, the row layout and the splits too (one split is not serialised), has
/// a valid alternative that changes the name.
fn store_base() -> AttentionSpec {
    AttentionSpec {
        rows: AttentionRows::Store,
        splits: 2,
        ..base()
    }
}

family_checks::family_tests! {
    base: store_base(),
    grid: grid(),
    alternatives: [
        ("head_dim", json!(256)),
        ("group", json!(7)),
        ("threads", json!(128)),
        ("rows_per_warp", json!(2)),
        ("rows", json!("fetched")),
        ("kv_rows", json!("adjacent")),
        ("splits", json!(4)),
    ],
    bad_fields: [
        ("head_dim", json!(512)),
        ("head_dim", json!(72)),
        ("group", json!(0)),
        ("group", json!(17)),
        ("threads", json!(16)),
        ("rows_per_warp", json!(0)),
        ("rows_per_warp", json!(9)),
        ("splits", json!(0)),
        ("splits", json!(17)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_attention_d128_g4_t256_r4");
    let [separate, adjacent] = store_variants(base());
    assert_eq!(
        separate.kernel_name(),
        "fathom_attention_d128_g4_t256_r4_store"
    );
    assert_eq!(
        adjacent.kernel_name(),
        "fathom_attention_d128_g4_t256_r4_store_kvadj"
    );
    let split = AttentionSpec {
        splits: 4,
        ..adjacent
    };
    assert_eq!(
        split.kernel_name(),
        "fathom_attention_d128_g4_t256_r4_s4_store_kvadj"
    );
}

#[test]
fn fetched_rows_take_no_store_layout() {
    let spec = AttentionSpec {
        kv_rows: KvRows::Adjacent,
        ..base()
    };
    let e = spec.validate().unwrap_err().to_string();
    assert!(e.contains("kv_rows") && e.contains("rows: store"), "{e}");
}

#[test]
fn the_store_variant_reads_rows_by_token_at_the_layout_s_stride() {
    let [separate, adjacent] = store_variants(base());
    let fetched = codegen::render::render(&base()).unwrap();
    let separate = codegen::render::render(&separate).unwrap();
    let adjacent = codegen::render::render(&adjacent).unwrap();
    assert!(fetched.contains("const int* __restrict__ sel_pos,") && !fetched.contains("k_rows"));
    assert!(separate.contains("const int* __restrict__ sel,") && !separate.contains("sel_pos"));
    assert!(separate.contains("keys + pos * D,") && !separate.contains("ROW_STRIDE"));
    assert!(adjacent.contains("constexpr int ROW_STRIDE = 2 * D;"));
    assert!(adjacent.contains("keys + pos * ROW_STRIDE,"));
}

#[test]
fn every_spec_of_the_grid_renders_within_static_shared_memory() {
    for spec in grid()
        .into_iter()
        .flat_map(|s| [s].into_iter().chain(store_variants(s)))
    {
        for spec in [spec, AttentionSpec { splits: 16, ..spec }] {
            assert_renders(&spec, &[spec.kernel_name()]);
            assert!(
                spec.static_shared_bytes() <= 48 * 1024,
                "{}",
                spec.kernel_name()
            );
        }
    }
}

#[test]
fn splits_blocks_per_query_head() {
    let launch = base().launch(4, 8).unwrap();
    assert_eq!(launch.grid, [4 * 8 * 4, 1, 1]);
    assert_eq!(launch.block, [256, 1, 1]);
    assert!(base().launch(0, 8).is_err());
    let split = AttentionSpec {
        splits: 5,
        ..base()
    };
    assert_eq!(split.launch(4, 8).unwrap().grid, [4 * 8 * 4, 5, 1]);
    assert_eq!(
        (base().partial_words(128), base().arrival_words(128)),
        (0, 0)
    );
    assert_eq!(
        (split.partial_words(128), split.arrival_words(128)),
        (128 * 5 * 130, 128)
    );
}

/// A split kernel takes its partials and arrival counters after `k`, reads only its share of
/// the rows and merges in split order; one split renders the one-block kernel, without them.
#[test]
fn a_split_kernel_takes_its_scratch_and_merges() {
    for spec in store_variants(base()).into_iter().chain([base()]) {
        let one = codegen::render::render(&spec).unwrap();
        let split = codegen::render::render(&AttentionSpec { splits: 3, ..spec }).unwrap();
        assert!(!one.contains("partials") && !one.contains("arrivals"));
        assert!(one.contains("constexpr int SPLITS = 1;"));
        assert!(split.contains(
            "int k,\n    float* __restrict__ partials,\n    unsigned int* __restrict__ arrivals)"
        ));
        assert!(split.contains("constexpr int SPLITS = 3;"));
        assert!(split.contains("atomicAdd(arrivals + head, 1u) == SPLITS - 1"));
    }
    let serialised = serde_json::to_value(base()).unwrap();
    assert!(
        serialised.get("splits").is_none(),
        "one split is not written"
    );
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    for head_dim in [64, 80, 96, 128, 192, 256] {
        for (group, threads, rows_per_warp) in [(7, 256, 4), (1, 32, 1), (16, 1024, 8)] {
            let spec = AttentionSpec {
                head_dim,
                group,
                threads,
                rows_per_warp,
                ..base()
            };
            assert_compiles(&spec, &[spec.kernel_name()]);
            for store in store_variants(spec) {
                assert_compiles(&store, &[store.kernel_name()]);
            }
            let split = AttentionSpec { splits: 16, ..spec };
            assert_compiles(&split, &[split.kernel_name()]);
            for splits in [2, 8] {
                for spec in [spec].into_iter().chain(store_variants(spec)) {
                    let merged = AttentionSpec {
                        splits,
                        cluster_merge: true,
                        ..spec
                    };
                    // Thread-block clusters are Hopper's.
                    assert_compiles_for(&merged, &[merged.kernel_name()], &["sm_90"]);
                }
            }
        }
    }
}

/// The splits merged in a thread-block cluster (opt-in): their own name, a grid of one block
/// a split along x in clusters of the splits, the partials in shared memory (within 48 KiB
/// at every shape of the grid), no global partial written or arrival counted; refused with
/// one split or more than the portable cluster size; not serialised when off.
#[test]
fn splits_merged_in_a_cluster() {
    let spec = AttentionSpec {
        splits: 4,
        cluster_merge: true,
        ..store_base()
    };
    spec.validate().unwrap();
    assert_eq!(
        spec.kernel_name(),
        "fathom_attention_d128_g4_t256_r4_s4_cm_store"
    );
    assert_eq!(spec.launch(4, 8).unwrap().grid, [4 * 8 * 4 * 4, 1, 1]);
    let source = codegen::render::render(&spec).unwrap();
    assert!(source.contains("__cluster_dims__(4, 1, 1) __launch_bounds__(THREADS)"));
    assert!(source.contains("cluster_load(mine + 2 + c, x)"));
    assert!(!source.contains("atomicAdd(arrivals") && !source.contains("__threadfence"));
    assert!(source.contains(
        "int k,\n    float* __restrict__ partials,\n    unsigned int* __restrict__ arrivals)"
    ));
    let plain = codegen::render::render(&AttentionSpec {
        cluster_merge: false,
        ..spec
    })
    .unwrap();
    assert!(
        !plain.contains("cluster"),
        "the default merge has nothing of the cluster"
    );
    for spec in grid()
        .into_iter()
        .flat_map(|s| [s].into_iter().chain(store_variants(s)))
    {
        let merged = AttentionSpec {
            splits: 8,
            cluster_merge: true,
            ..spec
        };
        merged.validate().unwrap();
        assert_renders(&merged, &[merged.kernel_name()]);
        assert!(
            merged.static_shared_bytes() <= 48 * 1024,
            "{}",
            merged.kernel_name()
        );
    }
    for splits in [1, 9, 16] {
        let bad = AttentionSpec {
            splits,
            cluster_merge: true,
            ..base()
        };
        assert_eq!(bad.validate().unwrap_err().field, "cluster_merge");
    }
    assert!(serde_json::to_value(spec).unwrap()["cluster_merge"] == true);
    let off = serde_json::to_value(store_base()).unwrap();
    assert!(off.get("cluster_merge").is_none());
    let back: AttentionSpec = serde_json::from_value(off).unwrap();
    assert!(!back.cluster_merge);
}

/// The rows prefetched into L2 (opt-in): their own name, the same arguments, a prefetch of
/// every 128-byte line of a K and a V row for the positions below the count, compiled without
/// warnings for every row source and an odd row size (D = 80: 160 bytes); nothing of it in
/// the default kernel, which renders as before; not serialised when off.
#[test]
fn rows_prefetched_into_l2() {
    let spec = AttentionSpec {
        splits: 8,
        prefetch_rows: true,
        ..store_base()
    };
    spec.validate().unwrap();
    assert_eq!(
        spec.kernel_name(),
        "fathom_attention_d128_g4_t256_r4_s8_store_pf"
    );
    let source = codegen::render::render(&spec).unwrap();
    assert!(source.contains("prefetch.global.L2 [%0];"));
    assert!(source.contains("prefetch_l2(keys + pos * D, 2 * D);"));
    let plain_spec = AttentionSpec {
        prefetch_rows: false,
        ..spec
    };
    let plain = codegen::render::render(&plain_spec).unwrap();
    assert!(!plain.contains("prefetch"));
    let signature = |s: &str| {
        let at = s.find("extern \"C\"").unwrap();
        s[at..at + s[at..].find('{').unwrap()].to_string()
    };
    assert_eq!(
        signature(&source).replace(&spec.kernel_name(), "K"),
        signature(&plain).replace(&plain_spec.kernel_name(), "K")
    );
    for spec in [
        base(),
        AttentionSpec {
            head_dim: 80,
            group: 5,
            ..base()
        },
    ] {
        for spec in [spec].into_iter().chain(store_variants(spec)) {
            for splits in [1, 8] {
                let prefetched = AttentionSpec {
                    splits,
                    prefetch_rows: true,
                    ..spec
                };
                assert_compiles(&prefetched, &[prefetched.kernel_name()]);
            }
        }
    }
    assert!(serde_json::to_value(spec).unwrap()["prefetch_rows"] == true);
    let off = serde_json::to_value(store_base()).unwrap();
    assert!(off.get("prefetch_rows").is_none());
    let back: AttentionSpec = serde_json::from_value(off).unwrap();
    assert!(!back.prefetch_rows);
}

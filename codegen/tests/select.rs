//! The select family: names, validation, rendering of every stage, launch plan and buffer sizes.

mod family_checks;

use codegen::spec::select::{SelectSpec, SelectStage, STATE_WORDS};
use codegen::spec::Family;
use family_checks::{assert_compiles, assert_renders, grid4};
use serde_json::json;

fn base() -> SelectSpec {
    SelectSpec {
        group: 4,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
    }
}

fn grid() -> Vec<SelectSpec> {
    grid4(
        &[1, 2, 3, 4, 5, 6, 7, 8],
        &[1, 128, 4096],
        &[32, 256, 1024],
        &[1, 16, 32],
        |group, k_max, threads, items_per_thread| SelectSpec {
            group,
            k_max,
            threads,
            items_per_thread,
        },
    )
}

family_checks::family_tests! {
    base: base(),
    grid: grid(),
    alternatives: [
        ("group", json!(7)),
        ("k_max", json!(4096)),
        ("threads", json!(512)),
        ("items_per_thread", json!(8)),
    ],
    bad_fields: [
        ("group", json!(0)),
        ("k_max", json!(0)),
        ("k_max", json!(4097)),
        ("threads", json!(1000)),
        ("items_per_thread", json!(0)),
        ("items_per_thread", json!(33)),
    ],
}

#[test]
fn the_name_spells_the_fields() {
    assert_eq!(base().kernel_name(), "fathom_select_g4_k512_t256_i16");
    assert_eq!(
        base().entry(SelectStage::Hist(2)),
        "fathom_select_g4_k512_t256_i16_hist"
    );
}

#[test]
fn every_spec_of_the_grid_renders_every_stage() {
    for spec in grid() {
        let entries: Vec<String> = SelectStage::ORDER.iter().map(|&s| spec.entry(s)).collect();
        assert_renders(&spec, &entries);
    }
}

#[test]
fn plan_at_a_million_tokens() {
    let spec = base();
    let (batch, kv_heads, n, k) = (4u64, 8u64, 1u64 << 20, 512u64);
    let plan = spec.plan(batch, kv_heads, n, k).unwrap();
    let heads = batch * kv_heads * 4;
    let chunks = n.div_ceil(256 * 16);
    assert_eq!(plan.chunks, chunks);
    // Many blocks per query head at 1M tokens.
    assert!(plan.chunks >= 128);
    let order: Vec<SelectStage> = plan.launches.iter().map(|(s, _)| *s).collect();
    assert_eq!(order, SelectStage::ORDER);
    for (stage, launch) in &plan.launches {
        let expected = match stage {
            SelectStage::Init | SelectStage::Pick(_) => [heads as u32, 1, 1],
            SelectStage::Union => [(batch * kv_heads) as u32, 1, 1],
            _ => [chunks as u32, heads as u32, 1],
        };
        assert_eq!(launch.grid, expected, "{stage:?}");
        assert_eq!(launch.block, [256, 1, 1]);
    }
    assert_eq!(plan.state_words, heads * STATE_WORDS);
    assert_eq!(plan.chunk_count_words, heads * chunks * 2);
    assert_eq!(plan.sel_words, heads * (k + 36));
    assert_eq!(plan.scratch_words, heads * (k + 37));
    assert_eq!(plan.uni_words, batch * kv_heads * (4 * k + 36));
}

#[test]
fn plan_refuses_sizes_it_cannot_serve() {
    let spec = base();
    assert_eq!(spec.plan(1, 8, 4096, 513).unwrap_err().field, "k");
    assert!(spec.plan(1, 8, 4096, 512).is_ok());
    assert!(spec.plan(1, 8, 0, 0).is_ok());
    assert!(spec.plan(0, 8, 4096, 16).is_err());
    assert!(spec.plan(10_000, 8, 4096, 16).is_err());
}

#[test]
fn a_sampled_grid_compiles_without_warnings() {
    let samples = [
        (7, 512, 256, 16),
        (1, 1, 32, 1),
        (8, 4096, 1024, 32),
        (4, 128, 512, 8),
    ];
    for (group, k_max, threads, items_per_thread) in samples {
        let spec = SelectSpec {
            group,
            k_max,
            threads,
            items_per_thread,
        };
        let entries: Vec<String> = SelectStage::ORDER.iter().map(|&s| spec.entry(s)).collect();
        assert_compiles(&spec, &entries);
    }
}

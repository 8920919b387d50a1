use super::*;
use crate::attention::default_scale;
use crate::metrics::fidelity;
use crate::select::{LOCAL, SINK};
use crate::store::{BlockSize, HeadId, StoreLayout};
use crate::synthetic::{generate_head, SyntheticSettings};

struct Fixture {
    store: HeadStore,
    keys: Vec<bf16>,
    values: Vec<bf16>,
    queries: Vec<Vec<f64>>,
}

fn fixture(n: usize, group: usize, seed: u64) -> Fixture {
    let settings = SyntheticSettings {
        seed,
        n,
        head_dim: 64,
        kv_heads: 1,
        group,
        ..SyntheticSettings::default()
    };
    let head = generate_head(&settings, 0).unwrap();
    let layout = StoreLayout::new(64, BlockSize::B64, 4).unwrap();
    let store = HeadStore::from_keys(layout, HeadId::default(), &head.keys).unwrap();
    Fixture {
        store,
        keys: head.keys,
        values: head.values,
        queries: head.queries,
    }
}

fn input(f: &Fixture) -> GroupInput<'_> {
    GroupInput {
        store: &f.store,
        keys: &f.keys,
        values: &f.values,
        queries: &f.queries,
        klt: None,
        sigma2: None,
        double_sparsity: None,
    }
}

fn config(method: &str, k: usize) -> StepConfig {
    StepConfig {
        method: method.parse().unwrap(),
        k,
        scale: default_scale(64),
    }
}

#[test]
fn oracle_selecting_everything_is_dense_attention() {
    let f = fixture(700, 3, 1);
    let oracle = step_group(&input(&f), &config("oracle", 700)).unwrap();
    let dense = step_group(&input(&f), &config("dense", 0)).unwrap();
    assert_eq!(oracle.selection.union.len(), f.store.total_tokens());
    for (o, d) in oracle.outputs.iter().zip(&dense.outputs) {
        assert!(fidelity(o, d) < 1e-12, "{}", fidelity(o, d));
    }
}

#[test]
fn every_plane_method_keeps_sink_and_local_and_reads_what_it_plans() {
    let f = fixture(1000, 4, 2);
    let n = f.store.total_tokens();
    for method in [
        "fathom(48)",
        "sparq(16)",
        "thumbnail",
        "uniform(3)",
        "landmark",
    ] {
        let step = step_group(&input(&f), &config(method, 64)).unwrap();
        for set in &step.selection.heads {
            assert_eq!(set.len(), SINK + LOCAL + 64, "{method}");
            assert!((0..SINK).all(|i| set.contains(&i)), "{method}");
            assert!((n - LOCAL..n).all(|i| set.contains(&i)), "{method}");
        }
        assert_eq!(step.scores.len(), 4);
        assert!(step.scores.iter().all(|s| s.len() == n));
        assert!(
            step.bytes.total() > step.bytes.rows,
            "{method} read no key bytes"
        );
    }
}

#[test]
fn more_bits_give_scores_closer_to_the_exact_ones() {
    let f = fixture(2048, 4, 3);
    let exact = step_group(&input(&f), &config("oracle", 64))
        .unwrap()
        .scores;
    let error = |method: &str| {
        let scores = step_group(&input(&f), &config(method, 64)).unwrap().scores;
        let mut e = 0.0;
        for (s, x) in scores.iter().zip(&exact) {
            e += s.iter().zip(x).map(|(a, b)| (a - b).powi(2)).sum::<f64>();
        }
        e
    };
    let (low, high) = (error("fathom(24)"), error("fathom(160)"));
    assert!(
        high < low,
        "fathom(160) error {high} not below fathom(24) {low}"
    );
    assert!(error("uniform(4)") < error("uniform(1)"));
}

#[test]
fn bad_queries_and_rows_are_typed_errors() {
    let f = fixture(300, 2, 4);
    let mut queries = f.queries.clone();
    queries[1][5] = f64::NAN;
    let bad = GroupInput {
        queries: &queries,
        ..input(&f)
    };
    assert!(matches!(
        step_group(&bad, &config("fathom(48)", 8)),
        Err(StepError::NonFiniteQuery {
            head: 1,
            channel: 5,
            ..
        })
    ));
    let short = vec![vec![0.5; 63]; 2];
    let bad = GroupInput {
        queries: &short,
        ..input(&f)
    };
    assert!(matches!(
        step_group(&bad, &config("fathom(48)", 8)),
        Err(StepError::QueryShape { got: 63, .. })
    ));
    let bad = GroupInput {
        keys: &f.keys[..64 * 10],
        ..input(&f)
    };
    assert!(matches!(
        step_group(&bad, &config("oracle", 8)),
        Err(StepError::Rows { rows: 10, .. })
    ));
    assert!(step_group(&input(&f), &config("loki(8)", 8)).is_err());
}

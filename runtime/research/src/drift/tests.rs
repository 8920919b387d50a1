use super::*;
use reference::synthetic::SyntheticSettings;

fn small(threads: usize) -> DriftConfig {
    DriftConfig {
        drift: DriftSettings {
            prefill: SyntheticSettings {
                seed: 3,
                n: 1024,
                head_dim: 64,
                kv_heads: 2,
                group: 2,
                ..SyntheticSettings::default()
            },
            steps: 300,
            rotation: 0.7,
        },
        every: 100,
        k: 32,
        arms: vec![
            DriftArm::Fathom {
                bits: 24.0,
                sigma2: Sigma2::Prefill,
            },
            DriftArm::Fathom {
                bits: 272.0,
                sigma2: Sigma2::Live,
            },
            DriftArm::Pariskv { k: 32 },
        ],
        block: BlockSize::B64,
        threads,
    }
}

#[test]
fn rows_at_every_evaluated_step_with_recall_in_range() {
    let config = small(2);
    assert_eq!(config.evaluated_steps(), vec![0, 100, 200, 299]);
    let report = run(&config).unwrap();
    assert_eq!(
        report.arms,
        ["fathom(24)", "fathom(272)/live-sigma2", "pariskv(32)"]
    );
    assert_eq!(report.arm_k, [32, 32, 32]);
    assert_eq!(report.rows.len(), 4);
    for row in &report.rows {
        assert_eq!(row.tokens, 1024 + row.step + 1);
        assert_eq!(row.recall.len(), 3);
        assert_eq!(row.recall_per_head.len(), 3);
        for (mean, heads) in row.recall.iter().zip(&row.recall_per_head) {
            assert_eq!(heads.len(), 2);
            assert!((mean - (heads[0] + heads[1]) / 2.0).abs() < 1e-12);
            assert!((0.0..=1.0).contains(mean));
        }
        // Every channel at depth 4 (272 bits at D = 64): 4-bit codes, the best a scan gets.
        assert!(row.recall[1] > 0.75, "{row:?}");
        assert!(row.recall[1] >= row.recall[0], "{row:?}");
        assert!(row.error[1] <= row.error[0] + 1e-9, "{row:?}");
        assert!(row.recall[2] > 0.0, "{row:?}");
        assert!(row.error.iter().all(|e| e.is_finite() && *e >= 0.0));
        assert_eq!(row.mean_query_recall[..2], [None, None]);
        // ParisKV aims at the group mean's top-k: it finds more of that than of each head's.
        let own = row.mean_query_recall[2].unwrap();
        assert!(own >= row.recall[2] && own <= 1.0, "{row:?}");
        assert!((0.0..=1.0).contains(&row.oracle_decode_share));
    }
    assert_eq!(report.rows[0].progress, 0.0);
    assert_eq!(report.rows[3].progress, 1.0);
    // At step 0 one decode token exists; later, the decode tokens matter.
    assert!(report.rows[0].oracle_decode_share <= 1.0 / 32.0);
    assert!(
        report.rows[3].oracle_decode_share > 0.1,
        "{:?}",
        report.rows[3]
    );
    // The recent keys drift away from the prefill's profile.
    assert!(report.rows[3].profile_distance > report.rows[0].profile_distance + 0.1);
    // Threads change nothing.
    assert_eq!(run(&small(1)).unwrap(), report);
}

#[test]
fn group_recall_counts_the_chosen_among_the_top_k() {
    let truth = [0.1, 5.0, 4.0, 3.0, -1.0];
    // Tokens 10..15; the top-2 are 11 and 12.
    assert_eq!(group_recall(&[11, 14], &truth, 10, 2), 0.5);
    assert_eq!(group_recall(&[12, 11], &truth, 10, 2), 1.0);
    assert_eq!(group_recall(&[], &truth, 10, 2), 0.0);
    assert_eq!(group_recall(&[10, 11, 12, 13, 14], &truth, 10, 9), 1.0);
    assert_eq!(group_recall(&[], &[], 0, 3), 1.0);
}

#[test]
fn bad_configs_are_refused() {
    let err = |f: fn(&mut DriftConfig)| {
        let mut c = small(1);
        f(&mut c);
        run(&c).unwrap_err().to_string()
    };
    assert!(err(|c| c.every = 0).contains("every = 0"));
    assert!(err(|c| c.k = 0).contains("k = 0"));
    assert!(err(|c| c.arms.clear()).contains("no arms"));
    assert!(err(|c| c.arms[2] = DriftArm::Pariskv { k: 0 }).contains("pariskv(0)"));
    assert!(err(|c| c.arms[0] = DriftArm::Fathom {
        bits: f64::NAN,
        sigma2: Sigma2::Prefill
    })
    .contains("finite"));
    assert!(err(|c| c.drift.steps = 0).contains("decode steps"));
    assert!(err(|c| c.drift.prefill.head_dim = 100).contains("100"));
}

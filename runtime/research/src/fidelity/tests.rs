use super::*;
use reference::activations::{data_dir, Activations, SMOLLM2_CODE_8K};

fn summary(error: f64, scan_bytes: f64) -> ArmSummary {
    ArmSummary {
        error,
        scan_bytes,
        row_bytes: 100.0,
        ..ArmSummary::default()
    }
}

#[test]
fn equal_error_interpolates_and_bounds() {
    let (a, b, c) = (
        summary(0.4, 1000.0),
        summary(0.2, 2000.0),
        summary(0.1, 4000.0),
    );
    let curve = [(24.0, &a), (48.0, &b), (92.0, &c)];
    let mid = equal_error(&curve, 0.3);
    assert_eq!(mid.reach, Reach::Interpolated);
    assert!((mid.budget.unwrap() - 36.0).abs() < 1e-12);
    assert!((mid.scan_bytes.unwrap() - 1500.0).abs() < 1e-9);
    assert!((mid.total_bytes.unwrap() - 1600.0).abs() < 1e-9);
    let exact = equal_error(&curve, 0.1);
    assert_eq!(exact.budget, Some(92.0));
    let easy = equal_error(&curve, 0.5);
    assert_eq!((easy.reach, easy.budget), (Reach::AtMost, Some(24.0)));
    let hard = equal_error(&curve, 0.05);
    assert_eq!((hard.reach, hard.budget), (Reach::NotReached, None));
}

#[test]
fn default_split_keeps_calibration_off_the_evaluated_positions() {
    let split = Split::halves(8192, 128, 4).unwrap();
    assert_eq!(split.calibration_keys, 4096);
    assert_eq!(split.calibration_queries, 0..64);
    assert_eq!(split.evaluated.len(), 16);
    assert_eq!(split.evaluated.last(), Some(&127));
    assert!(split.evaluated.iter().all(|&i| i >= 64));
    assert!(Split::halves(8192, 128, 0).is_err());
}

/// The core on a tiny slice of the real capture: one layer, one KV head, 4 positions.
#[test]
fn tiny_slice_of_real_activations() {
    let path = data_dir().join(SMOLLM2_CODE_8K);
    let acts = Activations::open(&path).unwrap_or_else(|e| panic!("{e}"));
    let layer = acts.layer(12).unwrap();
    let mut split = Split::halves(layer.tokens, layer.query_count(), 16).unwrap();
    assert_eq!(split.evaluated.len(), 4);
    let raw = |method| Arm {
        method,
        basis: Basis::Raw,
    };
    let mut arms: Vec<Arm> = [
        Method::Uniform { t: 1 },
        Method::Uniform { t: 4 },
        Method::Fathom { bits: 24.0 },
        Method::Fathom { bits: 92.0 },
        Method::DoubleSparsity { r: 32 },
        Method::Oracle,
        Method::Dense,
    ]
    .map(raw)
    .to_vec();
    arms.push(Arm {
        method: Method::Loki { r: 32 },
        basis: Basis::Klt,
    });
    let config = FidelityConfig {
        split: split.clone(),
        k: 128,
        double_sparsity_r: 32,
        arms,
        threads: 2,
    };
    let report = evaluate(std::slice::from_ref(&layer), Some(&[1]), &config).unwrap();
    assert_eq!(report.positions.len(), 4);
    assert!(report.positions.iter().all(|p| (8128..=8191).contains(p)));
    let get = |label: &str| report.arm(label).unwrap();
    assert_eq!(get("oracle").recall, Some(1.0));
    assert_eq!(get("dense").error, 0.0);
    assert_eq!(get("dense").recall, None);
    assert!(get("uniform(1)").error > get("uniform(4)").error);
    assert!(get("fathom(24)").error > get("fathom(92)").error);
    assert!(get("fathom(24)").recall < get("fathom(92)").recall);
    for arm in &report.arms {
        assert_eq!(arm.steps, 4);
        assert!(arm.error.is_finite() && arm.error >= 0.0, "{arm:?}");
        if let Some(r) = arm.recall {
            assert!((0.0..=1.0).contains(&r), "{arm:?}");
        }
    }
    // A plan never reads more than its budget, and the nominal fixed-depth costs hold.
    assert!(get("fathom(24)").bits_per_token.unwrap() <= 24.0);
    assert_eq!(get("uniform(4)").bits_per_token, Some(64.0 * 4.25));
    assert_eq!(get("loki(32)/klt").bits_per_token, Some(32.0 * 4.25));
    // Evaluating a calibration query is refused.
    split.evaluated[0] = 3;
    let leaky = FidelityConfig { split, ..config };
    assert!(matches!(
        evaluate(std::slice::from_ref(&layer), Some(&[1]), &leaky),
        Err(FidelityError::Split(_))
    ));
}

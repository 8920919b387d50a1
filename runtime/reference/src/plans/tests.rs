use super::*;
use crate::planner::plan_cost;
use proptest::prelude::*;

const B64: BlockSize = BlockSize::B64;

fn ctx<'a>(queries: &'a [Vec<f64>], sigma2: &'a [f64]) -> PlanContext<'a> {
    PlanContext {
        queries,
        sigma2,
        block: B64,
        basis: Basis::Klt,
        double_sparsity: None,
    }
}

fn depths(plan: DepthPlan) -> Plan {
    match plan {
        DepthPlan::Depths(plan) => plan,
        other => panic!("expected a plane plan, got {other:?}"),
    }
}

/// A query group of 4 heads over 128 channels with distinct channel magnitudes.
fn group() -> Vec<Vec<f64>> {
    (0..4)
        .map(|h| {
            (0..128)
                .map(|c| ((c * 37 + h * 11) % 128) as f64 - 60.0)
                .collect()
        })
        .collect()
}

#[test]
fn nominal_bits_at_d128_blk64() {
    let bits = |m: &str| m.parse::<Method>().unwrap().bits_per_token(128, B64);
    assert_eq!(bits("sparq(16)"), Some(68.0));
    assert_eq!(bits("sparq(32)"), Some(136.0));
    assert_eq!(bits("double_sparsity(32)"), Some(136.0));
    assert_eq!(bits("loki(32)"), Some(136.0));
    assert_eq!(bits("thumbnail"), Some(288.0));
    assert_eq!(bits("uniform(4)"), Some(4.25 * 128.0));
    assert_eq!(bits("landmark"), Some(256.0));
    assert_eq!(bits("oracle"), Some(2048.0));
    assert_eq!(bits("fathom(48)"), Some(48.0));
    assert_eq!(bits("dense"), None);
    // The scale share follows the block: at BLK = 32 a channel costs 4.5 bits.
    let sparq = Method::Sparq { r: 16 };
    assert_eq!(sparq.bits_per_token(128, BlockSize::B32), Some(72.0));
}

#[test]
fn plans_cost_what_their_method_says() {
    let q = group();
    let s = vec![1.0; 128];
    let cal_keys: Vec<Vec<f64>> = (0..16)
        .map(|i| (0..128).map(|c| ((i * 5 + c * 3) % 17) as f64).collect())
        .collect();
    let cal = DoubleSparsityCalibration::fit(&q, &cal_keys, 32).unwrap();
    let context = PlanContext {
        double_sparsity: Some(&cal),
        ..ctx(&q, &s)
    };
    for (name, bits) in [
        ("sparq(16)", 68.0),
        ("sparq(32)", 136.0),
        ("double_sparsity(32)", 136.0),
        ("loki(32)", 136.0),
        ("thumbnail", 288.0),
        ("uniform(3)", 3.25 * 128.0),
    ] {
        let method: Method = name.parse().unwrap();
        let plan = depths(depth_plan(method, &context).unwrap());
        assert_eq!(plan.bits_per_token, bits, "{name}");
        assert_eq!(plan_cost(&plan.depths, B64), bits, "{name}");
        assert_eq!(plan.water_line, None);
        assert_eq!(method.bits_per_token(128, B64), Some(bits));
    }
    let fathom = depths(depth_plan(Method::Fathom { bits: 48.0 }, &context).unwrap());
    assert!(fathom.bits_per_token <= 48.0 && fathom.water_line.is_some());
    for (method, bits) in [
        (Method::Landmark, Some(256.0)),
        (Method::Oracle, Some(2048.0)),
        (Method::Dense, None),
    ] {
        let plan = depth_plan(method, &context).unwrap();
        assert_eq!(plan.bits_per_token(128), bits);
    }
}

#[test]
fn sparq_reads_the_largest_channels_ties_to_the_lower_index() {
    // Σ_h |q_h[c]|: c0 3, c1 5, c2 5, c3 1, c4 5, c5 0.
    let q = vec![
        vec![1.0, -2.0, 5.0, 0.5, 0.0, 0.0],
        vec![-2.0, 3.0, 0.0, -0.5, -5.0, 0.0],
    ];
    let s = vec![1.0; 6];
    let plan = |r| depths(depth_plan(Method::Sparq { r }, &ctx(&q, &s)).unwrap()).depths;
    assert_eq!(plan(1), vec![0, 4, 0, 0, 0, 0]);
    assert_eq!(plan(2), vec![0, 4, 4, 0, 0, 0]);
    assert_eq!(plan(3), vec![0, 4, 4, 0, 4, 0]);
    assert_eq!(plan(4), vec![4, 4, 4, 0, 4, 0]);
    // r channels are read even where Σ|q| is 0.
    assert_eq!(plan(6), vec![4; 6]);
}

#[test]
fn double_sparsity_ranks_by_query_times_key_magnitude() {
    // mean|q|: c0 1, c1 2, c2 0.5, c3 4; mean|k|: c0 4, c1 1, c2 8, c3 0.25.
    // Products: 4, 2, 4, 1 -> top-2 is c0 and c2 (a tie, both in), top-1 is c0 (lower index).
    let q = vec![vec![1.0, -2.0, 0.5, 4.0], vec![-1.0, 2.0, -0.5, -4.0]];
    let k = vec![vec![4.0, 1.0, -8.0, 0.25], vec![-4.0, -1.0, 8.0, 0.25]];
    let cal = DoubleSparsityCalibration::fit(&q, &k, 2).unwrap();
    assert_eq!(cal.channels(), &[0, 2]);
    assert_eq!(cal.mask(), vec![1, 0, 1, 0]);
    assert_eq!(
        DoubleSparsityCalibration::fit(&q, &k, 1)
            .unwrap()
            .channels(),
        &[0]
    );
    // The set is fixed: the group's own queries do not move it.
    let group = vec![vec![0.0, 0.0, 0.0, 9.0]];
    let s = [1.0; 4];
    let context = PlanContext {
        double_sparsity: Some(&cal),
        ..ctx(&group, &s)
    };
    let plan = depths(depth_plan(Method::DoubleSparsity { r: 2 }, &context).unwrap());
    assert_eq!(plan.depths, vec![4, 0, 4, 0]);
}

#[test]
fn loki_reads_the_leading_rotated_coordinates() {
    let q = vec![vec![1.0; 8]];
    let s = [1.0; 8];
    let plan = depths(depth_plan(Method::Loki { r: 3 }, &ctx(&q, &s)).unwrap());
    assert_eq!(plan.depths, vec![4, 4, 4, 0, 0, 0, 0, 0]);
    let raw = PlanContext {
        basis: Basis::Raw,
        ..ctx(&q, &s)
    };
    assert_eq!(
        depth_plan(Method::Loki { r: 3 }, &raw),
        Err(PlanError::NeedsRotatedStore)
    );
}

#[test]
fn bad_plans_are_refused() {
    let q = vec![vec![1.0; 8]];
    let s = [1.0; 8];
    for method in [
        Method::Sparq { r: 9 },
        Method::Loki { r: 0 },
        Method::DoubleSparsity { r: 9 },
    ] {
        assert_eq!(
            depth_plan(method, &ctx(&q, &s)),
            Err(PlanError::ChannelCount {
                method: method.to_string(),
                r: match method {
                    Method::Sparq { r } | Method::Loki { r } | Method::DoubleSparsity { r } => r,
                    _ => unreachable!(),
                },
                head_dim: 8
            })
        );
    }
    assert_eq!(
        depth_plan(Method::DoubleSparsity { r: 2 }, &ctx(&q, &s)),
        Err(PlanError::MissingCalibration)
    );
    let cal = DoubleSparsityCalibration::fit(&q, &q, 3).unwrap();
    let context = PlanContext {
        double_sparsity: Some(&cal),
        ..ctx(&q, &s)
    };
    assert!(matches!(
        depth_plan(Method::DoubleSparsity { r: 2 }, &context),
        Err(PlanError::CalibrationMismatch { fitted_r: 3, .. })
    ));
    assert_eq!(
        depth_plan(Method::Uniform { t: 5 }, &ctx(&q, &s)),
        Err(PlanError::Depth { got: 5 })
    );
    assert!(matches!(
        depth_plan(Method::Fathom { bits: 1.0 }, &ctx(&q, &s)),
        Err(PlanError::Budget { .. })
    ));
    // The group is checked for every method.
    assert!(matches!(
        depth_plan(Method::Thumbnail, &ctx(&[vec![1.0; 7]], &s)),
        Err(PlanError::QueryShape { .. })
    ));
}

#[test]
fn calibration_is_checked() {
    assert_eq!(
        channel_variance(&[]),
        Err(CalibrationError::Empty { what: "keys" })
    );
    assert_eq!(
        channel_variance(&[vec![]]),
        Err(CalibrationError::ZeroWidth { what: "keys" })
    );
    assert_eq!(
        channel_variance(&[vec![1.0, 2.0], vec![1.0]]),
        Err(CalibrationError::Shape {
            what: "keys",
            row: 1,
            got: 1,
            expected: 2
        })
    );
    assert!(matches!(
        channel_variance(&[vec![1.0, f64::NEG_INFINITY]]),
        Err(CalibrationError::NonFinite {
            row: 0,
            channel: 1,
            ..
        })
    ));
    let k = vec![vec![1.0, 2.0]];
    assert!(matches!(
        DoubleSparsityCalibration::fit(&[vec![1.0; 3]], &k, 1),
        Err(CalibrationError::Shape {
            what: "queries",
            ..
        })
    ));
    assert_eq!(
        DoubleSparsityCalibration::fit(&k, &k, 3),
        Err(CalibrationError::ChannelCount { r: 3, head_dim: 2 })
    );
}

#[test]
fn channel_variance_is_the_population_variance() {
    // c0: 1, 3 -> mean 2, variance 1; c1 constant -> 0; c2: -2, 2 -> 4.
    let k = vec![vec![1.0, 5.0, -2.0], vec![3.0, 5.0, 2.0]];
    assert_eq!(channel_variance(&k).unwrap(), vec![1.0, 0.0, 4.0]);
}

#[test]
fn parse_errors_say_what_is_valid() {
    for bad in [
        "sparq",
        "sparq(0)",
        "sparq(x)",
        "sparq(4",
        "fathom(-1)",
        "fathom(nan)",
        "fathom(inf)",
        "uniform(0)",
        "uniform(5)",
        "dense(2)",
        "quest(8)",
        "",
    ] {
        let err = bad.parse::<Method>().unwrap_err();
        assert_eq!(err.input, bad);
        assert!(err.to_string().contains("valid forms: fathom(B)"), "{err}");
    }
    assert_eq!(
        " fathom(92) ".parse::<Method>(),
        Ok(Method::Fathom { bits: 92.0 })
    );
}

fn methods() -> impl Strategy<Value = Method> {
    prop_oneof![
        (0.01f64..1e6).prop_map(|bits| Method::Fathom { bits }),
        (1usize..300).prop_map(|r| Method::Sparq { r }),
        (1usize..300).prop_map(|r| Method::DoubleSparsity { r }),
        (1usize..300).prop_map(|r| Method::Loki { r }),
        Just(Method::Thumbnail),
        (1u8..=4).prop_map(|t| Method::Uniform { t }),
        Just(Method::Landmark),
        Just(Method::Oracle),
        Just(Method::Dense),
    ]
}

proptest! {
    #[test]
    fn display_and_parse_round_trip(method in methods()) {
        let name = method.to_string();
        prop_assert_eq!(name.parse::<Method>(), Ok(method));
    }

    /// SparQ's channels are exactly the r largest Σ|q|: every read channel scores at least
    /// every unread one, and an unread channel that ties a read one has the higher index.
    #[test]
    fn sparq_picks_a_top_set(
        q in prop::collection::vec(prop::collection::vec(-3i32..=3, 16), 1..=8),
        r in 1usize..=16,
    ) {
        let q: Vec<Vec<f64>> = q.iter().map(|h| h.iter().map(|&x| f64::from(x)).collect()).collect();
        let s = [1.0; 16];
        let plan = depths(depth_plan(Method::Sparq { r }, &ctx(&q, &s)).unwrap());
        let score = |c: usize| q.iter().map(|h| h[c].abs()).sum::<f64>();
        prop_assert_eq!(plan.active_channels(), r);
        for a in (0..16).filter(|&c| plan.depths[c] == 4) {
            for b in (0..16).filter(|&c| plan.depths[c] == 0) {
                prop_assert!(score(a) > score(b) || (score(a) == score(b) && a < b));
            }
        }
    }
}

//! Property fuzzing of the reference inputs that come from outside: the planner (§3, §4) under
//! zero, subnormal, huge and non-finite queries, variances and budgets; the key encoder (§2)
//! under extreme and non-finite keys; and the method parser (`fathom(48)`, ...).
//!
//! Every case asserts: no panic, every refusal is the typed error with a message, every
//! acceptance satisfies the invariants (a plan within budget with depths ≤ 4, a store unchanged
//! on error, a parsed method that prints back to itself).

use std::panic::{catch_unwind, AssertUnwindSafe};

use half::bf16;
use proptest::prelude::*;
use reference::model::Basis;
use reference::planner::{
    depth_at, min_budget, per_layer_budgets, plan_cost, water_fill, water_fill_importance,
    LayerBudgetSearch, PlanError,
};
use reference::plans::{depth_plan, DepthPlan, Method, PlanContext};
use reference::store::{
    encode_block, BlockSize, EncodeError, HeadId, HeadStore, StoreLayout, PLANES, WORD_TOKENS,
};

/// f64 values that break arithmetic: zeros, subnormals, the extremes, non-finite, plus ordinary.
fn special_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        3 => prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::from_bits(1)),
            Just(-f64::from_bits(1)),
            Just(f64::MIN_POSITIVE),
            Just(f64::MIN_POSITIVE / 3.0),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(1e154),
            Just(1e-154),
            Just(1e300),
            Just(f64::EPSILON),
        ],
        2 => -1e3..1e3f64,
        1 => any::<f64>(),
        1 => (-320i32..308).prop_map(|e| 10f64.powi(e)),
    ]
}

/// Mostly finite, non-negative values (so that plans are reached), with specials mixed in.
fn mostly_sane(len: usize) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(
        prop_oneof![6 => 0.0..10.0f64, 1 => special_f64()],
        len..=len,
    )
}

fn block() -> impl Strategy<Value = BlockSize> {
    prop::sample::select(BlockSize::ALL.to_vec())
}

fn budget() -> impl Strategy<Value = f64> {
    prop_oneof![3 => 0.0..600.0f64, 1 => special_f64()]
}

/// A plan's invariants: one depth per channel, each ≤ 4, the cost its depths' cost, within the
/// budget, and nothing read where the importance is zero.
fn check_plan(
    depths: &[u8],
    bits: f64,
    d: usize,
    budget: f64,
    block: BlockSize,
    w: Option<&[f64]>,
) {
    assert_eq!(depths.len(), d);
    assert!(
        depths.iter().all(|&t| usize::from(t) <= PLANES),
        "{depths:?}"
    );
    assert_eq!(bits, plan_cost(depths, block));
    assert!(bits <= budget, "plan costs {bits} > budget {budget}");
    if let Some(w) = w {
        for (c, (&t, &wc)) in depths.iter().zip(w).enumerate() {
            assert!(wc > 0.0 || t == 0, "channel {c} has w = {wc} but depth {t}");
        }
    }
}

/// The most important channel is read whenever the water line just below its depth-1 level
/// (by twice the bisection's resolution) fits the budget: a plan that reads nothing although it
/// could read the top channel is wrong, not a rounding of the bisection.
fn check_top_channel_read(w: &[f64], depths: &[u8], budget: f64, block: BlockSize) {
    let gains: Vec<Option<f64>> = w
        .iter()
        .map(|&w| (w > 0.0).then(|| w.log2() + 3f64.log2()))
        .collect();
    let known: Vec<f64> = gains.iter().flatten().copied().collect();
    let Some(top) = known.iter().copied().reduce(f64::max) else {
        return;
    };
    let bottom = known.iter().copied().fold(f64::INFINITY, f64::min);
    let resolution = (top - bottom + 9.0) / 2f64.powi(30);
    let x = top - 2.0 - 2.0 * resolution;
    let at_x: Vec<u8> = gains
        .iter()
        .map(|g| g.map_or(0, |g| depth_at(g, x)))
        .collect();
    if plan_cost(&at_x, block) <= budget {
        let c = gains.iter().position(|g| *g == Some(top)).unwrap();
        assert!(
            depths[c] > 0,
            "channel {c} (w = {}) is unread though x = {x} fits {budget}: {depths:?}",
            w[c]
        );
    }
}

fn message_of(e: &impl std::fmt::Display) -> String {
    let m = e.to_string();
    assert!(!m.trim().is_empty(), "an error with an empty message");
    m
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Water-filling queries and variances with special values: a typed refusal or a valid plan.
    #[test]
    fn water_fill_never_panics_and_keeps_the_budget(
        (g, d) in (0usize..10, 0usize..24),
        seed_q in prop::collection::vec(mostly_sane(24), 10),
        sigma2 in mostly_sane(24),
        negate in any::<bool>(),
        budget in budget(),
        block in block(),
    ) {
        let queries: Vec<Vec<f64>> = seed_q[..g]
            .iter()
            .map(|q| q[..d].iter().map(|x| if negate { -x } else { *x }).collect())
            .collect();
        let sigma2 = &sigma2[..d];
        let result = catch_unwind(AssertUnwindSafe(|| water_fill(&queries, sigma2, budget, block)))
            .unwrap_or_else(|_| panic!("water_fill panicked on q={queries:?} σ²={sigma2:?} B={budget}"));
        match result {
            Ok(plan) => {
                let w: Vec<f64> = (0..d)
                    .map(|c| sigma2[c] * queries.iter().map(|q| q[c] * q[c]).sum::<f64>())
                    .collect();
                check_plan(&plan.depths, plan.bits_per_token, d, budget, block, Some(&w));
                let theta = plan.water_line.expect("a water-filled plan has a water line");
                prop_assert!(theta >= 0.0, "water line {theta}");
                check_top_channel_read(&w, &plan.depths, budget, block);
            }
            Err(e) => {
                message_of(&e);
            }
        }
    }

    /// Importances straight in (what the step's σ²·Σq² gives): huge, subnormal and ties.
    #[test]
    fn water_fill_importance_handles_extreme_importances(
        w in prop::collection::vec(
            prop_oneof![2 => special_f64(), 1 => 0.0..1.0f64, 1 => Just(f64::MAX / 2.0)],
            0..40,
        ),
        budget in budget(),
        block in block(),
    ) {
        let result = catch_unwind(AssertUnwindSafe(|| water_fill_importance(&w, budget, block)))
            .unwrap_or_else(|_| panic!("water_fill_importance panicked on w={w:?} B={budget}"));
        match result {
            Ok(plan) => {
                check_plan(&plan.depths, plan.bits_per_token, w.len(), budget, block, Some(&w));
                check_top_channel_read(&w, &plan.depths, budget, block);
            }
            Err(e) => {
                message_of(&e);
                let bad_w = w.is_empty() || w.iter().any(|x| !x.is_finite() || *x < 0.0);
                let bad_b = !(budget.is_finite() && budget >= min_budget(block));
                prop_assert!(bad_w || bad_b, "refused valid input: {e}");
            }
        }
    }

    /// More budget never reads fewer bits (the bisection is on a fixed bracket).
    #[test]
    fn water_fill_is_monotone_in_the_budget(
        w in prop::collection::vec(prop_oneof![3 => 0.0..5.0f64, 1 => special_f64()], 1..32),
        (b1, b2) in (0.0..300.0f64, 0.0..300.0f64),
        block in block(),
    ) {
        let (lo, hi) = if b1 <= b2 { (b1, b2) } else { (b2, b1) };
        if let (Ok(a), Ok(b)) = (
            water_fill_importance(&w, lo, block),
            water_fill_importance(&w, hi, block),
        ) {
            prop_assert!(a.bits_per_token <= b.bits_per_token, "B={lo}: {a:?}, B={hi}: {b:?}");
        }
    }

    /// Every method of §4 on a fuzzed group: typed refusal or a plan within its own bits.
    #[test]
    fn depth_plan_never_panics(
        method in method(),
        (g, d) in (0usize..10, 0usize..20),
        q in prop::collection::vec(mostly_sane(20), 10),
        sigma2 in mostly_sane(20),
        block in block(),
        klt in any::<bool>(),
    ) {
        let queries: Vec<Vec<f64>> = q[..g].iter().map(|row| row[..d].to_vec()).collect();
        let ctx = PlanContext {
            queries: &queries,
            sigma2: &sigma2[..d],
            block,
            basis: if klt { Basis::Klt } else { Basis::Raw },
            double_sparsity: None,
        };
        let result = catch_unwind(AssertUnwindSafe(|| depth_plan(method, &ctx)))
            .unwrap_or_else(|_| panic!("depth_plan panicked on {method} q={queries:?}"));
        match result {
            Ok(DepthPlan::Depths(plan)) => {
                let nominal = method.bits_per_token(d, block).unwrap_or(f64::INFINITY);
                check_plan(&plan.depths, plan.bits_per_token, d, nominal, block, None);
            }
            Ok(_) => {}
            Err(e) => {
                message_of(&e);
            }
        }
    }

    /// Per-layer budgets with non-finite or wild calibration errors.
    #[test]
    fn per_layer_budgets_never_panics(
        layers in 0usize..6,
        target_mean in 0u32..40,
        step in 0u32..6,
        (min, max) in (0u32..40, 0u32..80),
        errors in prop::collection::vec(special_f64(), 6 * 81),
    ) {
        let search = LayerBudgetSearch { layers, target_mean, step, min, max };
        let result = catch_unwind(AssertUnwindSafe(|| {
            per_layer_budgets(&search, |l, b| errors[l * 81 + (b as usize).min(80)])
        }))
        .unwrap_or_else(|_| panic!("per_layer_budgets panicked on {search:?}"));
        match result {
            Ok(budgets) => {
                prop_assert_eq!(budgets.len(), layers);
                prop_assert_eq!(
                    budgets.iter().map(|&b| u64::from(b)).sum::<u64>(),
                    layers as u64 * u64::from(target_mean)
                );
                prop_assert!(budgets.iter().all(|b| (min..=max).contains(b)), "{budgets:?}");
            }
            Err(e) => {
                message_of(&e);
            }
        }
    }
}

/// A method, valid or not (`uniform(0)`, `sparq(0)`, non-finite budgets ...).
fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        special_f64().prop_map(|bits| Method::Fathom { bits }),
        (0.0..400.0f64).prop_map(|bits| Method::Fathom { bits }),
        (0usize..40).prop_map(|r| Method::Sparq { r }),
        any::<usize>().prop_map(|r| Method::Sparq { r }),
        (0usize..40).prop_map(|r| Method::DoubleSparsity { r }),
        (0usize..40).prop_map(|r| Method::Loki { r }),
        Just(Method::Thumbnail),
        any::<u8>().prop_map(|t| Method::Uniform { t }),
        Just(Method::Landmark),
        Just(Method::Oracle),
        Just(Method::Dense),
        (0usize..600).prop_map(|k| Method::Pariskv { k }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The key encoder.

/// bf16 keys with specials: zeros, subnormals, the largest finite, infinities and NaNs.
fn key() -> impl Strategy<Value = bf16> {
    prop_oneof![
        6 => (-4.0..4.0f32).prop_map(bf16::from_f32),
        1 => prop_oneof![
            Just(bf16::ZERO),
            Just(bf16::NEG_ZERO),
            Just(bf16::MIN_POSITIVE_SUBNORMAL),
            Just(bf16::MIN_POSITIVE),
            Just(bf16::MAX),
            Just(bf16::MIN),
            Just(bf16::INFINITY),
            Just(bf16::NEG_INFINITY),
            Just(bf16::NAN),
            Just(bf16::from_f32(524_000.0)),
            Just(bf16::from_f32(524_288.0)),
            Just(bf16::from_f32(1e-30)),
        ],
        1 => any::<u16>().prop_map(bf16::from_bits),
    ]
}

/// Everything observable about a head store, to tell whether a failed append changed it.
fn snapshot(store: &HeadStore) -> (Vec<reference::store::Segment>, usize, Vec<u16>) {
    (
        store.segments().to_vec(),
        store.stored_tokens(),
        store.tail().iter().map(|x| x.to_bits()).collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Appends of fuzzed keys in fuzzed chunk sizes: an error leaves the store as it was; an
    /// accepted key decodes at depth 4 to within half a step (plus the scale's fp16 rounding).
    #[test]
    fn encoder_is_atomic_and_exact(
        block in block(),
        words in prop_oneof![Just(1usize), Just(2), Just(4)],
        chunks in prop::collection::vec(
            (0usize..100, any::<bool>(), prop::collection::vec(key(), 0..=(100 * 64))),
            1..4,
        ),
    ) {
        let d = 64;
        let Ok(layout) = StoreLayout::new(d, block, words) else {
            // 1 word (64 tokens) cannot hold a 128-token block: the refusal is the case here.
            prop_assert!(block == BlockSize::B128 && words % 2 == 1);
            return Ok(());
        };
        let id = HeadId { layer: 3, kv_head: 1 };
        let mut store = HeadStore::new(layout, id);
        let mut accepted: Vec<bf16> = Vec::new();
        for (len, clean, keys) in &chunks {
            // Mostly whole keys; sometimes a ragged length to reach the shape check. A clean
            // chunk has its non-finite keys zeroed and the rest clamped below the fp16 scale
            // limit, so that appends also succeed.
            let take = (*len * d / 7).min(keys.len());
            let keys: Vec<bf16> = keys[..take]
                .iter()
                .map(|&x| match (*clean, x.is_finite()) {
                    (true, false) => bf16::ZERO,
                    (true, true) => bf16::from_f32(x.to_f32().clamp(-5e5, 5e5)),
                    (false, _) => x,
                })
                .collect();
            let keys = &keys[..];
            let before = snapshot(&store);
            let result = catch_unwind(AssertUnwindSafe(|| store.append(keys)))
                .unwrap_or_else(|_| panic!("append panicked on {} keys", keys.len()));
            match result {
                Ok(()) => accepted.extend_from_slice(keys),
                Err(e) => {
                    message_of(&e);
                    prop_assert_eq!(&snapshot(&store), &before, "a failed append changed the store");
                    let ragged = !keys.len().is_multiple_of(d);
                    let non_finite = keys.iter().any(|x| !x.is_finite());
                    match e {
                        EncodeError::Shape { .. } => prop_assert!(ragged),
                        EncodeError::NonFiniteKey { layer, kv_head, .. } => {
                            prop_assert!(non_finite);
                            prop_assert_eq!((layer, kv_head), (3, 1));
                        }
                        EncodeError::ScaleOverflow { max_abs, limit, .. } => {
                            prop_assert!(max_abs / 8.0 >= 65520.0 && limit > 0.0);
                        }
                    }
                }
            }
        }
        prop_assert_eq!(store.total_tokens() * d, accepted.len());
        for token in 0..store.stored_tokens() {
            for c in 0..d {
                let x = accepted[token * d + c].to_f64();
                let delta = store.scale(token, c).to_f64();
                let err = (store.decode(token, c, 4) - x).abs();
                // Half a step, plus the fp16 rounding of Δ seen from |x| <= 8Δ.
                let tol = 0.5 * delta + 8.0 * (delta / 2048.0 + 2f64.powi(-25)) + 1e-12;
                prop_assert!(err <= tol, "token {token} channel {c}: x={x} Δ={delta} err={err}");
            }
        }
    }

    /// One block straight through `encode_block`, any head dimension including 0.
    #[test]
    fn encode_block_never_panics(
        head_dim in prop_oneof![Just(0usize), 1usize..300],
        keys in prop::collection::vec(key(), 0..600),
    ) {
        let result = catch_unwind(AssertUnwindSafe(|| encode_block(&keys, head_dim, HeadId::default(), 0)))
            .unwrap_or_else(|_| panic!("encode_block panicked on {} keys of D={head_dim}", keys.len()));
        match result {
            Ok(block) => {
                prop_assert_eq!(block.codes.len(), keys.len());
                prop_assert_eq!(block.scales.len(), head_dim);
                prop_assert!(block.codes.iter().all(|&c| c < 16));
                prop_assert!(block.scales.iter().all(|s| s.is_finite()));
            }
            Err(e) => {
                message_of(&e);
            }
        }
    }

    /// Layouts from fuzzed numbers (a config's `segment_words`, `block`, `head_dim`).
    #[test]
    fn store_layout_never_panics(
        head_dim in prop_oneof![Just(0usize), Just(64), Just(128), Just(256), any::<usize>()],
        tokens in prop_oneof![Just(32usize), Just(64), Just(128), any::<usize>()],
        words in prop_oneof![Just(0usize), 1usize..4096, any::<usize>(), Just(usize::MAX), Just(usize::MAX / 64 + 1)],
    ) {
        let result = catch_unwind(|| {
            BlockSize::from_tokens(tokens).map(|b| StoreLayout::new(head_dim, b, words))
        })
        .unwrap_or_else(|_| panic!("layout panicked on D={head_dim} BLK={tokens} S={words}"));
        match result {
            Ok(Ok(layout)) => {
                prop_assert_eq!(layout.segment_tokens() % layout.block().tokens(), 0);
                prop_assert_eq!(layout.segment_tokens(), words * WORD_TOKENS);
            }
            Ok(Err(e)) => {
                message_of(&e);
            }
            Err(e) => {
                message_of(&e);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The method parser.

/// Text near the grammar: real names, arguments of every kind, and stray characters.
fn method_text() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "fathom",
        "sparq",
        "double_sparsity",
        "loki",
        "thumbnail",
        "uniform",
        "landmark",
        "oracle",
        "dense",
        "pariskv",
        "Fathom",
        "",
        "fathom ",
        "dénse",
    ]);
    let arg = prop_oneof![
        special_f64().prop_map(|x| x.to_string()),
        any::<i64>().prop_map(|x| x.to_string()),
        any::<u8>().prop_map(|x| x.to_string()),
        prop::sample::select(vec![
            "",
            " 4 ",
            "+3",
            "-0",
            "0x10",
            "1e400",
            "1e-400",
            "nan",
            "inf",
            "-inf",
            "4.0",
            "١",
            "((4))",
            "4)",
            "(",
            ")",
            "18446744073709551616",
            "٣",
        ])
        .prop_map(str::to_string),
        "\\PC{0,6}",
    ];
    let close = prop::sample::select(vec![")", "", "))", ") ", ")x", "\u{3000})"]);
    prop_oneof![
        (name.clone(), arg, close).prop_map(|(n, a, c)| format!("{n}({a}{c}")),
        name.prop_map(str::to_string),
        "\\PC{0,24}",
        any::<Vec<u8>>().prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Fuzzed text: a typed refusal naming the input, or a valid method that prints back to
    /// itself.
    #[test]
    fn method_parser_never_panics(text in method_text()) {
        let result = catch_unwind(|| text.parse::<Method>())
            .unwrap_or_else(|_| panic!("parsing {text:?} panicked"));
        match result {
            Ok(method) => {
                match method {
                    Method::Fathom { bits } => prop_assert!(bits.is_finite() && bits > 0.0),
                    Method::Sparq { r } | Method::DoubleSparsity { r } | Method::Loki { r } => {
                        prop_assert!(r >= 1)
                    }
                    Method::Uniform { t } => prop_assert!((1..=4).contains(&t)),
                    Method::Pariskv { k } => prop_assert!(k >= 1),
                    _ => {}
                }
                let again: Method = method.to_string().parse().expect("a method's own name parses");
                prop_assert_eq!(again, method);
            }
            Err(e) => {
                prop_assert_eq!(&e.input, &text);
                prop_assert!(!e.reason.is_empty());
                message_of(&e);
            }
        }
    }

    /// Every valid method prints to text that parses back to it.
    #[test]
    fn method_display_round_trips(method in method()) {
        let text = method.to_string();
        let parsed = text.parse::<Method>();
        let valid = match method {
            Method::Fathom { bits } => bits.is_finite() && bits > 0.0,
            Method::Sparq { r } | Method::DoubleSparsity { r } | Method::Loki { r } => r >= 1,
            Method::Uniform { t } => (1..=4).contains(&t),
            Method::Pariskv { k } => k >= 1,
            _ => true,
        };
        match parsed {
            Ok(m) => {
                prop_assert!(valid, "{text} was accepted");
                prop_assert_eq!(m, method);
            }
            Err(e) => {
                prop_assert!(!valid, "{text} was refused: {e}");
            }
        }
    }
}

/// The cases the fuzzing found, kept by name.
mod regressions {
    use super::*;

    /// `w = f64::MAX / 2` is finite, but `3 w` overflows: the plan must still read the channel.
    #[test]
    fn an_importance_near_f64_max_is_read() {
        for w in [f64::MAX, f64::MAX / 2.0, 1e308] {
            let plan = water_fill_importance(&[w, 1.0], 6.0, BlockSize::B64).unwrap();
            assert!(plan.depths[0] > 0, "w = {w}: {plan:?}");
            assert!(plan.bits_per_token <= 6.0);
            assert!(plan.water_line.unwrap() >= 0.0, "{plan:?}");
        }
    }

    #[test]
    fn a_zero_head_dim_block_is_refused() {
        assert!(matches!(
            encode_block(&[], 0, HeadId::default(), 0),
            Err(EncodeError::Shape { .. })
        ));
    }

    #[test]
    fn a_huge_segment_is_refused_not_overflowed() {
        for words in [usize::MAX, usize::MAX / 64 + 1] {
            assert!(StoreLayout::new(64, BlockSize::B64, words).is_err());
        }
    }

    #[test]
    fn a_subnormal_importance_is_planned() {
        let w = [f64::from_bits(1), 0.0, f64::MIN_POSITIVE];
        let plan = water_fill_importance(&w, 100.0, BlockSize::B32).unwrap();
        assert_eq!(plan.depths, vec![4, 0, 4]);
        let _ = PlanError::EmptyHead;
    }
}

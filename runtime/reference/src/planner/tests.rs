use super::*;
use proptest::prelude::*;

const B32: BlockSize = BlockSize::B32;
const B64: BlockSize = BlockSize::B64;

/// The gain `3 w 4^-t` of plane `t`, straight from §3 (not through logarithms).
fn plane_gain(w: f64, t: u8) -> f64 {
    3.0 * w * 4f64.powi(-i32::from(t))
}

/// Σ over read planes of their gains: how much a plan lowers the expected squared score error.
fn total_gain(w: &[f64], depths: &[u8]) -> f64 {
    w.iter()
        .zip(depths)
        .map(|(&w, &t)| (1..=t).map(|t| plane_gain(w, t)).sum::<f64>())
        .sum()
}

fn planes(depths: &[u8]) -> u32 {
    depths.iter().map(|&t| u32::from(t)).sum()
}

/// One query row whose squares are `w` and unit variances: `importance` then gives `w` back
/// (up to the rounding of `sqrt` and squaring).
fn group_for(w: &[f64]) -> (Vec<Vec<f64>>, Vec<f64>) {
    (
        vec![w.iter().map(|w| w.sqrt()).collect()],
        vec![1.0; w.len()],
    )
}

#[test]
fn importance_is_variance_times_sum_of_squares() {
    let queries = vec![vec![1.0, -2.0, 0.0], vec![3.0, 0.5, 0.0]];
    let sigma2 = [2.0, 4.0, 7.0];
    // c0: 2 * (1 + 9) = 20; c1: 4 * (4 + 0.25) = 17; c2: 7 * 0 = 0.
    assert_eq!(
        importance(&queries, &sigma2).unwrap(),
        vec![20.0, 17.0, 0.0]
    );
}

/// Importances 1, 1/4, 1/16, 0 at BLK = 64 (scale 0.25 bit). Plane gains by level:
/// 3/4 (c0 plane 1); 3/16 (c0 plane 2, c1 plane 1); 3/64 (c0 p3, c1 p2, c2 p1); ...
/// Cumulative charged cost at each level: 1.25; +1 +1.25 = 3.5; +1 +1 +1.25 = 6.75.
#[test]
fn known_plans_of_a_small_head() {
    let w = [1.0, 0.25, 0.0625, 0.0];
    let cases: [(f64, [u8; 4]); 6] = [
        (1.25, [1, 0, 0, 0]),
        (3.49, [1, 0, 0, 0]),
        (3.5, [2, 1, 0, 0]),
        (6.74, [2, 1, 0, 0]),
        (6.75, [3, 2, 1, 0]),
        (12.75, [4, 4, 4, 0]),
    ];
    for (budget, expected) in cases {
        let plan = water_fill_importance(&w, budget, B64).unwrap();
        assert_eq!(plan.depths, expected, "budget {budget}");
        assert_eq!(plan.bits_per_token, plan_cost(&expected, B64));
    }
    // At 1.25 the water line sits just above the first gain left out, 3/16, and at most 3/4.
    let theta = water_fill_importance(&w, 1.25, B64)
        .unwrap()
        .water_line
        .unwrap();
    assert!(
        theta > 3.0 / 16.0 && theta < 3.0 / 16.0 * (1.0 + 1e-6),
        "{theta}"
    );
}

/// Pins the bracket and the bisection of the module docs, which the GPU copies: with
/// importances 1, 1/4, 1/16 and B = 1.25, `hi = log2 3`, `lo = log2(3/16) - 9 = log2 3 - 13`, and
/// the first plane left out has gain 3/16, i.e. `x0 = log2 3 - 4`, which is infeasible (ties are
/// read). After 30 halvings `hi` is the first point of the grid `lo + k · 13 / 2^30` above `x0`:
/// `k = ceil(9 · 2^30 / 13)`.
#[test]
fn the_water_line_is_the_bisection_of_the_documented_bracket() {
    let plan = water_fill_importance(&[1.0, 0.25, 0.0625], 1.25, B64).unwrap();
    let lo = 3f64.log2() - 13.0;
    let k = (9.0 * 2f64.powi(30) / 13.0).ceil();
    let expected = lo + k * 13.0 / 2f64.powi(30);
    let got = plan.water_line.unwrap().log2();
    assert!(
        (got - expected).abs() < 1e-12,
        "log2 θ* = {got}, expected {expected}"
    );
}

#[test]
fn depth_comparisons_match_the_floor_of_the_definition() {
    // Away from cell edges, t_c = clamp(floor(log4(3 w / θ)), 0, 4).
    for (w, theta) in [
        (1.0f64, 0.7f64),
        (1.0, 0.1),
        (5.0, 1e-3),
        (2.0, 10.0),
        (1e-9, 1e-12),
    ] {
        let expected = ((3.0 * w / theta).log(4.0).floor()).clamp(0.0, 4.0) as u8;
        assert_eq!(depth_at((3.0 * w).log2(), theta.log2()), expected);
    }
    // On an edge the plane is read: 3 w 4^-t = θ exactly.
    assert_eq!(depth_at(3f64.log2(), 3f64.log2() - 4.0), 2);
}

#[test]
fn all_zero_queries_read_nothing() {
    let queries = vec![vec![0.0; 64]; 4];
    let plan = water_fill(&queries, &[1.0; 64], 48.0, B64).unwrap();
    assert_eq!(plan.depths, vec![0; 64]);
    assert_eq!(plan.bits_per_token, 0.0);
    assert_eq!(plan.water_line, Some(0.0));
}

#[test]
fn a_budget_that_holds_everything_reads_every_channel_at_depth_4() {
    let queries = vec![vec![1.0, 2.0, 0.0, -3.0]];
    let plan = water_fill(&queries, &[1.0, 1.0, 1.0, 0.5], 17.0, B64).unwrap();
    assert_eq!(plan.depths, vec![4, 4, 0, 4]);
    assert_eq!(plan.bits_per_token, 12.75);
}

#[test]
fn groups_of_seven_heads_are_planned() {
    let queries: Vec<Vec<f64>> = (0..7)
        .map(|h| {
            (0..128)
                .map(|c| ((h * 31 + c * 7) % 13) as f64 - 6.0)
                .collect()
        })
        .collect();
    let plan = water_fill(&queries, &[1.0; 128], 48.0, B64).unwrap();
    assert!(plan.bits_per_token <= 48.0 && plan.bits_per_token > 0.0);
}

#[test]
fn bad_input_is_refused_with_what_was_wrong() {
    let q = vec![vec![1.0; 4]];
    let s = [1.0; 4];
    assert_eq!(
        water_fill(&q, &s, 1.24, B64),
        Err(PlanError::Budget {
            budget: 1.24,
            min: 1.25
        })
    );
    assert!(matches!(
        water_fill(&q, &s, 1.4, B32),
        Err(PlanError::Budget { min, .. }) if min == 1.5
    ));
    assert!(water_fill(&q, &s, 1.25, B64).is_ok());
    for budget in [f64::NAN, f64::INFINITY, -3.0] {
        assert!(matches!(
            water_fill(&q, &s, budget, B64),
            Err(PlanError::Budget { .. })
        ));
    }
    assert_eq!(
        water_fill(&[], &s, 8.0, B64),
        Err(PlanError::GroupSize { got: 0 })
    );
    assert_eq!(
        water_fill(&vec![vec![1.0; 4]; 17], &s, 8.0, B64),
        Err(PlanError::GroupSize { got: 17 })
    );
    assert!(water_fill(&vec![vec![1.0; 4]; 16], &s, 8.0, B64).is_ok());
    let message = water_fill(&vec![vec![1.0; 4]; 17], &s, 8.0, B64)
        .unwrap_err()
        .to_string();
    assert!(message.contains("1 to 16"), "{message}");
    assert_eq!(
        water_fill(&[vec![1.0; 4], vec![1.0; 3]], &s, 8.0, B64),
        Err(PlanError::QueryShape {
            head: 1,
            got: 3,
            expected: 4
        })
    );
    assert_eq!(water_fill(&q, &[], 8.0, B64), Err(PlanError::EmptyHead));
    assert!(matches!(
        water_fill(&[vec![1.0, 1.0, f64::NAN, 1.0]], &s, 8.0, B64),
        Err(PlanError::NonFiniteQuery {
            head: 0,
            channel: 2,
            ..
        })
    ));
    assert_eq!(
        water_fill(&q, &[1.0, -0.5, 1.0, 1.0], 8.0, B64),
        Err(PlanError::Sigma2 {
            channel: 1,
            value: -0.5
        })
    );
    assert!(matches!(
        water_fill(&q, &[1.0, 1.0, 1.0, f64::INFINITY], 8.0, B64),
        Err(PlanError::Sigma2 { channel: 3, .. })
    ));
    assert!(matches!(
        water_fill(&[vec![1e160; 4]], &s, 8.0, B64),
        Err(PlanError::Importance { channel: 0, .. })
    ));
}

/// §3 has no tie-breaking: equal importances share a depth, so a budget below a whole tie group
/// leaves the group out (documented in the module docs).
#[test]
fn ties_are_all_or_nothing() {
    let plan = water_fill_importance(&[2.0; 8], 9.99, B64).unwrap();
    assert_eq!(plan.depths, vec![0; 8]);
    let plan = water_fill_importance(&[2.0; 8], 10.0, B64).unwrap();
    assert_eq!(plan.depths, vec![1; 8]);
}

/// The true statement about charged cost is weaker than "optimal at its cost": at BLK = 32 (half
/// a bit of scale per channel) dropping two depth-1 channels frees three bits, which buy three
/// planes just below the water line. Water-filling's plan A loses to X of equal cost.
#[test]
fn water_filling_is_not_optimal_among_plans_of_equal_charged_cost() {
    let w = [1.0, 1.0, 3.96, 3.96, 3.96];
    let a = water_fill_importance(&w, 7.5, B32).unwrap();
    assert_eq!(a.depths, vec![1, 1, 1, 1, 1]);
    let x = [0, 0, 2, 2, 2];
    assert_eq!(plan_cost(&x, B32), a.bits_per_token);
    assert!(total_gain(&w, &x) > total_gain(&w, &a.depths));
}

#[test]
fn per_layer_greedy_makes_the_best_move_first() {
    // Errors of three layers at budgets 2..=6 (index b - 2), all exact binary fractions.
    let table = [
        [40.0, 20.0, 10.0, 8.0, 7.0],  // layer 0: steep
        [9.0, 8.5, 8.0, 7.5, 7.0],     // layer 1: flat, 0.5 per bit
        [12.0, 6.0, 4.0, 3.75, 3.625], // layer 2
    ];
    // From [4, 4, 4]: receivers' drops: l0 2, l1 0.5, l2 0.25; donors' rises: l0 10, l1 0.5,
    // l2 2. Best net: receiver 0, donor 1: 2 - 0.5 = 1.5 -> [5, 3, 4].
    // Next: drops l0 1, l1 0.5 (3->4), l2 0.25; rises l0 2, l1 0.5 (3->2), l2 2.
    // Best: receiver 0, donor 1: 1 - 0.5 = 0.5 -> [6, 2, 4]. Then l0 is at max, l1 at min:
    // receiver 1 (drop 0.5) from l0 (rise 1) or l2 (rise 2), receiver 2 (0.25) from l0 (1):
    // nothing positive. Result [6, 2, 4], mean 4.
    let search = LayerBudgetSearch {
        layers: 3,
        target_mean: 4,
        step: 1,
        min: 2,
        max: 6,
    };
    let mut calls = HashMap::new();
    let budgets = per_layer_budgets(&search, |l, b| {
        *calls.entry((l, b)).or_insert(0) += 1;
        table[l][b as usize - 2]
    })
    .unwrap();
    assert_eq!(budgets, vec![6, 2, 4]);
    assert!(calls.values().all(|&n| n == 1), "each (layer, budget) once");
    // With a 2-bit step the first move is the same, then the search is at the range ends.
    let two = per_layer_budgets(&LayerBudgetSearch { step: 2, ..search }, |l, b| {
        table[l][b as usize - 2]
    });
    // Step 2 from [4,4,4]: l0 drop 20-... e(0,4)-e(0,6) = 3, l1 rise e(1,2)-e(1,4) = 1: net 2.
    assert_eq!(two.unwrap(), vec![6, 2, 4]);
}

#[test]
fn per_layer_search_errors() {
    let ok = LayerBudgetSearch {
        layers: 2,
        target_mean: 48,
        step: 4,
        min: 8,
        max: 96,
    };
    let flat = |_: usize, b: u32| 1.0 / f64::from(b);
    assert_eq!(per_layer_budgets(&ok, flat).unwrap(), vec![48, 48]);
    assert_eq!(
        per_layer_budgets(&LayerBudgetSearch { layers: 0, ..ok }, flat),
        Err(LayerBudgetError::NoLayers)
    );
    assert_eq!(
        per_layer_budgets(&LayerBudgetSearch { step: 0, ..ok }, flat),
        Err(LayerBudgetError::ZeroStep)
    );
    for (min, max) in [(1, 96), (50, 96), (8, 40)] {
        assert!(matches!(
            per_layer_budgets(&LayerBudgetSearch { min, max, ..ok }, flat),
            Err(LayerBudgetError::Range { .. })
        ));
    }
    assert!(matches!(
        per_layer_budgets(&ok, |l, b| if l == 1 && b == 52 { f64::NAN } else { 1.0 }),
        Err(LayerBudgetError::NonFiniteError {
            layer: 1,
            budget: 52,
            ..
        })
    ));
}

/// Importances with exact ties (equal values, and values a power of 4 apart, whose planes tie
/// across depths), zeros, and continuous values.
fn importances(max_len: usize) -> impl Strategy<Value = Vec<f64>> {
    let one = prop_oneof![
        1 => Just(0.0),
        3 => (-20i32..20, 0usize..3).prop_map(|(k, b)| [1.0, 1.7, 2.9][b] * 2f64.powi(k)),
        3 => 1e-6f64..1e6,
    ];
    prop::collection::vec(one, 1..=max_len)
}

fn block_sizes() -> impl Strategy<Value = BlockSize> {
    prop::sample::select(BlockSize::ALL.to_vec())
}

/// The brute-force greedy of §3: planes sorted by gain `3 w 4^-t`, added one tie group at a time
/// (the scale charged when a channel's first plane comes in); the state after the last group
/// whose cumulative cost fits.
fn greedy(w: &[f64], budget: f64, block: BlockSize) -> Vec<u8> {
    let mut planes: Vec<(f64, usize)> = w
        .iter()
        .enumerate()
        .filter(|(_, &w)| w > 0.0)
        .flat_map(|(c, &w)| (1..=4).map(move |t| (plane_gain(w, t), c)))
        .collect();
    planes.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut depths = vec![0u8; w.len()];
    let mut best = depths.clone();
    let mut i = 0;
    while i < planes.len() {
        let gain = planes[i].0;
        while i < planes.len() && planes[i].0 == gain {
            depths[planes[i].1] += 1;
            i += 1;
        }
        if plan_cost(&depths, block) > budget {
            break;
        }
        best = depths.clone();
    }
    best
}

/// Whether every two distinct plane gains differ by a factor above `1 + 1e-6`: then the
/// bisection's resolution (about 1e-7 in log2 θ here) cannot fall between them.
fn gains_separated(w: &[f64]) -> bool {
    let mut gains: Vec<f64> = w
        .iter()
        .filter(|&&w| w > 0.0)
        .flat_map(|&w| (1..=4).map(move |t| plane_gain(w, t)))
        .collect();
    gains.sort_by(f64::total_cmp);
    gains.dedup();
    gains.windows(2).all(|p| p[1] > p[0] * (1.0 + 1e-6))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The plan's cost never exceeds the budget, and its reported cost is its depths' cost.
    #[test]
    fn never_exceeds_the_budget(
        queries in prop::collection::vec(prop::collection::vec(-100.0f64..100.0, 16), 1..=8),
        sigma2 in prop::collection::vec(prop_oneof![Just(0.0), 0.0f64..10.0], 16),
        budget in 1.5f64..80.0,
        block in block_sizes(),
    ) {
        let plan = water_fill(&queries, &sigma2, budget, block).unwrap();
        prop_assert!(plan.bits_per_token <= budget);
        prop_assert_eq!(plan.bits_per_token, plan_cost(&plan.depths, block));
        prop_assert!(plan.depths.iter().all(|&t| t <= 4));
        let w = importance(&queries, &sigma2).unwrap();
        for (c, &t) in plan.depths.iter().enumerate() {
            prop_assert!(w[c] > 0.0 || t == 0, "channel {} with w = 0 is read", c);
        }
    }

    /// A larger budget never reads a channel shallower: the bisection makes the same
    /// feasibility tests on the same bracket, and a test passed at B passes at B' > B.
    #[test]
    fn depths_are_monotone_in_the_budget(
        w in importances(24),
        b1 in 1.5f64..110.0,
        extra in 0.0f64..40.0,
        block in block_sizes(),
    ) {
        let small = water_fill_importance(&w, b1, block).unwrap();
        let large = water_fill_importance(&w, b1 + extra, block).unwrap();
        prop_assert!(large.bits_per_token >= small.bits_per_token);
        for (a, b) in small.depths.iter().zip(&large.depths) {
            prop_assert!(a <= b, "{:?} vs {:?}", small.depths, large.depths);
        }
    }

    /// Water-filling equals the brute-force greedy stopped at its last whole tie group that
    /// fits, whenever distinct plane gains are farther apart than the bisection's resolution.
    #[test]
    fn equals_the_greedy_allocation(
        w in importances(12),
        budget in 1.5f64..60.0,
        block in block_sizes(),
    ) {
        prop_assume!(gains_separated(&w));
        let plan = water_fill_importance(&w, budget, block).unwrap();
        prop_assert_eq!(plan.depths, greedy(&w, budget, block));
    }

    /// The same through `water_fill`, from queries and variances.
    #[test]
    fn equals_the_greedy_allocation_from_queries(
        w in importances(12),
        budget in 1.5f64..60.0,
    ) {
        let (queries, sigma2) = group_for(&w);
        let w = importance(&queries, &sigma2).unwrap();
        prop_assume!(gains_separated(&w));
        let plan = water_fill(&queries, &sigma2, budget, B64).unwrap();
        prop_assert_eq!(plan.depths, greedy(&w, budget, B64));
    }

    /// Exhaustive search on heads of up to 4 channels: no allocation that reads at most as many
    /// planes as the plan lowers the expected score error more. (With the scale bits counted,
    /// plans of equal cost can beat it: see `water_filling_is_not_optimal_...`.)
    #[test]
    fn no_allocation_with_as_few_planes_gains_more(
        w in importances(4),
        budget in 1.5f64..20.0,
        block in block_sizes(),
    ) {
        let plan = water_fill_importance(&w, budget, block).unwrap();
        let best = total_gain(&w, &plan.depths);
        let d = w.len();
        for code in 0..5usize.pow(d as u32) {
            let x: Vec<u8> = (0..d).map(|c| (code / 5usize.pow(c as u32) % 5) as u8).collect();
            if planes(&x) <= planes(&plan.depths) {
                prop_assert!(total_gain(&w, &x) <= best * (1.0 + 1e-12), "{:?} beats {:?}", x, plan.depths);
            }
        }
    }

    /// Every move keeps the sum, so the mean is the target; and on integer errors (no rounding)
    /// the result is a local optimum: no single move lowers the total error.
    #[test]
    fn per_layer_budgets_keep_the_mean_and_end_locally_optimal(
        layers in 1usize..6,
        table in prop::collection::vec(prop::collection::vec(0u32..1000, 17), 6),
        step in 1u32..4,
        min in 2u32..6,
        span in 0u32..6,
        above in 0u32..6,
    ) {
        let target = min + span;
        let max = (target + above).min(18);
        prop_assume!(target <= max);
        let search = LayerBudgetSearch { layers, target_mean: target, step, min, max };
        let e = |l: usize, b: u32| f64::from(table[l][b as usize - 2]);
        let budgets = per_layer_budgets(&search, e).unwrap();
        prop_assert_eq!(budgets.iter().sum::<u32>(), target * layers as u32);
        prop_assert!(budgets.iter().all(|&b| (min..=max).contains(&b)));
        for r in 0..layers {
            for d in (0..layers).filter(|&d| d != r) {
                if budgets[r] + step <= max && budgets[d] >= min + step {
                    let drop = e(r, budgets[r]) - e(r, budgets[r] + step);
                    let rise = e(d, budgets[d] - step) - e(d, budgets[d]);
                    prop_assert!(drop <= rise, "move {} -> {} still helps", d, r);
                }
            }
        }
    }

    /// With convex error curves and 1-bit steps, no move helping is the global optimum
    /// (separable convex allocation): the total error equals the best of every assignment.
    #[test]
    fn per_layer_budgets_are_optimal_on_convex_curves(
        drops in prop::collection::vec(prop::collection::vec(0u32..100, 8), 3),
        target in 3u32..8,
    ) {
        // Layer l's error at budget b (2..=10): 1000 minus the b-2 largest drops.
        let curves: Vec<Vec<f64>> = drops.iter().map(|d| {
            let mut d = d.clone();
            d.sort_by(|a, b| b.cmp(a));
            let mut e = vec![1000.0];
            for x in d { e.push(e.last().unwrap() - f64::from(x)); }
            e
        }).collect();
        let e = |l: usize, b: u32| curves[l][b as usize - 2];
        let search = LayerBudgetSearch { layers: 3, target_mean: target, step: 1, min: 2, max: 10 };
        let budgets = per_layer_budgets(&search, e).unwrap();
        let total = |b: &[u32]| b.iter().enumerate().map(|(l, &b)| e(l, b)).sum::<f64>();
        let mut best = f64::INFINITY;
        for b0 in 2..=10 {
            for b1 in 2..=10 {
                let b2 = 3 * target as i64 - b0 - b1;
                if (2..=10).contains(&b2) {
                    best = best.min(total(&[b0 as u32, b1 as u32, b2 as u32]));
                }
            }
        }
        prop_assert_eq!(total(&budgets), best);
    }
}

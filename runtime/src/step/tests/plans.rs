//! The launch plan as data: which stages each method and placement launches, and with what.

use super::*;

#[test]
fn plane_methods_launch_plan_scan_tail_select_fetch_attention() {
    let s = shape(4, 40_000, Placement::Hbm);
    let plan = plan_of(
        s,
        Method::Fathom { bits: 48.0 },
        Some(Transfer::Memcpy),
        256,
        None,
    )
    .unwrap();
    // In HBM the transfer is ignored: the scan reads the store in place.
    assert_eq!(plan.transfer, None);
    let mut want = vec![
        Role::Plan { staged: false },
        Role::Scan { staged: false },
        Role::Oracle { whole: false },
    ];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&plan), want);
    assert!(plan.capturable);
    let ops = &plan.operations;
    let plan_kernel = ops[0].kernel.as_ref().unwrap();
    assert_eq!(plan_kernel.launch.grid, [2, 3, 1]);
    assert!(plan_kernel
        .entry
        .starts_with("fathom_plan_d128_g4_b64_s64_fathom_raw"));
    let scan = ops[1].kernel.as_ref().unwrap();
    assert!(scan.entry.contains("_hbm_"), "{}", scan.entry);
    // One block per 16-word tile of each of the 3 segments of the 6 (sequence, head) pairs.
    assert_eq!(scan.launch.grid, [64 / 16, 3, 6]);
    let tail = ops[2].kernel.as_ref().unwrap();
    assert_eq!(&tail.launch.grid[1..], &[2, 3]);
    let capacity = token_capacity(40_000);
    assert_eq!(plan.token_capacity, capacity);
    let select = SelectSpec {
        group: 4,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
        algorithm: SelectAlgorithm::Radix,
        coarse_floor: false,
        owned_tiles: false,
    };
    let expected = select.plan(3, 2, capacity as u64, 256).unwrap();
    for ((stage, launch), op) in expected.launches.iter().zip(&ops[3..13]) {
        let kernel = op.kernel.as_ref().unwrap();
        assert_eq!(op.role, Role::Select(*stage));
        assert_eq!(kernel.launch, *launch);
        assert_eq!(kernel.entry, select.entry(*stage));
    }
    let attention = ops[14].kernel.as_ref().unwrap();
    assert_eq!(attention.launch.grid, [3 * 2 * 4, 1, 1]);

    // Every spec of the plan is valid and named for the shape.
    for op in ops {
        if let Some(k) = &op.kernel {
            k.spec.validate().unwrap();
            assert!(k.spec.entry_points().contains(&k.entry), "{}", k.entry);
        }
    }
}

#[test]
fn host_transfers_differ_only_in_how_planes_reach_the_scan() {
    let s = shape(7, 20_000, Placement::Host);
    let method = Method::Sparq { r: 16 };
    let fused = plan_of(s, method, Some(Transfer::Fused), 128, None).unwrap();
    let copy = plan_of(s, method, Some(Transfer::CopyKernel), 128, None).unwrap();
    let memcpy = plan_of(s, method, Some(Transfer::Memcpy), 128, None).unwrap();
    let head = |p: &crate::step::LaunchPlan, n| roles(p)[..n].to_vec();
    assert_eq!(
        head(&fused, 2),
        [Role::Plan { staged: false }, Role::Scan { staged: false }]
    );
    assert_eq!(
        head(&copy, 4),
        [
            Role::ClearStatus,
            Role::Plan { staged: true },
            Role::Gather,
            Role::Scan { staged: true }
        ]
    );
    assert_eq!(
        head(&memcpy, 4),
        [
            Role::ClearStatus,
            Role::Plan { staged: true },
            Role::RunCopies,
            Role::Scan { staged: true }
        ]
    );
    // The same tail, selection, fetch and attention after the scan.
    assert_eq!(roles(&fused)[2..], roles(&copy)[4..]);
    assert_eq!(roles(&fused)[2..], roles(&memcpy)[4..]);
    let scan_entry = |p: &crate::step::LaunchPlan| {
        p.operations
            .iter()
            .find(|op| matches!(op.role, Role::Scan { .. }))
            .and_then(|op| op.kernel.clone())
            .unwrap()
            .entry
    };
    assert!(scan_entry(&fused).contains("_host_"));
    assert!(scan_entry(&copy).contains("_hbm_"));
    assert!(fused.capturable && copy.capturable && !memcpy.capturable);
    // Row kernels read the host placement whatever the transfer.
    let fetch = fused
        .operations
        .iter()
        .find(|op| op.role == Role::Fetch)
        .unwrap();
    assert!(fetch.kernel.as_ref().unwrap().entry.ends_with("_host"));
    // Staging only for the copy transfers: 4r planes per (sequence, head, segment).
    assert_eq!((fused.stage_planes, copy.stage_planes), (0, 64));
    assert_eq!(fused.sizes.stage_words, 0);
    assert_eq!(copy.sizes.stage_words, 3 * 2 * 3 * 64 * 64);
    assert_eq!(copy.sizes.stage_scales, 3 * 2 * 3 * 128 * 64);
    assert_eq!(copy.sizes.staged_runs, copy.sizes.runs);
    // No transfer asked and no record: fused.
    assert_eq!(
        plan_of(s, method, None, 128, None).unwrap().transfer,
        Some(Transfer::Fused)
    );
}

#[test]
fn landmark_oracle_and_dense_skip_the_plane_stages() {
    let s = shape(4, 50_000, Placement::Host);
    let landmark = plan_of(s, Method::Landmark, Some(Transfer::CopyKernel), 64, None).unwrap();
    let mut want = vec![Role::LandmarkScan, Role::Oracle { whole: false }];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&landmark), want);
    assert_eq!(landmark.transfer, None);
    assert!(landmark.operations[0]
        .kernel
        .as_ref()
        .unwrap()
        .entry
        .ends_with("_host_scan"));

    let oracle = plan_of(s, Method::Oracle, None, 64, None).unwrap();
    let mut want = vec![Role::Oracle { whole: true }];
    want.extend(select_roles());
    want.extend([Role::Fetch, Role::Attention]);
    assert_eq!(roles(&oracle), want);
    assert_eq!(oracle.sizes.runs, 0);

    // Dense ignores k (even beyond k_max) and selects every token of the capacity.
    let dense = plan_of(s, Method::Dense, None, 100_000, None).unwrap();
    assert_eq!(
        roles(&dense),
        [Role::DenseCounts, Role::Fetch, Role::Attention]
    );
    let capacity = token_capacity(50_000);
    assert_eq!(dense.k, capacity - ALWAYS);
    assert_eq!(dense.sizes.scores, 0);
    assert_eq!(dense.sizes.dense_sel, 3 * 2 * 4 * capacity);
    assert_eq!(
        dense.sizes.dense_uni,
        3 * 2 * (4 * (capacity - ALWAYS) + ALWAYS)
    );
    assert_eq!(dense.sizes.rows, dense.sizes.dense_uni * 128);
    assert!(dense.capturable);
}

#[test]
fn workspace_sizes_follow_the_abi_layouts() {
    let (b, h, g, d, max_seg, k) = (3, 2, 7, 128, 3, 200);
    let s = shape(g, 30_000, Placement::Hbm);
    let plan = plan_of(s, Method::Thumbnail, None, k, None).unwrap();
    let z = plan.sizes;
    let cap = token_capacity(30_000);
    assert_eq!(z.q_store, b * h * g * d);
    assert_eq!(z.depths, b * h * d);
    assert_eq!(z.class_count, b * h * 4);
    assert_eq!(z.runs, b * h * max_seg * d * 4);
    assert_eq!(z.plan_status, 3);
    assert_eq!((z.staged_runs, z.stage_words, z.stage_scales), (0, 0, 0));
    assert_eq!(z.scores, b * h * g * cap);
    assert_eq!(plan.ld_scores, cap);
    assert_eq!(z.sel, b * h * g * (k + ALWAYS));
    assert_eq!(z.sel_count, b * h * g);
    assert_eq!(z.uni, b * h * (g * k + ALWAYS));
    assert_eq!(z.uni_count, b * h);
    assert_eq!(z.rows, b * h * (g * k + ALWAYS) * d);
    assert_eq!(z.out, b * h * g * d);
    let select = SelectSpec {
        group: g as u32,
        k_max: 512,
        threads: 256,
        items_per_thread: 16,
        algorithm: SelectAlgorithm::Radix,
        owned_tiles: false,
        coarse_floor: false,
    }
    .plan(b as u64, h as u64, cap as u64, k as u64)
    .unwrap();
    assert_eq!((z.select_candidates, z.select_candidate_runs), (0, 0));
    assert_eq!(z.select_state as u64, select.state_words);
    assert_eq!(z.chunk_counts as u64, select.chunk_count_words);
    assert_eq!(z.scratch as u64, select.scratch_words);
    let bytes = 4 * (z.q_store + z.class_count + z.plan_status + z.scores + z.out)
        + z.depths
        + 8 * z.runs
        + 2 * 2 * z.rows
        + 4 * (z.select_state + z.chunk_counts + z.scratch + 2 * z.sel)
        + 4 * (z.sel_count + z.uni + z.uni_count);
    assert_eq!(z.bytes(), bytes);
}

#[test]
fn k_beyond_k_max_and_bad_grids_are_refused() {
    let s = shape(4, 1000, Placement::Hbm);
    assert!(matches!(
        plan_of(s, Method::Oracle, None, 513, None),
        Err(StepError::K { k: 513, k_max: 512 })
    ));
    assert!(plan_of(s, Method::Oracle, None, 512, None).is_ok());
    // B*H*G query heads beyond a grid's y limit.
    let huge = StepShape { batch: 9000, ..s };
    assert!(matches!(
        plan_of(huge, Method::Oracle, None, 16, None),
        Err(StepError::Size(_))
    ));
}

#[test]
fn dense_tables_are_the_identity_per_row() {
    let (uni, sel) = dense_tables((2, 5, 3, 4));
    assert_eq!(uni, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
    assert_eq!(sel, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]);
}

#[test]
fn rotated_stores_plan_with_rotation_and_loki_reads_its_channels() {
    let s = StepShape {
        basis: Basis::Klt,
        ..shape(7, 5000, Placement::Hbm)
    };
    let plan = plan_of(s, Method::Loki { r: 32 }, None, 64, None).unwrap();
    let spec = plan.specs.plan.unwrap();
    assert!(spec.rotate);
    assert_eq!(spec.method, PlanMethod::Loki { r: 32 });
    assert!(spec.kernel_name().contains("_loki32_rot_"));
}

/// A view of K/V-adjacent rows specialises every kernel of the step that reads them (the
/// tail's and the oracle's scores, the fetch; the landmark scan shares its kernel's name),
/// in both placements and for every method; nothing else changes.
#[test]
fn adjacent_rows_specialise_the_row_readers_and_nothing_else() {
    for placement in [Placement::Hbm, Placement::Host] {
        for method in [
            Method::Fathom { bits: 48.0 },
            Method::Oracle,
            Method::Landmark,
            Method::Dense,
        ] {
            let s = shape(4, 40_000, placement);
            let adjacent = StepShape {
                kv_rows: KvRows::Adjacent,
                ..s
            };
            let k = if method == Method::Dense { 100_000 } else { 64 };
            let base = plan_of(s, method, None, k, None).unwrap();
            let plan = plan_of(adjacent, method, None, k, None).unwrap();
            assert_eq!(roles(&plan), roles(&base), "{method}");
            assert_eq!(plan.sizes, base.sizes, "{method}");
            let readers = [
                Role::Fetch,
                Role::Oracle { whole: false },
                Role::Oracle { whole: true },
            ];
            for (a, b) in base.operations.iter().zip(&plan.operations) {
                let (Some(ka), Some(kb)) = (&a.kernel, &b.kernel) else {
                    continue;
                };
                assert_eq!(ka.launch, kb.launch, "{method} {:?}", a.role);
                if readers.contains(&a.role) {
                    assert_eq!(kb.entry, format!("{}_kvadj", ka.entry), "{method}");
                } else if a.role == Role::LandmarkScan {
                    // The scan entry of the landmark kernel built over adjacent rows.
                    assert!(kb.entry.contains("_kvadj_"), "{}", kb.entry);
                } else {
                    assert_eq!(kb.entry, ka.entry, "{method} {:?}", a.role);
                }
            }
            assert_eq!(plan.specs.fetch.kv_rows, KvRows::Adjacent);
            assert_eq!(
                plan.specs.fetch.kernel_name(),
                format!("{}_kvadj", base.specs.fetch.kernel_name())
            );
        }
    }
}

/// `Tiles::attention_rows = store` (opt-in): in HBM attention reads the store's rows by token
/// (its spec says so, with the store's row layout) and nothing is fetched or held for the rows;
/// from host memory the rows are fetched as before. Dense and the plane methods alike.
#[test]
fn attention_from_the_store_drops_the_fetch_in_hbm_only() {
    let tiles = Tiles {
        attention_rows: AttentionRows::Store,
        ..Tiles::default()
    };
    for method in [Method::Fathom { bits: 48.0 }, Method::Oracle, Method::Dense] {
        for kv_rows in KvRows::ALL {
            for placement in [Placement::Hbm, Placement::Host] {
                let s = StepShape {
                    kv_rows,
                    ..shape(4, 20_000, placement)
                };
                let plan = plan_with(s, method, 64, &tiles).unwrap();
                let fetches = roles(&plan).iter().filter(|&&r| r == Role::Fetch).count();
                let attention = plan.specs.attention;
                let what = format!("{method} {placement:?} {kv_rows}");
                assert_eq!(roles(&plan).last(), Some(&Role::Attention), "{what}");
                if placement == Placement::Hbm {
                    assert_eq!(fetches, 0, "{what}");
                    assert_eq!(attention.rows, AttentionRows::Store, "{what}");
                    assert_eq!(attention.kv_rows, kv_rows, "{what}");
                    assert_eq!(plan.sizes.rows, 0, "{what}");
                    let name = &plan
                        .operations
                        .last()
                        .unwrap()
                        .kernel
                        .as_ref()
                        .unwrap()
                        .entry;
                    assert!(name.contains("_store"), "{what}: {name}");
                } else {
                    assert_eq!(fetches, 1, "{what}");
                    assert_eq!(attention.rows, AttentionRows::Fetched, "{what}");
                    assert_eq!(attention.kv_rows, KvRows::Separate, "{what}");
                    assert!(plan.sizes.rows > 0, "{what}");
                }
            }
        }
    }
    assert_eq!(
        Tiles::default().attention_rows,
        AttentionRows::Store,
        "in HBM attention reads the store by default (measured faster on the H200)"
    );
}

/// `StepRequest::union = false` drops the union's launch exactly where nothing reads the union
/// (a select, then attention from the store's rows in HBM) and says so in the plan; with the
/// rows fetched, from host memory, and for `dense` (no select) the plan is unchanged.
#[test]
fn a_step_without_the_union_drops_its_launch_only_where_nothing_reads_it() {
    for rows in [AttentionRows::Store, AttentionRows::Fetched] {
        let tiles = Tiles {
            attention_rows: rows,
            ..Tiles::default()
        };
        for method in [Method::Fathom { bits: 48.0 }, Method::Oracle, Method::Dense] {
            for placement in [Placement::Hbm, Placement::Host] {
                let s = shape(4, 20_000, placement);
                let scoring = Scoring::of(method, s.head_dim, s.block, Basis::Klt).unwrap();
                let plan = |union| {
                    launch_plan(&PlanInputs {
                        shape: s,
                        scoring,
                        transfer: None,
                        k: 64,
                        k_max: 512,
                        union,
                        tiles: &tiles,
                        tuning: None,
                    })
                    .unwrap()
                };
                let (with, without) = (plan(true), plan(false));
                let unions = |p: &super::super::launches::LaunchPlan| {
                    roles(p)
                        .iter()
                        .filter(|&&r| r == Role::Select(SelectStage::Union))
                        .count()
                };
                let what = format!("{method} {placement:?} {rows:?}");
                let skips = rows == AttentionRows::Store
                    && placement == Placement::Hbm
                    && method != Method::Dense;
                assert!(with.union, "{what}");
                assert_eq!(without.union, !skips, "{what}");
                let selects = usize::from(method != Method::Dense);
                assert_eq!(unions(&with), selects, "{what}");
                assert_eq!(unions(&without), selects - usize::from(skips), "{what}");
                assert_eq!(
                    without.operations.len() + usize::from(skips),
                    with.operations.len(),
                    "{what}"
                );
            }
        }
    }
}

#[test]
fn head_groups_share_the_whole_steps_plan_and_results() {
    use super::super::launches::groups_share_the_plan;
    let at = |heads: usize, tokens, placement| StepShape {
        batch: 1,
        kv_heads: heads,
        ..shape(4, tokens, placement)
    };
    let methods = [
        Method::Fathom { bits: 48.0 },
        Method::Sparq { r: 16 },
        Method::Oracle,
    ];
    for algorithm in SelectAlgorithm::ALL {
        let tiles = Tiles {
            select_algorithm: algorithm,
            ..fetched()
        };
        for (placement, transfer) in [
            (Placement::Hbm, None),
            (Placement::Host, Some(Transfer::Fused)),
            (Placement::Host, Some(Transfer::CopyKernel)),
        ] {
            for tokens in [5_000, 40_000, 300_000] {
                for method in methods {
                    for groups in [2, 4, 8] {
                        let plan = |heads| {
                            plan_inputs(
                                at(heads, tokens, placement),
                                method,
                                transfer,
                                256,
                                &tiles,
                                None,
                            )
                            .unwrap()
                        };
                        let (whole, group) = (plan(8), plan(8 / groups));
                        let what = format!(
                            "{algorithm:?} {placement:?} {transfer:?} {tokens} {method} {groups}"
                        );
                        assert!(groups_share_the_plan(&whole, &group, groups), "{what}");
                        // A group's share of the workspace is a groups-th of the whole's, or
                        // more where a select with fewer rows splits each row further.
                        let shares = group.sizes.times(groups);
                        assert!(shares.bytes() + 64 * 1024 >= whole.sizes.bytes(), "{what}");
                        assert_eq!(group.specs.scan, whole.specs.scan, "{what}");
                    }
                }
            }
        }
    }
    // Not with a batch of several sequences, nor when the heads do not split evenly.
    let whole = plan_of(
        shape(4, 40_000, Placement::Hbm),
        Method::Sparq { r: 16 },
        None,
        64,
        None,
    )
    .unwrap();
    let two = StepShape {
        kv_heads: 1,
        ..shape(4, 40_000, Placement::Hbm)
    };
    let group = plan_of(two, Method::Sparq { r: 16 }, None, 64, None).unwrap();
    assert!(!groups_share_the_plan(&whole, &group, 2), "batch 3");
    let one = |heads| {
        plan_of(
            at(heads, 40_000, Placement::Hbm),
            Method::Sparq { r: 16 },
            None,
            64,
            None,
        )
        .unwrap()
    };
    assert!(!groups_share_the_plan(&one(8), &one(2), 3));
}

#[test]
fn workspace_sizes_times_n_scale_every_buffer() {
    let plan = plan_of(
        StepShape {
            batch: 1,
            ..shape(4, 40_000, Placement::Host)
        },
        Method::Fathom { bits: 48.0 },
        Some(Transfer::CopyKernel),
        256,
        None,
    )
    .unwrap();
    let (one, three) = (plan.sizes, plan.sizes.times(3));
    assert_eq!(three.bytes(), 3 * one.bytes());
    for ((name, a), (_, b)) in one.parts().iter().zip(three.parts()) {
        assert_eq!(3 * a, b, "{name}");
    }
}

#[test]
fn a_plan_that_scores_the_tail_drops_the_oracle_launch() {
    // The runtime's default since it won on the H100 (2026-12-06).
    assert!(Tiles::default().tail_in_plan);
    let tiles = Tiles {
        tail_in_plan: true,
        ..fetched()
    };
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(4, 40_000, placement);
        for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
            let plain = plan_inputs(s, method, None, 256, &fetched(), None).unwrap();
            let fused = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
            let tail = Role::Oracle { whole: false };
            assert!(roles(&plain).contains(&tail));
            let mut want = roles(&plain);
            want.retain(|&r| r != tail);
            assert_eq!(roles(&fused), want, "{method} {placement:?}");
            let spec = fused.specs.plan.unwrap();
            assert_eq!(spec.tail, Some(placement));
            assert_eq!(spec.tail_kv_rows, s.kv_rows);
            let launch = &fused.operations[0].kernel.as_ref().unwrap().launch;
            // A block a (KV head, sequence) plans, one more scores its tail.
            assert_eq!(launch.grid, [2 * 2, 3, 1]);
            assert!(fused.operations[0]
                .kernel
                .as_ref()
                .unwrap()
                .entry
                .ends_with(&format!("_tail{}", placement.as_str())));
            assert_eq!(fused.sizes, plain.sizes);
        }
        // The oracle method scores every token itself; a plan of more threads than a tail
        // allows leaves the tail to the oracle.
        let oracle = plan_inputs(s, Method::Oracle, None, 256, &tiles, None).unwrap();
        assert!(roles(&oracle).contains(&Role::Oracle { whole: true }));
        let wide = Tiles {
            plan_threads: 1024,
            ..tiles
        };
        let wide = plan_inputs(s, Method::Fathom { bits: 48.0 }, None, 256, &wide, None).unwrap();
        assert_eq!(wide.specs.plan.unwrap().tail, None);
        assert!(roles(&wide).contains(&Role::Oracle { whole: false }));
    }
}

#[test]
fn batched_run_tables_reach_the_plan_spec_and_nothing_else() {
    // Off unless asked for (exact on an H100, no faster there).
    assert!(!Tiles::default().plan_batched_runs);
    let tiles = Tiles {
        plan_batched_runs: true,
        ..fetched()
    };
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(4, 40_000, placement);
        for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
            let plain = plan_inputs(s, method, None, 256, &fetched(), None).unwrap();
            let batched = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
            assert_eq!(roles(&batched), roles(&plain), "{method} {placement:?}");
            assert!(batched.specs.plan.unwrap().batched_runs);
            assert!(!plain.specs.plan.unwrap().batched_runs);
            let entry = |p: &crate::step::LaunchPlan| {
                p.operations[0].kernel.as_ref().unwrap().entry.clone()
            };
            assert_eq!(
                entry(&batched),
                entry(&plain).replacen("_t256", "_t256_rb", 1)
            );
            for (a, b) in plain.operations.iter().zip(&batched.operations).skip(1) {
                assert_eq!(
                    a.kernel.as_ref().map(|k| &k.entry),
                    b.kernel.as_ref().map(|k| &k.entry)
                );
            }
            assert_eq!(batched.sizes, plain.sizes);
        }
    }
}

#[test]
fn paired_run_tables_reach_the_plan_spec_and_nothing_else() {
    // On by default (`fetched()` turns it off); with batched pointer loads it is left out
    // (they do not combine).
    assert!(Tiles::default().plan_paired_runs);
    let tiles = Tiles {
        plan_paired_runs: true,
        ..fetched()
    };
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(4, 40_000, placement);
        for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
            let plain = plan_inputs(s, method, None, 256, &fetched(), None).unwrap();
            let paired = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
            assert_eq!(roles(&paired), roles(&plain), "{method} {placement:?}");
            assert!(paired.specs.plan.unwrap().paired_runs);
            assert!(!plain.specs.plan.unwrap().paired_runs);
            let entry = |p: &crate::step::LaunchPlan| {
                p.operations[0].kernel.as_ref().unwrap().entry.clone()
            };
            assert_eq!(
                entry(&paired),
                entry(&plain).replacen("_t256", "_t256_rp", 1)
            );
            for (a, b) in plain.operations.iter().zip(&paired.operations).skip(1) {
                assert_eq!(
                    a.kernel.as_ref().map(|k| &k.entry),
                    b.kernel.as_ref().map(|k| &k.entry)
                );
            }
            assert_eq!(paired.sizes, plain.sizes);
            let both = Tiles {
                plan_batched_runs: true,
                ..tiles
            };
            let both = plan_inputs(s, method, None, 256, &both, None).unwrap();
            let spec = both.specs.plan.unwrap();
            assert!(spec.batched_runs && !spec.paired_runs);
        }
    }
}

#[test]
fn shared_run_tables_reach_the_plan_spec_and_its_launch_only() {
    // The shape's count unless asked for; `fetched()` keeps the default's.
    assert_eq!(Tiles::default().plan_run_blocks, None);
    let one = Tiles {
        plan_run_blocks: Some(1),
        ..fetched()
    };
    for run_blocks in [2, 4, codegen::spec::PlanSpec::MAX_RUN_BLOCKS] {
        let tiles = Tiles {
            plan_run_blocks: Some(run_blocks),
            ..fetched()
        };
        for placement in [Placement::Hbm, Placement::Host] {
            let s = shape(4, 40_000, placement);
            for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
                let plain = plan_inputs(s, method, None, 256, &one, None).unwrap();
                let shared = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
                assert_eq!(roles(&shared), roles(&plain), "{method} {placement:?}");
                assert_eq!(shared.specs.plan.unwrap().run_blocks, run_blocks);
                let kernel = |p: &crate::step::LaunchPlan| p.operations[0].kernel.clone().unwrap();
                let (a, b) = (kernel(&plain), kernel(&shared));
                assert_eq!(
                    b.entry,
                    a.entry
                        .replacen("_t256", &format!("_t256_rt{run_blocks}"), 1)
                );
                assert_eq!(b.launch.grid[..2], a.launch.grid[..2]);
                assert_eq!((a.launch.grid[2], b.launch.grid[2]), (1, run_blocks as u32));
                for (a, b) in plain.operations.iter().zip(&shared.operations).skip(1) {
                    assert_eq!(
                        a.kernel.as_ref().map(|k| &k.entry),
                        b.kernel.as_ref().map(|k| &k.entry)
                    );
                }
                assert_eq!(shared.sizes, plain.sizes);
            }
        }
    }
    // Out of range: a typed error naming the field, not a launch.
    for run_blocks in [0, codegen::spec::PlanSpec::MAX_RUN_BLOCKS + 1] {
        let tiles = Tiles {
            plan_run_blocks: Some(run_blocks),
            ..fetched()
        };
        let s = shape(4, 40_000, Placement::Hbm);
        let err = plan_inputs(s, Method::Fathom { bits: 48.0 }, None, 256, &tiles, None)
            .err()
            .unwrap_or_else(|| panic!("{run_blocks} blocks a head accepted"));
        assert!(err.to_string().contains("run_blocks"), "{err}");
    }
}

#[test]
fn one_wave_fits_the_hbm_scan_grid_to_the_resident_blocks() {
    use crate::step::fit_scan_to_one_wave;
    assert!(Tiles::default().scan_one_wave);
    let fit = |plan: &mut crate::step::LaunchPlan, resident: usize| {
        fit_scan_to_one_wave(plan, |_| Ok::<_, std::convert::Infallible>(resident)).unwrap()
    };
    let scan_at = |p: &crate::step::LaunchPlan| {
        p.operations
            .iter()
            .find(|op| matches!(op.role, Role::Scan { .. }))
            .and_then(|op| op.kernel.as_ref())
            .expect("a scan")
            .launch
            .grid
    };
    // 3 sequences x 2 KV heads x 3 segments of 512 words: 18 columns of the grid.
    let s = StepShape {
        segment_words: 512,
        ..shape(4, 40_000, Placement::Hbm)
    };
    for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
        let plain = plan_inputs(s, method, None, 256, &fetched(), None).unwrap();
        let spec = plain.specs.scan.unwrap();
        let grid = scan_at(&plain);
        let columns = (grid[1] * grid[2]) as usize;
        assert_eq!(columns, 18);
        let blocks = grid[0] as usize * columns;
        // A GPU that holds the whole grid, or not even a stripe of every segment: unchanged.
        for resident in [blocks, blocks + 1, columns - 1, 0] {
            let mut fitted = plain.clone();
            assert_eq!(fit(&mut fitted, resident), None, "{resident}");
            assert_eq!(fitted, plain);
        }
        // Fewer resident blocks than the grid: the most stripes that fit, all else as it was.
        for resident in [columns, 3 * columns + columns - 1, blocks - 1] {
            let mut fitted = plain.clone();
            let want = (resident / columns).min(spec.segment_tiles());
            assert!(want < grid[0] as usize);
            assert_eq!(fit(&mut fitted, resident), Some(want));
            let new = scan_at(&fitted);
            assert_eq!(new[0] as usize, want, "{method} {resident}");
            assert!(new[0] as usize * columns <= resident);
            assert_eq!(new[1..], grid[1..]);
            let mut back = fitted.clone();
            for op in back.operations.iter_mut() {
                if let (Role::Scan { .. }, Some(k)) = (&op.role, op.kernel.as_mut()) {
                    k.launch.grid = grid;
                }
            }
            assert_eq!(back, plain, "only the scan's stripes change");
        }
    }
    // The host placement's scan is left alone (bound by the link; not timed this way).
    let host = StepShape {
        segment_words: 512,
        ..shape(4, 40_000, Placement::Host)
    };
    let plain = plan_inputs(
        host,
        Method::Fathom { bits: 48.0 },
        None,
        256,
        &fetched(),
        None,
    )
    .unwrap();
    let mut fitted = plain.clone();
    // The residency is not asked of a host scan.
    let asked = fit_scan_to_one_wave(&mut fitted, |_| Err("asked"));
    assert_eq!(asked, Ok(None));
    assert_eq!(fitted, plain);
}

#[test]
fn scan_stripes_reach_the_scan_launch_only() {
    assert_eq!(Tiles::default().scan_stripes, None);
    for placement in [Placement::Hbm, Placement::Host] {
        // Segments of 512 words: several tiles a segment at every placement's tile.
        let s = StepShape {
            segment_words: 512,
            ..shape(4, 40_000, placement)
        };
        for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
            let plain = plan_inputs(s, method, None, 256, &fetched(), None).unwrap();
            let spec = plain.specs.scan.unwrap();
            assert!(spec.segment_tiles() > 3, "{spec:?}");
            let at = |p: &crate::step::LaunchPlan| {
                p.operations
                    .iter()
                    .position(|op| matches!(op.role, Role::Scan { .. }))
                    .expect("a scan")
            };
            // One block a segment, uneven stripes (3 of the segment's tiles), every tile its own.
            for stripes in [1, 3, spec.segment_tiles()] {
                let tiles = Tiles {
                    scan_stripes: Some(stripes),
                    ..fetched()
                };
                let striped = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
                assert_eq!(roles(&striped), roles(&plain), "{method} {placement:?}");
                assert_eq!(striped.sizes, plain.sizes);
                for (i, (a, b)) in plain.operations.iter().zip(&striped.operations).enumerate() {
                    let (a, b) = (a.kernel.as_ref(), b.kernel.as_ref());
                    assert_eq!(a.map(|k| &k.entry), b.map(|k| &k.entry));
                    let (a, b) = (a.map(|k| k.launch.grid), b.map(|k| k.launch.grid));
                    if i == at(&plain) {
                        let (a, b) = (a.unwrap(), b.unwrap());
                        assert_eq!(b[0], stripes as u32, "{method} {placement:?}");
                        assert_eq!(b[1..], a[1..], "{method} {placement:?}");
                    } else {
                        assert_eq!(a, b);
                    }
                }
            }
            // Out of range: a typed error naming the field and the range, not a launch.
            for stripes in [0, spec.segment_tiles() + 1] {
                let tiles = Tiles {
                    scan_stripes: Some(stripes),
                    ..fetched()
                };
                let err = plan_inputs(s, method, None, 256, &tiles, None)
                    .err()
                    .unwrap_or_else(|| panic!("{stripes} blocks a segment accepted"));
                let text = err.to_string();
                assert!(text.contains("scan_stripes"), "{text}");
                assert!(
                    text.contains(&format!("1 to {}", spec.segment_tiles())),
                    "{text}"
                );
            }
        }
    }
}

#[test]
fn long_sequences_share_their_run_tables_by_default() {
    let mut tiles = fetched();
    tiles.plan_run_blocks = None;
    for (max_seg, want) in [(3, 1), (9, 2), (32, 4), (200, 4)] {
        let s = StepShape {
            max_seg,
            ..shape(4, 40_000, Placement::Hbm)
        };
        for method in [Method::Fathom { bits: 48.0 }, Method::Sparq { r: 16 }] {
            let plan = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
            let spec = plan.specs.plan.unwrap();
            assert_eq!(spec.run_blocks, want, "{max_seg} segments, {method}");
            let kernel = plan.operations[0].kernel.as_ref().unwrap();
            assert_eq!(kernel.launch.grid[2], want as u32);
        }
        // Batched pointer loads keep one block; a count asked for is taken as it is.
        let batched = Tiles {
            plan_batched_runs: true,
            ..tiles
        };
        let plan = plan_inputs(s, Method::Fathom { bits: 48.0 }, None, 256, &batched, None);
        assert_eq!(plan.unwrap().specs.plan.unwrap().run_blocks, 1);
        let asked = Tiles {
            plan_run_blocks: Some(8),
            ..tiles
        };
        let plan = plan_inputs(s, Method::Fathom { bits: 48.0 }, None, 256, &asked, None);
        assert_eq!(plan.unwrap().specs.plan.unwrap().run_blocks, 8);
    }
}

#[test]
fn the_coarse_floor_reaches_the_peaks_selects_only() {
    // On by default (`fetched()` turns it off).
    assert!(Tiles::default().select_coarse_floor);
    struct Only(SelectAlgorithm);
    impl Tuning for Only {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == TunedFamily::Select).then_some(Tile::select(256, 16, self.0))
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<Transfer> {
            None
        }
    }
    for algorithm in SelectAlgorithm::ALL {
        // The select from the tiles, and from a record whose select is this one.
        let plain_tiles = Tiles {
            select_algorithm: algorithm,
            ..fetched()
        };
        let tiles = Tiles {
            select_coarse_floor: true,
            ..plain_tiles
        };
        let record = Only(algorithm);
        for tuning in [None, Some(&record as &dyn Tuning)] {
            for placement in [Placement::Hbm, Placement::Host] {
                let s = shape(4, 40_000, placement);
                // With a plane scan (which may write the peaks), and without one.
                for method in [Method::Fathom { bits: 48.0 }, Method::Oracle] {
                    let what = format!("{algorithm:?} {method} {placement:?}");
                    let plain = plan_inputs(s, method, None, 256, &plain_tiles, tuning).unwrap();
                    let coarse = plan_inputs(s, method, None, 256, &tiles, tuning).unwrap();
                    let (p, c) = (plain.specs.select.unwrap(), coarse.specs.select.unwrap());
                    assert!(!p.coarse_floor, "{what}");
                    assert_eq!(c.coarse_floor, algorithm.peaks(), "{what}");
                    assert_eq!(
                        SelectSpec {
                            coarse_floor: false,
                            ..c
                        },
                        p,
                        "{what}"
                    );
                    // Only the select's entries are renamed; the launches and sizes stay.
                    assert_eq!(roles(&coarse), roles(&plain), "{what}");
                    assert_eq!(coarse.sizes, plain.sizes, "{what}");
                    for (a, b) in plain.operations.iter().zip(&coarse.operations) {
                        let (ka, kb) = (a.kernel.as_ref(), b.kernel.as_ref());
                        assert_eq!(ka.map(|k| k.launch), kb.map(|k| k.launch), "{what}");
                        match a.role {
                            Role::Select(stage) => {
                                assert_eq!(ka.unwrap().entry, p.entry(stage), "{what}");
                                assert_eq!(kb.unwrap().entry, c.entry(stage), "{what}");
                            }
                            _ => assert_eq!(ka.map(|k| &k.entry), kb.map(|k| &k.entry), "{what}"),
                        }
                    }
                    if algorithm.peaks() {
                        assert!(c.kernel_name().ends_with("_cf"), "{what}");
                    }
                }
            }
        }
    }
}

#[test]
fn owned_tiles_reach_the_streaming_peaks_selects_only() {
    // Off by default (an opt-in: exact on an H100 but no faster).
    assert!(!Tiles::default().select_owned_tiles);
    for algorithm in SelectAlgorithm::ALL {
        let plain_tiles = Tiles {
            select_algorithm: algorithm,
            ..fetched()
        };
        let tiles = Tiles {
            select_owned_tiles: true,
            ..plain_tiles
        };
        for placement in [Placement::Hbm, Placement::Host] {
            let s = shape(4, 40_000, placement);
            // With a plane scan (a scan-peaks select reads its peaks), and without one (its
            // streaming form, which owns its tiles).
            for method in [Method::Fathom { bits: 48.0 }, Method::Oracle] {
                let what = format!("{algorithm:?} {method} {placement:?}");
                let plain = plan_inputs(s, method, None, 256, &plain_tiles, None).unwrap();
                let owned = plan_inputs(s, method, None, 256, &tiles, None).unwrap();
                let (p, o) = (plain.specs.select.unwrap(), owned.specs.select.unwrap());
                assert!(!p.owned_tiles, "{what}");
                assert_eq!(o.owned_tiles, o.algorithm.owns_tiles(), "{what}");
                assert_eq!(
                    SelectSpec {
                        owned_tiles: false,
                        ..o
                    },
                    p,
                    "{what}"
                );
                assert_eq!(roles(&owned), roles(&plain), "{what}");
                assert_eq!(owned.sizes, plain.sizes, "{what}");
                if o.owned_tiles {
                    assert!(o.kernel_name().ends_with("_ot"), "{what}");
                }
            }
        }
    }
    // The streaming forms own their tiles with and without a plane scan; a scan-peaks select
    // does where its method has no scan.
    let tiles = Tiles {
        select_algorithm: SelectAlgorithm::ScanPeaksHead,
        select_owned_tiles: true,
        ..fetched()
    };
    let s = shape(4, 40_000, Placement::Hbm);
    let scanned = plan_inputs(s, Method::Fathom { bits: 48.0 }, None, 256, &tiles, None).unwrap();
    let streamed = plan_inputs(s, Method::Oracle, None, 256, &tiles, None).unwrap();
    assert!(!scanned.specs.select.unwrap().owned_tiles);
    let streamed = streamed.specs.select.unwrap();
    assert_eq!(streamed.algorithm, SelectAlgorithm::PeaksHead);
    assert!(streamed.owned_tiles);
}

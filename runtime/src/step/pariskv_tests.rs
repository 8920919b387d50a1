//! CPU tests of the `pariskv(k)` method in the step API: its name, the head dimensions and
//! views it accepts, and its launch plan (the GPU test is `tests/tests/gpu_pariskv_step.rs`).

use codegen::model::{Basis, ModelShape};
use codegen::spec::pariskv::{candidate_capacity, RerankSelect, RerankSelectStep};
use codegen::spec::{Family, KvRows, Placement};

use super::launches::{launch_plan, token_capacity, PlanInputs, Role, StepShape, ALWAYS};
use super::request::{Method, Scoring};
use super::validate::{check_needs, check_view, ViewShape};
use super::StepError;
use crate::pariskv::{RetrievalSizes, Stage};
use crate::tuning::Tiles;
use reference::planner::PlanError;
use reference::plans::{depth_plan, PlanContext};
use reference::store::BlockSize;

const K_MAX: usize = 512;

fn model(head_dim: usize, group: usize) -> ModelShape {
    ModelShape {
        name: "test".into(),
        layers: 2,
        query_heads: 3 * group,
        kv_heads: 3,
        head_dim,
        qk_norm: true,
        basis: Basis::Raw,
    }
}

fn view(batch: usize, index: Option<usize>) -> ViewShape {
    let heads = batch * 3;
    ViewShape {
        layer: 1,
        batch,
        kv_heads: 3,
        head_dim: 128,
        placement: Placement::Host,
        max_seg: 2,
        max_tokens: 9_000,
        seg_words_len: heads * 2,
        seg_scales_len: heads * 2,
        n_stored_len: batch,
        n_total_len: batch,
        k_rows_len: heads,
        v_rows_len: heads,
        kv_rows: KvRows::Separate,
        landmarks_len: None,
        pariskv_len: index,
    }
}

fn shape(batch: usize, group: usize, max_tokens: usize, placement: Placement) -> StepShape {
    StepShape {
        batch,
        kv_heads: 3,
        head_dim: 128,
        group,
        block: 64,
        segment_words: 512,
        max_seg: 2,
        max_tokens,
        placement,
        basis: Basis::Raw,
        kv_rows: KvRows::Separate,
    }
}

fn plan(shape: StepShape, k: usize, request_k: usize) -> Result<super::LaunchPlan, StepError> {
    plan_with(shape, k, request_k, &one_block_rerank())
}

/// The default tiles with the first rerank (one thread a candidate, one block a KV head for
/// the top-k, no decode tables): the six retrieval launches these plans test; the default
/// rerank's choices have their own test (`rerank_tiles_choose_the_whole_row_score`).
fn one_block_rerank() -> Tiles {
    Tiles {
        rerank_vector_loads: false,
        rerank_select: RerankSelect::Single,
        rerank_decode_table: false,
        ..Tiles::default()
    }
}

/// [`plan`] with `tiles` in place of the defaults.
fn plan_with(
    shape: StepShape,
    k: usize,
    request_k: usize,
    tiles: &Tiles,
) -> Result<super::LaunchPlan, StepError> {
    let scoring = Scoring::of(Method::Pariskv { k }, shape.head_dim, 64, Basis::Raw)?;
    launch_plan(&PlanInputs {
        shape,
        scoring,
        transfer: None,
        k: request_k,
        k_max: K_MAX,
        union: true,
        tiles,
        tuning: None,
    })
}

#[test]
fn the_name_parses_and_prints() {
    let m: Method = "pariskv(100)".parse().unwrap();
    assert_eq!(m, Method::Pariskv { k: 100 });
    assert_eq!(m.to_string(), "pariskv(100)");
    assert_eq!(
        " pariskv( 512 ) ".parse::<Method>().unwrap(),
        Method::Pariskv { k: 512 }
    );
    for (bad, reason) in [
        ("pariskv", "needs a top-k"),
        ("pariskv(0)", "whole number >= 1"),
        ("pariskv(-3)", "whole number >= 1"),
        ("pariskv(1.5)", "whole number >= 1"),
        ("pariskv(100", "closing parenthesis"),
    ] {
        let e = bad.parse::<Method>().unwrap_err();
        assert!(e.reason.contains(reason), "{bad}: {e}");
        assert!(e.to_string().contains("pariskv(k)"), "{bad}: {e}");
    }
}

#[test]
fn it_is_not_a_plane_plan() {
    let queries = vec![vec![1.0; 64]; 2];
    let sigma2 = vec![1.0; 64];
    let ctx = PlanContext {
        queries: &queries,
        sigma2: &sigma2,
        block: BlockSize::B64,
        basis: Basis::Raw,
        double_sparsity: None,
    };
    match depth_plan(Method::Pariskv { k: 10 }, &ctx) {
        Err(PlanError::NotAPlan { method }) => assert_eq!(method, "pariskv(10)"),
        other => panic!("{other:?}"),
    }
    // Ids of every token (B bytes) and the rerank of 10% of them, at D = 128.
    let bits = Method::Pariskv { k: 10 }.bits_per_token(128, BlockSize::B64);
    assert_eq!(bits, Some(128.0 + 0.1 * 8.0 * 96.0));
}

#[test]
fn head_dims_follow_the_index() {
    for d in [64, 80, 96, 128, 192, 256] {
        assert_eq!(
            Scoring::of(Method::Pariskv { k: 4 }, d, 64, Basis::Raw).unwrap(),
            Scoring::Pariskv { k: 4 }
        );
    }
    for (d, rule) in [
        (100, "multiple of 8"),
        (36, "multiple of 8"),
        (120, "outside the sizes"),
        (32, "outside the sizes"),
        (512, "outside the sizes"),
    ] {
        match Scoring::of(Method::Pariskv { k: 4 }, d, 64, Basis::Klt) {
            Err(e @ StepError::PariskvHeadDim { head_dim, .. }) => {
                assert_eq!(head_dim, d);
                let message = e.to_string();
                assert!(message.contains(rule), "{d}: {message}");
                assert!(
                    message.contains("64, 80, 96, 128, 192 or 256"),
                    "{d}: {message}"
                );
            }
            other => panic!("{d}: {other:?}"),
        }
    }
}

#[test]
fn the_view_must_carry_the_index() {
    let scoring = Scoring::Pariskv { k: 100 };
    let check = |v: &ViewShape| check_needs(&scoring, "pariskv(100)", Basis::Raw, v, None, None);
    assert!(matches!(
        check(&view(2, None)),
        Err(StepError::MissingPariskvIndex)
    ));
    assert!(check(&view(2, Some(6))).is_ok());
    let m = model(128, 4);
    assert!(check_view(&m, &view(2, Some(6))).is_ok());
    // A store's tables have room for its largest batch: longer is fine, shorter is not.
    assert!(check_view(&m, &view(2, Some(64))).is_ok());
    match check_view(&m, &view(2, Some(5))) {
        Err(StepError::ViewShape { field, got: 5, .. }) => {
            assert!(field.contains("ParisKV"), "{field}")
        }
        other => panic!("{other:?}"),
    }
    // Other methods do not care.
    let oracle = Scoring::Oracle;
    assert!(check_needs(&oracle, "oracle", Basis::Raw, &view(2, None), None, None).is_ok());
}

#[test]
fn the_plan_runs_six_retrieval_launches_then_fetch_and_attention() {
    for placement in [Placement::Hbm, Placement::Host] {
        for (group, batch, tokens) in [(4, 2, 9_000), (7, 3, 40), (1, 1, 200_000)] {
            let s = shape(batch, group, tokens, placement);
            let p = plan(s, 100, 7).unwrap();
            let mut want: Vec<Role> = Stage::ALL.iter().map(|&st| Role::Pariskv(st)).collect();
            // In HBM attention reads the store's rows (the default): nothing is fetched.
            if placement == Placement::Host {
                want.push(Role::Fetch);
            }
            want.push(Role::Attention);
            let got: Vec<Role> = p.operations.iter().map(|op| op.role).collect();
            assert_eq!(got, want);
            // The method's k, not the request's.
            assert_eq!(p.k, 100);
            assert!(p.capturable);
            assert_eq!(p.transfer, None);
            assert_eq!(p.stage_planes, 0);
            let specs = p.specs.pariskv.expect("pariskv specs");
            assert!(p.specs.select.is_none() && p.specs.oracle.is_none());
            assert!(p.specs.plan.is_none() && p.specs.scan.is_none());
            assert_eq!(specs.vote.placement, placement);
            assert_eq!(specs.rerank.placement, placement);
            assert_eq!(specs.rerank.k_max as usize, K_MAX);
            assert_eq!(specs.query.group as usize, group);
            // Kernels and entry points as the specs name them.
            let names: Vec<&str> = p
                .operations
                .iter()
                .map(|op| op.kernel.as_ref().unwrap().entry.as_str())
                .collect();
            assert_eq!(names[0], specs.query.kernel_name());
            assert_eq!(names[1], specs.vote.kernel_name());
            assert_eq!(names[2], specs.topc.count_entry());
            assert_eq!(names[3], specs.topc.write_entry());
            assert_eq!(names[4], specs.rerank.score_entry());
            assert_eq!(names[5], specs.rerank.select_entry());

            // Buffers sized for the token capacity, so a captured graph serves it all.
            let capacity = token_capacity(tokens);
            let heads = batch * 3;
            let (topc, words) = specs.topc.launch(batch as u64, 3, capacity as u64).unwrap();
            assert_eq!(p.operations[2].kernel.as_ref().unwrap().launch, topc);
            let sizes = RetrievalSizes::new(heads, 128, capacity, words as usize);
            assert_eq!(p.sizes.pariskv, sizes);
            assert_eq!(sizes.ld_votes, capacity);
            assert!(sizes.ld_cand as u64 >= candidate_capacity(capacity as u64));
            assert_eq!(p.sizes.sel, heads * group * (100 + ALWAYS));
            assert_eq!(p.sizes.uni, heads * (group * 100 + ALWAYS));
            assert_eq!(p.sizes.sel_count, heads * group);
            assert_eq!(p.sizes.uni_count, heads);
            assert_eq!(p.sizes.scores, 0);
            // Fetched rows from host memory; in HBM attention reads the store's.
            let rows = match placement {
                Placement::Host => heads * (group * 100 + ALWAYS) * 128,
                Placement::Hbm => 0,
            };
            assert_eq!(p.sizes.rows, rows);
            assert!(p.sizes.bytes() >= sizes.bytes());
            let vote = specs.vote.launch(batch as u64, 3, capacity as u64).unwrap();
            assert_eq!(p.operations[1].kernel.as_ref().unwrap().launch, vote);
            let score = specs
                .rerank
                .launch_score(batch as u64, 3, sizes.ld_cand as u64)
                .unwrap();
            assert_eq!(p.operations[4].kernel.as_ref().unwrap().launch, score);
        }
    }
}

#[test]
fn k_is_checked_against_k_max() {
    let s = shape(1, 4, 5_000, Placement::Hbm);
    assert!(plan(s, K_MAX, 0).is_ok());
    // The method's k is checked, whatever the request says.
    match plan(s, K_MAX + 1, 1) {
        Err(StepError::K { k, k_max }) => assert_eq!((k, k_max), (K_MAX + 1, K_MAX)),
        other => panic!("{other:?}"),
    }
    assert!(plan(s, 10, K_MAX + 100).is_ok());
}

/// A record with ParisKV winners only, remembering the keys it was asked.
struct PariskvRecord {
    keys: std::cell::RefCell<Vec<crate::tuning::TuneKey>>,
}

impl crate::tuning::Tuning for PariskvRecord {
    fn tile(&self, key: &crate::tuning::TuneKey) -> Option<crate::tuning::Tile> {
        use crate::tuning::{Tile, TunedFamily};
        self.keys.borrow_mut().push(*key);
        match key.family {
            TunedFamily::PariskvVote => Some(Tile::Threads(512)),
            TunedFamily::PariskvTopc => Some(Tile::Threads(1024)),
            TunedFamily::PariskvRerank => Some(Tile::Threads(128)),
            _ => None,
        }
    }

    fn transfer(&self, _: usize, _: usize, _: u32) -> Option<super::request::Transfer> {
        None
    }
}

#[test]
fn pariskv_tiles_come_from_the_record_and_fall_back_to_the_defaults() {
    use crate::tuning::{context_bucket, Tile, TuneKey, TunedFamily, Tuning};
    let tokens = 200_000;
    for placement in [Placement::Hbm, Placement::Host] {
        let s = shape(1, 4, tokens, placement);
        let scoring = Scoring::of(Method::Pariskv { k: 100 }, 128, 64, Basis::Raw).unwrap();
        let plan = |tuning: Option<&dyn Tuning>| {
            launch_plan(&PlanInputs {
                shape: s,
                scoring,
                transfer: None,
                k: 7,
                k_max: K_MAX,
                union: true,
                tiles: &Tiles::default(),
                tuning,
            })
        };
        // Without a record: the default threads everywhere.
        let untuned = plan(None).unwrap();
        let defaults = untuned.specs.pariskv.unwrap();
        let t = Tiles::default().pariskv_threads;
        assert_eq!(
            (
                defaults.vote.threads,
                defaults.topc.threads,
                defaults.rerank.threads
            ),
            (t, t, t)
        );
        let record = PariskvRecord {
            keys: Default::default(),
        };
        let tuned = plan(Some(&record)).unwrap();
        let specs = tuned.specs.pariskv.unwrap();
        assert_eq!(
            (specs.vote.threads, specs.topc.threads, specs.rerank.threads),
            (512, 1024, 128)
        );
        assert_eq!(specs.query, defaults.query);
        // The launches are built from the tuned specs.
        let block = |stage: Stage| {
            tuned
                .operations
                .iter()
                .find(|op| op.role == Role::Pariskv(stage))
                .and_then(|op| op.kernel.as_ref())
                .map(|k| (k.launch.block[0], k.entry.clone()))
                .unwrap()
        };
        assert_eq!(block(Stage::Vote), (512, specs.vote.kernel_name()));
        assert_eq!(block(Stage::TopcCount), (1024, specs.topc.count_entry()));
        assert_eq!(block(Stage::TopcWrite).0, 1024);
        assert_eq!(block(Stage::RerankScore), (128, specs.rerank.score_entry()));
        assert_eq!(block(Stage::RerankSelect(RerankSelectStep::Select)).0, 128);
        assert_eq!(block(Stage::Query).0, codegen::spec::pariskv::QUERY_THREADS);
        // The topc chunk follows its threads: 1024 threads x 16 votes per block.
        let capacity = token_capacity(tokens) as u64;
        let (topc, _) = specs.topc.launch(1, 3, capacity).unwrap();
        assert_eq!(tuned.operations[2].kernel.as_ref().unwrap().launch, topc);
        // The keys: vote and rerank in the index rows' placement, the top-C (votes only)
        // in HBM; the shape and context bucket of the step.
        let keys = record.keys.borrow();
        let asked = |family: TunedFamily| -> TuneKey {
            *keys
                .iter()
                .find(|k| k.family == family)
                .unwrap_or_else(|| panic!("{family:?} was not looked up"))
        };
        assert_eq!(asked(TunedFamily::PariskvVote).placement, placement);
        assert_eq!(asked(TunedFamily::PariskvRerank).placement, placement);
        assert_eq!(asked(TunedFamily::PariskvTopc).placement, Placement::Hbm);
        let key = asked(TunedFamily::PariskvVote);
        assert_eq!((key.head_dim, key.group), (128, 4));
        assert_eq!(key.context_bucket, context_bucket(tokens));
        // Nothing ParisKV does not run is asked for.
        for family in [TunedFamily::Select, TunedFamily::Oracle, TunedFamily::Scan] {
            assert!(keys.iter().all(|k| k.family != family), "{family:?}");
        }
        // Fetch and attention fell back to the defaults; the ParisKV families did not.
        assert!(!tuned.tuned);
        assert!(tuned.untuned.iter().all(|f| !f.starts_with("pariskv")));
        assert!(untuned.untuned.is_empty());
        // A tile of another shape is refused.
        struct Wrong;
        impl Tuning for Wrong {
            fn tile(&self, key: &TuneKey) -> Option<Tile> {
                (key.family == TunedFamily::PariskvTopc).then_some(Tile::select(
                    256,
                    4,
                    codegen::spec::SelectAlgorithm::Radix,
                ))
            }
            fn transfer(&self, _: usize, _: usize, _: u32) -> Option<super::request::Transfer> {
                None
            }
        }
        assert!(matches!(
            plan(Some(&Wrong)),
            Err(StepError::Tuning {
                family: "pariskv_topc",
                ..
            })
        ));
    }
}

/// A `Rerank` tile sets the rerank's threads, `_score` variant and top-k; the `Threads` tile of
/// an older record is the plain `_score` and the one-block top-k; a many-block tile whose
/// threads cannot hold two `k_max` a block falls back to the one-block top-k; a rerank tile on
/// another family is refused.
#[test]
fn rerank_tiles_choose_the_whole_row_score() {
    use crate::tuning::{Tile, TuneKey, TunedFamily, Tuning};
    struct One(TunedFamily, Tile);
    impl Tuning for One {
        fn tile(&self, key: &TuneKey) -> Option<Tile> {
            (key.family == self.0).then_some(self.1)
        }
        fn transfer(&self, _: usize, _: usize, _: u32) -> Option<super::request::Transfer> {
            None
        }
    }
    let s = shape(1, 4, 200_000, Placement::Host);
    let scoring = Scoring::of(Method::Pariskv { k: 100 }, 128, 64, Basis::Raw).unwrap();
    let plan = |tuning: &dyn Tuning| {
        launch_plan(&PlanInputs {
            shape: s,
            scoring,
            transfer: None,
            k: 7,
            k_max: K_MAX,
            union: true,
            tiles: &Tiles::default(),
            tuning: Some(tuning),
        })
    };
    let tile = |threads, vector_loads, multiblock, decode_table| {
        One(
            TunedFamily::PariskvRerank,
            Tile::Rerank {
                threads,
                vector_loads,
                multiblock,
                decode_table,
            },
        )
    };
    let rerank = |threads, vector_loads| tile(threads, vector_loads, false, false);
    use RerankSelect::{Multiblock, Single};
    for (record, want, select, decode_table) in [
        (rerank(512, true), (512, true), Single, false),
        (rerank(64, false), (64, false), Single, false),
        (
            One(TunedFamily::PariskvRerank, Tile::Threads(128)),
            (128, false),
            Single,
            false,
        ),
        (tile(256, true, true, false), (256, true), Multiblock, false),
        (tile(32, false, true, false), (32, false), Multiblock, false),
        (tile(256, true, true, true), (256, true), Multiblock, true),
        (tile(128, false, false, true), (128, false), Single, true),
    ] {
        let tuned = plan(&record).unwrap();
        let r = tuned.specs.pariskv.unwrap().rerank;
        assert_eq!((r.threads, r.vector_loads), want);
        assert_eq!(r.select, select);
        assert_eq!(r.decode_table, decode_table);
        let score = tuned
            .operations
            .iter()
            .find(|op| op.role == Role::Pariskv(Stage::RerankScore))
            .and_then(|op| op.kernel.as_ref())
            .unwrap();
        assert_eq!(score.entry, r.score_entry());
        assert_eq!(score.entry.contains("_v16_"), want.1);
        let ld_cand = tuned.sizes.pariskv.ld_cand as u64;
        assert_eq!(score.launch, r.launch_score(1, 3, ld_cand).unwrap());
    }
    // Without a record, the rerank autotune found fastest: whole rows, many blocks, tables.
    assert!(Tiles::default().rerank_vector_loads);
    assert_eq!(Tiles::default().rerank_select, Multiblock);
    assert!(Tiles::default().rerank_decode_table);
    // At k_max = 2048, 32 threads of at most 32 candidates cannot hold two k_max a block.
    let fallback = launch_plan(&PlanInputs {
        shape: s,
        scoring,
        transfer: None,
        k: 7,
        k_max: 2048,
        union: true,
        tiles: &Tiles::default(),
        tuning: Some(&tile(32, false, true, false)),
    })
    .unwrap();
    let r = fallback.specs.pariskv.unwrap().rerank;
    assert_eq!((r.threads, r.select), (32, Single));
    // The query kernel: one block a subspace by default; split as the tiles ask, at most one
    // block a subspace (16 at D = 128), its launch's z the blocks.
    assert_eq!(Tiles::default().pariskv_query_blocks, 16);
    for (asked, used) in [(1, 1), (5, 5), (16, 16), (40, 16)] {
        let tiles = Tiles {
            pariskv_query_blocks: asked,
            ..Tiles::default()
        };
        let split = plan_with(s, 100, 7, &tiles).unwrap();
        let q = split.specs.pariskv.unwrap().query;
        assert_eq!(q.subspace_blocks, used, "{asked}");
        let op = split
            .operations
            .iter()
            .find(|op| op.role == Role::Pariskv(Stage::Query))
            .and_then(|op| op.kernel.as_ref())
            .unwrap();
        assert_eq!(op.entry, q.kernel_name());
        assert_eq!(op.launch.grid[2], used, "{asked}");
    }
    assert!(matches!(
        plan(&One(TunedFamily::PariskvVote, rerank(256, true).1)),
        Err(StepError::Tuning {
            family: "pariskv_vote",
            ..
        })
    ));
}

#[test]
fn pariskv_families_have_the_spec_names() {
    use crate::tuning::TunedFamily;
    use codegen::spec::{PariskvRerankSpec, PariskvTopcSpec, PariskvVoteSpec};
    assert_eq!(
        TunedFamily::PariskvVote.as_str(),
        <PariskvVoteSpec as Family>::FAMILY
    );
    assert_eq!(
        TunedFamily::PariskvTopc.as_str(),
        <PariskvTopcSpec as Family>::FAMILY
    );
    assert_eq!(
        TunedFamily::PariskvRerank.as_str(),
        <PariskvRerankSpec as Family>::FAMILY
    );
    for f in TunedFamily::ALL {
        assert_eq!(TunedFamily::from_name(f.as_str()), Some(f));
        // serde spells each family as its name (the record's keys).
        assert_eq!(
            serde_json::to_value(f).unwrap(),
            serde_json::Value::String(f.as_str().into())
        );
    }
}

/// With the many-block top-k (`Tiles::rerank_select`), the rerank's `_select` becomes the launches
/// of `PariskvRerankSpec::select_plan` (a `_chunk`, merges while one block cannot hold every
/// slot, a `_write`), and the workspace holds their two slot buffers.
#[test]
fn the_many_block_top_k_replaces_the_select_launch() {
    // k = 500 and 512 at 256 threads: 1,024 candidates a block, two slots a merge.
    for (k, tokens, merges) in [(100, 9_000, 0), (500, 200_000, 4), (512, 2_000_000, 7)] {
        let s = shape(1, 4, tokens, Placement::Hbm);
        let tiles = Tiles {
            rerank_select: RerankSelect::Multiblock,
            ..Tiles::default()
        };
        let p = plan_with(s, k, 7, &tiles).unwrap();
        let rerank = p.specs.pariskv.unwrap().rerank;
        assert_eq!(rerank.select, RerankSelect::Multiblock);
        let ld_cand = p.sizes.pariskv.ld_cand as u64;
        let select = rerank.select_plan(1, 3, ld_cand, k as u64).unwrap();
        assert_eq!(select.launches.len(), 2 + merges, "k {k} at {tokens}");
        let ops: Vec<_> = p
            .operations
            .iter()
            .filter_map(|op| match op.role {
                Role::Pariskv(Stage::RerankSelect(step)) => {
                    Some((step, op.kernel.clone().unwrap()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(ops.len(), select.launches.len());
        for ((step, kernel), &(want, launch)) in ops.iter().zip(&select.launches) {
            assert_eq!(*step, want);
            assert_eq!(kernel.entry, rerank.select_step_entry(want));
            assert!(kernel.entry.contains("_mb_"));
            assert_eq!(kernel.launch, launch);
        }
        assert!(matches!(ops[0].0, RerankSelectStep::Chunk));
        assert!(matches!(
            ops.last().unwrap().0,
            RerankSelectStep::Write { .. }
        ));
        // Attention follows the top-k (in HBM it reads the store's rows: no fetch).
        let roles: Vec<Role> = p.operations.iter().map(|op| op.role).collect();
        assert!(matches!(
            roles[roles.len() - 2],
            Role::Pariskv(Stage::RerankSelect(_))
        ));
        assert_eq!(roles.last(), Some(&Role::Attention));
        let sizes = p.sizes.pariskv;
        assert_eq!(sizes.select_slots as u64, select.slot_words);
        assert_eq!(sizes.select_counts as u64, select.count_words);
        assert!(sizes.select_slots >= 3 * k * 2);
    }
}

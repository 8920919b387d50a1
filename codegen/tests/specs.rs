//! Spec names, validation, rendering determinism and default kernel sets (no NVRTC needed).

use codegen::model::{self, Basis, ModelShape};
use codegen::render::{render, render_any};
use codegen::spec::{
    EncodeMode, EncodeSpec, Family, GatherSpec, KernelSpec, KvRows, Placement, PlanMethod,
    PlanSpec, ScanSpec,
};
use codegen::{kernels_for, KernelSetOptions};
use scan_cells::scan_cells;
use std::collections::{BTreeSet, HashMap};

mod scan_cells;

/// Checks that `variations` changes every serialised field of `base` exactly once, one field
/// per variation, and that each change changes the kernel name.
fn assert_every_field_named<F: Family + serde::Serialize + Copy>(
    base: F,
    variations: Vec<(&'static str, F)>,
) {
    base.validate().expect("base spec is valid");
    let base_json = serde_json::to_value(base).unwrap();
    let fields: BTreeSet<String> = base_json.as_object().unwrap().keys().cloned().collect();
    let varied: BTreeSet<String> = variations.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(
        fields,
        varied,
        "every field of {} needs a variation",
        F::FAMILY
    );
    for (field, spec) in variations {
        spec.validate()
            .unwrap_or_else(|e| panic!("variation of {field} is invalid: {e}"));
        let json = serde_json::to_value(spec).unwrap();
        let changed: Vec<&String> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, v)| base_json[k.as_str()] != **v)
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            changed,
            vec![field],
            "the variation must change only {field}"
        );
        assert_ne!(
            spec.kernel_name(),
            base.kernel_name(),
            "changing {} {field} must change the kernel name",
            F::FAMILY
        );
    }
}

#[test]
fn encode_name_carries_every_field() {
    let s = EncodeSpec::new(128, EncodeMode::Bulk, false);
    // Destructured so that a new field fails to compile here until it has a variation.
    let EncodeSpec {
        head_dim: _,
        block: _,
        segment_words: _,
        mode: _,
        rotate: _,
        threads: _,
        kv_rows: _,
    } = s;
    assert_every_field_named(
        s,
        vec![
            ("head_dim", EncodeSpec { head_dim: 64, ..s }),
            ("block", EncodeSpec { block: 32, ..s }),
            (
                "segment_words",
                EncodeSpec {
                    segment_words: 64,
                    ..s
                },
            ),
            (
                "mode",
                EncodeSpec {
                    mode: EncodeMode::Append,
                    ..s
                },
            ),
            ("rotate", EncodeSpec { rotate: true, ..s }),
            ("threads", EncodeSpec { threads: 128, ..s }),
            (
                "kv_rows",
                EncodeSpec {
                    kv_rows: KvRows::Adjacent,
                    ..s
                },
            ),
        ],
    );
}

#[test]
fn plan_name_carries_every_field() {
    let s = PlanSpec::new(128, 4, PlanMethod::Fathom, false);
    let PlanSpec {
        head_dim: _,
        group: _,
        block: _,
        segment_words: _,
        method: _,
        rotate: _,
        threads: _,
        tail: _,
        tail_kv_rows: _,
        batched_runs: _,
        run_blocks: _,
        paired_runs: _,
        direct_line: _,
    } = s;
    let tail = s.with_tail(Placement::Hbm, KvRows::Separate);
    assert_every_field_named(
        s,
        vec![
            ("head_dim", PlanSpec { head_dim: 256, ..s }),
            ("group", PlanSpec { group: 7, ..s }),
            ("block", PlanSpec { block: 128, ..s }),
            (
                "segment_words",
                PlanSpec {
                    segment_words: 256,
                    ..s
                },
            ),
            (
                "method",
                PlanSpec {
                    method: PlanMethod::Thumbnail,
                    ..s
                },
            ),
            ("rotate", PlanSpec { rotate: true, ..s }),
            ("threads", PlanSpec { threads: 512, ..s }),
        ],
    );
    // Batched run tables (not serialised when off, so not among the fields above) have their
    // own name, with and without a tail.
    let batched = PlanSpec {
        batched_runs: true,
        ..s
    };
    batched.validate().unwrap();
    assert_eq!(batched.kernel_name(), format!("{}_rb", s.kernel_name()));
    assert_ne!(
        PlanSpec {
            batched_runs: true,
            ..tail
        }
        .kernel_name(),
        tail.kernel_name()
    );
    // Run tables shared among blocks (not serialised at 1, so not among the fields above):
    // each count its own name, with and without a tail, and the launch's z; 0, more than
    // MAX_RUN_BLOCKS and the combination with batched run tables refused.
    let mut shared = BTreeSet::new();
    for run_blocks in [2, 3, 4, 8, PlanSpec::MAX_RUN_BLOCKS] {
        for base in [s, tail] {
            let spec = PlanSpec { run_blocks, ..base };
            spec.validate().unwrap();
            assert!(spec.kernel_name().contains(&format!("_rt{run_blocks}")));
            assert_eq!(spec.launch_dims(3, 8).0 .2, run_blocks as u32);
            assert!(shared.insert(spec.kernel_name()));
        }
    }
    assert_eq!(s.launch_dims(3, 8).0 .2, 1);
    let json = serde_json::to_value(PlanSpec { run_blocks: 4, ..s }).unwrap();
    assert_eq!(json["run_blocks"], 4);
    assert!(serde_json::to_value(s).unwrap().get("run_blocks").is_none());
    let back: PlanSpec = serde_json::from_value(serde_json::to_value(s).unwrap()).unwrap();
    assert_eq!(back.run_blocks, 1);
    for run_blocks in [0, PlanSpec::MAX_RUN_BLOCKS + 1] {
        let bad = PlanSpec { run_blocks, ..s };
        assert_eq!(bad.validate().unwrap_err().field, "run_blocks");
    }
    let both = PlanSpec {
        run_blocks: 4,
        batched_runs: true,
        ..s
    };
    assert_eq!(both.validate().unwrap_err().field, "run_blocks");
    // Run-table entries by lane pairs (not serialised when off): their own name, alone and
    // with shared run tables or a tail; refused with batched run tables.
    for base in [s, tail, PlanSpec { run_blocks: 4, ..s }] {
        let paired = PlanSpec {
            paired_runs: true,
            ..base
        };
        paired.validate().unwrap();
        assert!(
            paired.kernel_name().contains("_rp"),
            "{}",
            paired.kernel_name()
        );
        assert!(shared.insert(paired.kernel_name()));
        assert_ne!(paired.kernel_name(), base.kernel_name());
    }
    let json = serde_json::to_value(PlanSpec {
        paired_runs: true,
        ..s
    })
    .unwrap();
    assert_eq!(json["paired_runs"], true);
    assert!(serde_json::to_value(s)
        .unwrap()
        .get("paired_runs")
        .is_none());
    assert!(!back.paired_runs);
    let both = PlanSpec {
        paired_runs: true,
        batched_runs: true,
        ..s
    };
    assert_eq!(both.validate().unwrap_err().field, "paired_runs");
    // The direct water line (not serialised when off): its own name with every way of writing
    // the run tables and with a tail; fathom's only, the other methods refused with the field.
    for base in [
        s,
        tail,
        batched,
        PlanSpec { run_blocks: 4, ..s },
        PlanSpec {
            paired_runs: true,
            ..tail
        },
    ] {
        let direct = PlanSpec {
            direct_line: true,
            ..base
        };
        direct.validate().unwrap();
        assert!(
            direct.kernel_name().contains("_dl"),
            "{}",
            direct.kernel_name()
        );
        assert!(shared.insert(direct.kernel_name()));
    }
    let json = serde_json::to_value(PlanSpec {
        direct_line: true,
        ..s
    })
    .unwrap();
    assert_eq!(json["direct_line"], true);
    assert!(serde_json::to_value(s)
        .unwrap()
        .get("direct_line")
        .is_none());
    assert!(!back.direct_line);
    for method in [
        PlanMethod::Sparq { r: 16 },
        PlanMethod::Thumbnail,
        PlanMethod::Uniform { t: 2 },
        PlanMethod::DoubleSparsity,
    ] {
        let bad = PlanSpec {
            direct_line: true,
            method,
            ..s
        };
        let err = bad.validate().unwrap_err();
        assert_eq!(err.field, "direct_line");
        assert!(err.to_string().contains("fathom"), "{err}");
    }
    // The runtime's count: at most 4 entries a thread, at most 4 blocks (1M tokens of 32k-token
    // segments at D = 128 and 256 threads: 4; 32k: 1).
    for (max_seg, head_dim, threads, want) in [
        (32, 128, 256, 4),
        (33, 128, 256, 4),
        (2, 128, 256, 1),
        (8, 128, 256, 1),
        (9, 128, 256, 2),
        (16, 128, 256, 2),
        (17, 128, 256, 3),
        (32, 64, 256, 2),
        (32, 128, 1024, 1),
        (0, 128, 256, 1),
        (1 << 20, 256, 32, 4),
        (4, 128, 0, 4),
    ] {
        assert_eq!(
            PlanSpec::run_blocks_for(max_seg, head_dim, threads),
            want,
            "{max_seg} segments, D = {head_dim}, {threads} threads"
        );
    }
    // The tail (not serialised when absent, so not among the fields above), its placement and
    // its row layout each have their own name.
    let tails: BTreeSet<String> = [
        s,
        tail,
        s.with_tail(Placement::Host, KvRows::Separate),
        s.with_tail(Placement::Hbm, KvRows::Adjacent),
    ]
    .iter()
    .map(|spec| spec.kernel_name())
    .collect();
    assert_eq!(tails.len(), 4);
    // Adjacent rows without a tail say nothing: refused.
    let stray = PlanSpec {
        tail_kv_rows: KvRows::Adjacent,
        ..s
    };
    assert_eq!(stray.validate().unwrap_err().field, "tail_kv_rows");
    // Nor a tail in blocks of more than 512 threads.
    let wide = PlanSpec {
        threads: 1024,
        ..tail
    };
    assert_eq!(wide.validate().unwrap_err().field, "threads");
    assert!(PlanSpec {
        threads: 512,
        ..tail
    }
    .validate()
    .is_ok());
    // Every method, and every method parameter, has its own name.
    let methods = [
        PlanMethod::Fathom,
        PlanMethod::Sparq { r: 16 },
        PlanMethod::Sparq { r: 32 },
        PlanMethod::DoubleSparsity,
        PlanMethod::Loki { r: 16 },
        PlanMethod::Loki { r: 32 },
        PlanMethod::Thumbnail,
        PlanMethod::Uniform { t: 1 },
        PlanMethod::Uniform { t: 4 },
    ];
    let names: BTreeSet<String> = methods
        .iter()
        .map(|&method| PlanSpec { method, ..s }.kernel_name())
        .collect();
    assert_eq!(names.len(), methods.len());
}

#[test]
fn gather_name_carries_every_field() {
    let s = GatherSpec::new(128);
    let GatherSpec {
        head_dim: _,
        block: _,
        segment_words: _,
        loads_in_flight: _,
        threads: _,
    } = s;
    assert_every_field_named(
        s,
        vec![
            ("head_dim", GatherSpec { head_dim: 64, ..s }),
            ("block", GatherSpec { block: 32, ..s }),
            (
                "segment_words",
                GatherSpec {
                    segment_words: 1024,
                    ..s
                },
            ),
            (
                "loads_in_flight",
                GatherSpec {
                    loads_in_flight: 8,
                    ..s
                },
            ),
            ("threads", GatherSpec { threads: 512, ..s }),
        ],
    );
}

#[test]
fn scan_name_carries_every_field() {
    let s = ScanSpec::new(128, 4, Placement::Hbm);
    let ScanSpec {
        head_dim: _,
        group: _,
        block: _,
        segment_words: _,
        tile_words: _,
        threads: _,
        placement: _,
        tensor_cores: _,
        peaks: _,
    } = s;
    assert_every_field_named(
        s,
        vec![
            ("head_dim", ScanSpec { head_dim: 64, ..s }),
            ("group", ScanSpec { group: 7, ..s }),
            ("block", ScanSpec { block: 32, ..s }),
            (
                "segment_words",
                ScanSpec {
                    segment_words: 64,
                    ..s
                },
            ),
            ("tile_words", ScanSpec { tile_words: 8, ..s }),
            ("threads", ScanSpec { threads: 512, ..s }),
            (
                "placement",
                ScanSpec {
                    placement: Placement::Host,
                    ..s
                },
            ),
            (
                "tensor_cores",
                ScanSpec {
                    tensor_cores: true,
                    ..s
                },
            ),
            ("peaks", ScanSpec { peaks: true, ..s }),
        ],
    );
}

/// A grid of valid scan specs: distinct specs, distinct names.
#[test]
fn scan_names_are_unique_over_a_grid() {
    let mut names: HashMap<String, ScanSpec> = HashMap::new();
    let tiles: Vec<(usize, usize)> = [2, 4, 16, 64]
        .into_iter()
        .flat_map(|t| [32, 64, 128, 256, 512, 1024].map(|threads| (t, threads)))
        .collect();
    for spec in scan_cells(&[1, 2, 3, 4, 5, 6, 7, 8, 12, 16], &tiles) {
        if spec.validate().is_err() {
            continue;
        }
        if let Some(other) = names.insert(spec.kernel_name(), spec) {
            panic!("{other:?} and {spec:?} share a name");
        }
    }
    assert!(
        names.len() > 100,
        "the grid has only {} valid specs",
        names.len()
    );
}

fn expect_error<F: Family + std::fmt::Debug>(spec: F, field: &str, allowed_part: &str) {
    let e = spec
        .validate()
        .map(|()| format!("{spec:?}"))
        .expect_err("spec must be refused");
    assert_eq!(e.family, F::FAMILY);
    assert_eq!(e.field, field, "{e}");
    assert!(e.allowed.contains(allowed_part), "{e}");
    let message = e.to_string();
    assert!(
        message.contains(field) && message.contains(&e.got),
        "{message}"
    );
    // Rendering validates first.
    assert!(render(&spec).is_err());
}

#[test]
fn validation_names_the_field_and_the_allowed_values() {
    let e = EncodeSpec::new(128, EncodeMode::Bulk, false);
    expect_error(
        EncodeSpec { head_dim: 72, ..e },
        "head_dim",
        "64, 80, 96, 128, 192 or 256",
    );
    expect_error(EncodeSpec { block: 48, ..e }, "block", "32, 64 or 128");
    expect_error(
        EncodeSpec {
            segment_words: 0,
            ..e
        },
        "segment_words",
        "whole",
    );
    expect_error(
        EncodeSpec {
            block: 128,
            segment_words: 3,
            ..e
        },
        "segment_words",
        "128-token",
    );
    expect_error(
        EncodeSpec { threads: 100, ..e },
        "threads",
        "multiple of 32",
    );
    expect_error(EncodeSpec { threads: 2048, ..e }, "threads", "1024");

    let p = PlanSpec::new(128, 4, PlanMethod::Fathom, false);
    expect_error(PlanSpec { group: 0, ..p }, "group", "1 to 16");
    expect_error(PlanSpec { group: 17, ..p }, "group", "1 to 16");
    expect_error(
        PlanSpec {
            method: PlanMethod::Sparq { r: 0 },
            ..p
        },
        "method.r",
        "1 to 128",
    );
    expect_error(
        PlanSpec {
            method: PlanMethod::Loki { r: 129 },
            ..p
        },
        "method.r",
        "1 to 128",
    );
    expect_error(
        PlanSpec {
            method: PlanMethod::Uniform { t: 5 },
            ..p
        },
        "method.t",
        "1 to 4",
    );
    expect_error(
        PlanSpec { head_dim: 512, ..p },
        "head_dim",
        "64, 80, 96, 128, 192 or 256",
    );

    let g = GatherSpec::new(128);
    expect_error(
        GatherSpec {
            segment_words: 3,
            ..g
        },
        "segment_words",
        "even",
    );
    expect_error(
        GatherSpec {
            loads_in_flight: 0,
            ..g
        },
        "loads_in_flight",
        "1 to 16",
    );

    let s = ScanSpec::new(128, 4, Placement::Hbm);
    expect_error(
        ScanSpec { tile_words: 3, ..s },
        "tile_words",
        "even divisor",
    );
    expect_error(
        ScanSpec {
            tile_words: 24,
            ..s
        },
        "tile_words",
        "even divisor",
    );
    // 16 words = 1024 tokens: 32 threads would score 32 tokens each.
    expect_error(
        ScanSpec { threads: 32, ..s },
        "threads",
        "128, 256, 512, 1024",
    );
    expect_error(
        ScanSpec {
            segment_words: 1,
            ..s
        },
        "segment_words",
        "even",
    );
    expect_error(ScanSpec { group: 0, ..s }, "group", "1 to 16");
    expect_error(ScanSpec { group: 17, ..s }, "group", "1 to 16");
    // A 512-word tile would need 32 tokens per thread even at 1024 threads.
    expect_error(
        ScanSpec {
            tile_words: 512,
            threads: 1024,
            ..s
        },
        "threads",
        "none",
    );
    // On the tensor cores, 2 tokens a thread at 1024 threads need more than the 64 registers a
    // thread has; the plain scan takes the tile.
    let wide = ScanSpec {
        tile_words: 32,
        threads: 1024,
        ..s
    };
    wide.validate().unwrap();
    expect_error(
        ScanSpec {
            tensor_cores: true,
            ..wide
        },
        "threads",
        "256, 512 for the tensor-core scan",
    );
}

#[test]
fn rendering_is_deterministic_and_strict() {
    for spec in kernels_for(
        &model::preset("qwen2.5-7b").unwrap(),
        &KernelSetOptions::default(),
    ) {
        let a = render_any(&spec).unwrap();
        let b = render_any(&spec).unwrap();
        assert_eq!(a, b, "{}", spec.kernel_name());
        for entry in spec.entry_points() {
            assert!(
                a.contains(&format!("{entry}(")),
                "the kernel carries its name {entry}"
            );
        }
        let code = a.lines().filter(|l| !l.trim_start().starts_with("//"));
        assert!(
            code.clone().all(|l| !l.contains("{{") && !l.contains("{%")),
            "no template syntax left in the code"
        );
    }
}

#[test]
fn scan_reads_planes_by_depth_class_with_unrolled_plane_loops() {
    let source = render(&ScanSpec::new(128, 7, Placement::Hbm)).unwrap();
    for depth in 1..=4 {
        assert!(
            source.contains(&format!("// Depth class {depth}:")),
            "class {depth}"
        );
    }
    // One bit extraction per plane of every class: 4 + 3 + 2 + 1.
    assert_eq!(source.matches("__funnelshift_r(").count(), 10);
}

/// `peaks`: the name's last suffix (`_pk`, after `_tc`), `false` when a spec omits it, and only
/// its kernels take the peaks (parameters after `ld_scores`, the helper of
/// `scan_peaks.cuh.tera`).
#[test]
fn scan_peaks_is_named_defaulted_and_only_in_its_kernels() {
    let plain = ScanSpec::new(128, 4, Placement::Hbm);
    let tc = ScanSpec {
        tensor_cores: true,
        ..plain
    };
    let name = |s: ScanSpec| s.kernel_name();
    assert_eq!(
        name(ScanSpec {
            peaks: true,
            ..plain
        }),
        format!("{}_pk", name(plain))
    );
    assert_eq!(
        name(ScanSpec { peaks: true, ..tc }),
        format!("{}_pk", name(tc))
    );
    assert!(name(ScanSpec { peaks: true, ..tc }).ends_with("_tc_pk"));

    let json = r#"{"family": "scan", "head_dim": 128, "group": 4, "block": 64,
        "segment_words": 512, "tile_words": 16, "threads": 256, "placement": "hbm"}"#;
    let read: KernelSpec = serde_json::from_str(json).unwrap();
    assert_eq!(read, KernelSpec::Scan(plain));
    let json = r#"{"family": "scan", "head_dim": 128, "group": 4, "block": 64,
        "segment_words": 512, "tile_words": 16, "threads": 256, "placement": "hbm",
        "tensor_cores": true, "peaks": true}"#;
    let read: KernelSpec = serde_json::from_str(json).unwrap();
    let both = ScanSpec { peaks: true, ..tc };
    assert_eq!(read, KernelSpec::Scan(both));
    let back: KernelSpec = serde_json::from_str(&serde_json::to_string(&read).unwrap()).unwrap();
    assert_eq!(back, read);

    for spec in [plain, tc] {
        let without = render(&spec).unwrap();
        let with = render(&ScanSpec {
            peaks: true,
            ..spec
        })
        .unwrap();
        assert!(!without.contains("peaks") && !without.contains("fathom_raw_key"));
        assert!(
            with.contains("    int ld_scores,\n    unsigned int* peaks,\n    int ld_peaks)\n{"),
            "{}",
            name(spec)
        );
        // Defined once, called once.
        assert_eq!(
            with.matches("fathom_store_peaks(").count(),
            2,
            "{}",
            name(spec)
        );
    }
}

#[test]
fn kernel_specs_round_trip_through_json() {
    for spec in kernels_for(
        &model::preset("llama-3.1-70b").unwrap(),
        &KernelSetOptions::default(),
    ) {
        let json = serde_json::to_string(&spec).unwrap();
        assert!(json.contains(&format!("\"family\":\"{}\"", spec.family())));
        let back: KernelSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
    }
}

#[test]
fn default_sets_cover_every_family_and_follow_the_shape() {
    // The presets, and shapes of every other head dimension with G = 16: ParisKV included.
    let mut shapes: Vec<ModelShape> = model::presets().iter().map(|p| p.shape()).collect();
    for head_dim in [64, 80, 96, 192, 256] {
        shapes.push(ModelShape {
            name: format!("d{head_dim}-g16"),
            layers: 1,
            query_heads: 32,
            kv_heads: 2,
            head_dim,
            qk_norm: false,
            basis: Basis::Klt,
        });
    }
    for shape in shapes {
        let set = kernels_for(&shape, &KernelSetOptions::default());
        let families: BTreeSet<&str> = set.iter().map(KernelSpec::family).collect();
        assert_eq!(
            families,
            BTreeSet::from([
                "attention",
                "encode",
                "fetch",
                "gather",
                "landmark",
                "oracle",
                "pariskv_index",
                "pariskv_query",
                "pariskv_rerank",
                "pariskv_topc",
                "pariskv_vote",
                "plan",
                "scan",
                "select"
            ])
        );
        let names: BTreeSet<String> = set.iter().map(KernelSpec::kernel_name).collect();
        assert_eq!(names.len(), set.len(), "names are unique within a set");
        for spec in &set {
            spec.validate().unwrap();
            // Selection works on scores alone: its kernel does not depend on the head dimension.
            if spec.family() != "select" {
                let d = format!("_d{}_", shape.head_dim);
                assert!(spec.kernel_name().contains(&d), "{}", spec.kernel_name());
            }
        }
        let rotated = set.iter().any(|s| s.kernel_name().contains("_rot_"));
        assert_eq!(rotated, shape.basis == Basis::Klt, "{}", shape.name);
        let loki = set.iter().any(|s| s.kernel_name().contains("loki"));
        assert_eq!(loki, shape.basis == Basis::Klt);
    }
    let seven = ModelShape {
        name: "g7".into(),
        layers: 1,
        query_heads: 28,
        kv_heads: 4,
        head_dim: 64,
        qk_norm: true,
        basis: Basis::Raw,
    };
    let set = kernels_for(
        &seven,
        &KernelSetOptions {
            block: 32,
            segment_words: 64,
        },
    );
    assert!(set
        .iter()
        .filter(|s| matches!(s, KernelSpec::Scan(_) | KernelSpec::Plan(_)))
        .all(|s| s.kernel_name().contains("_g7_") && s.kernel_name().contains("_b32_s64_")));
}

#[test]
fn launch_dims_follow_the_abi() {
    let scan = ScanSpec::new(128, 4, Placement::Hbm);
    assert_eq!(scan.launch_dims(2, 8, 5), ((32, 5, 16), (256, 1, 1), 0));
    let plan = PlanSpec::new(128, 4, PlanMethod::Fathom, false);
    assert_eq!(plan.launch_dims(2, 8), ((8, 2, 1), (256, 1, 1), 0));
    let gather = GatherSpec::new(256);
    assert_eq!(gather.launch_dims(3, 4, 7), ((256, 7, 12), (256, 1, 1), 0));
    let bulk = EncodeSpec::new(128, EncodeMode::Bulk, false);
    assert_eq!(bulk.launch_dims(1, 8, 640), ((10, 8, 1), (256, 1, 1), 0));
    // 32-token blocks: a range may start mid-word and touch one word more.
    let half = EncodeSpec { block: 32, ..bulk };
    assert_eq!(half.launch_dims(1, 8, 640).0, (11, 8, 1));
    let append = EncodeSpec::new(128, EncodeMode::Append, true);
    assert_eq!(append.launch_dims(4, 8, 0).0, (1, 8, 4));
}

#[test]
fn the_default_set_validates_at_every_segment_size_the_store_allows() {
    // The default scan tiles (16 and 64 words) are fitted to segments they do not divide.
    let glm = ModelShape {
        name: "glm-4-9b".into(),
        layers: 40,
        query_heads: 32,
        kv_heads: 2,
        head_dim: 128,
        qk_norm: false,
        basis: Basis::Klt,
    };
    let phi = ModelShape {
        name: "phi-3-mini".into(),
        layers: 32,
        query_heads: 32,
        kv_heads: 32,
        head_dim: 96,
        qk_norm: false,
        basis: Basis::Klt,
    };
    for segment_words in [2, 6, 16, 48, 100, 512, 1000, 4096] {
        for preset in ["qwen3-8b", "qwen2.5-7b", "llama-3.1-70b"] {
            let options = KernelSetOptions {
                block: 64,
                segment_words,
            };
            for spec in kernels_for(&model::preset(preset).unwrap(), &options)
                .into_iter()
                .chain(kernels_for(&glm, &options))
                .chain(kernels_for(&phi, &options))
            {
                spec.validate().unwrap_or_else(|e| {
                    panic!("{preset}, S = {segment_words}: {}: {e}", spec.kernel_name())
                });
            }
        }
    }
}

//! Generated kernels compiled by NVRTC: snapshots of the CUDA and PTX of the preset shapes,
//! determinism, and a sampled grid of specs compiling without a warning.
//!
//! These tests need NVRTC and fail (never skip) without it: `scripts/test.sh` installs the
//! pinned wheel and points `FATHOM_NVRTC` at it. Update snapshots with `INSTA_UPDATE=always`
//! (or `cargo insta accept`) and review the `.snap` diffs.

use codegen::emit::{build_kernel, COMPILE_OPTIONS};
use codegen::model::{self, Basis, ModelShape};
use codegen::nvrtc;
use codegen::render::render_any;
use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{
    EncodeMode, EncodeSpec, Family, GatherSpec, KernelSpec, KvRows, OracleSpec, PariskvRerankSpec,
    Placement, PlanMethod, PlanSpec, ScanSpec, SelectAlgorithm, SelectSpec,
};
use codegen::{kernels_for, KernelSetOptions};
use scan_cells::scan_cells;

mod scan_cells;

const ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// The shapes beyond the presets that the snapshots hold whole (every family, both
/// architectures): D = 96 (Phi-3-mini, G = 1) and G = 16 (GLM-4-9B, D = 128), read from their
/// real `config.json` files.
const NEW_SHAPES: [(&str, &str); 2] = [
    ("phi-3-mini", "phi-3-mini-4k-instruct.json"),
    ("glm-4-9b", "glm-4-9b-chat.json"),
];

fn fixture_shape(name: &str, file: &str) -> ModelShape {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(file);
    ModelShape {
        name: name.into(),
        ..model::from_config_path(path).unwrap()
    }
}

/// The snapshot shapes: three presets (G = 4, 7, 8), the other two power-of-two head
/// dimensions, and [`NEW_SHAPES`].
fn shapes() -> Vec<ModelShape> {
    let mut shapes: Vec<ModelShape> = ["qwen3-8b", "qwen2.5-7b", "llama-3.1-70b"]
        .iter()
        .map(|name| model::preset(name).unwrap())
        .collect();
    // SmolLM2-135M's shape (§11): G = 3, D = 64, no QK-norm.
    shapes.push(ModelShape {
        name: "d64-g3".into(),
        layers: 30,
        query_heads: 9,
        kv_heads: 3,
        head_dim: 64,
        qk_norm: false,
        basis: Basis::Klt,
    });
    shapes.push(ModelShape {
        name: "d256-g2".into(),
        layers: 26,
        query_heads: 8,
        kv_heads: 4,
        head_dim: 256,
        qk_norm: true,
        basis: Basis::Raw,
    });
    shapes.extend(NEW_SHAPES.map(|(name, file)| fixture_shape(name, file)));
    shapes
}

fn compile(spec: &KernelSpec, arch: &str) -> nvrtc::Compiled {
    let source = render_any(spec).unwrap();
    let options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
    nvrtc::compile(
        &source,
        &format!("{}.cu", spec.kernel_name()),
        arch,
        &options,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", spec.kernel_name()))
}

#[test]
fn cuda_snapshots_of_the_default_sets() {
    for shape in shapes() {
        for spec in kernels_for(&shape, &KernelSetOptions::default()) {
            let source = render_any(&spec).unwrap();
            insta::assert_snapshot!(
                format!("cuda-{}-{}", shape.name, spec.kernel_name()),
                source
            );
        }
    }
}

/// PTX of every kernel of qwen3-8b, of the scans (the kernels whose code depends most on the
/// shape) of every shape, for both architectures, and of one kernel of every family (both
/// scans) of each of [`NEW_SHAPES`], for both architectures. The whole set would be several MB.
#[test]
fn ptx_snapshots() {
    for arch in ARCHS {
        for shape in shapes() {
            let new = NEW_SHAPES.iter().any(|(name, _)| *name == shape.name);
            let mut families = Vec::new();
            for spec in kernels_for(&shape, &KernelSetOptions::default()) {
                let all = shape.name == "qwen3-8b" && arch == "sm_90";
                let first_of_family = new && !families.contains(&spec.family());
                families.push(spec.family());
                if !all && !first_of_family && !matches!(spec, KernelSpec::Scan(_)) {
                    continue;
                }
                let compiled = compile(&spec, arch);
                assert_eq!(compiled.log, "", "{}: NVRTC warned", spec.kernel_name());
                insta::assert_snapshot!(
                    format!("ptx-{arch}-{}-{}", shape.name, spec.kernel_name()),
                    compiled.ptx
                );
            }
        }
    }
}

/// The compacting and the one-read selects are not in the default sets (the compacting one is a
/// tuning choice, the one-read ones too): their source and PTX for the default select tile of
/// qwen3-8b (G = 4), and the one-read variants' for qwen2.5-7b (G = 7) and llama-3.1-70b
/// (G = 8, the unfused one) too, are snapshotted here (the peaks one for G = 4 and 7, its
/// one-block form for G = 4, both cluster ones for G = 4 and 7).
#[test]
fn select_variant_snapshots() {
    for (preset, algorithm) in [
        ("qwen3-8b", SelectAlgorithm::Compact),
        ("qwen3-8b", SelectAlgorithm::Onepass),
        ("qwen2.5-7b", SelectAlgorithm::Onepass),
        ("llama-3.1-70b", SelectAlgorithm::Onepass),
        ("qwen3-8b", SelectAlgorithm::Fused),
        ("qwen2.5-7b", SelectAlgorithm::Fused),
        ("qwen3-8b", SelectAlgorithm::Peaks),
        ("qwen2.5-7b", SelectAlgorithm::Peaks),
        ("qwen3-8b", SelectAlgorithm::PeaksHead),
        ("qwen3-8b", SelectAlgorithm::ScanPeaks),
        ("qwen2.5-7b", SelectAlgorithm::ScanPeaks),
        ("qwen3-8b", SelectAlgorithm::ScanPeaksHead),
        ("qwen3-8b", SelectAlgorithm::Cluster),
        ("qwen2.5-7b", SelectAlgorithm::Cluster),
        ("qwen3-8b", SelectAlgorithm::ScanPeaksCluster),
        ("qwen2.5-7b", SelectAlgorithm::ScanPeaksCluster),
        ("qwen3-8b", SelectAlgorithm::Resident),
        ("qwen2.5-7b", SelectAlgorithm::Resident),
    ] {
        let shape = model::preset(preset).unwrap();
        let plain = kernels_for(&shape, &KernelSetOptions::default())
            .into_iter()
            .find_map(|spec| match spec {
                KernelSpec::Select(s) => Some(s),
                _ => None,
            })
            .expect("the default set has a select");
        let spec: KernelSpec = SelectSpec { algorithm, ..plain }.into();
        snapshot_variant(preset, &spec);
    }
}

/// The rerank's many-block top-k (`select: multiblock`, opt-in until measured on a GPU): the
/// source and sm_90 PTX of qwen3-8b's rerank (both placements) with it.
#[test]
fn pariskv_select_variant_snapshots() {
    let shape = model::preset("qwen3-8b").unwrap();
    for spec in kernels_for(&shape, &KernelSetOptions::default()) {
        let KernelSpec::PariskvRerank(plain) = spec else {
            continue;
        };
        let spec: KernelSpec = PariskvRerankSpec {
            select: RerankSelect::Multiblock,
            ..plain
        }
        .into();
        snapshot_variant("qwen3-8b", &spec);
    }
}

/// The compacting and the one-read selects at G = 16 (GLM-4-9B's group), for both
/// architectures.
#[test]
fn compact_select_snapshots_at_group_16() {
    let shape = fixture_shape("glm-4-9b", "glm-4-9b-chat.json");
    for algorithm in [
        SelectAlgorithm::Compact,
        SelectAlgorithm::Onepass,
        SelectAlgorithm::Fused,
    ] {
        let spec: KernelSpec = kernels_for(&shape, &KernelSetOptions::default())
            .into_iter()
            .find_map(|spec| match spec {
                KernelSpec::Select(s) => Some(SelectSpec { algorithm, ..s }.into()),
                _ => None,
            })
            .expect("the default set has a select");
        let source = render_any(&spec).unwrap();
        insta::assert_snapshot!(format!("cuda-glm-4-9b-{}", spec.kernel_name()), source);
        for arch in ARCHS {
            let compiled = compile(&spec, arch);
            assert_eq!(compiled.log, "", "{}: NVRTC warned", spec.kernel_name());
            insta::assert_snapshot!(
                format!("ptx-{arch}-glm-4-9b-{}", spec.kernel_name()),
                compiled.ptx
            );
        }
    }
}

/// Every kernel of the shapes at the edges of §1 that no snapshot holds compiles without a
/// warning: D = 80 (not a multiple of 32, a row of 10 16-byte units) with an odd G, D = 192
/// (24 units) with G = 16, D = 64 with G = 16 (more query heads than the 8 lanes of a row) and
/// D = 256 with G = 16.
#[test]
fn every_kernel_of_the_edge_shapes_compiles_without_warnings() {
    for (head_dim, query_heads, kv_heads) in [(80, 10, 2), (192, 32, 2), (64, 32, 2), (256, 16, 1)]
    {
        let shape = ModelShape {
            name: format!("d{head_dim}"),
            layers: 2,
            query_heads,
            kv_heads,
            head_dim,
            qk_norm: false,
            basis: Basis::Klt,
        };
        shape.validate().unwrap();
        for spec in kernels_for(&shape, &KernelSetOptions::default()) {
            let compiled = compile(&spec, "sm_90");
            assert_eq!(compiled.log, "", "{}: NVRTC warned", spec.kernel_name());
            for entry in spec.entry_points() {
                assert!(
                    compiled.ptx.contains(&format!(".entry {entry}(")),
                    "{entry}"
                );
            }
        }
    }
}

#[test]
fn the_same_source_compiles_to_the_same_ptx() {
    let spec: KernelSpec = ScanSpec::new(128, 7, Placement::Host).into();
    let a = build_kernel(&spec, "sm_90").unwrap();
    let b = build_kernel(&spec, "sm_90").unwrap();
    assert_eq!(a.source, b.source);
    assert_eq!(a.ptx, b.ptx);
    assert!(a.ptx.contains(&format!(".entry {}(", spec.kernel_name())));
    let other = build_kernel(&spec, "sm_80").unwrap();
    assert_ne!(a.ptx, other.ptx, "the architecture reaches the PTX");
}

/// A valid spec per cell of a sampled grid, with threads chosen to fit the tile.
fn scan_grid() -> Vec<ScanSpec> {
    let tiles = [(2, 32), (8, 128), (16, 256), (64, 1024)];
    scan_cells(&[1, 3, 4, 7, 8, 16], &tiles)
        .into_iter()
        // Thin the grid: every block size, but not for every cell.
        .filter(|s| (s.head_dim + s.group + s.tile_words + s.block) % 5 == 0)
        .collect()
}

fn other_grid() -> Vec<KernelSpec> {
    let mut specs: Vec<KernelSpec> = Vec::new();
    for head_dim in [64, 80, 96, 128, 192, 256] {
        for block in [32, 64, 128] {
            for mode in [EncodeMode::Bulk, EncodeMode::Append] {
                let rotate = (head_dim / 64 + block / 32) % 2 == 0;
                specs.push(
                    EncodeSpec {
                        block,
                        ..EncodeSpec::new(head_dim, mode, rotate)
                    }
                    .into(),
                );
            }
            specs.push(
                GatherSpec {
                    block,
                    segment_words: 64,
                    ..GatherSpec::new(head_dim)
                }
                .into(),
            );
        }
        for (group, method) in [
            (1, PlanMethod::Fathom),
            (7, PlanMethod::Fathom),
            (3, PlanMethod::Sparq { r: 16 }),
            (8, PlanMethod::DoubleSparsity),
            (2, PlanMethod::Loki { r: 32 }),
            (5, PlanMethod::Thumbnail),
            (6, PlanMethod::Uniform { t: 1 }),
            (16, PlanMethod::Fathom),
            (16, PlanMethod::Sparq { r: 32 }),
        ] {
            let rotate = group % 2 == 1;
            specs.push(PlanSpec::new(head_dim, group, method, rotate).into());
        }
    }
    specs
}

#[test]
fn a_sampled_grid_of_specs_compiles_without_warnings() {
    let specs: Vec<KernelSpec> = scan_grid()
        .into_iter()
        .map(KernelSpec::from)
        .chain(other_grid())
        .collect();
    assert!(specs.len() > 60, "the grid has {} specs", specs.len());
    for spec in &specs {
        spec.validate().unwrap_or_else(|e| panic!("{e}"));
        let compiled = compile(spec, "sm_90");
        assert_eq!(compiled.log, "", "{}: NVRTC warned", spec.kernel_name());
        assert!(compiled.ptx.contains(&spec.kernel_name()));
    }
}

#[test]
fn every_family_template_is_embedded() {
    // A family whose template is missing from render.rs fails here, not at emit time.
    assert!(render_any(&EncodeSpec::new(64, EncodeMode::Bulk, false).into()).is_ok());
    assert_eq!(<ScanSpec as Family>::FAMILY, "scan");
}

#[test]
fn emit_writes_sources_ptx_and_manifest_or_nothing() {
    use codegen::emit::{emit, sha256_hex, Manifest};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("kernels");
    let shape = model::preset("llama-3.1-70b").unwrap();
    let manifest = emit(&shape, &KernelSetOptions::default(), "sm_90", &out).unwrap();
    let set = kernels_for(&shape, &KernelSetOptions::default());
    assert_eq!(manifest.kernels.len(), set.len());
    let written: Manifest =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(written, manifest);
    for (entry, spec) in manifest.kernels.iter().zip(&set) {
        let source = std::fs::read_to_string(out.join(format!("{}.cu", entry.name))).unwrap();
        assert_eq!(entry.source_sha256, sha256_hex(&source));
        assert_eq!(source, render_any(spec).unwrap());
        let ptx = std::fs::read_to_string(out.join(format!("{}.ptx", entry.name))).unwrap();
        assert_eq!(entry.entry_points, spec.entry_points());
        for point in &entry.entry_points {
            assert!(ptx.contains(&format!(".entry {point}(")), "{point} missing");
        }
        assert_eq!(entry.family, spec.family());
        assert_eq!(entry.arch, "sm_90");
        let measured: Vec<&str> = entry.resources.iter().map(|r| r.entry.as_str()).collect();
        assert_eq!(
            measured, entry.entry_points,
            "resources of every entry, in order"
        );
        assert!(entry
            .resources
            .iter()
            .all(|r| (1..=255).contains(&r.registers)));
        assert_eq!(entry.spec, spec.fields_json());
    }
    // A bad architecture fails before anything is written, and the old output stays.
    let before = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(emit(&shape, &KernelSetOptions::default(), "sm_9x", &out).is_err());
    assert_eq!(
        std::fs::read_to_string(out.join("manifest.json")).unwrap(),
        before
    );
    let fresh = dir.path().join("fresh");
    let bad = KernelSetOptions {
        block: 48,
        segment_words: 512,
    };
    let e = emit(&shape, &bad, "sm_90", &fresh).unwrap_err().to_string();
    assert!(e.contains("block") && e.contains("32, 64 or 128"), "{e}");
    assert!(!fresh.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no partial directory left"
    );
}

/// A variant spec of `preset`'s set: its source and its sm_90 PTX (compiled without a warning,
/// every entry point present) as snapshots named after the preset and the kernel.
fn snapshot_variant(preset: &str, spec: &KernelSpec) {
    let source = render_any(spec).unwrap();
    insta::assert_snapshot!(format!("cuda-{preset}-{}", spec.kernel_name()), source);
    let compiled = compile(spec, "sm_90");
    assert_eq!(compiled.log, "", "{}: NVRTC warned", spec.kernel_name());
    for entry in spec.entry_points() {
        assert!(
            compiled.ptx.contains(&format!(".entry {entry}(")),
            "{entry}"
        );
    }
    insta::assert_snapshot!(
        format!("ptx-sm_90-{preset}-{}", spec.kernel_name()),
        compiled.ptx
    );
}

/// The tensor-core scan (`templates/scan_tc.cu.tera`) at every group size the grid of the plain
/// scan samples, several tiles, blocks and head dimensions, both placements and both
/// architectures: it compiles without a warning, and at the tiles autotune tries for qwen3-8b's
/// shape ptxas neither spills nor exceeds the static shared memory the spec sized.
#[test]
fn tensor_core_scans_compile_without_warnings_or_spills() {
    let tiles = [(2, 32), (4, 64), (8, 128), (16, 256), (64, 1024)];
    let mut specs: Vec<ScanSpec> = scan_cells(&[1, 3, 4, 7, 8, 16], &tiles)
        .into_iter()
        .filter(|s| (s.head_dim + s.group + s.tile_words + s.block) % 7 == 0)
        .map(|s| ScanSpec {
            tensor_cores: true,
            ..s
        })
        .filter(|s| s.validate().is_ok())
        .collect();
    for (tile_words, threads) in [(4, 64), (8, 128), (16, 256), (32, 256), (32, 512)] {
        for placement in [Placement::Hbm, Placement::Host] {
            specs.push(ScanSpec {
                tile_words,
                threads,
                tensor_cores: true,
                ..ScanSpec::new(128, 4, placement)
            });
        }
    }
    assert!(specs.len() > 30, "the grid has {} specs", specs.len());
    for spec in &specs {
        spec.validate().unwrap_or_else(|e| panic!("{e}"));
        assert!(
            spec.kernel_name().ends_with("_tc"),
            "{}",
            spec.kernel_name()
        );
        for arch in ARCHS {
            let compiled = compile(&(*spec).into(), arch);
            assert_eq!(
                compiled.log,
                "",
                "{} ({arch}): NVRTC warned",
                spec.kernel_name()
            );
        }
        if spec.head_dim == 128 && spec.group == 4 && spec.block == 64 {
            let source = render_any(&(*spec).into()).unwrap();
            let options: Vec<String> = COMPILE_OPTIONS.iter().map(|o| o.to_string()).collect();
            let entry = [spec.kernel_name()];
            let r = &codegen::resources::measure(&source, "scan_tc.cu", "sm_90", &options, &entry)
                .unwrap()[0];
            assert_eq!(
                (r.spill_store_bytes, r.spill_load_bytes, r.stack_bytes),
                (0, 0, 0),
                "{}: {r:?}",
                spec.kernel_name()
            );
            assert!(
                r.shared_bytes as usize <= spec.shared_bytes(),
                "{}: {} bytes of shared memory, the spec sized {}",
                spec.kernel_name(),
                r.shared_bytes,
                spec.shared_bytes()
            );
            eprintln!("{}: {r:?}", spec.kernel_name());
        }
    }
}

/// The scans that also write the peaks of their halves (`ScanSpec::peaks`), plain and on the
/// tensor cores, at G = 4 and 7, both placements, several tiles and a few other shapes: they
/// compile without a warning for both architectures (the plain one's `__reduce_max_sync` is
/// sm_80's `redux.sync`), and where the same kernel without peaks keeps nothing in local memory
/// the peaks one keeps nothing there either (ptxas at sm_90).
/// What `spec`'s kernel uses on sm_90 (ptxas's report), after checking that NVRTC compiles it
/// without a warning.
fn sm90_resources(spec: &KernelSpec) -> codegen::resources::EntryResources {
    sm90_entry_resources(spec, &[spec.kernel_name()]).remove(0)
}

/// [`sm90_resources`] of each of `entries` (a kernel with several entry points).
fn sm90_entry_resources(
    spec: &KernelSpec,
    entries: &[String],
) -> Vec<codegen::resources::EntryResources> {
    let options: Vec<String> = COMPILE_OPTIONS
        .iter()
        .map(|o| o.to_string())
        .chain(["--ptxas-options=-v".to_string()])
        .collect();
    let source = render_any(spec).unwrap();
    let name = spec.kernel_name();
    let compiled = nvrtc::compile(&source, &format!("{name}.cu"), "sm_90", &options)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        !compiled.log.contains("warning"),
        "{name}: {}",
        compiled.log
    );
    entries
        .iter()
        .map(|entry| codegen::resources::parse_entry(&compiled.log, entry).unwrap())
        .collect()
}

#[test]
fn peaks_scans_compile_without_warnings_or_new_local_memory() {
    let tiles = [(4, 64), (8, 128), (16, 256), (32, 512), (64, 1024)];
    let mut specs = Vec::new();
    for group in [4, 7] {
        for placement in [Placement::Hbm, Placement::Host] {
            for tensor_cores in [false, true] {
                for (tile_words, threads) in tiles {
                    specs.push(ScanSpec {
                        tile_words,
                        threads,
                        tensor_cores,
                        peaks: true,
                        ..ScanSpec::new(128, group, placement)
                    });
                }
            }
        }
    }
    for (head_dim, group, block, tensor_cores) in [
        (64, 3, 32, false),
        (256, 8, 128, true),
        (96, 1, 64, true),
        (192, 16, 32, false),
    ] {
        specs.push(ScanSpec {
            block,
            tensor_cores,
            peaks: true,
            ..ScanSpec::new(head_dim, group, Placement::Hbm)
        });
    }
    specs.retain(|s| s.validate().is_ok());
    assert!(specs.len() >= 30, "the grid has {} specs", specs.len());
    let resources = |spec: ScanSpec| sm90_resources(&spec.into());
    for spec in &specs {
        let name = spec.kernel_name();
        assert!(name.ends_with("_pk"), "{name}");
        let compiled = compile(&(*spec).into(), "sm_80");
        assert_eq!(compiled.log, "", "{name} (sm_80): NVRTC warned");
        assert!(compiled.ptx.contains(&format!(".entry {name}(")), "{name}");
        let with = resources(*spec);
        let without = resources(ScanSpec {
            peaks: false,
            ..*spec
        });
        if !without.spills() && without.stack_bytes == 0 {
            assert!(
                !with.spills() && with.stack_bytes == 0,
                "{name}: {with:?}, without peaks {without:?}"
            );
        }
        eprintln!(
            "{name}: {} registers, stack {} spill {} (without peaks {}, {}, {})",
            with.registers,
            with.stack_bytes,
            with.spill_store_bytes,
            without.registers,
            without.stack_bytes,
            without.spill_store_bytes
        );
    }
}

/// Plans with batched run tables (`PlanSpec::batched_runs`, opt-in), run tables shared among
/// blocks (`PlanSpec::run_blocks`) or entries written by lane pairs (`PlanSpec::paired_runs`,
/// opt-in, alone and with shared tables) compile without warnings and with no more local memory
/// than the same plan without, at every thread count (batches of 8 up to 256 threads, of 4
/// above) and with a tail; without the option the source has nothing of it.
#[test]
fn plans_with_batched_or_shared_run_tables_compile_without_new_local_memory() {
    let mut specs = Vec::new();
    for (i, (head_dim, group)) in [(64, 3), (96, 7), (128, 4), (128, 16), (256, 8)]
        .into_iter()
        .enumerate()
    {
        for (j, threads) in [32, 128, 256, 512, 1024].into_iter().enumerate() {
            let method = [
                PlanMethod::Fathom,
                PlanMethod::Sparq { r: 16 },
                PlanMethod::Uniform { t: 2 },
            ][(i + j) % 3];
            let plain = PlanSpec {
                threads,
                ..PlanSpec::new(head_dim, group, method, (i + j) % 2 == 1)
            };
            let batched = PlanSpec {
                batched_runs: true,
                ..plain
            };
            let shared = PlanSpec {
                run_blocks: [2, 4, 8][(i + j) % 3],
                ..plain
            };
            let paired = PlanSpec {
                paired_runs: true,
                ..[plain, shared][(i + j) % 2]
            };
            for spec in [batched, shared, paired] {
                specs.push(spec);
                if threads <= PlanSpec::TAIL_MAX_THREADS {
                    specs.push(spec.with_tail(Placement::Hbm, KvRows::Adjacent));
                }
            }
        }
    }
    for spec in &specs {
        spec.validate().unwrap();
        let name = spec.kernel_name();
        let plain = PlanSpec {
            batched_runs: false,
            run_blocks: 1,
            paired_runs: false,
            ..*spec
        };
        let (marker, line) = if spec.paired_runs {
            assert!(name.contains("_rp"), "{name}");
            ("half & 1", "entry[half & 1] = half & 1".to_string())
        } else if spec.batched_runs {
            let batch = spec.run_batch();
            assert_eq!(batch, if spec.threads > 256 { 4 } else { 8 });
            assert!(name.contains("_rb"), "{name}");
            ("RUN_BATCH", format!("constexpr int RUN_BATCH = {batch};"))
        } else {
            assert!(name.contains(&format!("_rt{}", spec.run_blocks)), "{name}");
            (
                "RUN_BLOCKS",
                format!("constexpr int RUN_BLOCKS = {};", spec.run_blocks),
            )
        };
        assert!(
            render_any(&(*spec).into()).unwrap().contains(&line),
            "{name}"
        );
        let plain_source = render_any(&plain.into()).unwrap();
        assert!(!plain_source.contains(marker) && !plain_source.contains("writes_plan"));
        let with = sm90_resources(&(*spec).into());
        let without = sm90_resources(&plain.into());
        assert!(
            with.stack_bytes <= without.stack_bytes
                && with.spill_store_bytes <= without.spill_store_bytes,
            "{name}: {with:?}, without {without:?}"
        );
    }
}

/// The plan that also scores the tail (`PlanSpec::tail`, the runtime's default): every head
/// dimension, small and large groups, both placements and row layouts, the plane methods, at
/// the plan's thread counts, compile without warnings, and with at most 8 bytes of local memory
/// where neither the plain plan nor the oracle kernel of the same rows and threads has any;
/// without the option the source has nothing of the tail.
#[test]
fn plans_scoring_the_tail_compile_without_warnings_or_new_local_memory() {
    let mut specs = Vec::new();
    for (head_dim, group) in [
        (64, 3),
        (80, 1),
        (96, 7),
        (128, 4),
        (128, 16),
        (192, 2),
        (256, 8),
    ] {
        for placement in [Placement::Hbm, Placement::Host] {
            for kv_rows in [KvRows::Separate, KvRows::Adjacent] {
                for (method, rotate, threads) in [
                    (PlanMethod::Fathom, false, 256),
                    (PlanMethod::Sparq { r: 16 }, true, 128),
                    (PlanMethod::Uniform { t: 2 }, false, 512),
                ] {
                    specs.push(PlanSpec {
                        threads,
                        ..PlanSpec::new(head_dim, group, method, rotate)
                            .with_tail(placement, kv_rows)
                    });
                }
            }
        }
    }
    let resources = |spec: KernelSpec| sm90_resources(&spec);
    for spec in &specs {
        spec.validate().unwrap();
        let name = spec.kernel_name();
        assert!(name.contains("_tail"), "{name}");
        let plain = PlanSpec {
            tail: None,
            tail_kv_rows: KvRows::Separate,
            ..*spec
        };
        let source = render_any(&(*spec).into()).unwrap();
        assert!(source.contains("score_rows(k_rows, tail_bh"), "{name}");
        assert!(!render_any(&plain.into()).unwrap().contains("oracle_rows"));
        let oracle = OracleSpec::new(
            spec.head_dim as u32,
            spec.group as u32,
            spec.threads as u32,
            spec.tail.unwrap(),
        )
        .with_kv_rows(spec.tail_kv_rows);
        let with = resources((*spec).into());
        let clean = |r: &codegen::resources::EntryResources| !r.spills() && r.stack_bytes == 0;
        let (plain, oracle) = (resources(plain.into()), resources(oracle.into()));
        // At most a word or two of local memory where neither has any: ptxas spills 4 bytes
        // at D = 80, G = 1, 512 threads from host memory (2026-12-06), in a kernel that runs
        // at most 127 tail rows a block.
        if clean(&plain) && clean(&oracle) {
            assert!(
                with.stack_bytes <= 8 && with.spill_store_bytes <= 8,
                "{name}: {with:?}, the plan {plain:?}, the oracle {oracle:?}"
            );
        }
    }
}

/// The peaks selects with the coarse floor (`SelectSpec::coarse_floor`, opt-in): the four
/// algorithms at the runtime's default tile (512 threads, 4 items), the default set's (256,
/// 16) and a few others, over G = 1, 4, 7, 8, 16, compile without warnings for both
/// architectures; where an entry of the same kernel without it keeps nothing in local memory
/// (ptxas at sm_90) the entry with it keeps nothing there either, and elsewhere no more. At
/// (256, 16), where ptxas gives the chunks 128 registers and three of the four plain forms
/// spill, the coarse floor's `scan_peaks` chunk spills too (12 bytes, where the plain one takes
/// 139 registers and none): there every chunk keeps at most what the worst plain one does.
#[test]
fn peaks_selects_with_the_coarse_floor_compile_without_warnings_or_local_memory() {
    use codegen::resources::EntryResources;
    let algorithms = [
        SelectAlgorithm::Peaks,
        SelectAlgorithm::PeaksHead,
        SelectAlgorithm::ScanPeaks,
        SelectAlgorithm::ScanPeaksHead,
    ];
    let crowded = (256, 16);
    let tiles = [
        (512, 4, 2048),
        (1024, 4, 4096),
        (256, 8, 2048),
        (128, 8, 512),
        (32, 3, 64),
        (crowded.0, crowded.1, 2048),
    ];
    let entries = |s: &SelectSpec| -> Vec<String> {
        s.stages().iter().map(|&stage| s.entry(stage)).collect()
    };
    let clean = |r: &EntryResources| !r.spills() && r.stack_bytes == 0;
    let mut clean_entries = 0;
    for (i, (threads, items_per_thread, k_max)) in tiles.into_iter().enumerate() {
        // (with, without) of each entry of the tile's four kernels.
        let mut tile = Vec::new();
        for (j, algorithm) in algorithms.into_iter().enumerate() {
            let plain = SelectSpec {
                group: [1, 4, 7, 8, 16][(i + j) % 5],
                k_max,
                threads,
                items_per_thread,
                algorithm,
                coarse_floor: false,
                owned_tiles: false,
            };
            let spec = SelectSpec {
                coarse_floor: true,
                ..plain
            };
            spec.validate().unwrap();
            let name = spec.kernel_name();
            assert!(name.ends_with("_cf"), "{name}");
            let kernel: KernelSpec = spec.into();
            let compiled = compile(&kernel, "sm_80");
            assert_eq!(compiled.log, "", "{name} (sm_80): NVRTC warned");
            for entry in entries(&spec) {
                assert!(
                    compiled.ptx.contains(&format!(".entry {entry}(")),
                    "{entry}"
                );
            }
            let with = sm90_entry_resources(&kernel, &entries(&spec));
            let without = sm90_entry_resources(&plain.into(), &entries(&plain));
            for (with, without) in with.into_iter().zip(without) {
                eprintln!(
                    "{}: {} registers, stack {} spill {} (without the coarse floor {}, {}, {})",
                    with.entry,
                    with.registers,
                    with.stack_bytes,
                    with.spill_store_bytes,
                    without.registers,
                    without.stack_bytes,
                    without.spill_store_bytes
                );
                tile.push((with, without));
            }
        }
        let worst_plain = (
            tile.iter().map(|(_, w)| w.stack_bytes).max().unwrap(),
            tile.iter().map(|(_, w)| w.spill_store_bytes).max().unwrap(),
        );
        for (with, without) in &tile {
            let at_most = |(stack, spill): (u64, u64)| {
                with.stack_bytes <= stack && with.spill_store_bytes <= spill
            };
            let fits = if (threads, items_per_thread) == crowded {
                at_most(worst_plain)
            } else if clean(without) {
                clean_entries += 1;
                clean(with)
            } else {
                at_most((without.stack_bytes, without.spill_store_bytes))
            };
            assert!(fits, "{with:?}, without the coarse floor {without:?}");
        }
    }
    // Most entries keep nothing in local memory with or without it.
    assert!(
        clean_entries >= 30,
        "{clean_entries} entries without local memory"
    );
}

//! The rerank's many-block top-k (`PariskvRerankSpec::select = multiblock`, name suffix `_mb`):
//! its name and entry points, its validation, that it leaves `_score` and every default kernel
//! as they were, and that it compiles for sm_90 without a warning or a register spill.

use codegen::render::render;
use codegen::spec::pariskv::{select_chunk, select_items, RerankSelect, MAX_SELECT_ITEMS};
use codegen::spec::{Family, KernelSpec, PariskvRerankSpec, Placement};

/// Compiles for sm_80 and sm_90 with an empty NVRTC log, every entry point in the PTX.
fn assert_compiles(spec: &PariskvRerankSpec, entries: &[String]) {
    let source = render(spec).unwrap();
    let file_name = format!("{}.cu", spec.kernel_name());
    for arch in ["sm_80", "sm_90"] {
        let out = codegen::nvrtc::compile(&source, &file_name, arch, &[])
            .unwrap_or_else(|e| panic!("{file_name} for {arch}: {e}"));
        assert_eq!(out.log.trim(), "", "{file_name} for {arch}: NVRTC log");
        for entry in entries {
            assert!(out.ptx.contains(&format!(".entry {entry}(")), "{entry}");
        }
    }
}

fn single() -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim: 128,
        group: 4,
        k_max: 2048,
        threads: 256,
        placement: Placement::Hbm,
        vector_loads: false,
        select: RerankSelect::Single,
        decode_table: false,
    }
}

fn many(spec: PariskvRerankSpec) -> PariskvRerankSpec {
    PariskvRerankSpec {
        select: RerankSelect::Multiblock,
        ..spec
    }
}

#[test]
fn the_name_and_entries_say_many_blocks() {
    let s = many(single());
    assert_eq!(
        s.kernel_name(),
        "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb"
    );
    let wide = PariskvRerankSpec {
        vector_loads: true,
        ..s
    };
    assert_eq!(
        wide.kernel_name(),
        "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_v16_mb"
    );
    assert_eq!(
        KernelSpec::from(s).entry_points(),
        [
            "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_score",
            "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_chunk",
            "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_merge",
            "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_mb_write",
        ]
    );
    // A serialised spec without the field is the one-block top-k.
    let mut json = serde_json::to_value(single()).unwrap();
    assert_eq!(json["select"], "single");
    json.as_object_mut().unwrap().remove("select");
    let back: PariskvRerankSpec = serde_json::from_value(json).unwrap();
    assert_eq!(back, single());
}

#[test]
fn a_block_must_hold_two_k_max() {
    for (threads, k_max, ok) in [
        (64, 1024, true),
        (64, 1025, false),
        (64, 2048, false),
        (128, 2048, true),
        (256, 4096, true),
        (128, 4096, false),
        (32, 512, true),
        (32, 513, false),
    ] {
        let s = many(PariskvRerankSpec {
            threads,
            k_max,
            ..single()
        });
        match s.validate() {
            Ok(()) => {
                assert!(ok, "{threads} threads, k_max {k_max}");
                assert!(select_items(threads, k_max) <= MAX_SELECT_ITEMS);
                assert!(select_chunk(threads, k_max) >= 2 * k_max);
            }
            Err(e) => {
                assert!(!ok, "{threads} threads, k_max {k_max}: {e}");
                assert_eq!((e.family, e.field), ("pariskv_rerank", "select"));
                assert!(e.allowed.contains("threads * 32 >= 2 * k_max"), "{e}");
                assert!(render(&s).is_err());
            }
        }
        // The one-block top-k has no such bound.
        PariskvRerankSpec {
            select: RerankSelect::Single,
            ..s
        }
        .validate()
        .unwrap();
    }
}

/// The many-block variant replaces `_select` and nothing else: its `_score` is the one-block
/// spec's, and the one-block source has none of its entry points.
#[test]
fn only_the_select_changes() {
    for head_dim in [64, 96, 128, 256] {
        for vector_loads in [false, true] {
            let one = PariskvRerankSpec {
                head_dim,
                vector_loads,
                ..single()
            };
            let (a, b) = (render(&one).unwrap(), render(&many(one)).unwrap());
            let score = |source: &str, name: &str| {
                let from = source.find("_score(").unwrap();
                let to = source[from..].find("\n}\n").unwrap();
                source[from..from + to].replace(name, "K")
            };
            assert_eq!(
                score(&a, &one.kernel_name()),
                score(&b, &many(one).kernel_name())
            );
            assert!(a.contains("_select(") && !a.contains("_chunk("));
            assert!(!b.contains("_select(") && b.contains("_merge(") && b.contains("_write("));
            assert!(b.contains("constexpr int ITEMS = 16;"));
        }
    }
}

/// Every head dimension, both placements, the smallest and largest blocks that hold two
/// `k_max = 2048` (32 and 4 candidates a thread), and `k_max = 4096`: compiles quietly for
/// sm_80 and sm_90 with no register spill in any entry point at sm_90.
#[test]
fn the_many_block_variant_compiles_without_spills() {
    let mut specs = Vec::new();
    for head_dim in codegen::spec::pariskv::head_dims() {
        // The top-k does not depend on D or the placement; `_score` does, on both.
        let placement = if head_dim == 128 {
            Placement::Host
        } else {
            Placement::Hbm
        };
        specs.push(many(PariskvRerankSpec {
            head_dim: head_dim as u32,
            placement,
            ..single()
        }));
    }
    for (threads, k_max) in [(128, 2048), (1024, 2048), (256, 4096), (512, 4096), (32, 1)] {
        specs.push(many(PariskvRerankSpec {
            threads,
            k_max,
            vector_loads: threads == 1024,
            ..single()
        }));
    }
    for spec in specs {
        let entries = KernelSpec::from(spec).entry_points();
        assert_compiles(&spec, &entries);
        let used = codegen::resources::measure(
            &render(&spec).unwrap(),
            &format!("{}.cu", spec.kernel_name()),
            "sm_90",
            &[],
            &entries,
        )
        .unwrap();
        for (entry, r) in entries.iter().zip(&used) {
            assert!(!r.spills(), "{entry}: {r:?}");
            if spec.head_dim == 128 {
                eprintln!(
                    "{entry}: {} registers, {} bytes of shared memory",
                    r.registers, r.shared_bytes
                );
            }
        }
    }
}

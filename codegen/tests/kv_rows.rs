//! The K/V-adjacent row layout (`KvRows::Adjacent`) of every family that reads or writes the
//! store's bf16 rows: its kernels differ from the default's only in the row stride (`2*D`
//! instead of `D`) and the name (`_kvadj`), and the default's source is what it always was (the
//! snapshots of `compile.rs` and `append_rows.rs` hold it).

#[allow(dead_code, unused_macros, unused_imports)] // the shared checks other families use
mod family_checks;

use codegen::render::render;
use codegen::spec::pariskv::padded_dim;
use codegen::spec::shape::HEAD_DIMS;
use codegen::spec::{
    AppendRowsSpec, EncodeMode, EncodeSpec, Family, FetchSpec, KernelSpec, KvRows, LandmarkSpec,
    OracleSpec, PariskvIndexSpec, Placement,
};
use family_checks::{assert_compiles, assert_renders};

const PLACEMENTS: [Placement; 2] = [Placement::Hbm, Placement::Host];

/// The lines the adjacent variant adds after its constants.
fn stride_block(head_dim: u32) -> String {
    format!(
        "\n// K/V-adjacent rows (kv_rows = adjacent): a token's K row, then its V row, \
         [capacity][2][D];\n// consecutive key (and value) rows are ROW_STRIDE elements apart.\n\
         constexpr int ROW_STRIDE = 2 * {head_dim};"
    )
}

/// Every default spec of the families with K/V rows, paired with its adjacent twin, and the
/// name the default source multiplies a row index by (`KEY_DIM` in the padded ParisKV index).
fn pairs() -> Vec<(KernelSpec, KernelSpec, u32, &'static str)> {
    let mut out: Vec<(KernelSpec, KernelSpec, u32, &'static str)> = Vec::new();
    for d in HEAD_DIMS.map(|d| d as u32) {
        for placement in PLACEMENTS {
            for g in [1, 4, 7, 16] {
                let fetch = FetchSpec::new(d, g, 256, placement);
                let oracle = OracleSpec::new(d, g, 128, placement);
                let landmark = LandmarkSpec::new(d, g, 256, placement);
                for (a, b) in [
                    (fetch.into(), fetch.with_kv_rows(KvRows::Adjacent).into()),
                    (oracle.into(), oracle.with_kv_rows(KvRows::Adjacent).into()),
                    (
                        landmark.into(),
                        landmark.with_kv_rows(KvRows::Adjacent).into(),
                    ),
                ] {
                    out.push((a, b, d, "D"));
                }
            }
            let index = PariskvIndexSpec {
                head_dim: d,
                threads: 256,
                placement,
                kv_rows: KvRows::Separate,
            };
            let adjacent = PariskvIndexSpec {
                kv_rows: KvRows::Adjacent,
                ..index
            };
            let padded = padded_dim(d) != d;
            out.push((
                index.into(),
                adjacent.into(),
                d,
                if padded { "KEY_DIM" } else { "D" },
            ));
        }
        for mode in [EncodeMode::Bulk, EncodeMode::Append] {
            for rotate in [false, true] {
                for block in [32, 64, 128] {
                    let encode = EncodeSpec {
                        block,
                        ..EncodeSpec::new(d as usize, mode, rotate)
                    };
                    let adjacent = EncodeSpec {
                        kv_rows: KvRows::Adjacent,
                        ..encode
                    };
                    out.push((encode.into(), adjacent.into(), d, "D"));
                }
            }
        }
    }
    out
}

/// The adjacent source, taken back to the default's: without the stride's lines, every
/// `ROW_STRIDE` the default's stride, the default's name.
fn undo(adjacent: &str, head_dim: u32, stride: &str, names: (&str, &str)) -> String {
    let block = stride_block(head_dim);
    assert_eq!(
        adjacent.matches(&block).count(),
        1,
        "{}: the stride is defined once",
        names.1
    );
    adjacent
        .replace(&block, "")
        .replace("ROW_STRIDE", stride)
        .replace(names.1, names.0)
}

#[test]
fn the_adjacent_kernels_differ_from_the_default_only_in_the_row_stride() {
    let pairs = pairs();
    assert!(pairs.len() > 200, "{} pairs", pairs.len());
    for (default, adjacent, d, stride) in pairs {
        let (a, b) = (default.kernel_name(), adjacent.kernel_name());
        assert_eq!(b, format!("{a}_kvadj"));
        let base = default.render().unwrap();
        let adj = adjacent.render().unwrap();
        assert!(
            !base.contains("ROW_STRIDE") && !base.contains("kvadj"),
            "{a}"
        );
        assert!(
            adj.contains("* ROW_STRIDE"),
            "{b} indexes no row by the stride"
        );
        assert_eq!(undo(&adj, d, stride, (&a, &b)), base, "{b}");
        // The entry points follow the name (landmark: `_build`, `_scan`).
        for entry in adjacent.entry_points() {
            assert!(entry.starts_with(&b), "{entry}");
            assert!(adj.contains(&format!("{entry}(")), "{entry}");
        }
    }
}

#[test]
fn the_adjacent_fetch_reads_both_rows_of_a_token_at_twice_the_stride() {
    let spec = FetchSpec::new(128, 4, 256, Placement::Host).with_kv_rows(KvRows::Adjacent);
    assert_eq!(spec.kernel_name(), "fathom_fetch_d128_g4_t256_host_kvadj");
    let source = assert_renders(&spec, &[spec.kernel_name()]);
    assert!(source.contains("constexpr int ROW_STRIDE = 2 * 128;"));
    assert!(source.contains("keys + token * ROW_STRIDE + unit * 8"));
    assert!(source.contains("values + token * ROW_STRIDE + (unit - UNITS_PER_MATRIX) * 8"));
    // The compact outputs keep rows of D.
    assert!(source.contains("k_out + (size_t)row[u] * D + unit * 8"));
    // D = 80: the flat-list path too.
    let padded = FetchSpec::new(80, 7, 256, Placement::Hbm).with_kv_rows(KvRows::Adjacent);
    let source = render(&padded).unwrap();
    assert!(source.contains("keys + token * ROW_STRIDE + unit * 8"));
    assert!(source.contains("k_out + (size_t)row * D + unit * 8"));
}

#[test]
fn the_adjacent_append_writes_rows_twice_the_head_dimension_apart() {
    let base = AppendRowsSpec::default();
    let adjacent = AppendRowsSpec {
        kv_rows: KvRows::Adjacent,
        ..base
    };
    let (a, b) = (render(&base).unwrap(), render(&adjacent).unwrap());
    let row = "(long long)(n_total[bh / n_heads] - 1) * ";
    assert!(a.contains(&format!("{row}head_dim;")) && !a.contains("2 * head_dim"));
    assert!(b.contains(&format!("{row}(2 * head_dim);")));
    assert!(!b.contains(&format!("{row}head_dim;")));
}

#[test]
fn the_layout_is_in_every_name_and_serialises() {
    let spec: KernelSpec = FetchSpec::new(128, 4, 256, Placement::Hbm)
        .with_kv_rows(KvRows::Adjacent)
        .into();
    let json = serde_json::to_value(spec).unwrap();
    assert_eq!(json["kv_rows"], "adjacent");
    assert_eq!(serde_json::from_value::<KernelSpec>(json).unwrap(), spec);
    // A spec serialised before the field existed reads as the default.
    let old = serde_json::json!({
        "family": "fetch", "head_dim": 128, "group": 4, "threads": 256, "placement": "hbm"
    });
    assert_eq!(
        serde_json::from_value::<KernelSpec>(old).unwrap(),
        FetchSpec::new(128, 4, 256, Placement::Hbm).into()
    );
    let bad = serde_json::json!({
        "family": "fetch", "head_dim": 128, "group": 4, "threads": 256, "placement": "hbm",
        "kv_rows": "interleaved"
    });
    assert!(serde_json::from_value::<KernelSpec>(bad).is_err());
}

/// NVRTC compiles a sample of the adjacent kernels without a warning (power-of-two and padded
/// head dimensions, both placements).
#[test]
fn a_sample_of_the_adjacent_kernels_compiles_without_warnings() {
    let adjacent =
        |s: KernelSpec| -> bool { serde_json::to_value(s).unwrap()["kv_rows"] == "adjacent" };
    for (i, (_, spec, _, _)) in pairs().into_iter().enumerate() {
        assert!(adjacent(spec));
        // Every family, both placements and a padded D, not the whole grid.
        if i % 11 != 0 {
            continue;
        }
        compile(&spec);
    }
    compile(
        &AppendRowsSpec {
            kv_rows: KvRows::Adjacent,
            ..AppendRowsSpec::default()
        }
        .into(),
    );
}

fn compile(spec: &KernelSpec) {
    let entries = spec.entry_points();
    match *spec {
        KernelSpec::Fetch(s) => assert_compiles(&s, &entries),
        KernelSpec::Oracle(s) => assert_compiles(&s, &entries),
        KernelSpec::Landmark(s) => assert_compiles(&s, &entries),
        KernelSpec::Encode(s) => assert_compiles(&s, &entries),
        KernelSpec::PariskvIndex(s) => assert_compiles(&s, &entries),
        KernelSpec::AppendRows(s) => assert_compiles(&s, &entries),
        _ => panic!("not a family with K/V rows: {}", spec.kernel_name()),
    }
}

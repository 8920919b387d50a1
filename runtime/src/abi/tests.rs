use std::collections::BTreeSet;

use codegen::model::presets;
use codegen::signature::entry_params;
use codegen::spec::{
    AppendRowsSpec, AttentionRows, AttentionSpec, ConvertSpec, KvRows, MappedReadSpec, Placement,
};
use codegen::{kernels_for, KernelSetOptions, KernelSpec};
use serde_json::Value;

use super::SIGNATURES;

/// The enum fields that choose a template's code paths (and so could change its signature);
/// every value of each, and of the flags `rotate` and `compact`, is tried on every spec of the
/// presets' kernel sets.
const FLIPS: [(&str, &[&str]); 6] = [
    ("placement", &["hbm", "host"]),
    ("mode", &["bulk", "append"]),
    (
        "algorithm",
        &[
            "radix",
            "compact",
            "onepass",
            "fused",
            "peaks",
            "peaks_head",
            "scan_peaks",
            "scan_peaks_head",
        ],
    ),
    ("select", &["single", "multiblock"]),
    ("kv_rows", &["separate", "adjacent"]),
    ("rows", &["fetched", "store"]),
];

/// The kernel sets of every preset, block and segment size, with every placement, mode,
/// `rotate`, select `algorithm`, scan `tensor_cores` and `peaks` and attention `splits` value on
/// each spec (those that validate), once per kernel name.
fn spec_grid() -> Vec<KernelSpec> {
    let mut names = BTreeSet::new();
    let mut grid = Vec::new();
    let mut push = |spec: KernelSpec| {
        if spec.validate().is_ok() && names.insert(spec.kernel_name()) {
            grid.push(spec);
        }
    };
    for loads_in_flight in [1, 4, 8] {
        for threads in [128, 256] {
            push(KernelSpec::MappedRead(MappedReadSpec {
                loads_in_flight,
                threads,
            }));
        }
    }
    for threads in [32, 128, 1024] {
        for kv_rows in KvRows::ALL {
            push(KernelSpec::AppendRows(AppendRowsSpec { threads, kv_rows }));
        }
        push(KernelSpec::Convert(ConvertSpec { threads }));
    }
    for preset in presets() {
        for block in [32, 64, 128] {
            for segment_words in [256, 512] {
                let options = KernelSetOptions {
                    block,
                    segment_words,
                };
                for spec in kernels_for(&preset.shape(), &options) {
                    for variant in variants(&spec) {
                        push(variant);
                    }
                }
            }
        }
    }
    grid
}

/// `spec` and the specs one flipped field away from it.
fn variants(spec: &KernelSpec) -> Vec<KernelSpec> {
    let tagged = serde_json::to_value(spec).expect("specs serialise");
    let mut out = vec![*spec];
    let mut flip = |field: &str, value: Value| {
        let mut other = tagged.clone();
        if let Some(slot) = other.get_mut(field) {
            *slot = value;
            if let Ok(spec) = serde_json::from_value::<KernelSpec>(other) {
                out.push(spec);
            }
        }
    };
    for (field, values) in FLIPS {
        for value in values {
            flip(field, Value::from(*value));
        }
    }
    flip("rotate", Value::Bool(true));
    flip("rotate", Value::Bool(false));
    // The scan's flags: on the tensor cores, writing the peaks of its halves, and both.
    flip("tensor_cores", Value::Bool(true));
    flip("peaks", Value::Bool(true));
    if let KernelSpec::Scan(s) = spec {
        out.push(
            codegen::spec::ScanSpec {
                tensor_cores: true,
                peaks: true,
                ..*s
            }
            .into(),
        );
    }
    // The plan that also scores the tail: `tail` is not serialised when absent, so it is set
    // here, in both placements and row layouts.
    if let KernelSpec::Plan(p) = spec {
        for placement in [Placement::Hbm, Placement::Host] {
            for kv_rows in KvRows::ALL {
                out.push(p.with_tail(placement, kv_rows).into());
            }
        }
    }
    // Attention over several blocks a query head: `splits` is not serialised at its default,
    // so it is set here, with both row sources.
    if let KernelSpec::Attention(a) = spec {
        for rows in AttentionRows::ALL {
            out.push(
                AttentionSpec {
                    splits: 4,
                    rows,
                    ..*a
                }
                .into(),
            );
        }
    }
    out
}

#[test]
fn every_spec_has_a_generated_signature() {
    let grid = spec_grid();
    let families: BTreeSet<&str> = grid.iter().map(KernelSpec::family).collect();
    assert!(
        families.len() >= 17,
        "the grid misses families: {families:?}"
    );
    let mut stale = Vec::new();
    for spec in &grid {
        let name = spec.kernel_name();
        let source = spec.render().unwrap_or_else(|e| panic!("{name}: {e}"));
        for entry in spec.entry_points() {
            let params: Vec<String> = entry_params(&source, &entry)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .iter()
                .map(|p| p.canonical())
                .collect();
            let stage = entry[name.len()..].trim_start_matches('_');
            let covered = SIGNATURES.iter().any(|abi| {
                abi.family == spec.family() && abi.stage == stage && abi.params == params
            });
            if !covered {
                stale.push(format!(
                    "family `{}`, entry `{entry}`: ({})",
                    spec.family(),
                    params.join(", ")
                ));
            }
        }
    }
    assert!(
        stale.is_empty(),
        "signatures no struct of runtime::abi covers (add a variant to runtime/src/abi.rs, or \
         fix the template):\n{}",
        stale.join("\n")
    );
}

#[test]
fn every_struct_is_some_spec_s_signature() {
    // A variant line whose structs no spec of the grid has would be dead weight.
    let grid = spec_grid();
    for abi in SIGNATURES {
        let used = grid.iter().any(|spec| {
            spec.family() == abi.family && {
                let name = spec.kernel_name();
                let source = spec.render().expect("renders");
                spec.entry_points().iter().any(|entry| {
                    entry[name.len()..].trim_start_matches('_') == abi.stage
                        && entry_params(&source, entry).is_ok_and(|p| {
                            p.iter().map(|p| p.canonical()).collect::<Vec<_>>() == abi.params
                        })
                })
            }
        });
        assert!(used, "{abi:?} is no spec's signature");
    }
}

#[test]
fn the_compact_select_differs_only_in_its_chunked_stages() {
    let by = |variant: &str, stage: &str| {
        SIGNATURES
            .iter()
            .find(|a| a.variant == variant && a.stage == stage)
            .map(|a| a.params)
    };
    for stage in ["init", "pick", "union"] {
        assert_eq!(by("select", stage), by("select_compact", stage), "{stage}");
    }
    for stage in ["hist", "count", "write"] {
        assert_ne!(by("select", stage), by("select_compact", stage), "{stage}");
    }
    assert!(by("select", "filter").is_none() && by("select_compact", "filter").is_some());
}

/// `scan_args` passes a scan's arguments as they are, and for a scan that writes peaks appends
/// the buffer and its stride, in `scan_peaks`'s order.
#[test]
fn scan_args_append_the_peaks_to_the_scan_s_arguments() {
    use crate::gpu::Arg;
    use crate::launch::{DevicePtr, DevicePtrMut};
    let base = || super::scan::Args {
        runs: DevicePtr::from_addr(1),
        class_count: DevicePtr::from_addr(2),
        q_store: DevicePtr::from_addr(3),
        n_stored: DevicePtr::from_addr(4),
        max_seg: 5,
        n_heads: 6,
        scores: DevicePtrMut::from_addr(7),
        ld_scores: 8,
    };
    let values = |args: Vec<Arg>| -> Vec<u64> {
        args.into_iter()
            .map(|a| match a {
                Arg::Ptr(v) | Arg::U64(v) => v,
                Arg::I32(v) => v as u64,
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    };
    assert_eq!(
        values(super::scan_args(base(), None)),
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    let with = super::scan_args(base(), Some((DevicePtrMut::from_addr(9), 10)));
    assert_eq!(values(with), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
}

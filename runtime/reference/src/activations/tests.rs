use super::*;
use crate::attention::default_scale;
use crate::metrics::recall_at_k;
use crate::score::{score_exact, score_stored};
use crate::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use safetensors::tensor::TensorView;

fn real_path() -> PathBuf {
    data_dir().join(SMOLLM2_CODE_8K)
}

fn open_real() -> Activations {
    let path = real_path();
    assert!(
        path.exists(),
        "the real activations {} are missing: they ship in shared/data; point FATHOM_DATA_DIR at \
         the directory holding {SMOLLM2_CODE_8K}",
        path.display()
    );
    Activations::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn real_capture_has_the_described_shape() {
    let acts = open_real();
    assert_eq!(acts.layers(), &[0, 6, 12, 18, 24, 29]);
    assert_eq!(
        (
            acts.head_dim(),
            acts.kv_heads(),
            acts.query_heads(),
            acts.group()
        ),
        (64, 3, 9, 3)
    );
    assert_eq!(acts.tokens(), 8192);
    let layer = acts.layer(29).unwrap();
    assert_eq!(layer.keys.len(), 3);
    assert_eq!(layer.values.len(), 3);
    assert!(layer.keys.iter().all(|k| k.len() == 8192 * 64));
    assert!(layer.values.iter().all(|v| v.len() == 8192 * 64));
    assert_eq!(layer.queries.len(), 9);
    assert_eq!(layer.query_count(), 128);
    assert_eq!(layer.query_position(127), 8191);
    assert_eq!(layer.scale, default_scale(64));
    assert_eq!(layer.kv_head_of(5), 1);
    assert_eq!(layer.group_queries(2, 7)[1], layer.queries[7][7]);
    assert!(layer.keys.iter().flatten().all(|x| x.is_finite()));
    assert!(layer
        .queries
        .iter()
        .flatten()
        .flatten()
        .all(|x| x.is_finite()));
    // Not all zero: a real capture has spread.
    assert!(layer.keys[0].iter().any(|x| x.to_f64().abs() > 1.0));
}

#[test]
fn keys_are_the_fp16_values_rounded_to_bf16() {
    let acts = open_real();
    let tensors = acts.tensors().unwrap();
    let raw = fp16_tensor(&tensors, &acts.path, "layer6.k", &[3, 8192, 64]).unwrap();
    let layer = acts.layer(6).unwrap();
    for (i, x) in raw.iter().enumerate().step_by(97) {
        let (head, j) = (i / (8192 * 64), i % (8192 * 64));
        let got = layer.keys[head][j].to_f64();
        let want = x.to_f64();
        assert!(
            (got - want).abs() <= want.abs() * 2f64.powi(-8),
            "{got} vs {want}"
        );
    }
}

#[test]
fn real_keys_encode_and_a_depth_four_scan_finds_the_oracle_top() {
    let acts = open_real();
    let layer = acts.layer(12).unwrap();
    let layout = StoreLayout::new(64, BlockSize::B64, 16).unwrap();
    let index = 127;
    let n = layer.query_position(index) + 1;
    let keys = &layer.keys[1][..n * 64];
    let store = HeadStore::from_keys(
        layout,
        HeadId {
            layer: 12,
            kv_head: 1,
        },
        keys,
    )
    .unwrap();
    assert_eq!(store.stored_tokens(), n);
    let queries = layer.group_queries(1, index);
    let approx = score_stored(&store, &[4; 64], &queries);
    let exact = score_exact(keys, 64, 0..n, &queries);
    for (a, e) in approx.iter().zip(&exact) {
        let recall = recall_at_k(a, e, 128);
        assert!(recall > 0.6, "depth-4 recall@128 is only {recall}");
    }
}

/// Writes a tiny capture (1 KV head, 2 query heads, D = 2, 4 tokens, 2 queries, layer 3) with
/// `tensors` replaced or removed as the test needs.
fn write_capture(dir: &Path, tensors: Vec<(&str, Dtype, Vec<usize>)>) -> PathBuf {
    let path = dir.join("tiny.safetensors");
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, dtype, shape)| vec![0u8; shape.iter().product::<usize>() * dtype.size()])
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&data)
        .map(|((name, dtype, shape), bytes)| {
            (
                name.to_string(),
                TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, &None, &path).unwrap();
    let json = r#"{"config": {"head_dim": 2, "num_kv_heads": 1, "num_q_heads": 2},
        "layers": [3], "n_tokens": 4, "queries": {"count": 2, "first_position": 2},
        "layer_info": [{"layer": 3, "scale": 0.5}]}"#;
    std::fs::write(path.with_extension("json"), json).unwrap();
    path
}

fn good() -> Vec<(&'static str, Dtype, Vec<usize>)> {
    vec![
        ("layer3.k", Dtype::F16, vec![1, 4, 2]),
        ("layer3.v", Dtype::F16, vec![1, 4, 2]),
        ("layer3.q", Dtype::F16, vec![2, 2, 2]),
    ]
}

#[test]
fn tiny_capture_loads() {
    let dir = tempfile::tempdir().unwrap();
    let acts = Activations::open(write_capture(dir.path(), good())).unwrap();
    let layer = acts.layer(3).unwrap();
    assert_eq!(layer.scale, 0.5);
    assert_eq!(layer.group, 2);
    assert_eq!(layer.first_query_position, 2);
    assert!(matches!(
        acts.layer(4),
        Err(ActivationsError::UnknownLayer { layer: 4, .. })
    ));
}

#[test]
fn missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = Activations::open(dir.path().join("absent.safetensors")).unwrap_err();
    assert!(matches!(err, ActivationsError::MissingFile { .. }), "{err}");
    let path = write_capture(dir.path(), good());
    std::fs::remove_file(path.with_extension("json")).unwrap();
    match Activations::open(&path).unwrap_err() {
        ActivationsError::MissingFile { path: p } => assert_eq!(p, path.with_extension("json")),
        other => panic!("{other}"),
    }
}

#[test]
fn missing_tensor_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = good();
    tensors.remove(1);
    match Activations::open(write_capture(dir.path(), tensors)).unwrap_err() {
        ActivationsError::MissingTensor { name, .. } => assert_eq!(name, "layer3.v"),
        other => panic!("{other}"),
    }
}

#[test]
fn wrong_dtype_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = good();
    tensors[2].1 = Dtype::F32;
    let err = Activations::open(write_capture(dir.path(), tensors)).unwrap_err();
    assert!(
        matches!(&err, ActivationsError::WrongDtype { name, .. } if name == "layer3.q"),
        "{err}"
    );
}

#[test]
fn wrong_shape_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = good();
    tensors[0].2 = vec![1, 5, 2];
    match Activations::open(write_capture(dir.path(), tensors)).unwrap_err() {
        ActivationsError::WrongShape {
            name,
            got,
            expected,
        } => {
            assert_eq!(name, "layer3.k");
            assert_eq!(got, vec![1, 5, 2]);
            assert_eq!(expected, vec![1, 4, 2]);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_capture(dir.path(), good());
    std::fs::write(&path, b"not a safetensors file").unwrap();
    let err = Activations::open(&path).unwrap_err();
    assert!(matches!(err, ActivationsError::Format { .. }), "{err}");
    let path = write_capture(dir.path(), good());
    std::fs::write(path.with_extension("json"), b"{\"layers\": [3]}").unwrap();
    let err = Activations::open(&path).unwrap_err();
    assert!(matches!(err, ActivationsError::Metadata { .. }), "{err}");
}

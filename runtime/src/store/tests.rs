use super::checks::status_error;
use super::*;

#[test]
fn status_words_name_the_sequence_of_their_batch() {
    let mut reg = Registry::default();
    let a = reg.insert(());
    let b = reg.insert(());
    assert!(status_error(&[0, 0, 0, 0, 0], 3, &[a, b]).is_none());
    match status_error(&[1, 1, 2, 70, 5], 3, &[a, b]) {
        Some(StoreError::NonFiniteKey {
            sequence,
            layer: 3,
            head: 2,
            token: 70,
            channel: 5,
        }) => assert_eq!(sequence, b),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        status_error(&[2, 0, 1, 64, 9], 0, &[a]),
        Some(StoreError::ScaleOverflow {
            token: 64,
            channel: 9,
            ..
        })
    ));
    assert!(matches!(
        status_error(&[1, 5, 0, 0, 0], 0, &[a]),
        Some(StoreError::Internal(_))
    ));
}

fn shape(basis: Basis) -> ModelShape {
    ModelShape {
        name: "test".into(),
        layers: 2,
        query_heads: 8,
        kv_heads: 2,
        head_dim: 64,
        qk_norm: basis == Basis::Raw,
        basis,
    }
}

#[test]
fn configs_are_checked_with_reasons() {
    let ok = StoreConfig::new(shape(Basis::Raw), Placement::Hbm, 1000);
    assert!(ok.validate().is_ok());
    let reason = |c: StoreConfig| match c.validate() {
        Err(StoreError::Config { reason }) => reason,
        other => panic!("{other:?}"),
    };
    assert!(reason(StoreConfig {
        block: 48,
        ..ok.clone()
    })
    .contains("32, 64 or 128"));
    assert!(reason(StoreConfig {
        segment_words: 3,
        ..ok.clone()
    })
    .contains("odd"));
    assert!(reason(StoreConfig {
        capacity_tokens: 0,
        ..ok.clone()
    })
    .contains("capacity_tokens"));
    assert!(reason(StoreConfig {
        max_batch: 0,
        ..ok.clone()
    })
    .contains("max_batch"));
    assert!(reason(StoreConfig {
        rotations: Some(vec![0.0; 2 * 2 * 64 * 64]),
        ..ok.clone()
    })
    .contains("raw channels"));
    let klt = StoreConfig::new(shape(Basis::Klt), Placement::Host, 1000);
    assert!(reason(klt.clone()).contains("needs its rotations"));
    assert!(reason(StoreConfig {
        rotations: Some(vec![0.0; 5]),
        ..klt.clone()
    })
    .contains("expected 16384"));
    let mut nan = vec![0.0; 2 * 2 * 64 * 64];
    nan[7] = f32::NAN;
    assert!(reason(StoreConfig {
        rotations: Some(nan),
        ..klt.clone()
    })
    .contains("value 7"));
    assert!(StoreConfig {
        rotations: Some(vec![0.0; 2 * 2 * 64 * 64]),
        ..klt
    }
    .validate()
    .is_ok());
    // Large-page host memory is for the host placement only.
    assert!(reason(StoreConfig {
        host_memory: HostMemory::Vmm2M,
        ..ok.clone()
    })
    .contains("applies to the host placement"));
    assert!(StoreConfig {
        host_memory: HostMemory::Registered,
        ..StoreConfig::new(shape(Basis::Raw), Placement::Host, 1000)
    }
    .validate()
    .is_ok());
    // Every head dimension a model may have (SPEC §1) can keep the ParisKV index; the
    // rule itself is `IndexGeometry::new`'s (tested in `pariskv`).
    assert!(StoreConfig {
        pariskv_index: true,
        ..ok.clone()
    }
    .validate()
    .is_ok());
}

/// Adjacent K/V rows are a layout of either placement (and the default), and the
/// store's kernels for them are valid specs of every head dimension (the kernel names the
/// layout).
#[test]
fn adjacent_rows_serve_both_placements_and_every_head_dimension() {
    assert_eq!(
        StoreConfig::new(shape(Basis::Raw), Placement::Hbm, 1000).kv_rows,
        KvRows::Adjacent
    );
    for placement in [Placement::Hbm, Placement::Host] {
        for kv_rows in KvRows::ALL {
            let c = StoreConfig {
                kv_rows,
                pariskv_index: true,
                keep_landmarks: true,
                ..StoreConfig::new(shape(Basis::Raw), placement, 1000)
            };
            assert!(c.validate().is_ok(), "{placement:?} {kv_rows:?}");
        }
    }
    for d in codegen::spec::shape::HEAD_DIMS {
        let spec = append_rows_spec(KvRows::Adjacent);
        assert!(spec.validate().is_ok());
        assert!(spec.kernel_name().ends_with("_kvadj"));
        let encode = EncodeSpec {
            kv_rows: KvRows::Adjacent,
            ..EncodeSpec::new(d, EncodeMode::Append, false)
        };
        assert!(encode.validate().is_ok(), "D = {d}");
        assert!(encode.kernel_name().ends_with("_kvadj"));
    }
    assert_eq!(
        append_rows_spec(KvRows::Separate),
        AppendRowsSpec::default()
    );
}

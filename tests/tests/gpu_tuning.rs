//! GPU test of issue #5's last step: a decoder opened the way a user opens it
//! (`Decoder::new`, no tuning passed) uses the committed autotune record of this GPU's model,
//! compiled into the binary, for its tiles and transfer; on a GPU without a committed record it
//! uses the defaults. Either way the tuned step runs and its output is finite.

use codegen::spec::Placement;
use fathom_tests::step_setup::{qwen3_8b, sigma2_decoder};
use fathom_tests::{gpu_test, inputs};
use runtime::step::{DecoderConfig, Method, StepRequest, Transfer};
use runtime::store::{KeyStore, StoreConfig};
use runtime::tuning::{context_bucket, fit_scan_tile};
use runtime::tuning::{record_file_name, record_for, EMBEDDED_DIR};
use runtime::tuning::{Tiles, Tuning};
use runtime::tuning::{TuneKey, TunedFamily};

const TOKENS: usize = 20_000;

gpu_test!(gpu_decoder_uses_the_record_of_this_gpu, |t| {
    let model = qwen3_8b(1);
    let (d, g) = (model.head_dim, model.group_size());

    let config = StoreConfig::new(model.clone(), Placement::Host, 1 << 15);
    let mut store = KeyStore::new(t.gpu.clone(), config).expect("a host store");
    let seq = store.create_sequence();
    let bits = |x: Vec<half::bf16>| x.into_iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
    let keys = bits(inputs::keys(&mut t.rng, model.kv_heads * TOKENS, d));
    let values = bits(inputs::keys(&mut t.rng, model.kv_heads * TOKENS, d));
    store
        .prefill(
            seq,
            0,
            &t.gpu.upload(&keys).expect("upload keys"),
            &t.gpu.upload(&values).expect("upload values"),
        )
        .expect("prefill");
    let view = store.layer_view(&[seq], 0).expect("a view");

    let record = record_for(t.gpu.info());
    let name = record_file_name(&t.gpu.info().name);
    let committed = runtime::tuning::locate::EMBEDDED_RECORDS
        .iter()
        .any(|(file, _)| *file == name);
    eprintln!(
        "GPU {:?}: committed record {name}: {committed}; record in use: {}",
        t.gpu.info().name,
        record
            .as_ref()
            .map_or("none".into(), |r| r.meta.gpu.clone())
    );
    if committed {
        assert!(
            record.is_some(),
            "{name} is compiled in ({EMBEDDED_DIR}) but no record fits this process"
        );
    }

    let mut sigma2 = vec![1.0f32; model.kv_heads * d];
    sigma2
        .iter_mut()
        .enumerate()
        .for_each(|(i, s)| *s += (i % 7) as f32);
    let mut decoder =
        sigma2_decoder(t.gpu.clone(), model.clone(), sigma2).expect("a calibrated decoder");
    let request = StepRequest::new(Method::Fathom { bits: 48.0 }, 256);
    let plan = decoder.launch_plan(&view, &request).expect("a launch plan");
    let scan = plan.specs.scan.expect("fathom scans");
    let segment_words = DecoderConfig::default().segment_words;
    let bucket = context_bucket(TOKENS);
    let (want_tile, want_transfer) = match &record {
        Some(r) => {
            let transfer = r
                .transfer(d, g, bucket)
                .expect("the record has a transfer winner");
            // The fused transfer scans the store's planes in host memory; the others stage
            // them in HBM first, and the step scans them there with the HBM scan's tile.
            let placement = if transfer == Transfer::Fused {
                Placement::Host
            } else {
                Placement::Hbm
            };
            let key = TuneKey {
                family: TunedFamily::Scan,
                head_dim: d,
                group: g,
                placement,
                context_bucket: bucket,
            };
            let tile = match r.tile(&key) {
                Some(runtime::tuning::Tile::Scan {
                    tile_words,
                    threads,
                    ..
                }) => (tile_words, threads),
                other => panic!("the record has no scan tile for {key:?}: {other:?}"),
            };
            (fit_scan_tile(tile, segment_words), transfer)
        }
        None => (
            fit_scan_tile(Tiles::default().scan_host, segment_words),
            Transfer::Fused,
        ),
    };
    assert_eq!(
        (scan.tile_words, scan.threads),
        want_tile,
        "the step's scan tile is not the record's for its transfer"
    );
    assert_eq!(plan.transfer, Some(want_transfer));

    let queries = inputs::vectors(&mut t.rng, model.kv_heads * g, d);
    let out = decoder
        .step_host(&view, &queries, request)
        .expect("the tuned step runs");
    out.check().expect("finite outputs");
    let host = out.download().expect("download");
    let picked = host.selected(0, 0, 0);
    assert!(picked.len() >= 256, "{} tokens selected", picked.len());
    assert!(picked.iter().all(|&t| (0..TOKENS as i32).contains(&t)));
});

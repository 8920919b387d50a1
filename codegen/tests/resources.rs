//! `codegen::resources` on real ptxas reports (the pinned NVRTC), for kernels whose resources are
//! known by construction.

use codegen::resources::{measure, EntryResources};

/// 32 accumulators live at once, and a shared buffer of 1,000 floats.
const SOURCE: &str = r#"
extern "C" __global__ void busy(const float* in, float* out) {
    __shared__ float buf[1000];
    float acc[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = in[threadIdx.x + 32 * i];
    buf[threadIdx.x] = acc[0] + acc[31];
    __syncthreads();
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[i] = acc[i] * acc[(i + r + 1) & 31] + buf[(i * 7 + r) % 1000];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 32; ++i) s += acc[i];
    out[threadIdx.x] = s;
}
extern "C" __global__ void idle(float* out) { out[threadIdx.x] = 1.0f; }
"#;

fn measured(options: &[&str]) -> Vec<EntryResources> {
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    let entries = ["busy".to_string(), "idle".to_string()];
    measure(SOURCE, "busy.cu", "sm_90", &options, &entries).unwrap()
}

#[test]
fn each_entry_reports_its_registers_and_shared_memory_in_the_order_asked() {
    let r = measured(&[]);
    assert_eq!((r[0].entry.as_str(), r[1].entry.as_str()), ("busy", "idle"));
    assert_eq!(r[0].shared_bytes, 4000);
    assert_eq!(r[1].shared_bytes, 0);
    assert!(
        r[0].registers > 32,
        "32 live accumulators: {}",
        r[0].registers
    );
    assert!(r[1].registers < 16, "{}", r[1].registers);
    assert!(!r[0].spills() && !r[1].spills(), "{r:?}");
}

#[test]
fn a_register_cap_below_what_the_kernel_needs_shows_as_spills() {
    let r = measured(&["--maxrregcount=24"]);
    assert!(r[0].registers <= 24, "{:?}", r[0]);
    assert!(r[0].spills(), "{:?}", r[0]);
    assert!(r[0].spill_store_bytes > 0 && r[0].spill_load_bytes > 0);
    assert!(!r[1].spills());
}

#[test]
fn an_entry_the_source_lacks_is_named_in_the_error() {
    let e = measure(SOURCE, "busy.cu", "sm_90", &[], &["gone".to_string()]).unwrap_err();
    assert!(e.to_string().contains("gone"), "{e}");
}

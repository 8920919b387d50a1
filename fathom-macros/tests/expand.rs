//! The macro's output against `codegen` run directly: same sources, every entry point with a
//! launcher of the kernel's signature.

use codegen::model::preset;
use codegen::spec::{
    EncodeMode, EncodeSpec, LandmarkSpec, Placement, PlanMethod, PlanSpec, ScanSpec,
    SelectAlgorithm, SelectSpec,
};
use codegen::{kernels_for, render_any, KernelSetOptions, KernelSpec};
use runtime::gpu::{Gpu, GpuError};
use runtime::launch::{CudaFunction, DevicePtr, DevicePtrMut, Launch};

fathom_macros::kernels! {
    /// A few specs, one of each way of writing a value.
    pub mod small {
        scan(head_dim = 128, group = 7, block = 64, segment_words = 512, tile_words = 16,
             threads = 256, placement = hbm);
        select(group = 7, k_max = 1024, threads = 256, items_per_thread = 8);
        plan(head_dim = 64, group = 2, block = 32, segment_words = 256, method = sparq(r = 16),
             rotate = true, threads = 128);
        plan(head_dim = 64, group = 2, block = 32, segment_words = 256, method = fathom,
             rotate = true, threads = 128);
        encode(head_dim = 128, block = 64, segment_words = 512, mode = append, rotate = false,
               threads = 256);
        landmark(head_dim = 128, group = 7, threads = 256, placement = host);
        // Listed twice: kept once.
        scan(head_dim = 128, group = 7, block = 64, segment_words = 512, tile_words = 16,
             threads = 256, placement = hbm);
    }
}

fathom_macros::kernels! {
    #[fathom(runtime = ::runtime)]
    mod from_preset {
        preset("llama-3.1-8b", segment_words = 256);
    }
}

fn small_specs() -> Vec<KernelSpec> {
    vec![
        ScanSpec {
            head_dim: 128,
            group: 7,
            block: 64,
            segment_words: 512,
            tile_words: 16,
            threads: 256,
            placement: Placement::Hbm,
            tensor_cores: false,
            peaks: false,
        }
        .into(),
        SelectSpec {
            group: 7,
            k_max: 1024,
            threads: 256,
            items_per_thread: 8,
            algorithm: SelectAlgorithm::Radix,
            coarse_floor: false,
            owned_tiles: false,
        }
        .into(),
        PlanSpec {
            block: 32,
            segment_words: 256,
            threads: 128,
            ..PlanSpec::new(64, 2, PlanMethod::Sparq { r: 16 }, true)
        }
        .into(),
        PlanSpec {
            block: 32,
            segment_words: 256,
            threads: 128,
            ..PlanSpec::new(64, 2, PlanMethod::Fathom, true)
        }
        .into(),
        EncodeSpec::new(128, EncodeMode::Append, false).into(),
        LandmarkSpec {
            head_dim: 128,
            group: 7,
            threads: 256,
            placement: Placement::Host,
            kv_rows: codegen::spec::KvRows::Separate,
        }
        .into(),
    ]
}

fn rendered(specs: &[KernelSpec]) -> Vec<(String, String)> {
    specs
        .iter()
        .map(|s| (s.kernel_name(), render_any(s).unwrap()))
        .collect()
}

fn embedded(sources: &[(&str, &str)]) -> Vec<(String, String)> {
    sources
        .iter()
        .map(|(name, source)| (name.to_string(), source.to_string()))
        .collect()
}

#[test]
fn sources_are_codegens() {
    assert_eq!(embedded(small::SOURCES), rendered(&small_specs()));
    assert_eq!(
        small::FATHOM_SCAN_D128_G7_B64_S512_W16_HBM_T256_SOURCE,
        render_any(&small_specs()[0]).unwrap()
    );
}

#[test]
fn a_preset_gives_its_default_kernel_set() {
    let options = KernelSetOptions {
        segment_words: 256,
        ..Default::default()
    };
    let specs = kernels_for(&preset("llama-3.1-8b").unwrap(), &options);
    assert_eq!(embedded(from_preset::SOURCES), rendered(&specs));
}

#[test]
fn entry_names_are_the_specs() {
    let select = &small_specs()[1];
    let entries = select.entry_points();
    assert_eq!(entries.len(), 6);
    assert_eq!(small::FATHOM_SELECT_G7_K1024_T256_I8_INIT_ENTRY, entries[0]);
    assert_eq!(
        small::FATHOM_SELECT_G7_K1024_T256_I8_UNION_ENTRY,
        entries[5]
    );
    assert_eq!(
        small::FATHOM_LANDMARK_D128_G7_T256_HOST_BUILD_ENTRY,
        small_specs()[5].entry_points()[0]
    );
}

type Done = Result<(), GpuError>;

/// Each launcher, with plain pointer arguments, is a function of exactly the kernel's
/// parameters (templates/ABI.md and the spec docs).
#[test]
#[allow(clippy::type_complexity)] // the full signatures are what is checked
fn launchers_have_the_kernels_signatures() {
    let _scan: fn(
        &Gpu,
        &CudaFunction,
        Launch,
        DevicePtr<u64>,    // const unsigned long long* runs
        DevicePtr<u32>,    // const unsigned int* class_count
        DevicePtr<f32>,    // const float* q_store
        DevicePtr<i32>,    // const int* n_stored
        i32,               // int max_seg
        i32,               // int n_heads
        DevicePtrMut<f32>, // float* scores
        i32,               // int ld_scores
    ) -> Done = small::fathom_scan_d128_g7_b64_s512_w16_hbm_t256;
    let _init: fn(
        &Gpu,
        &CudaFunction,
        Launch,
        DevicePtr<i32>,    // const int* n_total
        i32,               // int k
        DevicePtrMut<u32>, // unsigned int* state
        DevicePtrMut<i32>, // int* sel_count
        i32,               // int num_kv_heads
    ) -> Done = small::fathom_select_g7_k1024_t256_i8_init;
    let _pick: fn(&Gpu, &CudaFunction, Launch, DevicePtrMut<u32>, i32) -> Done =
        small::fathom_select_g7_k1024_t256_i8_pick;
    let _encode: fn(
        &Gpu,
        &CudaFunction,
        Launch,
        DevicePtr<DevicePtr<u16>>,    // const unsigned short* const* k_rows
        DevicePtr<f32>,               // const float* rot
        DevicePtr<DevicePtrMut<u64>>, // unsigned long long* const* seg_words
        DevicePtr<DevicePtrMut<u16>>, // unsigned short* const* seg_scales
        i32,                          // int max_seg
        DevicePtr<i32>,               // const int* range_a
        DevicePtr<i32>,               // const int* range_b
        i32,                          // int n_heads
        DevicePtrMut<i32>,            // int* status
    ) -> Done = small::fathom_encode_d128_b64_s512_append_raw_t256;
    let _build: fn(
        &Gpu,
        &CudaFunction,
        Launch,
        DevicePtr<DevicePtr<u16>>,    // const unsigned short* const* k_rows
        DevicePtr<DevicePtrMut<u16>>, // unsigned short* const* means
        DevicePtr<i32>,               // const int* range_start
        DevicePtr<i32>,               // const int* range_end
        i32,                          // int num_kv_heads
    ) -> Done = small::fathom_landmark_d128_g7_t256_host_build;
    let _plan: fn(
        &Gpu,
        &CudaFunction,
        Launch,
        DevicePtr<f32>,
        DevicePtr<f32>,
        DevicePtr<u8>,
        DevicePtr<f32>,
        f32, // float budget
        DevicePtr<DevicePtr<u64>>,
        DevicePtr<DevicePtr<u16>>,
        i32,
        DevicePtr<i32>,
        i32,
        DevicePtrMut<f32>,
        DevicePtrMut<u8>,
        DevicePtrMut<u32>,
        DevicePtrMut<u64>,
        DevicePtrMut<u64>,
        DevicePtrMut<u64>,
        DevicePtrMut<u16>,
        i32,
        DevicePtrMut<i32>,
    ) -> Done = small::fathom_plan_d64_g2_b32_s256_fathom_rot_t128;
}

/// Launches with buffers as the arguments (`pick` and `build` are the entry points
/// `small::FATHOM_SELECT_G7_K1024_T256_I8_PICK_ENTRY` and
/// `small::FATHOM_LANDMARK_D128_G7_T256_HOST_BUILD_ENTRY` of their kernels, loaded through the
/// runtime's JIT): compiled, never run (there may be no GPU).
#[allow(dead_code)]
fn launch_with_buffers(gpu: &Gpu, pick: &CudaFunction, build: &CudaFunction) -> Done {
    let launch = Launch::new([1, 1, 1], 256);
    let mut state = gpu.filled::<u32>(2052, 0)?;
    small::fathom_select_g7_k1024_t256_i8_pick(gpu, pick, launch, &mut state, 0)?;
    let keys = gpu.filled::<u16>(128 * 64, 0)?;
    let mut means = gpu.mapped::<u16>(128 * 8, 0)?;
    let k_rows = gpu.upload(&[keys.ptr()])?;
    let mean_rows = gpu.upload(&[means.ptr_mut()])?;
    let range_end = gpu.upload(&[64i32])?;
    small::fathom_landmark_d128_g7_t256_host_build(
        gpu,
        build,
        launch,
        &k_rows,
        &mean_rows,
        DevicePtr::null(),
        &range_end,
        1,
    )?;
    gpu.synchronize()?;
    let _ = means.as_mut_slice();
    Ok(())
}

//! Tests of the driver layer that need no GPU.

use super::*;

#[test]
fn device_info_names_its_target_capability_and_driver() {
    let info = DeviceInfo {
        name: "NVIDIA H200".into(),
        compute_capability: (9, 0),
        multiprocessors: 132,
        total_memory: 1 << 30,
        driver_version: 12080,
        host_numa_node: Some(0),
    };
    assert_eq!(info.arch(), "sm_90");
    assert_eq!(info.compute_capability_text(), "9.0");
    assert_eq!(info.driver_cuda(), "12.8");
}

#[test]
fn the_pinned_ledger_refuses_past_its_cap_and_counts_releases() {
    let ledger = PinnedLedger {
        in_use: AtomicUsize::new(0),
        limit: AtomicUsize::new(100),
    };
    assert_eq!(ledger.reserve(60), Ok(()));
    assert_eq!(ledger.reserve(41), Err(100));
    assert_eq!(ledger.in_use.load(Ordering::Relaxed), 60);
    assert_eq!(ledger.reserve(40), Ok(()));
    ledger.release(60);
    assert_eq!(ledger.in_use.load(Ordering::Relaxed), 40);
    ledger.limit.store(usize::MAX, Ordering::Relaxed);
    assert_eq!(ledger.reserve(usize::MAX - 40), Ok(()));
    assert_eq!(ledger.reserve(1), Err(usize::MAX), "overflow is refused");
}

#[test]
fn a_gpu_handle_can_move_to_another_thread() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Gpu>();
    send_sync::<DeviceBuffer<f32>>();
}

#[test]
fn running_out_of_memory_names_the_memory_and_the_request() {
    let oom = DriverError(sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY);
    let e = allocation_error(oom, "cuMemAlloc", "device", || "a buffer".into(), 64);
    assert!(matches!(
        e,
        GpuError::OutOfMemory {
            memory: "device",
            bytes: 64,
            ..
        }
    ));
    assert!(e.to_string().contains("out of device memory"), "{e}");
    let other = DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE);
    let e = allocation_error(
        other,
        "cuMemHostAlloc",
        "pinned host",
        || unreachable!(),
        64,
    );
    assert!(matches!(
        e,
        GpuError::Driver {
            call: "cuMemHostAlloc",
            ..
        }
    ));
}

#[test]
fn fathom_pdl_is_exit_by_default_one_early_or_zero_and_anything_else_says_what_is_allowed() {
    assert_eq!(parse_programmatic("exit").unwrap(), Pdl::AtExit);
    assert_eq!(parse_programmatic("").unwrap(), Pdl::AtExit);
    assert_eq!(parse_programmatic("1").unwrap(), Pdl::Early);
    assert_eq!(parse_programmatic(" 1\n").unwrap(), Pdl::Early);
    assert_eq!(parse_programmatic("early").unwrap(), Pdl::Early);
    assert_eq!(parse_programmatic("0").unwrap(), Pdl::Off);
    assert!(Pdl::AtExit.launches() && Pdl::Early.launches() && !Pdl::Off.launches());
    let e = parse_programmatic("yes").unwrap_err().to_string();
    assert!(
        e.contains(PDL_VAR)
            && e.contains("yes")
            && e.contains("exit (the default")
            && e.contains("0 (plain"),
        "{e}"
    );
}

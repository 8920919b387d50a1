//! How the host placement's segments and K/V row regions are allocated ([`HostMemory`]), and
//! the two allocations besides `cuMemHostAlloc` ([`HostBuffer`]).
//!
//! Why: the fetch reads a few thousand scattered 256-byte rows per layer out of a 2 GiB+ row
//! region at 1M tokens. `cuMemHostAlloc` memory is mapped for the GPU in small pages, so nearly
//! every scattered row costs a GPU TLB miss once the region outgrows the TLBs' reach (10 GB/s
//! at 1M against 50 GB/s at 128k; `bench/experiments/host_fetch_tlb.cu` measures it). Host
//! memory made by the virtual memory management API (`cuMemCreate` on the host, mapped at 2 MiB
//! or coarser granularity) or 2 MiB transparent huge pages registered with `cuMemHostRegister`
//! can be mapped with large GPU pages.
//!
//! Every allocation is counted in the context's pinned ledger ([`Gpu::pinned_bytes`], capped by
//! [`Gpu::limit_pinned`]) for its whole size, and given back to the driver and the operating
//! system when dropped. Running out is [`GpuError::OutOfMemory`] of `"pinned host"` memory, as
//! for `cuMemHostAlloc`.

use std::ffi::c_void;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Once};

use cudarc::driver::{sys, CudaContext, DriverError};

use crate::gpu::{allocation_error, Gpu, GpuError, PinnedReservation};

/// How the store allocates its host placement's memory (segments and K/V row regions). The
/// upload ring and every other pinned buffer stay `cuMemHostAlloc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum HostMemory {
    /// `cuMemHostAlloc` (mapped, portable): the default, small GPU pages.
    #[default]
    Pinned,
    /// Anonymous `mmap`, `madvise(MADV_HUGEPAGE)`, touched, then `cuMemHostRegister`
    /// (mapped): 2 MiB pages where the kernel's transparent huge pages allow.
    Registered,
    /// `cuMemCreate` of host memory (the GPU's NUMA node, else any), reserved and mapped with
    /// `cuMemAddressReserve`/`cuMemMap` at 2 MiB or the driver's coarser recommended
    /// granularity, device access by `cuMemSetAccess`. No CPU mapping: the store fills and
    /// reads it through the device.
    Vmm2M,
}

impl HostMemory {
    /// Every mode, in the order of [`HostMemory::name`]'s list.
    pub const ALL: [HostMemory; 3] = [
        HostMemory::Pinned,
        HostMemory::Registered,
        HostMemory::Vmm2M,
    ];

    /// The name the command lines and records use: `pinned`, `registered`, `vmm2m`.
    pub fn name(self) -> &'static str {
        match self {
            HostMemory::Pinned => "pinned",
            HostMemory::Registered => "registered",
            HostMemory::Vmm2M => "vmm2m",
        }
    }
}

impl fmt::Display for HostMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A host memory mode that is not one of the names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a host memory mode; allowed: pinned, registered, vmm2m")]
pub struct HostMemoryParseError(pub String);

impl FromStr for HostMemory {
    type Err = HostMemoryParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostMemory::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| HostMemoryParseError(s.to_string()))
    }
}

/// The mode a store runs with when `asked` cannot be had here (`unsupported` says why): with
/// `require` the reason is the error; else [`HostMemory::Pinned`], with one warning per process
/// on standard error (a serving process builds many stores; one line says it all).
pub fn fall_back(
    asked: HostMemory,
    unsupported: String,
    require: bool,
) -> Result<HostMemory, String> {
    if require {
        return Err(unsupported);
    }
    static WARNED: Once = Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "fathom: host memory `{asked}` is not available ({unsupported}); the store uses \
             `pinned` (cuMemHostAlloc). Set StoreConfig::require_host_memory to make this an error."
        )
    });
    Ok(HostMemory::Pinned)
}

/// Bytes of a huge page, the least granularity of both large-page modes.
pub const HUGE_PAGE: usize = 2 << 20;

enum Kind {
    /// `mmap` of `map_bytes` at `host`, registered with the driver.
    Registered { host: *mut c_void },
    /// A VMM allocation mapped over the buffer's reserved addresses.
    Vmm {
        handle: sys::CUmemGenericAllocationHandle,
    },
}

/// Host memory of [`HostMemory::Registered`] or [`HostMemory::Vmm2M`], device-mapped, zeroed.
pub struct HostBuffer {
    kind: Kind,
    /// The address kernels read it through.
    addr: u64,
    /// The bytes asked for.
    bytes: usize,
    /// The bytes mapped and pinned: `bytes` rounded up to whole huge pages (or the VMM
    /// granularity).
    map_bytes: usize,
    ctx: Arc<CudaContext>,
    _pinned: PinnedReservation,
}

// SAFETY: the raw pointer is an address of memory this value owns; nothing here is tied to the
// thread that allocated it (the driver calls bind the context first).
unsafe impl Send for HostBuffer {}
unsafe impl Sync for HostBuffer {}

fn driver(call: &'static str, r: sys::CUresult) -> Result<(), GpuError> {
    r.result()
        .map_err(|source| GpuError::Driver { call, source })
}

fn alloc_failure(call: &'static str, r: sys::CUresult, what: &str, bytes: usize) -> GpuError {
    allocation_error(
        DriverError(r),
        call,
        "pinned host",
        || what.to_string(),
        bytes,
    )
}

impl HostBuffer {
    /// `bytes` zeroed bytes of `mode` (not [`HostMemory::Pinned`]: that is
    /// [`Gpu::mapped`]), `what` naming them in an out-of-memory error.
    pub fn new(
        gpu: &Gpu,
        mode: HostMemory,
        bytes: usize,
        what: &str,
    ) -> Result<HostBuffer, GpuError> {
        let ctx = gpu.stream().context().clone();
        ctx.bind_to_thread().map_err(|source| GpuError::Driver {
            call: "cuCtxSetCurrent",
            source,
        })?;
        let granule = match mode {
            HostMemory::Pinned => {
                return Err(GpuError::Driver {
                    call: "HostBuffer::new (pinned memory is Gpu::mapped)",
                    source: DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE),
                })
            }
            HostMemory::Registered => HUGE_PAGE,
            HostMemory::Vmm2M => vmm_granule(&host_properties(&ctx)?)?,
        };
        let map_bytes = bytes.max(1).next_multiple_of(granule);
        // The whole mapping counts: it is what the host gives up.
        let pinned = gpu.reserve_pinned(map_bytes, || what.to_string())?;
        let (kind, addr) = match mode {
            HostMemory::Vmm2M => vmm(&ctx, map_bytes, granule, what)?,
            _ => {
                // The pages are placed as they are touched, on the node the thread prefers.
                let _near = crate::numa::PreferredNode::near(gpu.info().host_numa_node);
                registered(map_bytes, what)?
            }
        };
        let buffer = HostBuffer {
            kind,
            addr,
            bytes,
            map_bytes,
            ctx,
            _pinned: pinned,
        };
        if let Kind::Vmm { .. } = buffer.kind {
            // Not zeroed by the driver; the store's segments must read as zero. (A registered
            // mapping is fresh anonymous memory: zero already.)
            driver("cuMemsetD8", unsafe {
                sys::cuMemsetD8_v2(addr, 0, map_bytes)
            })?;
            driver("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })?;
        }
        Ok(buffer)
    }

    /// Whether `mode` can be allocated on `gpu`: one huge page of it is made and freed. The
    /// driver's reason when not (running out of pinned memory, the ledger's cap included, is
    /// [`GpuError::OutOfMemory`], not a missing mode).
    pub fn probe(gpu: &Gpu, mode: HostMemory) -> Result<(), GpuError> {
        match mode {
            HostMemory::Pinned => Ok(()),
            _ => HostBuffer::new(gpu, mode, HUGE_PAGE, "a probe of the host memory mode").map(drop),
        }
    }

    /// The (unified) address kernels read it through.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The bytes asked for.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// The bytes held (mapped and counted as pinned): the size rounded up to whole huge pages
    /// or the VMM granularity.
    pub fn held_bytes(&self) -> usize {
        self.map_bytes
    }

    /// Whether no bytes were asked for.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

/// Anonymous memory advised to huge pages, touched so that they back it, registered mapped.
fn registered(map_bytes: usize, what: &str) -> Result<(Kind, u64), GpuError> {
    let host = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if host == libc::MAP_FAILED {
        return Err(GpuError::OutOfMemory {
            memory: "pinned host",
            what: format!("{what} (mmap: {})", std::io::Error::last_os_error()),
            bytes: map_bytes,
        });
    }
    let unmap = || unsafe {
        libc::munmap(host, map_bytes);
    };
    // Advice only: where THP is off the pages are small and the mode is still correct.
    unsafe {
        libc::madvise(host, map_bytes, libc::MADV_HUGEPAGE);
        // One byte per small page faults every page in, as huge pages where possible.
        let bytes = host as *mut u8;
        for at in (0..map_bytes).step_by(4096) {
            bytes.add(at).write_volatile(0);
        }
    }
    let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
    let r = unsafe { sys::cuMemHostRegister_v2(host, map_bytes, flags) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        unmap();
        return Err(alloc_failure("cuMemHostRegister", r, what, map_bytes));
    }
    let mut device: sys::CUdeviceptr = 0;
    let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        unsafe { sys::cuMemHostUnregister(host) };
        unmap();
        return Err(GpuError::Driver {
            call: "cuMemHostGetDevicePointer",
            source: DriverError(r),
        });
    }
    Ok((Kind::Registered { host }, device))
}

/// The allocation properties of host memory near the GPU (`HOST_NUMA` with the device's NUMA
/// node), or of any host memory when the system has no NUMA.
fn host_properties(ctx: &CudaContext) -> Result<sys::CUmemAllocationProp, GpuError> {
    let numa = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID)
        .map_err(|source| GpuError::Driver {
            call: "cuDeviceGetAttribute(HOST_NUMA_ID)",
            source,
        })?;
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST_NUMA;
    // "On systems where NUMA is not available the id must be 0" (cuMemCreate).
    prop.location.id = numa.max(0);
    Ok(prop)
}

/// The VMM granularity of host memory: 2 MiB, or the driver's recommendation when coarser.
fn vmm_granule(prop: &sys::CUmemAllocationProp) -> Result<usize, GpuError> {
    let mut granularity = 0usize;
    driver("cuMemGetAllocationGranularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
        )
    })?;
    Ok(granularity.max(HUGE_PAGE))
}

/// Host memory of the VMM API, `map_bytes` (a multiple of `granule`) mapped for this device.
fn vmm(
    ctx: &CudaContext,
    map_bytes: usize,
    granule: usize,
    what: &str,
) -> Result<(Kind, u64), GpuError> {
    let prop = host_properties(ctx)?;
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    let r = unsafe { sys::cuMemCreate(&mut handle, map_bytes, &prop, 0) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(alloc_failure("cuMemCreate", r, what, map_bytes));
    }
    let release = || unsafe {
        sys::cuMemRelease(handle);
    };
    let mut va: sys::CUdeviceptr = 0;
    let r = unsafe { sys::cuMemAddressReserve(&mut va, map_bytes, granule, 0, 0) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        release();
        return Err(alloc_failure("cuMemAddressReserve", r, what, map_bytes));
    }
    let free_va = || unsafe {
        sys::cuMemAddressFree(va, map_bytes);
    };
    let r = unsafe { sys::cuMemMap(va, map_bytes, 0, handle, 0) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        free_va();
        release();
        return Err(alloc_failure("cuMemMap", r, what, map_bytes));
    }
    let mut access: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    access.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = ctx.ordinal() as i32;
    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    let r = unsafe { sys::cuMemSetAccess(va, map_bytes, &access, 1) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        unsafe { sys::cuMemUnmap(va, map_bytes) };
        free_va();
        release();
        return Err(GpuError::Driver {
            call: "cuMemSetAccess",
            source: DriverError(r),
        });
    }
    Ok((Kind::Vmm { handle }, va))
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // Freed even when the context cannot be bound (the process is tearing down): the
        // ledger is given back by the reservation either way.
        let _ = self.ctx.bind_to_thread();
        unsafe {
            match self.kind {
                Kind::Registered { host } => {
                    sys::cuMemHostUnregister(host);
                    libc::munmap(host, self.map_bytes);
                }
                Kind::Vmm { handle } => {
                    sys::cuMemUnmap(self.addr, self.map_bytes);
                    sys::cuMemAddressFree(self.addr, self.map_bytes);
                    sys::cuMemRelease(handle);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_their_names_and_nothing_else() {
        for mode in HostMemory::ALL {
            assert_eq!(mode.name().parse::<HostMemory>(), Ok(mode));
            assert_eq!(
                mode.to_string().to_uppercase().parse::<HostMemory>(),
                Ok(mode)
            );
        }
        let e = "vmm".parse::<HostMemory>().unwrap_err();
        assert!(e.to_string().contains("pinned, registered, vmm2m"), "{e}");
        assert_eq!(HostMemory::default(), HostMemory::Pinned);
    }

    #[test]
    fn an_unavailable_mode_falls_back_to_pinned_unless_required() {
        assert_eq!(
            fall_back(HostMemory::Vmm2M, "no VMM".into(), false),
            Ok(HostMemory::Pinned)
        );
        assert_eq!(
            fall_back(HostMemory::Registered, "refused".into(), true),
            Err("refused".to_string())
        );
    }
}

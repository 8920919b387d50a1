//! The store's raw device operations: memory of either placement, stream-ordered copies and
//! fills by address, the pinned upload ring that keeps table updates asynchronous, and the small
//! row-append kernel.
//!
//! Everything is queued on the [`Gpu`]'s one stream, so reusing memory a freed sequence held is
//! ordered after every kernel queued while it was alive.

use cudarc::driver::{result, sys, CudaEvent, DriverError};

use super::host_memory::{HostBuffer, HostMemory};
use super::pool::Backing;
use crate::gpu::{DeviceBuffer, Gpu, GpuError, MappedBuffer};
use codegen::spec::Placement;

fn check<T>(call: &'static str, r: Result<T, DriverError>) -> Result<T, GpuError> {
    r.map_err(|source| GpuError::Driver { call, source })
}

fn bind(gpu: &Gpu) -> Result<(), GpuError> {
    check("cuCtxSetCurrent", gpu.stream().context().bind_to_thread())
}

/// Memory of one placement: device memory, or page-locked host memory mapped into the device's
/// address space (`cuMemHostAlloc`, or registered or VMM host memory: [`HostMemory`]).
pub enum Memory {
    Device(DeviceBuffer<u8>),
    Mapped(MappedBuffer<u8>),
    Host(HostBuffer),
}

impl Memory {
    /// `bytes` zeroed bytes in `placement`, host memory allocated as `host` says.
    pub fn zeroed(
        gpu: &Gpu,
        placement: Placement,
        host: HostMemory,
        bytes: usize,
    ) -> Result<Memory, GpuError> {
        Ok(match placement {
            Placement::Host if host != HostMemory::Pinned => {
                Memory::Host(HostBuffer::new(gpu, host, bytes, "a store allocation")?)
            }
            // Queued on the store's stream, before the work that will write there: no wait, so
            // an append that grows the store stays asynchronous.
            Placement::Hbm => Memory::Device(gpu.zeroed_async(bytes)?),
            Placement::Host => Memory::Mapped(gpu.mapped(bytes, 0)?),
        })
    }
}

impl Backing for Memory {
    fn addr(&self) -> u64 {
        match self {
            Memory::Device(b) => b.addr(),
            Memory::Mapped(b) => b.addr(),
            Memory::Host(b) => b.addr(),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Memory::Device(b) => b.len(),
            Memory::Mapped(b) => b.len(),
            // What the pools hold is what was pinned, huge-page rounding included.
            Memory::Host(b) => b.held_bytes(),
        }
    }
}

/// Waits for all work of the context, every stream's: for tests and set-up that mix streams,
/// never on a step or append path (a borrowed stream's owner keeps other streams busy).
pub fn settle(gpu: &Gpu) -> Result<(), GpuError> {
    check("cuCtxSynchronize", gpu.stream().context().synchronize())
}

/// Queues a copy of `bytes` bytes between unified addresses (device or mapped host memory).
pub fn copy(gpu: &Gpu, dst: u64, src: u64, bytes: usize) -> Result<(), GpuError> {
    if bytes == 0 {
        return Ok(());
    }
    bind(gpu)?;
    check("cuMemcpyAsync", unsafe {
        sys::cuMemcpyAsync(dst, src, bytes, gpu.stream().cu_stream()).result()
    })
}

/// Rows of one pitched copy: long prefills are cut into pieces of at most this many rows (a
/// margin under any limit of a driver's pitched copies; the pieces queue back to back).
const ROWS_PER_COPY: usize = 1 << 15;

/// Queues a copy of `rows` rows of `row_bytes` bytes each from `src` (rows `row_bytes` apart)
/// to `dst` (rows `dst_pitch` bytes apart), between unified addresses (device or mapped host
/// memory): `cuMemcpy2DAsync`, one per [`ROWS_PER_COPY`] rows.
pub fn copy_rows(
    gpu: &Gpu,
    dst: u64,
    dst_pitch: usize,
    src: u64,
    row_bytes: usize,
    rows: usize,
) -> Result<(), GpuError> {
    if rows == 0 || row_bytes == 0 {
        return Ok(());
    }
    assert!(
        dst_pitch >= row_bytes,
        "rows of {row_bytes} bytes overlap at pitch {dst_pitch}"
    );
    bind(gpu)?;
    let unified = sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
    for first in (0..rows).step_by(ROWS_PER_COPY) {
        let height = ROWS_PER_COPY.min(rows - first);
        let copy = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: unified,
            srcHost: std::ptr::null(),
            srcDevice: src + (first * row_bytes) as u64,
            srcArray: std::ptr::null_mut(),
            srcPitch: row_bytes,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: unified,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst + (first * dst_pitch) as u64,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch,
            WidthInBytes: row_bytes,
            Height: height,
        };
        check("cuMemcpy2DAsync", unsafe {
            sys::cuMemcpy2DAsync_v2(&copy, gpu.stream().cu_stream()).result()
        })?;
    }
    Ok(())
}

/// Queues setting `bytes` bytes at the unified address `dst` to zero.
pub fn zero(gpu: &Gpu, dst: u64, bytes: usize) -> Result<(), GpuError> {
    if bytes == 0 {
        return Ok(());
    }
    bind(gpu)?;
    check("cuMemsetD8Async", unsafe {
        result::memset_d8_async(dst, 0, bytes, gpu.stream().cu_stream())
    })
}

/// Reads `len` elements at the unified address `addr` (device or mapped host memory) after
/// everything queued so far: a host synchronisation, for checks and tests, never for a step.
pub fn read_back<T: Copy + Default>(gpu: &Gpu, addr: u64, len: usize) -> Result<Vec<T>, GpuError> {
    gpu.synchronize()?;
    let mut out = vec![T::default(); len];
    if len > 0 {
        bind(gpu)?;
        check("cuMemcpy", unsafe {
            sys::cuMemcpy(
                out.as_mut_ptr() as u64,
                addr,
                len * std::mem::size_of::<T>(),
            )
            .result()
        })?;
    }
    Ok(out)
}

/// Host→device copies of small tables from a ring of pinned memory, so that they are truly
/// asynchronous: the ring is cut into parts, and a part is refilled only after an event shows
/// the copies reading it have run (normally long before, so no wait).
pub struct Uploader {
    ring: MappedBuffer<u8>,
    part_bytes: usize,
    /// The event recorded when the part was left, per part.
    done: Vec<Option<CudaEvent>>,
    part: usize,
    offset: usize,
}

/// Parts of the upload ring.
const RING_PARTS: usize = 16;
/// Bytes of one part.
const PART_BYTES: usize = 64 * 1024;

impl Uploader {
    /// A ring of 1 MiB of pinned memory.
    pub fn new(gpu: &Gpu) -> Result<Uploader, GpuError> {
        Ok(Uploader {
            ring: gpu.mapped(RING_PARTS * PART_BYTES, 0)?,
            part_bytes: PART_BYTES,
            done: (0..RING_PARTS).map(|_| None).collect(),
            part: 0,
            offset: 0,
        })
    }

    /// Pinned bytes the ring holds.
    pub fn bytes(&self) -> usize {
        self.ring.len()
    }

    /// Queues copying `data` to the device address `dst`.
    pub fn upload<T: Copy>(&mut self, gpu: &Gpu, dst: u64, data: &[T]) -> Result<(), GpuError> {
        let bytes = std::mem::size_of_val(data);
        if bytes == 0 {
            return Ok(());
        }
        bind(gpu)?;
        if bytes > self.part_bytes {
            // Rare (a whole segment table rewritten): the driver stages a pageable source
            // before it returns, so `data` may go away at once.
            return check("cuMemcpyHtoDAsync", unsafe {
                result::memcpy_htod_async(dst, data, gpu.stream().cu_stream())
            });
        }
        if self.offset + bytes > self.part_bytes {
            let event = check(
                "cuEventCreate",
                gpu.stream()
                    .context()
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)),
            )?;
            check("cuEventRecord", event.record(gpu.stream()))?;
            self.done[self.part] = Some(event);
            self.part = (self.part + 1) % self.done.len();
            self.offset = 0;
            if let Some(event) = self.done[self.part].take() {
                check("cuEventSynchronize", event.synchronize())?;
            }
        }
        let start = self.part * self.part_bytes + self.offset;
        let staged = &mut self.ring.as_mut_slice()[start..start + bytes];
        // SAFETY: `data` is `bytes` bytes of plain `Copy` values.
        staged.copy_from_slice(unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, bytes)
        });
        check("cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(dst, &self.ring.as_slice()[start..start + bytes], {
                gpu.stream().cu_stream()
            })
        })?;
        // 16-byte steps keep every staged table aligned.
        self.offset += bytes.next_multiple_of(16);
        Ok(())
    }
}

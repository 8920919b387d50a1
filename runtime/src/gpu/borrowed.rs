//! The GPU layer for a foreign caller: a [`Gpu`] queuing on a stream someone else owns (a
//! PyTorch stream, the legacy default stream, the per-thread default stream), in the device's
//! primary context, which is the context the CUDA runtime and so PyTorch use; views of memory
//! someone else allocated; where a pointer lives; and the stream-ordered uploads and downloads a
//! decode step may use (no context-wide synchronisation: the caller's other streams keep
//! running).
//!
//! Work queued through a borrowed stream is ordered with the owner's work on that stream, which
//! is the point: a key written by a PyTorch kernel is read by fathom's kernels after it.

use std::sync::atomic::AtomicBool;

use cudarc::driver::{result, sys};

use super::{check, DeviceBuffer, Gpu, GpuError};

/// A stream handle as a foreign caller passes it: PyTorch's `torch.cuda.Stream.cuda_stream`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamHandle {
    /// The legacy default stream: handle 0 (PyTorch's default stream) or `CU_STREAM_LEGACY`.
    Legacy,
    /// The per-thread default stream, `CU_STREAM_PER_THREAD` (2).
    PerThread,
    /// Any other stream, by its `CUstream` value.
    Raw(u64),
}

impl StreamHandle {
    /// The handle a caller passes as an integer.
    pub fn from_raw(handle: u64) -> StreamHandle {
        match handle {
            0 | 1 => StreamHandle::Legacy,
            2 => StreamHandle::PerThread,
            h => StreamHandle::Raw(h),
        }
    }

    /// The `CUstream` value queued to.
    pub fn raw(self) -> u64 {
        match self {
            StreamHandle::Legacy => 0,
            StreamHandle::PerThread => 2,
            StreamHandle::Raw(h) => h,
        }
    }
}

/// An event one stream records and another waits on ([`Gpu::marker`], [`Gpu::wait_on`]).
pub struct Marker(cudarc::driver::CudaEvent);

/// Where the driver says an address lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerPlace {
    /// Device memory of the device with this ordinal.
    Device(usize),
    /// Host memory (pinned, or pageable memory the driver does not know).
    Host,
}

impl Gpu {
    /// A handle on device `ordinal`'s primary context that queues on `stream`, which the caller
    /// owns (it is never destroyed here). The pinned-memory ledger is new; give further streams
    /// of the same device with [`Gpu::on_stream`] so that they share it.
    ///
    /// # Safety
    /// A [`StreamHandle::Raw`] must be a live stream, and stay alive while the handle (or
    /// anything holding it) queues work.
    pub unsafe fn borrow_stream(ordinal: usize, stream: StreamHandle) -> Result<Gpu, GpuError> {
        let (ctx, info) = Self::primary_context(ordinal)?;
        let root = Gpu::with_stream(ctx.clone(), ctx.default_stream(), info);
        root.set_programmatic_launch(super::programmatic_from_env()?.launches());
        unsafe { root.on_stream(stream) }
    }

    /// A second handle on this handle's context, queuing on `stream` (the caller's), sharing the
    /// pinned-memory ledger. A raw stream of another context is refused.
    ///
    /// # Safety
    /// As [`Gpu::borrow_stream`].
    pub unsafe fn on_stream(&self, stream: StreamHandle) -> Result<Gpu, GpuError> {
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let wrapped = match stream {
            StreamHandle::Legacy => self.ctx.default_stream(),
            StreamHandle::PerThread => self.ctx.per_thread_stream(),
            StreamHandle::Raw(h) => {
                let raw = h as sys::CUstream;
                let mut ctx: sys::CUcontext = std::ptr::null_mut();
                check("cuStreamGetCtx", unsafe {
                    sys::cuStreamGetCtx(raw, &mut ctx).result()
                })?;
                if ctx != self.ctx.cu_ctx() {
                    return Err(GpuError::ForeignContext {
                        stream: h,
                        ordinal: self.ctx.ordinal(),
                    });
                }
                unsafe { self.ctx.wrap_borrowed_stream(raw) }
            }
        };
        Ok(Gpu {
            ctx: self.ctx.clone(),
            stream: wrapped,
            info: self.info.clone(),
            capturing: AtomicBool::new(false),
            programmatic: AtomicBool::new(self.programmatic_launch()),
            pinned: self.pinned.clone(),
        })
    }

    /// The device ordinal of this handle's context.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Whether `other` queues on the same context as this handle (memory of one is valid on the
    /// other).
    pub fn same_context(&self, other: &Gpu) -> bool {
        self.ctx.cu_ctx() == other.ctx.cu_ctx()
    }

    /// Whether `other` queues on the same stream of the same context.
    pub fn same_stream(&self, other: &Gpu) -> bool {
        self.same_context(other) && self.stream.cu_stream() == other.stream.cu_stream()
    }

    /// Makes work queued on this handle's stream from now on wait for everything queued on
    /// `earlier`'s stream so far (an event, no host wait), so that an object moving from one
    /// stream to another keeps its one order. Nothing is done between the same stream, or
    /// when either stream is being captured: a wait would pull the other stream into the
    /// capture (or wait on an event recorded in one), and a capture of a PyTorch graph begins
    /// after a device synchronisation anyway.
    pub fn order_after(&self, earlier: &Gpu) -> Result<(), GpuError> {
        if self.same_stream(earlier) || self.is_capturing()? || earlier.is_capturing()? {
            return Ok(());
        }
        self.wait_on(earlier, &self.marker()?)
    }

    /// An event for [`Gpu::wait_on`], made once and used for every wait of its kind.
    pub fn marker(&self) -> Result<Marker, GpuError> {
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let flags = Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING);
        Ok(Marker(check("cuEventCreate", self.ctx.new_event(flags))?))
    }

    /// Makes work queued on this handle's stream from now on wait for everything queued on
    /// `earlier`'s stream so far (`marker` recorded there, no host wait), also while either is
    /// captured: a fork (a second stream of the step waits for the first) or a join (the first
    /// waits for the second) inside one capture, which pulls the waiting stream into it. A
    /// wait takes the marker's latest record, so one marker serves every step. Unlike
    /// [`Gpu::order_after`], meant for the two streams of one piece of work.
    pub fn wait_on(&self, earlier: &Gpu, marker: &Marker) -> Result<(), GpuError> {
        if self.same_stream(earlier) {
            return Ok(());
        }
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        check("cuEventRecord", marker.0.record(&earlier.stream))?;
        check("cuStreamWaitEvent", self.stream.wait(&marker.0))
    }

    /// Where `addr` lives, as the driver says (`cuPointerGetAttribute`): device memory of which
    /// device, or host memory.
    pub fn pointer_place(&self, addr: u64) -> Result<PointerPlace, GpuError> {
        check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let mut memory_type: u32 = 0;
        let known = unsafe {
            sys::cuPointerGetAttribute(
                (&mut memory_type as *mut u32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr,
            )
        };
        match known {
            sys::cudaError_enum::CUDA_SUCCESS => {}
            // Pageable host memory the driver has never seen.
            sys::cudaError_enum::CUDA_ERROR_INVALID_VALUE => return Ok(PointerPlace::Host),
            e => {
                return Err(GpuError::Driver {
                    call: "cuPointerGetAttribute",
                    source: result::DriverError(e),
                })
            }
        }
        if memory_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            return Ok(PointerPlace::Host);
        }
        let mut ordinal: i32 = -1;
        check("cuPointerGetAttribute", unsafe {
            sys::cuPointerGetAttribute(
                (&mut ordinal as *mut i32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                addr,
            )
            .result()
        })?;
        Ok(PointerPlace::Device(ordinal.max(0) as usize))
    }

    /// A view of `len` elements of device memory at `addr` that someone else allocated: it is
    /// never freed here.
    ///
    /// # Safety
    /// `addr` must hold `len` elements of `T` in this context, alive while the view (and work
    /// queued with it) is in use.
    pub unsafe fn borrowed_buffer<T>(&self, addr: u64, len: usize) -> DeviceBuffer<T> {
        DeviceBuffer {
            ptr: addr,
            len,
            ctx: self.ctx.clone(),
            owned: false,
            _t: std::marker::PhantomData,
        }
    }

    /// A device buffer holding `data`, the copy queued on this handle's stream: ready for work
    /// queued after it on this stream, without waiting (the driver stages pageable `data`
    /// before it returns).
    pub fn upload_async<T: Copy>(&self, data: &[T]) -> Result<DeviceBuffer<T>, GpuError> {
        let buffer = self.alloc::<T>(data.len())?;
        if !data.is_empty() {
            check("cuMemcpyHtoDAsync", unsafe {
                result::memcpy_htod_async(buffer.ptr, data, self.stream.cu_stream())
            })?;
        }
        Ok(buffer)
    }

    /// A device buffer of `len` zeroed elements, the fill queued on this handle's stream:
    /// ready for work queued after it on this stream, without waiting.
    pub fn zeroed_async<T: Copy>(&self, len: usize) -> Result<DeviceBuffer<T>, GpuError> {
        let buffer = self.alloc::<T>(len)?;
        if len > 0 {
            check("cuMemsetD8Async", unsafe {
                result::memset_d8_async(buffer.ptr, 0, buffer.bytes(), self.stream.cu_stream())
            })?;
        }
        Ok(buffer)
    }

    /// The first `len` elements of `buffer` on the host, after the work queued on this
    /// handle's stream (waits for this stream only, not the context).
    pub fn download<T: Copy + Default>(
        &self,
        buffer: &DeviceBuffer<T>,
        len: usize,
    ) -> Result<Vec<T>, GpuError> {
        let len = len.min(buffer.len());
        let mut out = vec![T::default(); len];
        if len > 0 {
            check("cuCtxSetCurrent", self.ctx.bind_to_thread())?;
            check("cuMemcpyDtoHAsync", unsafe {
                result::memcpy_dtoh_async(&mut out, buffer.ptr, self.stream.cu_stream())
            })?;
        }
        self.synchronize()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_handles_read_the_special_values_as_the_driver_does() {
        assert_eq!(StreamHandle::from_raw(0), StreamHandle::Legacy);
        assert_eq!(StreamHandle::from_raw(1), StreamHandle::Legacy);
        assert_eq!(StreamHandle::from_raw(2), StreamHandle::PerThread);
        assert_eq!(
            StreamHandle::from_raw(0x5555_0000),
            StreamHandle::Raw(0x5555_0000)
        );
        for h in [0u64, 2, 0x7f00_1234] {
            assert_eq!(StreamHandle::from_raw(h).raw(), h);
        }
    }
}

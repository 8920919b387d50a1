//! Whether the stream a launch went to is being captured into a graph, and what a launch may
//! therefore ask it.
//!
//! Launch errors surface asynchronously, so [`super::Gpu::launch`] asks its stream
//! (`cuStreamQuery`) right after a launch to catch configuration errors at the call that made
//! them. A query of a stream under capture ends that capture as invalid, and the capture need
//! not be ours: a foreign caller (PyTorch's `torch.cuda.graph`) may be capturing the very stream
//! it lent us. So the driver is asked first (`cuStreamIsCapturing`), and only an idle stream is
//! queried. The decision is a pure function of what a [`StreamProbe`] answers, tested here with
//! a fake stream.

use cudarc::driver::{sys, DriverError};

use super::{Gpu, GpuError};

/// What the driver says of a stream's capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing: work runs when queued.
    Idle,
    /// Work queued is recorded into a graph, not run (ours or the stream owner's capture).
    Active,
    /// A capture was begun and has been invalidated; it must be ended by whoever began it.
    Invalidated,
}

/// The two questions a launch asks its stream.
pub(crate) trait StreamProbe {
    /// `cuStreamIsCapturing`.
    fn capture_status(&self) -> Result<CaptureStatus, DriverError>;
    /// `cuStreamQuery`: `Ok` when the stream is done or still running, the error of a failed
    /// launch otherwise.
    fn query(&self) -> Result<(), DriverError>;
}

/// After a launch: the stream's error, asked only when nothing captures it. `own_capture` is
/// the handle's own [`Gpu::begin_capture`], known without asking the driver.
pub(crate) fn check_after_launch(
    probe: &dyn StreamProbe,
    own_capture: bool,
) -> Result<(), (&'static str, DriverError)> {
    if own_capture {
        return Ok(());
    }
    match probe.capture_status() {
        Ok(CaptureStatus::Idle) => probe.query().map_err(|e| ("cuStreamQuery", e)),
        // Recorded, not run: there is no launch error to ask for until the graph runs.
        Ok(CaptureStatus::Active) => Ok(()),
        Ok(CaptureStatus::Invalidated) => Err((
            "cuStreamIsCapturing",
            DriverError(sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        )),
        // The legacy stream while another stream is captured in global mode: asking more would
        // disturb that capture, and the launch itself has already said whether it was allowed.
        Err(DriverError(sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) => Ok(()),
        Err(e) => Err(("cuStreamIsCapturing", e)),
    }
}

/// A raw stream handle, asked through the driver.
pub(crate) struct RawStream(pub sys::CUstream);

impl StreamProbe for RawStream {
    fn capture_status(&self) -> Result<CaptureStatus, DriverError> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        unsafe { sys::cuStreamIsCapturing(self.0, &mut status) }.result()?;
        Ok(match status {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::Idle,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    fn query(&self) -> Result<(), DriverError> {
        match unsafe { sys::cuStreamQuery(self.0) } {
            sys::cudaError_enum::CUDA_SUCCESS | sys::cudaError_enum::CUDA_ERROR_NOT_READY => Ok(()),
            e => Err(DriverError(e)),
        }
    }
}

impl Gpu {
    /// Whether this handle's stream is being captured, by [`Gpu::begin_capture`] or by the
    /// stream's owner.
    pub fn capture_status(&self) -> Result<CaptureStatus, GpuError> {
        if self.capturing.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(CaptureStatus::Active);
        }
        match RawStream(self.stream.cu_stream()).capture_status() {
            Err(DriverError(sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)) => {
                Ok(CaptureStatus::Active)
            }
            other => other.map_err(|source| GpuError::Driver {
                call: "cuStreamIsCapturing",
                source,
            }),
        }
    }

    /// Whether the stream is being captured (any capture, valid or not).
    pub fn is_capturing(&self) -> Result<bool, GpuError> {
        Ok(self.capture_status()? != CaptureStatus::Idle)
    }

    /// [`GpuError::Capturing`] when the stream is captured: allocating, freeing, loading
    /// modules and synchronising are not allowed during a capture and would end it as invalid,
    /// so they are refused before the driver is asked.
    pub(crate) fn refuse_while_capturing(&self, what: &'static str) -> Result<(), GpuError> {
        if self.is_capturing()? {
            return Err(GpuError::Capturing { what });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A stream that answers from a script and counts queries.
    struct Fake {
        status: Result<CaptureStatus, DriverError>,
        query: Result<(), DriverError>,
        queries: Cell<usize>,
        asked: Cell<usize>,
    }

    impl Fake {
        fn new(status: Result<CaptureStatus, DriverError>) -> Self {
            Fake {
                status,
                query: Ok(()),
                queries: Cell::new(0),
                asked: Cell::new(0),
            }
        }
    }

    impl StreamProbe for Fake {
        fn capture_status(&self) -> Result<CaptureStatus, DriverError> {
            self.asked.set(self.asked.get() + 1);
            self.status
        }
        fn query(&self) -> Result<(), DriverError> {
            self.queries.set(self.queries.get() + 1);
            self.query
        }
    }

    const BAD_LAUNCH: DriverError =
        DriverError(sys::cudaError_enum::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);

    #[test]
    fn an_idle_stream_is_queried_and_its_launch_error_returned() {
        let fake = Fake::new(Ok(CaptureStatus::Idle));
        assert!(check_after_launch(&fake, false).is_ok());
        assert_eq!(fake.queries.get(), 1);
        let failing = Fake {
            query: Err(BAD_LAUNCH),
            ..Fake::new(Ok(CaptureStatus::Idle))
        };
        assert_eq!(
            check_after_launch(&failing, false),
            Err(("cuStreamQuery", BAD_LAUNCH))
        );
    }

    #[test]
    fn a_stream_captured_by_its_owner_is_never_queried() {
        let fake = Fake::new(Ok(CaptureStatus::Active));
        assert!(check_after_launch(&fake, false).is_ok());
        assert_eq!(
            fake.queries.get(),
            0,
            "a query would invalidate the capture"
        );
        // The legacy stream during another stream's global-mode capture.
        let implicit = Fake::new(Err(DriverError(
            sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
        )));
        assert!(check_after_launch(&implicit, false).is_ok());
        assert_eq!(implicit.queries.get(), 0);
    }

    #[test]
    fn our_own_capture_is_known_without_asking_the_driver() {
        let fake = Fake::new(Ok(CaptureStatus::Idle));
        assert!(check_after_launch(&fake, true).is_ok());
        assert_eq!((fake.asked.get(), fake.queries.get()), (0, 0));
    }

    #[test]
    fn an_invalidated_capture_or_a_failed_question_is_an_error_without_a_query() {
        let fake = Fake::new(Ok(CaptureStatus::Invalidated));
        let (call, e) = check_after_launch(&fake, false).unwrap_err();
        assert_eq!(call, "cuStreamIsCapturing");
        assert_eq!(
            e.0,
            sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        );
        let broken = Fake::new(Err(DriverError(
            sys::cudaError_enum::CUDA_ERROR_INVALID_HANDLE,
        )));
        assert!(check_after_launch(&broken, false).is_err());
        assert_eq!(fake.queries.get() + broken.queries.get(), 0);
    }
}

//! The decode step for a foreign caller: queries and the attention output in the caller's
//! tensors (`[B][H_q][D]`, f32 or bf16), on the caller's stream.
//!
//! f32 queries are read in place and an f32 output is written in place by the attention
//! kernel. bf16 ones go through a conversion kernel on the device (never the host): queries
//! into a decoder-side f32 buffer before the step, the output from the workspace's f32 buffer
//! after it. Query head `h` of `[H_q]` belongs to KV head `h / G`, so `[B][H_q][D]` is the
//! step's `[B][H][G][D]`.

use std::sync::Arc;

use codegen::spec::{ConvertSpec, KernelSpec};
use cudarc::driver::CudaFunction;

use super::output::OutputBuffers;
use super::{Decoder, OutputLayout, StepError, StepRequest};
use crate::abi;
use crate::foreign::{Device, Dim, Dtype, Expect, TensorDesc};
use crate::gpu::{DeviceBuffer, Gpu};
use crate::launch::{DevicePtr, DevicePtrMut, KernelArgs, Launch};
use crate::view::LayerView;

/// The conversion kernels' spec: the `convert` family (`templates/convert.cu.tera`), compiled
/// and cached by the JIT like every kernel.
const CONVERT: ConvertSpec = ConvertSpec { threads: 256 };

struct Convert {
    to_f32: CudaFunction,
    to_bf16: CudaFunction,
}

/// What a decoder keeps for foreign steps: the conversion kernels (loaded on the first bf16
/// step) and the f32 copy of bf16 queries.
#[derive(Default)]
pub struct ForeignStep {
    convert: Option<Convert>,
    queries: Option<DeviceBuffer<f32>>,
    /// The buffers the last step wrote its selections to.
    last: Option<(OutputBuffers, OutputLayout)>,
}

/// The selections of a step, on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSelections {
    pub layout: OutputLayout,
    /// `[B][H][G][k+36]`, the first `sel_count` of each row valid, ascending.
    pub sel: Vec<i32>,
    /// `[B][H][G]`.
    pub sel_count: Vec<i32>,
}

impl HostSelections {
    /// The tokens query head `q` (of `[H_q]`) of sequence `b` selected, ascending.
    pub fn indices(&self, b: usize, q: usize) -> &[i32] {
        let l = self.layout;
        let qh = b * l.kv_heads * l.group + q;
        let stride = l.sel_stride();
        &self.sel[qh * stride..qh * stride + self.sel_count[qh].max(0) as usize]
    }
}

/// One thread an element, at most 65,535 blocks (the threads stride over the rest).
fn convert_launch(n: usize) -> Launch {
    let blocks = n.div_ceil(CONVERT.threads as usize).clamp(1, 65_535) as u32;
    Launch::new([blocks, 1, 1], CONVERT.threads)
}

impl Decoder {
    /// Queues the decoder's work on `gpu`'s stream from now on (a handle on the same context),
    /// ordered after everything queued on the old one.
    pub fn rebind(&mut self, gpu: Arc<Gpu>) -> Result<(), StepError> {
        if Arc::ptr_eq(&gpu, &self.gpu) {
            return Ok(());
        }
        if !gpu.same_context(&self.gpu) {
            return Err(StepError::WrongGpu);
        }
        gpu.order_after(&self.gpu)?;
        self.gpu = gpu;
        Ok(())
    }

    fn convert(&self, scratch: &mut ForeignStep) -> Result<(), StepError> {
        if scratch.convert.is_none() {
            let spec = KernelSpec::Convert(CONVERT);
            scratch.convert = Some(Convert {
                to_f32: self.kernels.function(&spec, &CONVERT.to_f32_entry())?,
                to_bf16: self.kernels.function(&spec, &CONVERT.to_bf16_entry())?,
            });
        }
        Ok(())
    }

    /// One step over `view` with the caller's `queries` `[B][H_q][D]` (f32 or bf16), writing
    /// the attention output into the caller's `out` `[B][H_q][D]` (f32 or bf16), everything
    /// queued on the decoder's stream. Returns the layout of the selections, which stay in the
    /// workspace until the next step ([`Decoder::selections`] reads them back).
    ///
    /// While the stream is captured (a caller's `torch.cuda.graph`), the step records its
    /// launches only if nothing needs allocating, uploading or compiling: run it once outside
    /// the capture first; otherwise it is refused before anything is queued.
    ///
    /// # Safety
    /// `queries` and `out` must describe live device memory until the queued step has run.
    pub unsafe fn step_tensors(
        &mut self,
        scratch: &mut ForeignStep,
        view: &LayerView<'_>,
        queries: &TensorDesc,
        out: &TensorDesc,
        request: StepRequest<'_>,
    ) -> Result<OutputLayout, StepError> {
        let (b, hq, d) = (view.batch, self.model.query_heads, self.model.head_dim);
        let shape = [Dim::Is("B", b), Dim::Is("H_q", hq), Dim::Is("D", d)];
        // bf16 bits as 16-bit integers too (numpy has no bf16).
        let types = [Dtype::F32, Dtype::Bf16, Dtype::U16];
        let device = Device::Cuda(self.gpu.ordinal());
        let pointers = Some(self.gpu.as_ref() as &dyn crate::foreign::PointerCheck);
        let expect = |what| Expect {
            what,
            dtypes: &types,
            shape: &shape,
            device,
        };
        queries.check(&expect("queries"), pointers)?;
        out.check(&expect("out"), pointers)?;
        let n = b * hq * d;
        let bf16 = (queries.dtype != Dtype::F32, out.dtype != Dtype::F32);
        if bf16.0 || bf16.1 {
            self.convert(scratch)?;
        }
        let q = if bf16.0 {
            if scratch.queries.as_ref().is_none_or(|q| q.len() != n) {
                self.gpu
                    .refuse_while_capturing("growing the f32 copy of bf16 queries")?;
                scratch.queries = None;
                scratch.queries = Some(self.gpu.zeroed_async(n)?);
            }
            let f32_queries = scratch.queries.as_ref().expect("allocated above");
            let c = scratch.convert.as_ref().expect("loaded above");
            abi::convert::Bf16ToF32Args {
                src: DevicePtr::from_addr(queries.addr),
                dst: DevicePtrMut::from_addr(f32_queries.addr()),
                n: n as u64,
            }
            .launch(&self.gpu, &c.to_f32, convert_launch(n))?;
            unsafe { self.gpu.borrowed_buffer::<f32>(f32_queries.addr(), n) }
        } else {
            unsafe { self.gpu.borrowed_buffer::<f32>(queries.addr, n) }
        };
        // An f32 output is written in place; a bf16 one is converted from the workspace's.
        let in_place = (!bf16.1).then_some(out.addr);
        let (buffers, layout) = self.queue(view, &q, &request, in_place)?;
        scratch.last = Some((buffers.clone(), layout));
        if bf16.1 {
            let c = scratch.convert.as_ref().expect("loaded above");
            abi::convert::F32ToBf16Args {
                src: DevicePtr::from_addr(buffers.out.addr()),
                dst: DevicePtrMut::from_addr(out.addr),
                n: n as u64,
            }
            .launch(&self.gpu, &c.to_bf16, convert_launch(n))?;
        }
        Ok(layout)
    }

    /// The selections of the last [`Decoder::step_tensors`] with `scratch`, read back after it
    /// (waits for the decoder's stream).
    pub fn selections(&self, scratch: &ForeignStep) -> Result<HostSelections, StepError> {
        let Some((buffers, layout)) = &scratch.last else {
            return Err(StepError::NoStepYet);
        };
        let heads = layout.batch * layout.kv_heads * layout.group;
        Ok(HostSelections {
            layout: *layout,
            sel: self
                .gpu
                .download(&buffers.sel, heads * layout.sel_stride())?,
            sel_count: self.gpu.download(&buffers.sel_count, heads)?,
        })
    }
}

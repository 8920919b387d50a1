//! [`StepOutput`]: a step's results on the device, their layout, and the downloads and checks
//! that read them back (each of those synchronises the stream: call them after the step, not
//! inside a pipeline that must not wait).

use std::sync::Arc;

use super::launches::ALWAYS;
use super::StepError;
use crate::gpu::{DeviceBuffer, Gpu, GpuError};

/// The buffers a step's results live in (shared with the workspace, or a graph's own).
#[derive(Clone)]
pub(crate) struct OutputBuffers {
    pub sel: Arc<DeviceBuffer<i32>>,
    pub sel_pos: Arc<DeviceBuffer<i32>>,
    pub sel_count: Arc<DeviceBuffer<i32>>,
    pub uni: Arc<DeviceBuffer<i32>>,
    pub uni_count: Arc<DeviceBuffer<i32>>,
    pub out: Arc<DeviceBuffer<f32>>,
    /// The plan's staging status, when the step staged planes.
    pub plan_status: Option<Arc<DeviceBuffer<i32>>>,
}

/// The dimensions the result buffers are laid out by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLayout {
    /// `B`.
    pub batch: usize,
    /// `H`, KV heads.
    pub kv_heads: usize,
    /// `G`.
    pub group: usize,
    /// `D`.
    pub head_dim: usize,
    /// The `k` of the row strides: `sel` rows are `k + 36` long, `uni` rows `G*k + 36` (for
    /// `dense`, the token capacity minus 36).
    pub k: usize,
    /// Whether `sel_pos`, `uni` and `uni_count` were written ([`super::StepRequest::union`]).
    pub union: bool,
}

impl OutputLayout {
    /// `k + 36`, the row stride of `sel` and `sel_pos`.
    pub fn sel_stride(&self) -> usize {
        self.k + ALWAYS
    }

    /// `G*k + 36`, the row stride of `uni`.
    pub fn uni_stride(&self) -> usize {
        self.group * self.k + ALWAYS
    }

    fn query_heads(&self) -> usize {
        self.batch * self.kv_heads * self.group
    }
}

/// A step's results on the device. Layouts (query head `qh = (b*H + h)*G + g`, KV head
/// `kh = b*H + h`): `sel[qh*(k+36) + j]` ascending tokens for `j < sel_count[qh]`,
/// `sel_pos` each row's position in the union, `uni[kh*(G*k+36) + u]` ascending for
/// `u < uni_count[kh]`, `out[qh*D + c]` fp32. Buffers may be longer than the layout (the
/// workspace only grows). `sel_pos`, `uni` and `uni_count` hold this step's values only when
/// [`OutputLayout::union`] (a request with `union: false` in HBM leaves them unwritten).
///
/// ```no_run
/// use runtime::gpu::DeviceBuffer;
/// use runtime::step::{Decoder, Method, StepRequest};
/// use runtime::view::LayerView;
/// fn step(
///     decoder: &mut Decoder,
///     view: &LayerView<'_>,
///     queries: &DeviceBuffer<f32>,
/// ) -> Result<(), Box<dyn std::error::Error>> {
///     let out = decoder.step(view, queries, StepRequest::new(Method::Oracle, 256))?;
///     // The results stay on the device for the next kernels of the layer...
///     let (_attention, _rows) = (out.out(), out.uni());
///     // ...or come back to the host (both wait for the step).
///     out.check()?;
///     let host = out.download()?;
///     println!("{:?}", host.output(0, 0, 0)); // D floats
///     Ok(())
/// }
/// ```
pub struct StepOutput<'a> {
    pub(crate) buffers: OutputBuffers,
    pub(crate) layout: OutputLayout,
    pub(crate) gpu: &'a Gpu,
}

/// A step's results on the host, trimmed to the layout.
#[derive(Clone, Debug, PartialEq)]
pub struct HostStepOutput {
    pub layout: OutputLayout,
    pub sel: Vec<i32>,
    pub sel_pos: Vec<i32>,
    pub sel_count: Vec<i32>,
    pub uni: Vec<i32>,
    pub uni_count: Vec<i32>,
    pub out: Vec<f32>,
}

impl StepOutput<'_> {
    /// The layout of the buffers.
    pub fn layout(&self) -> OutputLayout {
        self.layout
    }

    /// `[B][H][G][k+36]` selected tokens.
    pub fn sel(&self) -> &DeviceBuffer<i32> {
        &self.buffers.sel
    }

    /// `[B][H][G][k+36]` each selected row's position in its KV head's union.
    pub fn sel_pos(&self) -> &DeviceBuffer<i32> {
        &self.buffers.sel_pos
    }

    /// `[B][H][G]` rows selected per query head.
    pub fn sel_count(&self) -> &DeviceBuffer<i32> {
        &self.buffers.sel_count
    }

    /// `[B][H][G*k+36]` the union of each KV head's selections: the rows fetched.
    pub fn uni(&self) -> &DeviceBuffer<i32> {
        &self.buffers.uni
    }

    /// `[B][H]` rows in each union.
    pub fn uni_count(&self) -> &DeviceBuffer<i32> {
        &self.buffers.uni_count
    }

    /// `[B][H][G][D]` attention outputs, fp32.
    pub fn out(&self) -> &DeviceBuffer<f32> {
        &self.buffers.out
    }

    /// Waits for the step and copies its results to the host.
    pub fn download(&self) -> Result<HostStepOutput, GpuError> {
        self.gpu.synchronize()?;
        let l = self.layout;
        let trim = |mut v: Vec<i32>, len: usize| {
            v.truncate(len);
            v
        };
        // What the step did not write is not downloaded: it would be an earlier step's.
        let union = |buffer: &DeviceBuffer<i32>, len: usize| -> Result<Vec<i32>, GpuError> {
            Ok(if l.union {
                trim(self.gpu.download(buffer, usize::MAX)?, len)
            } else {
                Vec::new()
            })
        };
        let mut out = self.gpu.download(&self.buffers.out, usize::MAX)?;
        out.truncate(l.query_heads() * l.head_dim);
        Ok(HostStepOutput {
            layout: l,
            sel: trim(
                self.gpu.download(&self.buffers.sel, usize::MAX)?,
                l.query_heads() * l.sel_stride(),
            ),
            sel_pos: union(&self.buffers.sel_pos, l.query_heads() * l.sel_stride())?,
            sel_count: trim(
                self.gpu.download(&self.buffers.sel_count, usize::MAX)?,
                l.query_heads(),
            ),
            uni: union(&self.buffers.uni, l.batch * l.kv_heads * l.uni_stride())?,
            uni_count: union(&self.buffers.uni_count, l.batch * l.kv_heads)?,
            out,
        })
    }

    /// Waits for the step and checks what the device reported: a plan that overflowed its
    /// staging, and non-finite outputs (the sign of a non-finite query, key or value: device
    /// queries are not checked before the step, which would need a read-back inside it).
    pub fn check(&self) -> Result<(), StepError> {
        self.gpu.synchronize()?;
        if let Some(status) = &self.buffers.plan_status {
            let s = self.gpu.download(status, usize::MAX)?;
            if s[0] != 0 {
                return Err(StepError::StagingOverflow {
                    sequence: s[1] as usize,
                    head: s[2] as usize,
                });
            }
        }
        let l = self.layout;
        let out = self.gpu.download(&self.buffers.out, usize::MAX)?;
        let per_sequence = l.kv_heads * l.group * l.head_dim;
        if let Some(i) = out[..l.query_heads() * l.head_dim]
            .iter()
            .position(|x| !x.is_finite())
        {
            return Err(StepError::NonFiniteOutput {
                sequence: i / per_sequence,
                query_head: i % per_sequence / l.head_dim,
            });
        }
        Ok(())
    }
}

impl HostStepOutput {
    fn assert_union(&self) {
        assert!(
            self.layout.union,
            "the step was asked with `union: false`, so it wrote no union; ask with `union: true`"
        );
    }

    fn query_head(&self, b: usize, h: usize, g: usize) -> usize {
        let l = self.layout;
        assert!(
            b < l.batch && h < l.kv_heads && g < l.group,
            "({b}, {h}, {g}) is outside the batch"
        );
        (b * l.kv_heads + h) * l.group + g
    }

    /// The tokens query head `g` of KV head `h` of sequence `b` selected, ascending.
    pub fn selected(&self, b: usize, h: usize, g: usize) -> &[i32] {
        let qh = self.query_head(b, h, g);
        let sc = self.layout.sel_stride();
        &self.sel[qh * sc..qh * sc + self.sel_count[qh].max(0) as usize]
    }

    /// The positions in the union of [`HostStepOutput::selected`]'s rows.
    pub fn positions(&self, b: usize, h: usize, g: usize) -> &[i32] {
        self.assert_union();
        let qh = self.query_head(b, h, g);
        let sc = self.layout.sel_stride();
        &self.sel_pos[qh * sc..qh * sc + self.sel_count[qh].max(0) as usize]
    }

    /// The union of KV head `h` of sequence `b`, ascending.
    pub fn union(&self, b: usize, h: usize) -> &[i32] {
        self.assert_union();
        let kh = b * self.layout.kv_heads + h;
        let uc = self.layout.uni_stride();
        &self.uni[kh * uc..kh * uc + self.uni_count[kh].max(0) as usize]
    }

    /// The attention output of query head `g` of KV head `h` of sequence `b`.
    pub fn output(&self, b: usize, h: usize, g: usize) -> &[f32] {
        let d = self.layout.head_dim;
        let qh = self.query_head(b, h, g);
        &self.out[qh * d..(qh + 1) * d]
    }
}

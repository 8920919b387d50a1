//! The key store for a foreign caller: prefill and append from lent tensors (checked, then read
//! in place), moving to the caller's current stream, and views that a caller's graph capture
//! may record.

use std::sync::Arc;

use super::{KeyStore, SequenceId, StoreError};
use crate::foreign::{Device, Dim, Dtype, Expect, TensorDesc};
use crate::gpu::{DeviceBuffer, Gpu, GpuError};
use crate::view::LayerView;

/// K/V rows may come as bf16 or as their bits in 16-bit integers (numpy has no bf16).
const ROW_TYPES: [Dtype; 2] = [Dtype::Bf16, Dtype::U16];

impl KeyStore {
    /// Queues the store's work on `gpu`'s stream from now on (a handle on the same context, e.g.
    /// the caller's current stream), ordered after everything queued on the old one.
    pub fn rebind(&mut self, gpu: Arc<Gpu>) -> Result<(), StoreError> {
        if Arc::ptr_eq(&gpu, &self.gpu) {
            return Ok(());
        }
        if !gpu.same_context(&self.gpu) {
            return Err(StoreError::Config {
                reason: "a store moves only between streams of the context it was made on".into(),
            });
        }
        gpu.order_after(&self.gpu)?;
        self.gpu = gpu;
        Ok(())
    }

    fn device(&self) -> Device {
        Device::Cuda(self.gpu.ordinal())
    }

    /// Checks `t` and views it as bf16 bits.
    ///
    /// # Safety
    /// The caller's tensor must stay alive until the work queued with the view has run.
    unsafe fn rows(
        &self,
        what: &'static str,
        t: &TensorDesc,
        shape: &[Dim],
    ) -> Result<(DeviceBuffer<u16>, Vec<usize>), StoreError> {
        let expect = Expect {
            what,
            dtypes: &ROW_TYPES,
            shape,
            device: self.device(),
        };
        let got = t.check(&expect, Some(self.gpu.as_ref()))?;
        Ok((
            unsafe { self.gpu.borrowed_buffer(t.addr, t.elements()) },
            got,
        ))
    }

    /// [`KeyStore::prefill`] from lent tensors `[H_kv][n][D]` (bf16, contiguous, 16-byte
    /// aligned, on the store's device), read on the store's stream. Not while capturing: a
    /// prefill waits for its encode.
    ///
    /// # Safety
    /// `keys` and `values` must describe live device memory until the prefill returns.
    pub unsafe fn prefill_tensors(
        &mut self,
        id: SequenceId,
        layer: usize,
        keys: &TensorDesc,
        values: &TensorDesc,
    ) -> Result<(), StoreError> {
        self.gpu.refuse_while_capturing("a prefill")?;
        let m = &self.config.model;
        let (h, d) = (m.kv_heads, m.head_dim);
        let shape = [Dim::Is("H_kv", h), Dim::Any("n"), Dim::Is("D", d)];
        let (k, got) = unsafe { self.rows("keys", keys, &shape)? };
        let same = [Dim::Is("H_kv", h), Dim::Is("n", got[1]), Dim::Is("D", d)];
        let (v, _) = unsafe { self.rows("values", values, &same)? };
        self.prefill(id, layer, &k, &v)
    }

    /// [`KeyStore::append`] from lent tensors `[B][H_kv][D]` (one token per sequence of
    /// `ids`), read on the store's stream after this returns. Not while capturing: the lengths
    /// an append moves live on the host, so a replay would not move them.
    ///
    /// # Safety
    /// `keys` and `values` must stay alive until the work queued on the stream has run (for
    /// PyTorch: keep the tensors, or allocate them on this stream).
    pub unsafe fn append_tensors(
        &mut self,
        ids: &[SequenceId],
        layer: usize,
        keys: &TensorDesc,
        values: &TensorDesc,
    ) -> Result<(), StoreError> {
        self.gpu.refuse_while_capturing("an append")?;
        let m = &self.config.model;
        let shape = [
            Dim::Is("B", ids.len()),
            Dim::Is("H_kv", m.kv_heads),
            Dim::Is("D", m.head_dim),
        ];
        let (k, _) = unsafe { self.rows("keys", keys, &shape)? };
        let (v, _) = unsafe { self.rows("values", values, &shape)? };
        self.append(ids, layer, &k, &v)
    }

    /// [`KeyStore::layer_view`], also while the stream is being captured, when the layer's
    /// tables already hold this batch (as after an append or a step of it): the view's table
    /// update would be recorded as a copy from the upload ring, which holds other data by the
    /// time the graph is replayed. A capture that needs an update is refused, before anything
    /// is queued.
    pub fn capturable_view(
        &self,
        ids: &[SequenceId],
        layer: usize,
    ) -> Result<LayerView<'_>, StoreError> {
        if self.gpu.is_capturing()? {
            self.check_layer(layer)?;
            self.check_batch(ids)?;
            let (wanted, _, _) = self.wanted_tables(ids, layer);
            if self.lock().mirrors[layer] != wanted {
                return Err(GpuError::Capturing {
                    what: "updating the layer's tables for a new batch or length",
                }
                .into());
            }
        }
        self.layer_view(ids, layer)
    }
}

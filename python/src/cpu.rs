//! `device="cpu"`: the key store and the decode step over the f64 reference, with the GPU
//! backend's checks. Per (sequence, layer, KV head) a reference [`HeadStore`] (§2: 4-bit codes,
//! bit planes, fp16 block scales, the bf16 tail), the raw bf16 K/V rows and, with the index, a
//! [`PariskvIndex`] (§12); a step is the reference's `step_group` (§3-§6) or `pariskv_step` of
//! every query group. A rotated (KLT) store holds `bf16(Rᵀ k)` rounded as the GPU encoder rounds
//! it (f32 fused multiply-adds in ascending order), so both backends store the same codes.

use codegen::model::{Basis, ModelShape};
use half::bf16;
use reference::klt::Klt;
use reference::pariskv::{pariskv_step, PariskvIndex, PariskvInput};
use reference::plans::DoubleSparsityCalibration;
use reference::step::{step_group, GroupInput, StepConfig};
use reference::store::{BlockSize, HeadId, HeadStore, StoreLayout};
use runtime::foreign::{Device, Dim, Dtype, Expect, TensorDesc};
use runtime::step::validate::{check_needs, check_view, ViewShape};
use runtime::step::{Calibration, Method, Scoring, StepError};
use runtime::store::ledger::Registry;
use runtime::store::{SequenceId, StoreError};

use crate::error::{Failure, Kind, Outcome};

const ROW_TYPES: [Dtype; 2] = [Dtype::Bf16, Dtype::U16];

struct Head {
    store: HeadStore,
    keys: Vec<bf16>,
    values: Vec<bf16>,
    index: Option<PariskvIndex>,
}

/// The CPU key store.
pub struct CpuStore {
    pub model: ModelShape,
    layout: StoreLayout,
    capacity: usize,
    max_batch: usize,
    landmarks: bool,
    pariskv: bool,
    /// `[L][H][D][D]` for a KLT model.
    rotation: Option<Vec<f32>>,
    sequences: Registry<Vec<Vec<Head>>>,
    used: usize,
}

/// Reads `t`'s elements as bf16 (checked by the caller).
///
/// # Safety
/// `t` must describe live host memory of its shape and dtype.
unsafe fn read_bf16(t: &TensorDesc) -> Vec<bf16> {
    let n = t.elements();
    if n == 0 {
        return Vec::new();
    }
    let bits = unsafe { std::slice::from_raw_parts(t.addr as *const u16, n) };
    bits.iter().map(|&b| bf16::from_bits(b)).collect()
}

/// Reads `t` as f64 values of f32 or bf16 elements.
///
/// # Safety
/// As [`read_bf16`].
pub unsafe fn read_values(t: &TensorDesc) -> Vec<f64> {
    let n = t.elements();
    if n == 0 {
        return Vec::new();
    }
    match t.dtype {
        Dtype::F32 => unsafe { std::slice::from_raw_parts(t.addr as *const f32, n) }
            .iter()
            .map(|&x| f64::from(x))
            .collect(),
        _ => unsafe { read_bf16(t) }.iter().map(|x| x.to_f64()).collect(),
    }
}

fn rotate_keys(rotation: &[f32], d: usize, keys: &[bf16]) -> Vec<bf16> {
    let mut out = Vec::with_capacity(keys.len());
    for row in keys.chunks_exact(d) {
        let x: Vec<f32> = row.iter().map(|v| v.to_f32()).collect();
        out.extend((0..d).map(|j| {
            let y = (0..d).fold(0.0f32, |acc, i| rotation[i * d + j].mul_add(x[i], acc));
            bf16::from_f32(y)
        }));
    }
    out
}

impl CpuStore {
    pub fn new(
        model: ModelShape,
        capacity: usize,
        max_batch: usize,
        landmarks: bool,
        pariskv: bool,
        rotation: Option<Vec<f32>>,
    ) -> Outcome<CpuStore> {
        let config = |reason: String| Failure::from(StoreError::Config { reason });
        model.validate().map_err(|e| config(e.to_string()))?;
        let layout = StoreLayout::new(model.head_dim, BlockSize::B64, 512)
            .map_err(|e| config(e.to_string()))?;
        if capacity == 0 || capacity > i32::MAX as usize {
            return Err(config(format!(
                "capacity_tokens {capacity} is outside 1..={}",
                i32::MAX
            )));
        }
        if !(1..=65_535).contains(&max_batch) {
            return Err(config(format!(
                "max_batch {max_batch} is outside 1..=65535"
            )));
        }
        if pariskv && ![64, 128, 256].contains(&model.head_dim) {
            return Err(config(format!(
                "the ParisKV index needs a head dimension of 64, 128 or 256, not {}",
                model.head_dim
            )));
        }
        match (model.basis, &rotation) {
            (Basis::Klt, None) => {
                return Err(config(format!(
                    "model {} uses the KLT basis, so the store needs its rotations: pass \
                     calibration=Calibration.fit(...) (or a raw-basis shape, shape.with_basis(\"raw\"))",
                    model.name
                )))
            }
            (Basis::Raw, Some(_)) => {
                return Err(config(format!(
                    "model {} uses raw channels; the store takes no rotations",
                    model.name
                )))
            }
            _ => {}
        }
        Ok(CpuStore {
            model,
            layout,
            capacity,
            max_batch,
            landmarks,
            pariskv,
            rotation,
            sequences: Registry::default(),
            used: 0,
        })
    }

    pub fn create_sequence(&mut self) -> SequenceId {
        let m = &self.model;
        let layout = self.layout;
        let pariskv = self.pariskv;
        let layers = (0..m.layers)
            .map(|layer| {
                (0..m.kv_heads)
                    .map(|kv_head| Head {
                        store: HeadStore::new(layout, HeadId { layer, kv_head }),
                        keys: Vec::new(),
                        values: Vec::new(),
                        index: pariskv.then(|| {
                            PariskvIndex::new(m.head_dim).expect("head dim checked at creation")
                        }),
                    })
                    .collect()
            })
            .collect();
        self.sequences.insert(layers)
    }

    pub fn free_sequence(&mut self, id: SequenceId) -> Outcome<()> {
        let seq = self.sequences.remove(id)?;
        self.used -= tokens(&seq);
        Ok(())
    }

    fn check_layer(&self, layer: usize) -> Outcome<()> {
        if layer >= self.model.layers {
            return Err(StoreError::LayerOutOfRange {
                layer,
                layers: self.model.layers,
            }
            .into());
        }
        Ok(())
    }

    pub fn lengths(&self, id: SequenceId, layer: usize) -> Outcome<(usize, usize)> {
        self.check_layer(layer)?;
        let head = &self.sequences.get(id)?[layer][0];
        Ok((head.store.stored_tokens(), head.store.total_tokens()))
    }

    pub fn tokens_in_use(&self) -> usize {
        self.used
    }

    fn rows(&self, what: &'static str, t: &TensorDesc, shape: &[Dim]) -> Outcome<Vec<usize>> {
        let expect = Expect {
            what,
            dtypes: &ROW_TYPES,
            shape,
            device: Device::Cpu,
        };
        Ok(t.check(&expect, None)?)
    }

    /// Adds `keys`/`values` (`[H][n][D]` each, per head token-major) to one layer of `id`; on
    /// any failure nothing changes.
    fn add(
        &mut self,
        id: SequenceId,
        layer: usize,
        keys: &[Vec<bf16>],
        values: &[Vec<bf16>],
    ) -> Outcome<()> {
        let d = self.model.head_dim;
        let n = keys[0].len() / d;
        let seq = self.sequences.get(id)?;
        let before = tokens(seq);
        let after = before.max(seq[layer][0].store.total_tokens() + n);
        if self.used - before + after > self.capacity {
            return Err(StoreError::CapacityExceeded {
                requested: after - before,
                used: self.used,
                capacity: self.capacity,
            }
            .into());
        }
        let rotation = self
            .rotation
            .as_ref()
            .map(|r| r[layer * self.model.kv_heads * d * d..].to_vec());
        let mut updated = Vec::with_capacity(keys.len());
        for (h, head) in seq[layer].iter().enumerate() {
            let mut store = head.store.clone();
            let encoded = match &rotation {
                Some(r) => rotate_keys(&r[h * d * d..(h + 1) * d * d], d, &keys[h]),
                None => keys[h].clone(),
            };
            store
                .append(&encoded)
                .map_err(|e| Failure::new(Kind::InvalidInput, format!("{id}: {e}")))?;
            let mut index = head.index.clone();
            if let Some(index) = index.as_mut() {
                index
                    .append(&keys[h])
                    .map_err(|e| Failure::new(Kind::InvalidInput, format!("{id}: {e}")))?;
            }
            updated.push((store, index));
        }
        let seq = self.sequences.get_mut(id)?;
        for (h, (store, index)) in updated.into_iter().enumerate() {
            let head = &mut seq[layer][h];
            head.store = store;
            head.index = index;
            head.keys.extend_from_slice(&keys[h]);
            head.values.extend_from_slice(&values[h]);
        }
        self.used = self.used - before + after;
        Ok(())
    }

    /// # Safety
    /// `keys` and `values` must describe live host memory.
    pub unsafe fn prefill(
        &mut self,
        id: SequenceId,
        layer: usize,
        keys: &TensorDesc,
        values: &TensorDesc,
    ) -> Outcome<()> {
        self.check_layer(layer)?;
        self.sequences.get(id)?;
        let (h, d) = (self.model.kv_heads, self.model.head_dim);
        let got = self.rows(
            "keys",
            keys,
            &[Dim::Is("H_kv", h), Dim::Any("n"), Dim::Is("D", d)],
        )?;
        let n = got[1];
        self.rows(
            "values",
            values,
            &[Dim::Is("H_kv", h), Dim::Is("n", n), Dim::Is("D", d)],
        )?;
        if n == 0 {
            return Ok(());
        }
        let split = |v: Vec<bf16>| -> Vec<Vec<bf16>> {
            v.chunks_exact(n * d).map(|c| c.to_vec()).collect()
        };
        let (k, v) = unsafe { (split(read_bf16(keys)), split(read_bf16(values))) };
        self.add(id, layer, &k, &v)
    }

    /// # Safety
    /// As [`CpuStore::prefill`].
    pub unsafe fn append(
        &mut self,
        ids: &[SequenceId],
        layer: usize,
        keys: &TensorDesc,
        values: &TensorDesc,
    ) -> Outcome<()> {
        self.check_layer(layer)?;
        self.check_batch(ids)?;
        let (h, d) = (self.model.kv_heads, self.model.head_dim);
        let shape = [Dim::Is("B", ids.len()), Dim::Is("H_kv", h), Dim::Is("D", d)];
        self.rows("keys", keys, &shape)?;
        self.rows("values", values, &shape)?;
        let (k, v) = unsafe { (read_bf16(keys), read_bf16(values)) };
        for (b, &id) in ids.iter().enumerate() {
            let rows = |x: &[bf16]| -> Vec<Vec<bf16>> {
                (0..h)
                    .map(|i| x[(b * h + i) * d..(b * h + i + 1) * d].to_vec())
                    .collect()
            };
            self.add(id, layer, &rows(&k), &rows(&v))?;
        }
        Ok(())
    }

    fn check_batch(&self, ids: &[SequenceId]) -> Outcome<()> {
        self.sequences.check_batch(ids)?;
        if ids.len() > self.max_batch {
            return Err(StoreError::BatchTooLarge {
                batch: ids.len(),
                max_batch: self.max_batch,
            }
            .into());
        }
        Ok(())
    }

    /// Bytes the store holds: planes and scales of every stored block, bf16 rows and tails.
    pub fn bytes(&self) -> usize {
        let d = self.model.head_dim;
        self.used * self.model.layers * self.model.kv_heads * (d / 2 + d / 32 + 4 * d)
    }
}

fn tokens(seq: &[Vec<Head>]) -> usize {
    seq.iter()
        .map(|layer| layer[0].store.total_tokens())
        .max()
        .unwrap_or(0)
}

/// A CPU step's result: per query head of every sequence, its selected tokens.
pub struct CpuSelection {
    pub heads: Vec<Vec<Vec<usize>>>,
}

/// The CPU decoder's fixed parameters.
pub struct CpuDecoder {
    pub model: ModelShape,
    pub k_max: usize,
    pub calibration: Option<Calibration>,
}

impl CpuDecoder {
    /// One step of `layer` for `ids` with `queries` `[B][H_q][D]`, writing `out` `[B][H_q][D]`.
    ///
    /// # Safety
    /// `queries` and `out` must describe live host memory of their shapes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn step(
        &self,
        store: &CpuStore,
        ids: &[SequenceId],
        layer: usize,
        queries: &TensorDesc,
        out: &TensorDesc,
        method: Method,
        k: Option<usize>,
        scale: Option<f64>,
    ) -> Outcome<CpuSelection> {
        let m = &self.model;
        if (m.layers, m.kv_heads, m.head_dim)
            != (
                store.model.layers,
                store.model.kv_heads,
                store.model.head_dim,
            )
        {
            return Err(Failure::new(
                Kind::Config,
                format!(
                    "the decoder is for {} and the store for {}",
                    m.name, store.model.name
                ),
            ));
        }
        store.check_batch(ids)?;
        let (h, g, d) = (m.kv_heads, m.group_size(), m.head_dim);
        let max_tokens = ids
            .iter()
            .map(|&id| {
                store
                    .sequences
                    .get(id)
                    .map(|s| s.get(layer).map_or(0, |l| l[0].store.total_tokens()))
            })
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .max()
            .unwrap_or(0);
        let view = ViewShape {
            layer,
            batch: ids.len(),
            kv_heads: h,
            head_dim: d,
            placement: codegen::spec::Placement::Hbm,
            max_seg: 1,
            max_tokens,
            seg_words_len: ids.len() * h,
            seg_scales_len: ids.len() * h,
            n_stored_len: ids.len(),
            n_total_len: ids.len(),
            k_rows_len: ids.len() * h,
            v_rows_len: ids.len() * h,
            kv_rows: codegen::spec::KvRows::Separate,
            landmarks_len: store.landmarks.then_some(ids.len() * h),
            pariskv_len: store.pariskv.then_some(ids.len() * h),
        };
        check_view(m, &view)?;
        let scoring = Scoring::of(method, d, 64, m.basis)?;
        check_needs(
            &scoring,
            &method.to_string(),
            m.basis,
            &view,
            self.calibration.as_ref(),
            None,
        )?;
        let shape = [
            Dim::Is("B", ids.len()),
            Dim::Is("H_q", h * g),
            Dim::Is("D", d),
        ];
        let types = [Dtype::F32, Dtype::Bf16, Dtype::U16];
        let expect = |what| Expect {
            what,
            dtypes: &types,
            shape: &shape,
            device: Device::Cpu,
        };
        queries.check(&expect("queries"), None)?;
        out.check(&expect("out"), None)?;
        let q = unsafe { read_values(queries) };
        if let Some(i) = q.iter().position(|x| !x.is_finite()) {
            return Err(StepError::NonFiniteQuery {
                sequence: i / (h * g * d),
                query_head: i / d % (h * g),
                channel: i % d,
                value: q[i] as f32,
            }
            .into());
        }
        let k = match method {
            Method::Pariskv { k } => k,
            _ => k.unwrap_or_else(|| reference::select::paper_k(max_tokens)),
        };
        if k > self.k_max {
            return Err(StepError::K {
                k,
                k_max: self.k_max,
            }
            .into());
        }
        let scale = scale.unwrap_or(1.0 / (d as f64).sqrt());
        let cal = self.calibration.as_ref();
        let mut outputs = vec![0.0f64; ids.len() * h * g * d];
        let mut heads = Vec::with_capacity(ids.len());
        for (b, &id) in ids.iter().enumerate() {
            let seq = &store.sequences.get(id)?[layer];
            let mut sets = Vec::with_capacity(h * g);
            for (kv, head) in seq.iter().enumerate() {
                let group: Vec<Vec<f64>> = (0..g)
                    .map(|j| {
                        let at = ((b * h + kv) * g + j) * d;
                        q[at..at + d].to_vec()
                    })
                    .collect();
                let (selection, outs) = if let Method::Pariskv { .. } = method {
                    let index = head
                        .index
                        .as_ref()
                        .expect("checked: the store keeps the index");
                    let input = PariskvInput {
                        index,
                        keys: &head.keys,
                        values: &head.values,
                        queries: &group,
                        n_total: head.store.total_tokens(),
                    };
                    let step = pariskv_step(&input, k, scale)
                        .map_err(|e| Failure::new(Kind::InvalidInput, e.to_string()))?;
                    (step.selection, step.outputs)
                } else {
                    let at = (layer * h + kv) * d;
                    let sigma2: Option<Vec<f64>> = cal.and_then(|c| c.sigma2(layer)).map(|s| {
                        s[kv * d..(kv + 1) * d]
                            .iter()
                            .map(|&x| f64::from(x))
                            .collect()
                    });
                    let _ = at;
                    let klt = cal.and_then(|c| c.rotation(layer)).map(|r| {
                        let r: Vec<f64> = r[kv * d * d..(kv + 1) * d * d]
                            .iter()
                            .map(|&x| f64::from(x))
                            .collect();
                        Klt::from_basis_row_major(d, &r).expect("a D x D rotation")
                    });
                    let ds = cal
                        .and_then(|c| c.double_sparsity(layer))
                        .and_then(|(_, m)| {
                            DoubleSparsityCalibration::from_mask(&m[kv * d..(kv + 1) * d])
                        });
                    let input = GroupInput {
                        store: &head.store,
                        keys: &head.keys,
                        values: &head.values,
                        queries: &group,
                        klt: if m.basis == Basis::Klt {
                            klt.as_ref()
                        } else {
                            None
                        },
                        sigma2: sigma2.as_deref(),
                        double_sparsity: ds.as_ref(),
                    };
                    let config = StepConfig { method, k, scale };
                    let step = step_group(&input, &config)
                        .map_err(|e| Failure::new(Kind::InvalidInput, e.to_string()))?;
                    (step.selection, step.outputs)
                };
                for (j, o) in outs.iter().enumerate() {
                    let at = ((b * h + kv) * g + j) * d;
                    if o.len() == d {
                        outputs[at..at + d].copy_from_slice(o);
                    }
                }
                sets.extend(selection.heads);
            }
            heads.push(sets);
        }
        let n = outputs.len();
        match out.dtype {
            Dtype::F32 => {
                let dst = unsafe { std::slice::from_raw_parts_mut(out.addr as *mut f32, n) };
                dst.iter_mut()
                    .zip(&outputs)
                    .for_each(|(o, &x)| *o = x as f32);
            }
            _ => {
                let dst = unsafe { std::slice::from_raw_parts_mut(out.addr as *mut u16, n) };
                dst.iter_mut()
                    .zip(&outputs)
                    .for_each(|(o, &x)| *o = bf16::from_f64(x).to_bits());
            }
        }
        Ok(CpuSelection { heads })
    }
}

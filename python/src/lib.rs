//! `fathom._native`: the Rust side of the Python package. The pure-Python layer (`fathom/`)
//! describes tensors (address, shape, strides, dtype, device) and the current stream; this
//! module checks them, runs the GPU backend (the runtime's key store and decoder on the
//! caller's stream) or the CPU backend (the f64 reference, [`cpu`]), and turns every Rust error
//! into the typed Python exception of [`error::Kind`]. Long work runs with the GIL released, and
//! a panic becomes a `KernelError` instead of crossing the boundary.

mod calib;
mod cpu;
mod error;
mod reference_step;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use codegen::model::{Basis, ModelShape};
use codegen::spec::kv_rows::KvRowsParseError;
use codegen::spec::Placement;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use runtime::foreign::{Device, Dtype, TensorDesc};
use runtime::gpu::{Gpu, StreamHandle};
use runtime::jit::Jit;
use runtime::shard::HeadShard;
use runtime::step::{Decoder, DecoderConfig, ForeignStep, Method, StepRequest, Transfer};
use runtime::store::{KeyStore, KvRows, SequenceId, StoreConfig};

use error::{Failure, Kind, Outcome};

create_exception!(_native, FathomError, PyException);
create_exception!(_native, DeviceUnavailableError, FathomError);
create_exception!(_native, InvalidInputError, FathomError);
create_exception!(_native, ConfigError, FathomError);
create_exception!(_native, MethodError, FathomError);
create_exception!(_native, SequenceError, FathomError);
create_exception!(_native, CapacityError, FathomError);
create_exception!(_native, CalibrationError, FathomError);
create_exception!(_native, KernelError, FathomError);

fn to_py(f: Failure) -> PyErr {
    let m = f.message;
    match f.kind {
        Kind::DeviceUnavailable => DeviceUnavailableError::new_err(m),
        Kind::InvalidInput => InvalidInputError::new_err(m),
        Kind::Config => ConfigError::new_err(m),
        Kind::Method => MethodError::new_err(m),
        Kind::Sequence => SequenceError::new_err(m),
        Kind::Capacity => CapacityError::new_err(m),
        Kind::Calibration => CalibrationError::new_err(m),
        Kind::Kernel => KernelError::new_err(m),
    }
}

/// Runs `f` without the GIL, a panic turned into a `KernelError`.
fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> Outcome<T> + Send) -> PyResult<T> {
    py.detach(|| {
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(Failure::new(
                Kind::Kernel,
                format!("internal error: {what}"),
            ))
        })
    })
    .map_err(to_py)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tensor as the Python layer describes it: `(addr, shape, strides, dtype, device)`.
type Described = (u64, Vec<usize>, Vec<i64>, String, String);

fn device_of(text: &str) -> Outcome<Device> {
    match text {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        t => t
            .strip_prefix("cuda:")
            .and_then(|i| i.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| {
                Failure::new(
                    Kind::InvalidInput,
                    format!("device {t:?} is not \"cpu\", \"cuda\" or \"cuda:N\""),
                )
            }),
    }
}

fn desc(d: Described) -> Outcome<TensorDesc> {
    Ok(TensorDesc {
        addr: d.0,
        shape: d.1,
        strides: d.2,
        dtype: Dtype::parse(&d.3),
        device: device_of(&d.4)?,
    })
}

/// Handles per (device, stream), shared by every store and decoder, so that moving between
/// streams is an event, and one JIT per device.
struct Devices {
    gpus: HashMap<(usize, u64), Arc<Gpu>>,
    jits: HashMap<usize, Arc<Jit>>,
}

fn devices() -> &'static Mutex<Devices> {
    static DEVICES: OnceLock<Mutex<Devices>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        Mutex::new(Devices {
            gpus: HashMap::new(),
            jits: HashMap::new(),
        })
    })
}

/// The handle of `stream` on device `ordinal` (the caller's live stream).
fn gpu_for(ordinal: usize, stream: u64) -> Outcome<Arc<Gpu>> {
    let mut d = lock(devices());
    if let Some(g) = d.gpus.get(&(ordinal, stream)) {
        return Ok(g.clone());
    }
    let handle = StreamHandle::from_raw(stream);
    // SAFETY: the Python layer passes PyTorch's current stream (or the legacy stream), which
    // PyTorch keeps alive; the README says the same of a stream= argument.
    let gpu = match d.gpus.iter().find(|((o, _), _)| *o == ordinal) {
        Some((_, root)) => unsafe { root.on_stream(handle)? },
        None => unsafe { Gpu::borrow_stream(ordinal, handle)? },
    };
    let gpu = Arc::new(gpu);
    d.gpus.insert((ordinal, stream), gpu.clone());
    Ok(gpu)
}

fn jit_for(gpu: &Arc<Gpu>) -> Outcome<Arc<Jit>> {
    let mut d = lock(devices());
    if let Some(j) = d.jits.get(&gpu.ordinal()) {
        return Ok(j.clone());
    }
    let jit =
        Arc::new(Jit::with_default_cache(gpu.clone()).map_err(runtime::store::StoreError::from)?);
    d.jits.insert(gpu.ordinal(), jit.clone());
    Ok(jit)
}

/// Why the GPU backend cannot run here, or `None` when it can.
fn unavailable() -> Option<String> {
    if let Err(e) = unsafe { Gpu::borrow_stream(0, StreamHandle::Legacy) } {
        return Some(e.to_string());
    }
    codegen::nvrtc::load().err().map(|e| e.to_string())
}

#[pyfunction]
fn unavailable_reason(py: Python<'_>) -> PyResult<Option<String>> {
    run(py, || Ok(unavailable()))
}

#[pyclass(name = "ModelShape", module = "fathom", frozen, from_py_object)]
#[derive(Clone)]
struct PyModelShape {
    shape: ModelShape,
}

#[pymethods]
impl PyModelShape {
    /// A §10 preset by name (`qwen3-8b`, `qwen2.5-7b`, ...).
    #[staticmethod]
    fn preset(name: &str) -> PyResult<Self> {
        codegen::model::preset(name)
            .map(|shape| PyModelShape { shape })
            .map_err(|e| ConfigError::new_err(e.to_string()))
    }

    /// The shape of a Hugging Face `config.json`, given as its text.
    #[staticmethod]
    fn _from_json(text: &str) -> PyResult<Self> {
        codegen::model::from_config_json(text)
            .map(|shape| PyModelShape { shape })
            .map_err(|e| ConfigError::new_err(e.to_string()))
    }

    /// The same shape with another store basis, `"raw"` or `"klt"`.
    fn with_basis(&self, basis: &str) -> PyResult<Self> {
        let basis = match basis {
            "raw" => Basis::Raw,
            "klt" => Basis::Klt,
            b => {
                return Err(ConfigError::new_err(format!(
                    "basis {b:?} is not \"raw\" or \"klt\""
                )))
            }
        };
        Ok(PyModelShape {
            shape: ModelShape {
                basis,
                ..self.shape.clone()
            },
        })
    }

    #[getter]
    fn name(&self) -> String {
        self.shape.name.clone()
    }
    #[getter]
    fn layers(&self) -> usize {
        self.shape.layers
    }
    #[getter]
    fn q_heads(&self) -> usize {
        self.shape.query_heads
    }
    #[getter]
    fn kv_heads(&self) -> usize {
        self.shape.kv_heads
    }
    #[getter]
    fn head_dim(&self) -> usize {
        self.shape.head_dim
    }
    #[getter]
    fn group(&self) -> usize {
        self.shape.group_size()
    }
    #[getter]
    fn qk_norm(&self) -> bool {
        self.shape.qk_norm
    }
    #[getter]
    fn basis(&self) -> &'static str {
        match self.shape.basis {
            Basis::Raw => "raw",
            Basis::Klt => "klt",
        }
    }
    /// Tensor-parallel rank `rank` of `ranks`'s share (`runtime::shard::HeadShard`): the shape
    /// its store and decoder are made for, and the `(start, end)` of the model's KV heads and
    /// query heads it holds.
    #[allow(clippy::type_complexity)]
    fn shard(&self, rank: usize, ranks: usize) -> PyResult<(Self, (usize, usize), (usize, usize))> {
        let s = HeadShard::of(&self.shape, rank, ranks)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        Ok((
            PyModelShape {
                shape: s.model(&self.shape),
            },
            (s.kv_heads.start, s.kv_heads.end),
            (s.query_heads.start, s.query_heads.end),
        ))
    }
    fn __repr__(&self) -> String {
        let s = &self.shape;
        format!(
            "ModelShape(name={:?}, layers={}, q_heads={}, kv_heads={}, head_dim={}, qk_norm={}, basis={:?})",
            s.name, s.layers, s.query_heads, s.kv_heads, s.head_dim, s.qk_norm, self.basis()
        )
    }
}

#[pyclass(name = "Calibration", module = "fathom", frozen)]
struct PyCalibration {
    /// The model name it was fitted for (kept in its file).
    name: String,
    fitted: calib::Fitted,
}

#[pymethods]
impl PyCalibration {
    /// Fits from per-layer `(values, rows)` float64 lists; the Python layer flattens tensors.
    #[staticmethod]
    #[pyo3(signature = (shape, keys, queries, budgets, double_sparsity_r))]
    fn _fit(
        py: Python<'_>,
        shape: &PyModelShape,
        keys: Vec<(Vec<f64>, usize)>,
        queries: Vec<(Vec<f64>, usize)>,
        budgets: Option<f64>,
        double_sparsity_r: usize,
    ) -> PyResult<Self> {
        let model = shape.shape.clone();
        let fitted = run(py, || {
            calib::fit(&model, &keys, &queries, double_sparsity_r, budgets)
        })?;
        Ok(PyCalibration {
            name: model.name,
            fitted,
        })
    }

    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        run(py, || calib::save(&self.name, &self.fitted, &path))
    }

    /// The part of this calibration (of the whole `shape`) that tensor-parallel rank `rank` of
    /// `ranks` needs: its KV heads of every layer; per-layer budgets are kept.
    fn _shard(&self, shape: &PyModelShape, rank: usize, ranks: usize) -> PyResult<Self> {
        let s = HeadShard::of(&shape.shape, rank, ranks)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        let calibration = s
            .calibration(&shape.shape, &self.fitted.calibration)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        Ok(PyCalibration {
            name: s.model(&shape.shape).name,
            fitted: calib::Fitted {
                calibration,
                budgets: self.fitted.budgets.clone(),
            },
        })
    }

    #[staticmethod]
    fn _load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let (name, fitted) = run(py, || calib::load(&path))?;
        Ok(PyCalibration { name, fitted })
    }

    /// Per-layer budgets `B_l` when fitted with `budgets=`, else `None`.
    #[getter]
    fn layer_budgets(&self) -> Option<Vec<u32>> {
        self.fitted.budgets.as_ref().map(|(_, b)| b.clone())
    }
    /// double_sparsity's masks `[L][H][D]` as a flat list, `None` when absent.
    #[getter]
    fn double_sparsity_masks(&self) -> Option<Vec<u8>> {
        let c = &self.fitted.calibration;
        (0..c.dims().0)
            .map(|l| c.double_sparsity(l).map(|(_, m)| m.to_vec()))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat())
    }
    /// σ² `[L][H][D]` as a flat list, `None` when absent.
    #[getter]
    fn sigma2(&self) -> Option<Vec<f32>> {
        let c = &self.fitted.calibration;
        (0..c.dims().0)
            .map(|l| c.sigma2(l).map(<[f32]>::to_vec))
            .collect::<Option<Vec<_>>>()
            .map(|v| v.concat())
    }
    #[getter]
    fn has_rotation(&self) -> bool {
        self.fitted.calibration.rotation(0).is_some()
    }
    #[getter]
    fn double_sparsity_r(&self) -> Option<usize> {
        self.fitted.calibration.double_sparsity(0).map(|(r, _)| r)
    }
    fn __eq__(&self, other: &PyCalibration) -> bool {
        self.fitted.calibration == other.fitted.calibration
            && self.fitted.budgets == other.fitted.budgets
    }
}

enum StoreBackend {
    Gpu(Box<KeyStore>),
    Cpu(cpu::CpuStore),
}

#[pyclass(name = "_Store", module = "fathom")]
struct PyStore {
    backend: Mutex<StoreBackend>,
    device: Device,
}

fn ids(raw: &[u64]) -> Vec<SequenceId> {
    raw.iter().map(|&b| SequenceId::from_bits(b)).collect()
}

impl PyStore {
    fn gpu_store(
        backend: &mut StoreBackend,
        ordinal: usize,
        stream: u64,
    ) -> Outcome<&mut KeyStore> {
        match backend {
            StoreBackend::Gpu(s) => {
                s.rebind(gpu_for(ordinal, stream)?)?;
                Ok(s)
            }
            StoreBackend::Cpu(_) => unreachable!("a cpu store has no stream"),
        }
    }
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (shape, placement, capacity_tokens, device, max_batch, landmarks, pariskv_index, rotation, stream, kv_rows=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        shape: &PyModelShape,
        placement: &str,
        capacity_tokens: usize,
        device: &str,
        max_batch: usize,
        landmarks: bool,
        pariskv_index: bool,
        rotation: Option<&PyCalibration>,
        stream: u64,
        kv_rows: Option<&str>,
    ) -> PyResult<Self> {
        let model = shape.shape.clone();
        let device = device_of(device).map_err(to_py)?;
        // The layout of the GPU store's K/V rows (the runtime's default when not given); the
        // CPU store keeps its own (any is fine).
        let kv_rows: KvRows = match kv_rows {
            None => StoreConfig::DEFAULT_KV_ROWS,
            Some(rows) => rows
                .parse()
                .map_err(|e: KvRowsParseError| ConfigError::new_err(format!("kv_rows: {e}")))?,
        };
        let placement = match placement {
            "hbm" => Placement::Hbm,
            "host" => Placement::Host,
            p => {
                return Err(ConfigError::new_err(format!(
                    "placement {p:?} is not \"hbm\" or \"host\""
                )))
            }
        };
        let rotations = rotation.and_then(|c| {
            let c = &c.fitted.calibration;
            (0..c.dims().0)
                .map(|l| c.rotation(l).map(<[f32]>::to_vec))
                .collect::<Option<Vec<_>>>()
                .map(|v| v.concat())
        });
        let rotations = if model.basis == Basis::Klt {
            rotations
        } else {
            None
        };
        let backend = run(py, || match device {
            Device::Cpu => Ok(StoreBackend::Cpu(cpu::CpuStore::new(
                model.clone(),
                capacity_tokens,
                max_batch,
                landmarks,
                pariskv_index,
                rotations,
            )?)),
            Device::Cuda(ordinal) => {
                let gpu = gpu_for(ordinal, stream)?;
                let jit = jit_for(&gpu)?;
                let config = StoreConfig {
                    max_batch,
                    rotations,
                    keep_landmarks: landmarks,
                    pariskv_index,
                    kv_rows,
                    ..StoreConfig::new(model.clone(), placement, capacity_tokens)
                };
                Ok(StoreBackend::Gpu(Box::new(KeyStore::with_kernels(
                    gpu,
                    config,
                    jit.as_ref(),
                )?)))
            }
        })?;
        Ok(PyStore {
            backend: Mutex::new(backend),
            device,
        })
    }

    fn create_sequence(&self) -> u64 {
        match &mut *lock(&self.backend) {
            StoreBackend::Gpu(s) => s.create_sequence().to_bits(),
            StoreBackend::Cpu(s) => s.create_sequence().to_bits(),
        }
    }

    fn free_sequence(&self, py: Python<'_>, seq: u64) -> PyResult<()> {
        run(py, || match &mut *lock(&self.backend) {
            StoreBackend::Gpu(s) => Ok(s.free_sequence(SequenceId::from_bits(seq))?),
            StoreBackend::Cpu(s) => s.free_sequence(SequenceId::from_bits(seq)),
        })
    }

    fn lengths(&self, seq: u64, layer: usize) -> PyResult<(usize, usize)> {
        let id = SequenceId::from_bits(seq);
        match &*lock(&self.backend) {
            StoreBackend::Gpu(s) => s.lengths(id, layer).map_err(|e| to_py(e.into())),
            StoreBackend::Cpu(s) => s.lengths(id, layer).map_err(to_py),
        }
    }

    fn prefill(
        &self,
        py: Python<'_>,
        seq: u64,
        layer: usize,
        keys: Described,
        values: Described,
        stream: u64,
    ) -> PyResult<()> {
        let device = self.device;
        run(py, || {
            let (k, v) = (desc(keys)?, desc(values)?);
            let id = SequenceId::from_bits(seq);
            let mut b = lock(&self.backend);
            match device {
                // SAFETY: the Python layer holds the tensors for the call, and a prefill waits.
                Device::Cpu => match &mut *b {
                    StoreBackend::Cpu(s) => unsafe { s.prefill(id, layer, &k, &v) },
                    _ => unreachable!(),
                },
                Device::Cuda(o) => {
                    let s = Self::gpu_store(&mut b, o, stream)?;
                    unsafe { s.prefill_tensors(id, layer, &k, &v)? };
                    Ok(())
                }
            }
        })
    }

    fn append(
        &self,
        py: Python<'_>,
        seqs: Vec<u64>,
        layer: usize,
        keys: Described,
        values: Described,
        stream: u64,
    ) -> PyResult<()> {
        let device = self.device;
        run(py, || {
            let (k, v) = (desc(keys)?, desc(values)?);
            let batch = ids(&seqs);
            let mut b = lock(&self.backend);
            match device {
                Device::Cpu => match &mut *b {
                    StoreBackend::Cpu(s) => unsafe { s.append(&batch, layer, &k, &v) },
                    _ => unreachable!(),
                },
                // SAFETY: the README asks to keep the tensors alive until the stream has run
                // (PyTorch's caching allocator does so on the same stream).
                Device::Cuda(o) => {
                    let s = Self::gpu_store(&mut b, o, stream)?;
                    unsafe { s.append_tensors(&batch, layer, &k, &v)? };
                    Ok(())
                }
            }
        })
    }

    fn check(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || match &*lock(&self.backend) {
            StoreBackend::Gpu(s) => Ok(s.check()?),
            StoreBackend::Cpu(_) => Ok(()),
        })
    }

    fn memory(&self) -> HashMap<String, usize> {
        match &*lock(&self.backend) {
            StoreBackend::Gpu(s) => {
                let m = s.memory();
                HashMap::from([
                    ("device_bytes".into(), m.device_bytes),
                    ("pinned_bytes".into(), m.pinned_bytes),
                    ("pool_bytes_in_use".into(), m.pool_bytes_in_use),
                    ("tokens".into(), s.tokens_in_use()),
                ])
            }
            StoreBackend::Cpu(s) => HashMap::from([
                ("device_bytes".into(), 0),
                ("pinned_bytes".into(), 0),
                ("host_bytes".into(), s.bytes()),
                ("tokens".into(), s.tokens_in_use()),
            ]),
        }
    }
}

enum DecoderBackend {
    Gpu(Box<Decoder>, ForeignStep),
    Cpu(cpu::CpuDecoder),
}

#[pyclass(name = "_Decoder", module = "fathom")]
struct PyDecoder {
    backend: Mutex<DecoderBackend>,
}

#[pyclass(name = "Selection", module = "fathom", frozen)]
struct PySelection {
    heads: Vec<Vec<Vec<i64>>>,
}

#[pymethods]
impl PySelection {
    /// The tokens query head `q_head` of batch entry `b` selected, ascending.
    fn indices(&self, b: usize, q_head: usize) -> PyResult<Vec<i64>> {
        self.heads
            .get(b)
            .and_then(|s| s.get(q_head))
            .cloned()
            .ok_or_else(|| {
                PyValueError::new_err(format!("({b}, {q_head}) is outside the selection"))
            })
    }
    #[getter]
    fn batch(&self) -> usize {
        self.heads.len()
    }
}

#[pymethods]
impl PyDecoder {
    #[new]
    #[pyo3(signature = (shape, device, k_max, calibration, stream))]
    fn new(
        py: Python<'_>,
        shape: &PyModelShape,
        device: &str,
        k_max: usize,
        calibration: Option<&PyCalibration>,
        stream: u64,
    ) -> PyResult<Self> {
        let model = shape.shape.clone();
        let cal = calibration.map(|c| c.fitted.calibration.clone());
        let device = device_of(device).map_err(to_py)?;
        let backend = run(py, || {
            let config = DecoderConfig {
                k_max,
                ..DecoderConfig::default()
            };
            config.validate()?;
            if let Some(c) = &cal {
                if c.dims() != (model.layers, model.kv_heads, model.head_dim) {
                    return Err(Failure::new(Kind::Calibration, format!(
                        "the calibration is for (layers, KV heads, head dim) = {:?}; the model has {:?}",
                        c.dims(), (model.layers, model.kv_heads, model.head_dim))));
                }
            }
            match device {
                Device::Cpu => {
                    model
                        .validate()
                        .map_err(|e| Failure::new(Kind::Config, e.to_string()))?;
                    Ok(DecoderBackend::Cpu(cpu::CpuDecoder {
                        model: model.clone(),
                        k_max,
                        calibration: cal,
                    }))
                }
                Device::Cuda(o) => {
                    let gpu = gpu_for(o, stream)?;
                    let jit = jit_for(&gpu)?;
                    let mut d = Decoder::with_kernels(gpu, model.clone(), config, jit)?;
                    if let Some(c) = cal {
                        d = d.with_calibration(c)?;
                    }
                    Ok(DecoderBackend::Gpu(Box::new(d), ForeignStep::default()))
                }
            }
        })?;
        Ok(PyDecoder {
            backend: Mutex::new(backend),
        })
    }

    /// `repeat` queues the same step that many times in one call (for timing what the Python
    /// call itself costs against the same work queued from Rust; the selection is the last's).
    #[pyo3(signature = (store, seqs, layer, queries, out, method, k, scale, transfer, return_selection, stream, repeat=1))]
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        py: Python<'_>,
        store: &PyStore,
        seqs: Vec<u64>,
        layer: usize,
        queries: Described,
        out: Described,
        method: &str,
        k: Option<usize>,
        scale: Option<f64>,
        transfer: Option<&str>,
        return_selection: bool,
        stream: u64,
        repeat: usize,
    ) -> PyResult<Option<PySelection>> {
        let heads = run(py, || {
            if repeat == 0 {
                return Err(Failure::new(
                    Kind::InvalidInput,
                    "repeat must be at least 1 (the number of times the step is queued)"
                        .to_string(),
                ));
            }
            let method: Method =
                method
                    .parse()
                    .map_err(|e: reference::plans::MethodParseError| {
                        Failure::new(Kind::Method, e.to_string())
                    })?;
            let transfer = match transfer {
                None => None,
                Some("fused") => Some(Transfer::Fused),
                Some("copy-kernel") => Some(Transfer::CopyKernel),
                Some("memcpy") => Some(Transfer::Memcpy),
                Some(t) => {
                    return Err(Failure::new(
                        Kind::Method,
                        format!(
                    "placement_transfer {t:?} is not \"fused\", \"copy-kernel\" or \"memcpy\""),
                    ))
                }
            };
            let (q, o) = (desc(queries)?, desc(out)?);
            let batch = ids(&seqs);
            // The store first, then the decoder: every call takes them in this order.
            let mut sb = lock(&store.backend);
            let mut db = lock(&self.backend);
            match (&mut *db, &mut *sb) {
                (DecoderBackend::Cpu(d), StoreBackend::Cpu(s)) => {
                    let mut sel = unsafe { d.step(s, &batch, layer, &q, &o, method, k, scale)? };
                    for _ in 1..repeat {
                        sel = unsafe { d.step(s, &batch, layer, &q, &o, method, k, scale)? };
                    }
                    Ok(return_selection.then(|| {
                        sel.heads.iter().map(|b| b.iter().map(|h| h.iter().map(|&t| t as i64).collect()).collect()).collect()
                    }))
                }
                (DecoderBackend::Gpu(d, scratch), StoreBackend::Gpu(s)) => {
                    let Device::Cuda(ordinal) = store.device else { unreachable!() };
                    let gpu = gpu_for(ordinal, stream)?;
                    s.rebind(gpu.clone())?;
                    d.rebind(gpu)?;
                    let view = s.capturable_view(&batch, layer)?;
                    let n = view.max_tokens;
                    let k = match method {
                        Method::Pariskv { k } => k,
                        _ => k.unwrap_or_else(|| reference::select::paper_k(n)),
                    };
                    // Python reads `out` and the sets, never the union.
                    let request = StepRequest {
                        transfer,
                        scale: scale.map(|s| s as f32),
                        union: false,
                        ..StepRequest::new(method, k)
                    };
                    // SAFETY: the tensors are the caller's, alive until the stream runs the step.
                    for _ in 0..repeat {
                        unsafe { d.step_tensors(scratch, &view, &q, &o, request)? };
                    }
                    if !return_selection {
                        return Ok(None);
                    }
                    let sel = d.selections(scratch)?;
                    let l = sel.layout;
                    Ok(Some((0..l.batch).map(|b| (0..l.kv_heads * l.group).map(|q| sel.indices(b, q).iter().map(|&t| i64::from(t)).collect()).collect()).collect()))
                }
                _ => Err(Failure::new(Kind::InvalidInput, "the decoder and the store are on different devices; make both on the same device".to_string())),
            }
        })?;
        Ok(heads.map(|heads| PySelection { heads }))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FathomError", py.get_type::<FathomError>())?;
    m.add(
        "DeviceUnavailableError",
        py.get_type::<DeviceUnavailableError>(),
    )?;
    m.add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    m.add("ConfigError", py.get_type::<ConfigError>())?;
    m.add("MethodError", py.get_type::<MethodError>())?;
    m.add("SequenceError", py.get_type::<SequenceError>())?;
    m.add("CapacityError", py.get_type::<CapacityError>())?;
    m.add("CalibrationError", py.get_type::<CalibrationError>())?;
    m.add("KernelError", py.get_type::<KernelError>())?;
    m.add_function(wrap_pyfunction!(unavailable_reason, m)?)?;
    m.add_function(wrap_pyfunction!(reference_step::reference_group_step, m)?)?;
    m.add_class::<PyModelShape>()?;
    m.add_class::<PyCalibration>()?;
    m.add_class::<PyStore>()?;
    m.add_class::<PyDecoder>()?;
    m.add_class::<PySelection>()?;
    Ok(())
}

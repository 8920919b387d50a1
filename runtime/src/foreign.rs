//! Memory a foreign caller lends (a PyTorch tensor, a numpy array): what it says it is, and the
//! checks that decide whether a kernel may read it as the shape it needs.
//!
//! A [`TensorDesc`] is the caller's word: address, shape, strides (in elements), dtype and
//! device. [`TensorDesc::check`] holds it to an [`Expect`]ation and to the driver's word on
//! where the address lives ([`PointerCheck`], the GPU's `cuPointerGetAttribute`), and names the
//! first thing wrong and what would be right. Nothing is read before the checks pass.

use thiserror::Error;

use crate::gpu::{Gpu, GpuError, PointerPlace};

/// Bytes every borrowed row array must be aligned to: kernels read rows in 16-byte loads.
pub const ALIGN: u64 = 16;

/// Element types a caller may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dtype {
    F32,
    /// bf16 (`torch.bfloat16`, `ml_dtypes.bfloat16`).
    Bf16,
    /// 16-bit unsigned integers: bf16 bits where numpy has no bf16.
    U16,
    /// Any other type, by the caller's name of it.
    Other(String),
}

impl Dtype {
    /// From a dtype's name: `float32`, `bfloat16`, `uint16` (with or without `torch.`).
    pub fn parse(name: &str) -> Dtype {
        match name.trim_start_matches("torch.") {
            "float32" | "float" => Dtype::F32,
            "bfloat16" => Dtype::Bf16,
            "uint16" => Dtype::U16,
            other => Dtype::Other(other.to_string()),
        }
    }

    /// Bytes of one element of the types kernels read.
    pub fn size(&self) -> Option<usize> {
        match self {
            Dtype::F32 => Some(4),
            Dtype::Bf16 | Dtype::U16 => Some(2),
            Dtype::Other(_) => None,
        }
    }

    fn name(&self) -> &str {
        match self {
            Dtype::F32 => "float32",
            Dtype::Bf16 => "bfloat16",
            Dtype::U16 => "uint16",
            Dtype::Other(n) => n,
        }
    }
}

/// Where a caller says memory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

/// Memory a caller lends, as the caller describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    pub addr: u64,
    pub shape: Vec<usize>,
    /// In elements, one per axis.
    pub strides: Vec<i64>,
    pub dtype: Dtype,
    pub device: Device,
}

/// One axis of an expected shape.
#[derive(Clone, Copy, Debug)]
pub enum Dim {
    /// Exactly this size, named for messages (`"H_kv"`).
    Is(&'static str, usize),
    /// Any size (the token count of a prefill).
    Any(&'static str),
}

/// What a call needs of one tensor.
#[derive(Clone, Copy, Debug)]
pub struct Expect<'a> {
    /// The argument's name, for messages (`"keys"`).
    pub what: &'static str,
    pub dtypes: &'a [Dtype],
    pub shape: &'a [Dim],
    pub device: Device,
}

/// A lent tensor that a call cannot read as it needs; every variant names the argument.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TensorError {
    #[error("{what} has dtype {got}; allowed: {allowed}")]
    Dtype {
        what: &'static str,
        got: String,
        allowed: String,
    },
    #[error("{what} has shape {got:?}; expected {want}")]
    Shape {
        what: &'static str,
        got: Vec<usize>,
        want: String,
    },
    #[error(
        "{what} (shape {shape:?}) has strides {strides:?}; it must be contiguous (row-major \
         strides {want:?}): call .contiguous() (torch) or numpy.ascontiguousarray first"
    )]
    Stride {
        what: &'static str,
        shape: Vec<usize>,
        strides: Vec<i64>,
        want: Vec<i64>,
    },
    #[error("{what} starts at {addr:#x}, not a multiple of {align} bytes; kernels read rows in {align}-byte loads: pass an aligned tensor (a fresh or .clone()d one is)")]
    Alignment {
        what: &'static str,
        addr: u64,
        align: u64,
    },
    #[error("{what} is on {got}; this object is on {want}")]
    Device {
        what: &'static str,
        got: Device,
        want: Device,
    },
    #[error("{what} says it is on {said}, but the driver places its address {addr:#x} in {found}")]
    Pointer {
        what: &'static str,
        said: Device,
        addr: u64,
        found: String,
    },
    #[error("{what} has a null address for {elements} elements")]
    Null { what: &'static str, elements: usize },
    #[error("{what} has {elements} elements of {bytes} bytes: too large to address")]
    TooLarge {
        what: &'static str,
        elements: usize,
        bytes: usize,
    },
    #[error("asking the driver where {what} lives failed: {message}")]
    Driver { what: &'static str, message: String },
}

/// Who says where an address lives (the GPU; a fake in tests).
pub trait PointerCheck {
    fn place(&self, addr: u64) -> Result<PointerPlace, GpuError>;
}

impl PointerCheck for Gpu {
    fn place(&self, addr: u64) -> Result<PointerPlace, GpuError> {
        self.pointer_place(addr)
    }
}

/// The row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1) as i64;
    }
    strides
}

impl TensorDesc {
    /// Elements the shape holds.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Checks the tensor against `expect` (dtype, shape, device, contiguity, alignment, in
    /// that order) and, on a GPU, the driver's placement of its address; `pointers` is asked
    /// only for a nonempty CUDA tensor. Returns the shape.
    pub fn check(
        &self,
        expect: &Expect<'_>,
        pointers: Option<&dyn PointerCheck>,
    ) -> Result<Vec<usize>, TensorError> {
        let what = expect.what;
        if !expect.dtypes.contains(&self.dtype) {
            let allowed: Vec<&str> = expect.dtypes.iter().map(Dtype::name).collect();
            return Err(TensorError::Dtype {
                what,
                got: self.dtype.name().to_string(),
                allowed: allowed.join(" or "),
            });
        }
        let want = || {
            let dims: Vec<String> = expect
                .shape
                .iter()
                .map(|d| match d {
                    Dim::Is(name, n) => format!("{name}={n}"),
                    Dim::Any(name) => name.to_string(),
                })
                .collect();
            format!("[{}]", dims.join(", "))
        };
        let fits = self.shape.len() == expect.shape.len()
            && self.strides.len() == self.shape.len()
            && self
                .shape
                .iter()
                .zip(expect.shape)
                .all(|(&got, d)| match d {
                    Dim::Is(_, n) => got == *n,
                    Dim::Any(_) => true,
                });
        if !fits {
            return Err(TensorError::Shape {
                what,
                got: self.shape.clone(),
                want: want(),
            });
        }
        if self.device != expect.device {
            return Err(TensorError::Device {
                what,
                got: self.device,
                want: expect.device,
            });
        }
        let elements = self.elements();
        let size = self.dtype.size().expect("an allowed dtype has a size");
        if elements
            .checked_mul(size)
            .is_none_or(|b| b > isize::MAX as usize)
        {
            return Err(TensorError::TooLarge {
                what,
                elements,
                bytes: size,
            });
        }
        if elements == 0 {
            // Nothing is read: any strides and address will do.
            return Ok(self.shape.clone());
        }
        let want_strides = contiguous_strides(&self.shape);
        // An axis of one element may carry any stride (PyTorch gives such axes odd ones).
        let contiguous = self
            .shape
            .iter()
            .zip(self.strides.iter().zip(&want_strides))
            .all(|(&n, (s, w))| n <= 1 || s == w);
        if !contiguous {
            return Err(TensorError::Stride {
                what,
                shape: self.shape.clone(),
                strides: self.strides.clone(),
                want: want_strides,
            });
        }
        if self.addr == 0 {
            return Err(TensorError::Null { what, elements });
        }
        if !self.addr.is_multiple_of(ALIGN) {
            return Err(TensorError::Alignment {
                what,
                addr: self.addr,
                align: ALIGN,
            });
        }
        if let (Device::Cuda(ordinal), Some(pointers)) = (self.device, pointers) {
            let place = pointers.place(self.addr).map_err(|e| TensorError::Driver {
                what,
                message: e.to_string(),
            })?;
            if place != PointerPlace::Device(ordinal) {
                return Err(TensorError::Pointer {
                    what,
                    said: self.device,
                    addr: self.addr,
                    found: match place {
                        PointerPlace::Device(i) => format!("device memory of cuda:{i}"),
                        PointerPlace::Host => "host memory".into(),
                    },
                });
            }
        }
        Ok(self.shape.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake(PointerPlace);

    impl PointerCheck for Fake {
        fn place(&self, _: u64) -> Result<PointerPlace, GpuError> {
            Ok(self.0)
        }
    }

    fn keys() -> TensorDesc {
        TensorDesc {
            addr: 0x1000,
            shape: vec![2, 5, 64],
            strides: vec![320, 64, 1],
            dtype: Dtype::Bf16,
            device: Device::Cuda(0),
        }
    }

    const ROWS: [Dim; 3] = [Dim::Is("H_kv", 2), Dim::Any("n"), Dim::Is("D", 64)];

    fn expect(device: Device) -> Expect<'static> {
        Expect {
            what: "keys",
            dtypes: &[Dtype::Bf16, Dtype::U16],
            shape: &ROWS,
            device,
        }
    }

    #[test]
    fn a_tensor_of_the_right_kind_passes_and_says_its_shape() {
        let on_gpu = Fake(PointerPlace::Device(0));
        let shape = keys().check(&expect(Device::Cuda(0)), Some(&on_gpu));
        assert_eq!(shape, Ok(vec![2, 5, 64]));
        // A size-1 axis may have any stride.
        let one = TensorDesc {
            shape: vec![2, 1, 64],
            strides: vec![64, 7, 1],
            ..keys()
        };
        assert!(one.check(&expect(Device::Cuda(0)), Some(&on_gpu)).is_ok());
        // An empty tensor needs no address.
        let empty = TensorDesc {
            addr: 0,
            shape: vec![2, 0, 64],
            strides: vec![0, 64, 1],
            ..keys()
        };
        assert!(empty.check(&expect(Device::Cuda(0)), None).is_ok());
    }

    #[test]
    fn each_wrong_property_is_named() {
        let e = expect(Device::Cuda(0));
        let on_gpu = Fake(PointerPlace::Device(0));
        let err = |t: TensorDesc| t.check(&e, Some(&on_gpu)).unwrap_err();
        let wrong_dtype = err(TensorDesc {
            dtype: Dtype::F32,
            ..keys()
        });
        assert!(
            wrong_dtype.to_string().contains("bfloat16 or uint16"),
            "{wrong_dtype}"
        );
        assert!(matches!(
            err(TensorDesc {
                shape: vec![3, 5, 64],
                ..keys()
            }),
            TensorError::Shape { .. }
        ));
        assert!(matches!(
            err(TensorDesc {
                shape: vec![2, 64],
                strides: vec![64, 1],
                ..keys()
            }),
            TensorError::Shape { .. }
        ));
        let transposed = err(TensorDesc {
            strides: vec![320, 1, 5],
            ..keys()
        });
        assert!(
            transposed.to_string().contains("contiguous"),
            "{transposed}"
        );
        assert!(matches!(
            err(TensorDesc {
                addr: 0x1002,
                ..keys()
            }),
            TensorError::Alignment { .. }
        ));
        assert!(matches!(
            err(TensorDesc {
                device: Device::Cpu,
                ..keys()
            }),
            TensorError::Device { .. }
        ));
        assert!(matches!(
            err(TensorDesc { addr: 0, ..keys() }),
            TensorError::Null { .. }
        ));
    }

    #[test]
    fn the_driver_s_placement_overrules_the_caller_s_word() {
        let e = expect(Device::Cuda(0));
        for place in [PointerPlace::Device(1), PointerPlace::Host] {
            let got = keys().check(&e, Some(&Fake(place))).unwrap_err();
            assert!(matches!(got, TensorError::Pointer { .. }), "{got}");
        }
        // A CPU array is not asked about.
        let cpu = TensorDesc {
            device: Device::Cpu,
            ..keys()
        };
        let never = Fake(PointerPlace::Device(9));
        assert!(cpu.check(&expect(Device::Cpu), Some(&never)).is_ok());
    }

    #[test]
    fn dtype_names_read_torch_and_numpy_spellings() {
        assert_eq!(Dtype::parse("torch.float32"), Dtype::F32);
        assert_eq!(Dtype::parse("bfloat16"), Dtype::Bf16);
        assert_eq!(Dtype::parse("uint16"), Dtype::U16);
        assert_eq!(Dtype::parse("torch.int64"), Dtype::Other("int64".into()));
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}

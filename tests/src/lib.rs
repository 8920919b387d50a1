//! Cross-crate integration tests of fathom: the generated kernels and the step against the f64
//! reference. The tests live in `tests/tests/`; this library holds their shared helpers.

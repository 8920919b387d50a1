//! NVRTC discovery on fake directories, and real compilations.
//!
//! The compilation tests need NVRTC and fail (never skip) without it: `scripts/test.sh`
//! installs the pinned wheel and points `FATHOM_NVRTC` at it.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use codegen::nvrtc::{
    cache_dir_from, check_library, compile, load, locate_in, pinned_wheel_lib_dir, version,
    NvrtcError, SearchEnv, Source, PINNED_NVRTC_VERSION,
};

/// A fake library file (text, not ELF) at `dir/name`.
fn fake_lib(dir: &Path, name: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    fs::write(&path, "not a shared library\n").unwrap();
    path
}

/// Every rule of the search order populated with a fake library, nothing from the real machine.
struct FakeMachine {
    _root: tempfile::TempDir,
    env: SearchEnv,
    libs: Vec<(Source, PathBuf)>,
}

fn fake_machine() -> FakeMachine {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let env = SearchEnv {
        fathom_nvrtc: Some(r.join("explicit")),
        cuda_path: Some(r.join("cuda")),
        ld_library_path: vec![r.join("ld-empty"), r.join("ld")],
        toolkit_dirs: vec![r.join("toolkit")],
        cache_dir: r.join("cache"),
    };
    let libs = vec![
        (
            Source::FathomNvrtc,
            fake_lib(&r.join("explicit"), "libnvrtc.so.13"),
        ),
        (
            Source::CudaPath,
            fake_lib(&r.join("cuda/lib64"), "libnvrtc.so.13"),
        ),
        (
            Source::CudaPath,
            fake_lib(&r.join("cuda/lib"), "libnvrtc.so"),
        ),
        (
            Source::LdLibraryPath,
            fake_lib(&r.join("ld"), "libnvrtc.so"),
        ),
        (
            Source::Toolkit,
            fake_lib(&r.join("toolkit"), "libnvrtc.so.13"),
        ),
        (
            Source::Cache,
            fake_lib(&pinned_wheel_lib_dir(&r.join("cache")), "libnvrtc.so.13"),
        ),
    ];
    fs::create_dir_all(r.join("ld-empty")).unwrap();
    FakeMachine {
        _root: root,
        env,
        libs,
    }
}

#[test]
fn search_order_is_env_cuda_path_ld_toolkit_cache() {
    let mut m = fake_machine();
    // Peel the rules off one at a time: each time the next one in order must win.
    for (i, (source, path)) in m.libs.clone().into_iter().enumerate() {
        let lib = locate_in(&m.env).unwrap();
        assert_eq!((lib.source, &lib.path), (source, &path), "step {i}");
        if source == Source::FathomNvrtc {
            m.env.fathom_nvrtc = None;
        } else {
            fs::remove_file(&path).unwrap();
        }
    }
    let err = locate_in(&m.env).unwrap_err();
    let NvrtcError::NotFound { searched } = &err else {
        panic!("{err:?}");
    };
    // Every place is listed, in order, and the message says how to fix it.
    let msg = err.to_string();
    assert_eq!(searched.len(), 7, "{msg}");
    assert!(searched[0].contains("FATHOM_NVRTC: not set"));
    assert!(searched[1].ends_with("cuda/lib64") && searched[2].ends_with("cuda/lib"));
    assert!(searched[3].ends_with("ld-empty") && searched[4].ends_with("ld"));
    assert!(searched[5].ends_with("toolkit"));
    assert!(searched[6].ends_with("nvidia/cu13/lib"), "{msg}");
    for fix in [
        "FATHOM_NVRTC",
        "CUDA 13 toolkit",
        "scripts/install-nvrtc.sh",
        "13.0.88",
    ] {
        assert!(msg.contains(fix), "{msg}");
    }
}

#[test]
fn so_13_is_preferred_over_unversioned_name() {
    let root = tempfile::tempdir().unwrap();
    fake_lib(root.path(), "libnvrtc.so");
    let versioned = fake_lib(root.path(), "libnvrtc.so.13");
    let env = SearchEnv {
        toolkit_dirs: vec![root.path().to_path_buf()],
        cache_dir: root.path().join("cache"),
        ..SearchEnv::default()
    };
    assert_eq!(locate_in(&env).unwrap().path, versioned);
}

#[test]
fn fathom_nvrtc_may_name_the_file_and_must_be_right() {
    let m = fake_machine();
    let file = fake_lib(&m.env.cache_dir.join("elsewhere"), "my-nvrtc.so");
    let env = SearchEnv {
        fathom_nvrtc: Some(file.clone()),
        ..m.env.clone()
    };
    let lib = locate_in(&env).unwrap();
    assert_eq!((lib.source, lib.path), (Source::FathomNvrtc, file));

    // Set but wrong: an error, even though other rules would find a library.
    let missing = m.env.cache_dir.join("nothing-here");
    let env = SearchEnv {
        fathom_nvrtc: Some(missing.clone()),
        ..m.env.clone()
    };
    let err = locate_in(&env).unwrap_err();
    assert!(
        matches!(&err, NvrtcError::BadFathomNvrtc { path } if *path == missing),
        "{err:?}"
    );
}

#[test]
fn located_paths_are_absolute() {
    let root = tempfile::tempdir().unwrap();
    fake_lib(root.path(), "libnvrtc.so.13");
    let relative = pathdiff(root.path());
    let env = SearchEnv {
        fathom_nvrtc: Some(relative),
        cache_dir: root.path().join("cache"),
        ..SearchEnv::default()
    };
    assert!(locate_in(&env).unwrap().path.is_absolute());
}

/// `dir` relative to the current directory (through `..` as needed).
fn pathdiff(dir: &Path) -> PathBuf {
    let cwd = std::env::current_dir().unwrap();
    let ups = cwd.components().count() - 1;
    let mut rel = PathBuf::new();
    for _ in 0..ups {
        rel.push("..");
    }
    rel.join(dir.strip_prefix("/").unwrap())
}

#[test]
fn a_fake_library_is_a_typed_load_error() {
    let m = fake_machine();
    let path = &m.libs[0].1;
    let err = check_library(path).unwrap_err();
    assert!(
        matches!(&err, NvrtcError::Load { path: p, .. } if p == path),
        "{err:?}"
    );
    assert!(err.to_string().contains("FATHOM_NVRTC"));
}

#[test]
fn a_real_library_that_is_not_nvrtc_is_refused() {
    // libm is loadable everywhere but exports no nvrtc* symbols. Found through the loaded
    // process's own maps, so the test does not guess a distribution's layout.
    let maps = fs::read_to_string("/proc/self/maps").unwrap();
    let libm = maps
        .split_whitespace()
        .find(|w| w.contains("/libm.so") || w.contains("/libm-"))
        .or_else(|| maps.split_whitespace().find(|w| w.contains("/libc.so")))
        .expect("libm or libc is mapped");
    let err = check_library(Path::new(libm)).unwrap_err();
    assert!(
        matches!(
            err,
            NvrtcError::NotNvrtc {
                missing: "nvrtcVersion",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn cache_dir_rules() {
    let os = |s: &'static str| Some(OsStr::new(s));
    assert_eq!(
        cache_dir_from(os("/c"), os("/x"), os("/h")),
        PathBuf::from("/c")
    );
    assert_eq!(
        cache_dir_from(None, os("/x"), os("/h")),
        PathBuf::from("/x/fathom")
    );
    assert_eq!(
        cache_dir_from(os(""), os("relative"), os("/h")),
        PathBuf::from("/h/.cache/fathom")
    );
    assert!(cache_dir_from(None, None, None).ends_with("fathom"));
    assert_eq!(
        pinned_wheel_lib_dir(Path::new("/c")),
        PathBuf::from(format!("/c/nvrtc-{PINNED_NVRTC_VERSION}/nvidia/cu13/lib"))
    );
}

const SAXPY: &str = r#"
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

fn must_load() {
    if let Err(e) = load() {
        panic!("NVRTC is required for this test (run scripts/test.sh): {e}");
    }
}

#[test]
fn version_is_13_and_pinned_wheel_is_13_0() {
    must_load();
    let lib = load().unwrap();
    let (major, minor) = version().unwrap();
    assert_eq!(
        major,
        13,
        "fathom targets NVRTC 13; loaded {}",
        lib.path.display()
    );
    let pinned = lib
        .path
        .to_string_lossy()
        .contains(&format!("nvrtc-{PINNED_NVRTC_VERSION}/nvidia/cu13/lib"));
    if pinned {
        assert_eq!((major, minor), (13, 0));
    }
    // Idempotent: the same library every time.
    assert!(std::ptr::eq(lib, load().unwrap()));
}

#[test]
fn compiles_to_ptx_for_sm80_and_sm90() {
    must_load();
    for arch in ["sm_80", "sm_90"] {
        let out = compile(SAXPY, "saxpy.cu", arch, &[]).unwrap();
        assert!(out.ptx.contains("\n.version 9."), "{arch}:\n{}", out.ptx);
        assert!(out.ptx.contains(&format!(".target {arch}")), "{arch}");
        assert!(out.ptx.contains(".entry saxpy("), "{arch}");
    }
    let fast = compile(SAXPY, "saxpy.cu", "sm_90", &["--use_fast_math".to_string()]).unwrap();
    assert!(fast.ptx.contains(".target sm_90"));
}

#[test]
fn compile_error_reports_file_and_line() {
    must_load();
    let broken = "extern \"C\" __global__ void k(float* y) {\n    y[0] = 1.0f;\n    y[1] = undefined_name;\n}\n";
    let err = compile(broken, "broken_kernel.cu", "sm_90", &[]).unwrap_err();
    let NvrtcError::Compile { file_name, log, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(file_name, "broken_kernel.cu");
    assert!(log.contains("broken_kernel.cu(3)"), "{log}");
    assert!(log.contains("undefined_name"), "{log}");
    assert!(err.to_string().contains("broken_kernel.cu(3)"));
}

#[test]
fn same_source_same_ptx() {
    must_load();
    let a = compile(SAXPY, "saxpy.cu", "sm_90", &[]).unwrap();
    let b = compile(SAXPY, "saxpy.cu", "sm_90", &[]).unwrap();
    assert_eq!(a.ptx.as_bytes(), b.ptx.as_bytes());
    let other = compile(
        &SAXPY.replace("a * x[i]", "a * x[i] * x[i]"),
        "saxpy.cu",
        "sm_90",
        &[],
    )
    .unwrap();
    assert_ne!(a.ptx, other.ptx);
}

#[test]
fn bad_arguments_are_typed_errors() {
    for arch in ["sm90", "sm_", "sm_9", "sm_90x", "gfx90a", "compute_1000"] {
        assert!(
            matches!(
                compile(SAXPY, "k.cu", arch, &[]),
                Err(NvrtcError::InvalidArch { .. })
            ),
            "{arch}"
        );
    }
    let err = compile(
        SAXPY,
        "k.cu",
        "sm_90",
        &["--gpu-architecture=sm_80".to_string()],
    );
    assert!(
        matches!(err, Err(NvrtcError::InvalidInput { what: "option", .. })),
        "{err:?}"
    );
    let err = compile("int x;\0", "k.cu", "sm_90", &[]);
    assert!(
        matches!(err, Err(NvrtcError::InvalidInput { what: "source", .. })),
        "{err:?}"
    );
}

#[test]
fn unknown_option_is_reported_by_nvrtc() {
    must_load();
    let err = compile(SAXPY, "k.cu", "sm_90", &["--no-such-option".to_string()]).unwrap_err();
    assert!(
        matches!(&err, NvrtcError::Compile { code, .. } if code.contains("INVALID_OPTION")),
        "{err:?}"
    );
}

#[test]
fn a_cubin_is_the_machine_code_of_a_real_architecture_and_deterministic() {
    let options = vec!["--std=c++17".to_string()];
    let first = codegen::nvrtc::compile_cubin(SAXPY, "saxpy.cu", "sm_90", &options).unwrap();
    assert_eq!(first.log, "");
    // An ELF image (what cuModuleLoadData takes as machine code, past the driver's PTX JIT).
    assert_eq!(&first.cubin[..4], b"\x7fELF", "{:?}", &first.cubin[..4]);
    assert!(first.cubin.len() > 256, "{} bytes", first.cubin.len());
    let again = codegen::nvrtc::compile_cubin(SAXPY, "saxpy.cu", "sm_90", &options).unwrap();
    assert_eq!(first.cubin, again.cubin, "same source, same CUBIN");
    let other = codegen::nvrtc::compile_cubin(SAXPY, "saxpy.cu", "sm_80", &options).unwrap();
    assert_ne!(
        first.cubin, other.cubin,
        "another architecture, another image"
    );
    // The PTX road is unchanged by asking for a CUBIN.
    assert!(compile(SAXPY, "saxpy.cu", "sm_90", &options)
        .unwrap()
        .ptx
        .contains(".entry saxpy"));
}

#[test]
fn a_cubin_of_a_virtual_architecture_is_refused_with_what_to_ask_for() {
    let e = codegen::nvrtc::compile_cubin(SAXPY, "saxpy.cu", "compute_90", &[]).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, NvrtcError::InvalidInput { .. })
            && text.contains("sm_90")
            && text.contains("PTX"),
        "{text}"
    );
}

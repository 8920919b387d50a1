//! Faults that need no GPU (issue #7): NVRTC missing.
//!
//! NVRTC is found once per process from the environment (`codegen::nvrtc::load`), so each case
//! runs in a child process of this test binary with its own environment: no test here changes
//! the environment of another. The child (`nvrtc_child`, which does nothing in a normal run)
//! asserts the typed error itself and prints a marker line; the parent checks that the child
//! passed, printed the marker, and that the message says what was looked at and how to fix it.
//!
//! - `FATHOM_NVRTC` naming a file that does not exist: `BadFathomNvrtc` naming the path, from
//!   `nvrtc::load`, from `nvrtc::compile` and from the runtime JIT's `compile` (as
//!   `JitError::Nvrtc`), even though other rules might find a library (an explicit choice is
//!   never silently replaced).
//! - no NVRTC anywhere (no `FATHOM_NVRTC`, no `CUDA_PATH`, an empty `LD_LIBRARY_PATH`
//!   directory, an empty cache): `NotFound` listing every place looked at, in order, and the
//!   fix. On a machine whose toolkit places hold NVRTC (a CUDA install) the search must find it
//!   there instead, from the `toolkit location` rule.

use std::path::{Path, PathBuf};
use std::process::Command;

use codegen::nvrtc::{self, pinned_wheel_lib_dir, NvrtcError, SearchEnv, Source, LIBRARY_NAMES};
use codegen::spec::{KernelSpec, OracleSpec, Placement};
use runtime::jit::{self, JitError};

/// Set in a child: which case it runs.
const CASE_VAR: &str = "FATHOM_FAULT_NVRTC_CASE";
/// Set in a child: the scratch directory of its case.
const DIR_VAR: &str = "FATHOM_FAULT_NVRTC_DIR";

const SAXPY: &str = "extern \"C\" __global__ void k(float* y) { y[0] = 1.0f; }\n";

fn oracle() -> KernelSpec {
    OracleSpec {
        head_dim: 128,
        group: 4,
        threads: 256,
        placement: Placement::Hbm,
        kv_rows: codegen::spec::KvRows::Separate,
    }
    .into()
}

/// Runs the child of `case` with `env` set (and `remove` unset); returns its stdout and stderr
/// once it has passed.
fn run_child(case: &str, dir: &Path, env: &[(&str, PathBuf)], remove: &[&str]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command
        .args(["nvrtc_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CASE_VAR, case)
        .env(DIR_VAR, dir);
    for var in remove {
        command.env_remove(var);
    }
    for (var, value) in env {
        command.env(var, value);
    }
    let out = command.output().expect("the child starts");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the {case} child failed:\n{text}");
    assert!(
        text.contains(&format!("nvrtc-child {case}:")),
        "the {case} child ran no case (was the test renamed?):\n{text}"
    );
    text
}

/// The child half of the tests below; does nothing unless started by one of them.
#[test]
fn nvrtc_child() {
    let Some(case) = std::env::var_os(CASE_VAR) else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os(DIR_VAR).expect("the parent sets the directory"));
    match case.to_str() {
        Some("missing-file") => child_missing_file(&dir),
        Some("nowhere") => child_nowhere(&dir),
        other => panic!("unknown child case {other:?}"),
    }
}

fn child_missing_file(dir: &Path) {
    let missing = dir.join("no-such-dir").join("libnvrtc.so.13");
    let is_ours =
        |e: &NvrtcError| matches!(e, NvrtcError::BadFathomNvrtc { path } if *path == missing);
    let e = nvrtc::load().expect_err("FATHOM_NVRTC names a missing file");
    assert!(is_ours(&e), "load: {e:?}");
    // Not cached: a second call searches again and fails the same way.
    let e = nvrtc::compile(SAXPY, "k.cu", "sm_90", &[]).expect_err("no NVRTC to compile with");
    assert!(is_ours(&e), "compile: {e:?}");
    // The runtime's JIT compiles through the same search.
    let prepared = jit::prepare(&oracle(), "sm_90", (13, 0)).expect("the spec renders");
    match jit::compile(&prepared) {
        Err(JitError::Nvrtc(e)) => assert!(is_ours(&e), "jit compile: {e:?}"),
        other => panic!("jit compile with FATHOM_NVRTC missing: {other:?}"),
    }
    println!("nvrtc-child missing-file: {e}");
}

fn child_nowhere(dir: &Path) {
    let env = SearchEnv::from_process();
    // A CUDA install in a toolkit place is found there: the search cannot be emptied here.
    let toolkit = env.toolkit_dirs.iter().find_map(|d| {
        LIBRARY_NAMES
            .iter()
            .map(|name| d.join(name))
            .find(|p| p.is_file())
    });
    if let Some(path) = toolkit {
        let lib = nvrtc::locate().expect("a toolkit NVRTC is found");
        assert_eq!(lib.source, Source::Toolkit, "{lib:?}");
        assert_eq!(lib.path.parent(), path.parent(), "{lib:?}");
        println!(
            "nvrtc-child nowhere: this machine has NVRTC at {}, found from the toolkit rule",
            path.display()
        );
        return;
    }
    let e = nvrtc::load().expect_err("no NVRTC anywhere");
    let NvrtcError::NotFound { searched } = &e else {
        panic!("load with no NVRTC anywhere: {e:?}");
    };
    let ld = dir.join("empty-ld");
    let cache = pinned_wheel_lib_dir(&dir.join("cache"));
    let mut expected = vec![
        "FATHOM_NVRTC: not set".to_string(),
        "CUDA_PATH: not set".to_string(),
        format!("LD_LIBRARY_PATH: {}", ld.display()),
    ];
    expected.extend(
        env.toolkit_dirs
            .iter()
            .map(|d| format!("toolkit location: {}", d.display())),
    );
    expected.push(format!("fathom cache (pinned wheel): {}", cache.display()));
    assert_eq!(*searched, expected, "every place, in order");
    assert!(
        searched
            .iter()
            .any(|s| s.ends_with("/usr/local/cuda/lib64")),
        "{searched:?}"
    );
    // The runtime's JIT reports the same.
    let prepared = jit::prepare(&oracle(), "sm_90", (13, 0)).expect("the spec renders");
    assert!(
        matches!(
            jit::compile(&prepared),
            Err(JitError::Nvrtc(NvrtcError::NotFound { .. }))
        ),
        "jit compile with no NVRTC"
    );
    println!("nvrtc-child nowhere: {e}");
}

#[test]
fn fathom_nvrtc_naming_a_missing_file_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("libnvrtc.so.13");
    let text = run_child(
        "missing-file",
        dir.path(),
        &[("FATHOM_NVRTC", missing.clone())],
        &[],
    );
    let shown = missing.display().to_string();
    assert!(text.contains(&shown), "the message names the path:\n{text}");
    assert!(
        text.contains("unset it to search the usual places"),
        "the message says what to do:\n{text}"
    );
}

#[test]
fn no_nvrtc_anywhere_lists_every_place_searched_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let ld = dir.path().join("empty-ld");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&ld).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let text = run_child(
        "nowhere",
        dir.path(),
        &[
            ("LD_LIBRARY_PATH", ld.clone()),
            ("HOME", home),
            ("FATHOM_CACHE_DIR", dir.path().join("cache")),
        ],
        &["FATHOM_NVRTC", "CUDA_PATH", "XDG_CACHE_HOME", "VIRTUAL_ENV"],
    );
    if text.contains("found from the toolkit rule") {
        return;
    }
    for want in [
        "NVRTC (libnvrtc.so.13) was not found. Looked in:",
        "  - FATHOM_NVRTC: not set",
        "  - CUDA_PATH: not set",
        &format!("  - LD_LIBRARY_PATH: {}", ld.display()),
        "  - toolkit location: /usr/local/cuda/lib64",
        "scripts/install-nvrtc.sh",
        "nvidia-cuda-nvrtc==13.0.88",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

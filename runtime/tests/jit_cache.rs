//! The JIT cache without a GPU: keys, the entry format and its corruption checks, atomic
//! writes, the fallback when the directory is unusable, and concurrent builds of one key by
//! threads and by processes. One test compiles real kernels with NVRTC (installed and pointed
//! at by `scripts/test.sh`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use codegen::emit::{build_kernel, sha256_hex};
use codegen::kernels::{kernels_for, KernelSetOptions};
use codegen::model::preset;
use codegen::nvrtc;
use codegen::spec::{KernelSpec, OracleSpec, Placement};
use runtime::jit::{
    cache_key, compile_options, prepare, CacheEntry, CacheStats, CorruptReason, JitCache, JitError,
    Lookup, Origin,
};

const SOURCE: &str = "extern \"C\" __global__ void k(float* x) { x[0] = 1.0f; }\n";
const ARCH: &str = "sm_90";
const VERSION: (i32, i32) = (13, 0);

fn key_of(source: &str, version: (i32, i32), arch: &str, options: &[&str]) -> String {
    cache_key(source, version, arch, options)
}

/// A PTX-like body of several lines, different per `seed`.
fn ptx(seed: u32) -> String {
    format!(
        "//\n// Generated for test {seed}\n//\n.version 9.0\n.target sm_90\n\
         .visible .entry k{seed}(\n.param .u64 p\n)\n{{\nret;\n}}\n"
    )
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn temp_files(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect()
}

#[test]
fn the_key_changes_with_every_input_and_only_with_them() {
    let base = key_of(SOURCE, VERSION, ARCH, &["--std=c++17"]);
    assert_eq!(base.len(), 64);
    assert!(base
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    assert_eq!(base, key_of(SOURCE, VERSION, ARCH, &["--std=c++17"]));

    let mut source = SOURCE.to_string();
    source.insert(source.len() - 1, ' ');
    let variants = [
        ("source", key_of(&source, VERSION, ARCH, &["--std=c++17"])),
        (
            "nvrtc major",
            key_of(SOURCE, (12, 0), ARCH, &["--std=c++17"]),
        ),
        (
            "nvrtc minor",
            key_of(SOURCE, (13, 1), ARCH, &["--std=c++17"]),
        ),
        ("arch", key_of(SOURCE, VERSION, "sm_80", &["--std=c++17"])),
        ("option", key_of(SOURCE, VERSION, ARCH, &["--std=c++14"])),
        ("no option", key_of(SOURCE, VERSION, ARCH, &[] as &[&str])),
        (
            "extra option",
            key_of(SOURCE, VERSION, ARCH, &["--std=c++17", "-lineinfo"]),
        ),
        (
            "option order",
            key_of(SOURCE, VERSION, ARCH, &["-lineinfo", "--std=c++17"]),
        ),
        // Field boundaries are part of the key: the same bytes split differently differ.
        (
            "options joined",
            key_of(SOURCE, VERSION, ARCH, &["--std=c++17-lineinfo"]),
        ),
        (
            "nvrtc version digits moved",
            key_of(SOURCE, (1, 30), ARCH, &["--std=c++17"]),
        ),
    ];
    for (what, key) in &variants {
        assert_ne!(key, &base, "changing the {what} must change the key");
    }
    for (i, (a, ka)) in variants.iter().enumerate() {
        for (b, kb) in &variants[i + 1..] {
            assert_ne!(ka, kb, "{a} and {b} collide");
        }
    }
}

#[test]
fn prepare_keys_the_rendered_source_with_codegens_options() {
    let shape = preset("qwen3-8b").unwrap();
    let specs = kernels_for(&shape, &KernelSetOptions::default());
    let mut keys = std::collections::HashSet::new();
    for spec in &specs {
        let p = prepare(spec, ARCH, VERSION).unwrap();
        assert_eq!(p.name, spec.kernel_name());
        assert_eq!(p.source, spec.render().unwrap());
        assert_eq!(p.source_sha256, sha256_hex(&p.source));
        assert_eq!(p.options, compile_options());
        assert_eq!(
            p.key,
            cache_key(&p.source, VERSION, ARCH, &compile_options())
        );
        assert!(keys.insert(p.key.clone()), "{} shares a key", p.name);
        assert_ne!(p.key, prepare(spec, "sm_80", VERSION).unwrap().key);
    }
    assert_eq!(keys.len(), specs.len());
}

#[test]
fn a_bad_spec_is_a_render_error_naming_the_kernel() {
    let spec: KernelSpec = OracleSpec {
        head_dim: 100,
        group: 4,
        threads: 256,
        placement: Placement::Hbm,
        kv_rows: Default::default(),
    }
    .into();
    match prepare(&spec, ARCH, VERSION) {
        Err(JitError::Render { kernel, .. }) => assert_eq!(kernel, spec.kernel_name()),
        other => panic!("expected a render error, got {other:?}"),
    }
}

#[test]
fn the_default_dir_is_the_override_or_kernels_in_the_cache_dir() {
    let cache = Path::new("/c/fathom");
    assert_eq!(
        JitCache::default_dir_from(None, cache),
        PathBuf::from("/c/fathom/kernels")
    );
    assert_eq!(
        JitCache::default_dir_from(Some("".as_ref()), cache),
        PathBuf::from("/c/fathom/kernels")
    );
    assert_eq!(
        JitCache::default_dir_from(Some("/k".as_ref()), cache),
        PathBuf::from("/k")
    );
}

#[test]
fn an_entry_round_trips() {
    for (i, body) in [ptx(1), String::new(), "no newline at the end".into()]
        .into_iter()
        .enumerate()
    {
        let key = key_of(&body, VERSION, ARCH, &[] as &[&str]);
        let entry = CacheEntry::new(key.clone(), format!("kernel_{i}"), body.clone());
        let bytes = entry.encode();
        assert!(bytes.ends_with(body.as_bytes()));
        let back = CacheEntry::decode(&bytes, &key, &format!("kernel_{i}")).unwrap();
        assert_eq!(back, entry);
    }
}

#[test]
fn every_truncation_and_every_flipped_byte_is_detected() {
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    let entry = CacheEntry::new(key.clone(), "scan_d128", ptx(7));
    let bytes = entry.encode();
    let header_end = bytes.iter().position(|&b| b == b'\n').unwrap();

    assert_eq!(
        CacheEntry::decode(&[], &key, "scan_d128"),
        Err(CorruptReason::Empty)
    );
    for len in 1..bytes.len() {
        let reason = CacheEntry::decode(&bytes[..len], &key, "scan_d128")
            .expect_err(&format!("a file cut to {len} bytes must be corrupt"));
        if len <= header_end {
            assert_eq!(reason, CorruptReason::NoHeaderEnd, "cut at {len}");
        } else {
            assert!(
                matches!(reason, CorruptReason::BodyHash { .. }),
                "cut at {len}: {reason}"
            );
        }
    }
    for at in 0..bytes.len() {
        for mask in [0x01u8, 0x80] {
            let mut damaged = bytes.clone();
            damaged[at] ^= mask;
            let reason = CacheEntry::decode(&damaged, &key, "scan_d128");
            assert!(reason.is_err(), "byte {at} ^ {mask:#x} went unnoticed");
            if at > header_end {
                assert!(
                    matches!(
                        reason,
                        Err(CorruptReason::BodyHash { .. } | CorruptReason::NotText { .. })
                    ),
                    "byte {at}: {reason:?}"
                );
            }
        }
    }
}

#[test]
fn a_header_for_another_key_kernel_or_version_is_rejected_with_its_reason() {
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    let other = key_of(SOURCE, VERSION, "sm_80", &[] as &[&str]);
    let bytes = CacheEntry::new(key.clone(), "k", ptx(2)).encode();
    assert_eq!(
        CacheEntry::decode(&bytes, &other, "k"),
        Err(CorruptReason::WrongKey {
            expected: other.clone(),
            found: key.clone()
        })
    );
    assert_eq!(
        CacheEntry::decode(&bytes, &key, "k2"),
        Err(CorruptReason::WrongKernel {
            expected: "k2".into(),
            found: "k".into()
        })
    );
    let text = String::from_utf8(bytes).unwrap();
    let v2 = text.replacen(" v1 ", " v2 ", 1);
    assert!(matches!(
        CacheEntry::decode(v2.as_bytes(), &key, "k"),
        Err(CorruptReason::Version { found }) if found == "v2"
    ));
    let no_magic = text.replacen("fathom-jit-ptx", "fathom-jit-cu", 1);
    assert!(matches!(
        CacheEntry::decode(no_magic.as_bytes(), &key, "k"),
        Err(CorruptReason::BadMagic { .. })
    ));
    let extra = text.replacen(" kernel=", " x=1 kernel=", 1);
    assert!(matches!(
        CacheEntry::decode(extra.as_bytes(), &key, "k"),
        Err(CorruptReason::MalformedHeader { .. })
    ));
    let plain_ptx = ptx(2);
    assert!(CacheEntry::decode(plain_ptx.as_bytes(), &key, "k").is_err());
}

#[test]
fn a_lookup_tells_missing_valid_and_corrupt_apart() {
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    assert_eq!(cache.lookup(&key, "k").unwrap(), Lookup::Missing);
    let entry = CacheEntry::new(key.clone(), "k", ptx(3));
    cache.store(&entry).unwrap();
    assert_eq!(cache.lookup(&key, "k").unwrap(), Lookup::Valid(entry));
    fs::write(cache.entry_path(&key), b"").unwrap();
    assert_eq!(
        cache.lookup(&key, "k").unwrap(),
        Lookup::Corrupt(CorruptReason::Empty)
    );
}

#[test]
fn stores_are_atomic_and_leave_no_temporary_files() {
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    for seed in 0..20 {
        cache
            .store(&CacheEntry::new(key.clone(), "k", ptx(seed)))
            .unwrap();
        assert_eq!(names(dir.path()), vec![format!("{key}.ptx")]);
        assert!(matches!(cache.lookup(&key, "k").unwrap(),
            Lookup::Valid(e) if e.ptx == ptx(seed)));
    }

    // A rename that fails (the entry's name is taken by a directory) removes its temporary
    // file and leaves what was there.
    let blocked = key_of("other", VERSION, ARCH, &[] as &[&str]);
    fs::create_dir(cache.entry_path(&blocked)).unwrap();
    fs::write(cache.entry_path(&blocked).join("inside"), b"x").unwrap();
    assert!(cache
        .store(&CacheEntry::new(blocked.clone(), "k", ptx(1)))
        .is_err());
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
    assert!(cache.entry_path(&blocked).join("inside").is_file());
}

#[test]
fn get_or_build_builds_once_then_hits_and_rebuilds_a_damaged_entry() {
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    let builds = AtomicUsize::new(0);
    let build = |seed| {
        builds.fetch_add(1, Ordering::SeqCst);
        Ok(ptx(seed))
    };

    let first = cache.get_or_build_with(&key, "k", || build(5)).unwrap();
    assert_eq!(
        (first.origin, first.stored, &first.ptx),
        (Origin::Compiled, true, &ptx(5))
    );
    let second = cache.get_or_build_with(&key, "k", || build(6)).unwrap();
    assert_eq!((second.origin, &second.ptx), (Origin::CacheHit, &ptx(5)));
    assert_eq!(builds.load(Ordering::SeqCst), 1);

    // Damage the entry three ways; each is found, deleted, rebuilt and rewritten.
    let path = cache.entry_path(&key);
    let good = fs::read(&path).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x20;
    for (n, damaged) in [good[..good.len() / 2].to_vec(), flipped, Vec::new()]
        .into_iter()
        .enumerate()
    {
        fs::write(&path, &damaged).unwrap();
        let fetched = cache.get_or_build_with(&key, "k", || build(5)).unwrap();
        assert_eq!(fetched.origin, Origin::Compiled);
        assert!(fetched.rebuilt.is_some(), "damage {n} was not reported");
        assert_eq!(fs::read(&path).unwrap(), good, "damage {n} not rewritten");
    }
    assert_eq!(
        cache.stats(),
        CacheStats {
            hits: 1,
            compiled: 4,
            corrupt_rebuilt: 3,
            uncached: 0
        }
    );

    // A failed build leaves neither the damaged entry nor a new one.
    fs::write(&path, b"garbage").unwrap();
    let failed = cache.get_or_build_with(&key, "k", || {
        Err(JitError::NvrtcVersionMismatch {
            kernel: "k".into(),
            keyed: (0, 0),
            loaded: VERSION,
        })
    });
    assert!(matches!(failed, Err(JitError::NvrtcVersionMismatch { .. })));
    assert!(!path.exists());
    assert_eq!(temp_files(dir.path()), Vec::<String>::new());
}

#[test]
fn an_unusable_directory_falls_back_to_building_without_caching() {
    let dir = tempfile::tempdir().unwrap();
    // A directory under a regular file can never be created, whoever runs the test.
    let file = dir.path().join("a-file");
    fs::write(&file, b"not a directory").unwrap();
    let cache = JitCache::new(file.join("kernels"));
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    for _ in 0..2 {
        let fetched = cache.get_or_build_with(&key, "k", || Ok(ptx(9))).unwrap();
        assert_eq!(
            (fetched.origin, fetched.stored, fetched.ptx),
            (Origin::Compiled, false, ptx(9))
        );
    }
    assert_eq!(cache.stats().uncached, 2);
    assert_eq!(cache.stats().compiled, 2);
}

#[test]
fn reading_an_entry_that_is_a_directory_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    fs::create_dir(cache.entry_path(&key)).unwrap();
    let result = cache.get_or_build_with(&key, "k", || Ok(ptx(1)));
    assert!(
        matches!(
            result,
            Err(JitError::Io {
                action: "reading",
                ..
            })
        ),
        "{result:?}"
    );
}

#[test]
fn threads_building_one_key_build_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    let threads = 8;
    let builds = AtomicUsize::new(0);
    let start = Barrier::new(threads);
    let origins: Vec<(Origin, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let fetched = cache
                        .get_or_build_with(&key, "k", || {
                            builds.fetch_add(1, Ordering::SeqCst);
                            // Long enough that every other thread arrives while it builds.
                            std::thread::sleep(Duration::from_millis(100));
                            Ok(ptx(4))
                        })
                        .unwrap();
                    (fetched.origin, fetched.ptx)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    let compiled = origins
        .iter()
        .filter(|(o, _)| *o == Origin::Compiled)
        .count();
    assert_eq!(compiled, 1);
    assert!(origins.iter().all(|(_, p)| *p == ptx(4)));
    assert_eq!(
        names(dir.path()),
        vec![format!("{key}.lock"), format!("{key}.ptx")]
    );
}

/// Set in a child process of [`processes_building_one_key_build_it_once`]: the cache directory.
const CHILD_DIR: &str = "FATHOM_JIT_TEST_CHILD_DIR";

/// The child's half of [`processes_building_one_key_build_it_once`]; does nothing in a normal
/// test run.
#[test]
fn child_process_builds_the_shared_key() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let dir = PathBuf::from(dir);
    // Start together: wait for the parent's go file.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("go").exists() {
        assert!(Instant::now() < deadline, "no go file");
        std::thread::sleep(Duration::from_millis(1));
    }
    let cache = JitCache::new(dir.join("cache"));
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    let fetched = cache
        .get_or_build_with(&key, "k", || {
            std::thread::sleep(Duration::from_millis(300));
            Ok(ptx(8))
        })
        .unwrap();
    assert_eq!(fetched.ptx, ptx(8));
    println!("jit-child origin={:?}", fetched.origin);
}

#[test]
fn processes_building_one_key_build_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "child_process_builds_the_shared_key",
                    "--exact",
                    "--nocapture",
                ])
                .env(CHILD_DIR, dir.path())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    fs::write(dir.path().join("go"), b"").unwrap();
    let mut origins = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child failed:\n{stdout}");
        let origin = stdout
            .lines()
            .find_map(|l| l.strip_prefix("jit-child origin="))
            .unwrap_or_else(|| panic!("the child ran no build:\n{stdout}"))
            .to_string();
        origins.push(origin);
    }
    let compiled = origins.iter().filter(|o| *o == "Compiled").count();
    assert_eq!(compiled, 1, "origins: {origins:?}");
    assert_eq!(
        origins.iter().filter(|o| *o == "CacheHit").count(),
        origins.len() - 1
    );
    let cache = JitCache::new(dir.path().join("cache"));
    let key = key_of(SOURCE, VERSION, ARCH, &[] as &[&str]);
    assert!(matches!(cache.lookup(&key, "k").unwrap(), Lookup::Valid(e) if e.ptx == ptx(8)));
    assert_eq!(temp_files(&dir.path().join("cache")), Vec::<String>::new());
}

/// Needs NVRTC (scripts/test.sh provides it): real kernels through the cache, no GPU.
#[test]
fn real_kernels_compile_into_the_cache_as_build_kernel_would() {
    let version = nvrtc::version().expect("NVRTC is installed (run scripts/test.sh)");
    let dir = tempfile::tempdir().unwrap();
    let cache = JitCache::new(dir.path().to_path_buf());
    let shape = preset("qwen3-8b").unwrap();
    let specs = kernels_for(&shape, &KernelSetOptions::default());
    // Two small kernels of different families.
    let picked: Vec<KernelSpec> = ["oracle", "fetch"]
        .iter()
        .map(|f| *specs.iter().find(|s| s.family() == *f).unwrap())
        .collect();
    for spec in &picked {
        let (ptx, origin) = cache.get_or_build(spec, ARCH, version).unwrap();
        assert_eq!(origin, Origin::Compiled);
        assert_eq!(ptx, build_kernel(spec, ARCH).unwrap().ptx);
        assert_eq!(
            cache.get_or_build(spec, ARCH, version).unwrap(),
            (ptx.clone(), Origin::CacheHit)
        );
        // A new cache over the same directory (another process, later) hits too.
        let again = JitCache::new(dir.path().to_path_buf());
        assert_eq!(
            again.get_or_build(spec, ARCH, version).unwrap(),
            (ptx.clone(), Origin::CacheHit)
        );
    }
    // Another architecture is another key.
    let (ptx80, origin) = cache.get_or_build(&picked[0], "sm_80", version).unwrap();
    assert_eq!(origin, Origin::Compiled);
    assert!(ptx80.contains(".target sm_80"));

    // A key made for another NVRTC is refused rather than filled with this one's PTX.
    let err = cache
        .get_or_build(&picked[0], ARCH, (version.0 + 1, 0))
        .unwrap_err();
    assert!(
        matches!(err, JitError::NvrtcVersionMismatch { loaded, .. } if loaded == version),
        "{err}"
    );
    let ptx_files = names(dir.path())
        .into_iter()
        .filter(|n| n.ends_with(".ptx"))
        .count();
    assert_eq!(ptx_files, 3);
}

#[test]
fn a_compile_error_names_the_kernel_and_carries_the_log() {
    let version = nvrtc::version().expect("NVRTC is installed (run scripts/test.sh)");
    let spec = kernels_for(&preset("qwen3-8b").unwrap(), &KernelSetOptions::default())[0];
    let mut prepared = prepare(&spec, ARCH, version).unwrap();
    prepared.source.push_str("\nthis is not C++;\n");
    let err = runtime::jit::compile(&prepared).unwrap_err();
    match &err {
        JitError::Compile { kernel, source } => {
            assert_eq!(kernel, &spec.kernel_name());
            let text = source.to_string();
            assert!(
                text.contains(&format!("{}.cu", spec.kernel_name())),
                "{text}"
            );
        }
        other => panic!("expected a compile error, got {other}"),
    }
}

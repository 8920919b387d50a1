//! [`JitCache`]: PTX on disk, one file per key, safe for several threads and processes.
//!
//! A lookup reads `<dir>/<key>.ptx` without a lock: entries only ever appear by an atomic
//! rename, so a file there is complete or was damaged afterwards, never half-written. A miss
//! (or a damaged entry) takes an exclusive lock on `<dir>/<key>.lock`, looks again (another
//! process may have built it meanwhile), builds, writes a temporary file in the same directory,
//! syncs it and renames it into place, then unlocks. Lock files stay: removing one while another
//! process waits on it would let a third lock a new file of the same name.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use codegen::nvrtc;
use codegen::spec::KernelSpec;
use serde::Serialize;

use super::entry::{CacheEntry, CorruptReason};
use super::error::JitError;
use super::key::{prepare, Prepared};

/// Where a kernel's PTX came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A valid entry of the disk cache.
    CacheHit,
    /// NVRTC, in this call.
    Compiled,
}

/// What a lookup of one key found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No file for the key.
    Missing,
    /// A verified entry.
    Valid(CacheEntry),
    /// A file that is not a valid entry for the key, and why.
    Corrupt(CorruptReason),
}

/// The PTX of one key and how it was had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The PTX text.
    pub ptx: String,
    /// From the cache or compiled now.
    pub origin: Origin,
    /// When a damaged entry was found, deleted and rebuilt: why it was rejected.
    pub rebuilt: Option<CorruptReason>,
    /// Whether the PTX is in the cache now (false when the cache directory is not writable).
    pub stored: bool,
}

/// Counts of what a [`JitCache`] did, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Lookups answered by a valid entry.
    pub hits: u64,
    /// Builds (compilations), stored or not.
    pub compiled: u64,
    /// Damaged entries found, deleted and rebuilt.
    pub corrupt_rebuilt: u64,
    /// Builds that could not be stored (the directory is not writable).
    pub uncached: u64,
}

/// The kernel cache directory and its counters. Share one between threads by reference.
#[derive(Debug)]
pub struct JitCache {
    dir: PathBuf,
    warned: AtomicBool,
    hits: AtomicU64,
    compiled: AtomicU64,
    corrupt_rebuilt: AtomicU64,
    uncached: AtomicU64,
}

/// The environment variable that overrides [`JitCache::default_dir`].
pub const KERNEL_CACHE_VAR: &str = "FATHOM_KERNEL_CACHE";

impl JitCache {
    /// A cache in `dir`, created on the first store.
    pub fn new(dir: PathBuf) -> JitCache {
        JitCache {
            dir,
            warned: AtomicBool::new(false),
            hits: AtomicU64::new(0),
            compiled: AtomicU64::new(0),
            corrupt_rebuilt: AtomicU64::new(0),
            uncached: AtomicU64::new(0),
        }
    }

    /// `$FATHOM_KERNEL_CACHE` when set, else `kernels/` in fathom's cache directory
    /// (`codegen::nvrtc::cache_dir()`).
    pub fn default_dir() -> PathBuf {
        Self::default_dir_from(
            std::env::var_os(KERNEL_CACHE_VAR).as_deref(),
            &nvrtc::cache_dir(),
        )
    }

    /// The rule of [`JitCache::default_dir`] on a given `FATHOM_KERNEL_CACHE` value and cache
    /// directory; an empty value counts as unset.
    pub fn default_dir_from(kernel_cache: Option<&OsStr>, cache_dir: &Path) -> PathBuf {
        match kernel_cache.filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => cache_dir.join("kernels"),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `key`'s entry.
    pub fn entry_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.ptx"))
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.lock"))
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            compiled: self.compiled.load(Ordering::Relaxed),
            corrupt_rebuilt: self.corrupt_rebuilt.load(Ordering::Relaxed),
            uncached: self.uncached.load(Ordering::Relaxed),
        }
    }

    /// Reads and verifies `key`'s entry for kernel `kernel`. Takes no lock and changes nothing.
    pub fn lookup(&self, key: &str, kernel: &str) -> Result<Lookup, JitError> {
        let path = self.entry_path(key);
        match fs::read(&path) {
            Ok(bytes) => Ok(match CacheEntry::decode(&bytes, key, kernel) {
                Ok(entry) => Lookup::Valid(entry),
                Err(reason) => Lookup::Corrupt(reason),
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Lookup::Missing),
            Err(source) => Err(JitError::Io {
                action: "reading",
                path,
                source,
            }),
        }
    }

    /// Writes `entry` atomically: into a temporary file of a name no other writer uses (pid,
    /// counter, random), synced, then renamed over `<key>.ptx`. On failure the temporary file
    /// is removed and the old entry, if any, is untouched.
    pub fn store(&self, entry: &CacheEntry) -> io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let temp = self.dir.join(format!(
            ".{}.{}.{}.{:016x}.tmp",
            entry.key,
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temp)?;
            file.write_all(&entry.encode())?;
            file.sync_all()?;
            drop(file);
            fs::rename(&temp, self.entry_path(&entry.key))
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written?;
        // The rename survives a crash only once the directory is synced; without that the worst
        // case is a missing entry, rebuilt on the next run, so a failure here is not reported.
        if let Ok(dir) = File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    /// The PTX of `key` (kernel `kernel`): a valid entry, or else `build()`'s output, stored.
    ///
    /// A damaged entry is deleted and rebuilt ([`Fetched::rebuilt`] says why). Concurrent
    /// callers for one key, in this process or others, build it once: the second waits for the
    /// lock and then finds the entry. When the directory cannot be created or locked, or the
    /// entry cannot be written, the PTX is built and returned uncached, with a warning on stderr
    /// the first time.
    pub fn get_or_build_with(
        &self,
        key: &str,
        kernel: &str,
        build: impl FnOnce() -> Result<String, JitError>,
    ) -> Result<Fetched, JitError> {
        // A read error here (an unreadable or absent directory) is settled under the lock below,
        // or by the fallback when there can be no lock.
        if let Ok(Lookup::Valid(entry)) = self.lookup(key, kernel) {
            return Ok(self.hit(entry));
        }
        if let Err(e) = fs::create_dir_all(&self.dir) {
            self.warn_uncached("cannot create", &self.dir, &e);
            return self.build_uncached(build);
        }
        let lock_path = self.lock_path(key);
        let lock = match lock_exclusive(&lock_path) {
            Ok(lock) => lock,
            Err(e) => {
                self.warn_uncached("cannot lock", &lock_path, &e);
                return self.build_uncached(build);
            }
        };
        let rebuilt = match self.lookup(key, kernel)? {
            Lookup::Valid(entry) => return Ok(self.hit(entry)),
            Lookup::Missing => None,
            Lookup::Corrupt(reason) => {
                // Deleted before building so that a failed build leaves no bad entry behind; if
                // the delete fails the rename below replaces the file anyway.
                let _ = fs::remove_file(self.entry_path(key));
                self.corrupt_rebuilt.fetch_add(1, Ordering::Relaxed);
                Some(reason)
            }
        };
        let ptx = build()?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        let stored = match self.store(&CacheEntry::new(key, kernel, ptx.as_str())) {
            Ok(()) => true,
            Err(e) => {
                self.warn_uncached("cannot write into", &self.dir, &e);
                self.uncached.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        drop(lock);
        Ok(Fetched {
            ptx,
            origin: Origin::Compiled,
            rebuilt,
            stored,
        })
    }

    /// The PTX of a prepared kernel: cached, or compiled by NVRTC and stored.
    pub fn fetch(&self, prepared: &Prepared) -> Result<Fetched, JitError> {
        self.get_or_build_with(&prepared.key, &prepared.name, || compile(prepared))
    }

    /// Renders `spec`, then returns its PTX for `arch` from the cache or compiled (and stored),
    /// without a GPU. `nvrtc_version` must be the loaded NVRTC's (`codegen::nvrtc::version()`):
    /// it is part of the key, and a compile with another one loaded is refused.
    pub fn get_or_build(
        &self,
        spec: &KernelSpec,
        arch: &str,
        nvrtc_version: (i32, i32),
    ) -> Result<(String, Origin), JitError> {
        let fetched = self.fetch(&prepare(spec, arch, nvrtc_version)?)?;
        Ok((fetched.ptx, fetched.origin))
    }

    fn hit(&self, entry: CacheEntry) -> Fetched {
        self.hits.fetch_add(1, Ordering::Relaxed);
        Fetched {
            ptx: entry.ptx,
            origin: Origin::CacheHit,
            rebuilt: None,
            stored: true,
        }
    }

    fn build_uncached(
        &self,
        build: impl FnOnce() -> Result<String, JitError>,
    ) -> Result<Fetched, JitError> {
        let ptx = build()?;
        self.compiled.fetch_add(1, Ordering::Relaxed);
        self.uncached.fetch_add(1, Ordering::Relaxed);
        Ok(Fetched {
            ptx,
            origin: Origin::Compiled,
            rebuilt: None,
            stored: false,
        })
    }

    fn warn_uncached(&self, what: &str, path: &Path, error: &io::Error) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "warning: fathom kernel cache: {what} {}: {error}; compiling kernels without \
                 caching them (set {KERNEL_CACHE_VAR} to a writable directory)",
                path.display()
            );
        }
    }
}

/// Opens (creating) `path` and takes an exclusive lock on it, waiting for other holders. The
/// lock is released when the file is dropped, or when the process dies.
fn lock_exclusive(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    file.lock()?;
    Ok(file)
}

/// Compiles a prepared kernel with NVRTC, as `codegen::emit::build_kernel` does (same file
/// name, architecture and options, so the same PTX).
pub fn compile(prepared: &Prepared) -> Result<String, JitError> {
    with_nvrtc(prepared, nvrtc::compile).map(|compiled| compiled.ptx)
}

/// The file name NVRTC is given: `<kernel>.cu`, or, when the kernel is compiled with
/// `-lineinfo` (`FATHOM_JIT_LINEINFO=1`), the absolute path of a copy of its source under
/// `$TMPDIR/fathom-sources/`, so that a profiler finds the lines the machine code points at (a
/// copy that cannot be written leaves the plain name: the kernel is the same either way).
fn source_file_name(prepared: &Prepared) -> String {
    let plain = format!("{}.cu", prepared.name);
    if !prepared.options.iter().any(|o| o == "-lineinfo") {
        return plain;
    }
    let dir = std::env::temp_dir().join("fathom-sources");
    let path = dir.join(&plain);
    match fs::create_dir_all(&dir).and_then(|()| fs::write(&path, &prepared.source)) {
        Ok(()) => path.to_string_lossy().into_owned(),
        Err(_) => plain,
    }
}

/// `build` (an NVRTC compile) of a prepared kernel's source, file name, architecture and
/// options, refused when the loaded NVRTC is not the one the kernel was keyed with.
pub(crate) fn with_nvrtc<T>(
    prepared: &Prepared,
    build: impl FnOnce(&str, &str, &str, &[String]) -> Result<T, nvrtc::NvrtcError>,
) -> Result<T, JitError> {
    let loaded = nvrtc::version().map_err(JitError::Nvrtc)?;
    if loaded != prepared.nvrtc_version {
        return Err(JitError::NvrtcVersionMismatch {
            kernel: prepared.name.clone(),
            keyed: prepared.nvrtc_version,
            loaded,
        });
    }
    let file_name = source_file_name(prepared);
    build(
        &prepared.source,
        &file_name,
        &prepared.arch,
        &prepared.options,
    )
    .map_err(|source| JitError::Compile {
        kernel: prepared.name.clone(),
        source,
    })
}

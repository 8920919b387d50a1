//! [`LoadReport`]: where each kernel of a set came from and what loading it cost.

use serde::Serialize;

use super::cache::Origin;
use super::loader::LoadedKernel;

/// One kernel of a [`LoadReport`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelLoad {
    /// The kernel's name.
    pub name: String,
    /// Disk cache or NVRTC.
    pub from: Origin,
    /// Whether a damaged cache entry was replaced.
    pub rebuilt: bool,
    /// Whether the kernel was already in the JIT's memory (its times are then those of its
    /// first load, and count in no total).
    pub reused: bool,
    /// Milliseconds to have the PTX (render, hash, read the cache or compile).
    pub compile_ms: f64,
    /// Milliseconds to load the module and resolve its entry points.
    pub load_ms: f64,
}

impl KernelLoad {
    pub(crate) fn of(kernel: &LoadedKernel, reused: bool) -> KernelLoad {
        KernelLoad {
            name: kernel.name.clone(),
            from: kernel.from,
            rebuilt: kernel.rebuilt.is_some(),
            reused,
            compile_ms: kernel.compile_ms,
            load_ms: kernel.load_ms,
        }
    }
}

/// The load of a kernel set.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadReport {
    /// Every kernel, in the order asked.
    pub kernels: Vec<KernelLoad>,
    /// Worker threads used.
    pub threads: usize,
    /// Wall-clock milliseconds of the whole set (less than the sums when threads overlap).
    pub wall_ms: f64,
    /// Sum of `compile_ms` over kernels loaded in this call.
    pub compile_ms: f64,
    /// Sum of `load_ms` over kernels loaded in this call.
    pub load_ms: f64,
    /// Kernels loaded in this call whose PTX came from the disk cache.
    pub cache_hits: usize,
    /// Kernels loaded in this call that NVRTC compiled.
    pub compiled: usize,
}

impl LoadReport {
    pub(crate) fn new(kernels: Vec<KernelLoad>, threads: usize, wall_ms: f64) -> LoadReport {
        let fresh = || kernels.iter().filter(|k| !k.reused);
        LoadReport {
            threads,
            wall_ms,
            compile_ms: fresh().map(|k| k.compile_ms).sum(),
            load_ms: fresh().map(|k| k.load_ms).sum(),
            cache_hits: fresh().filter(|k| k.from == Origin::CacheHit).count(),
            compiled: fresh().filter(|k| k.from == Origin::Compiled).count(),
            kernels,
        }
    }

    /// Whether every kernel of the set came from the disk cache or memory.
    pub fn all_cached(&self) -> bool {
        self.compiled == 0
    }

    /// A fixed-width table, one kernel a line, then the totals.
    pub fn table(&self) -> String {
        let width = self
            .kernels
            .iter()
            .map(|k| k.name.len())
            .max()
            .unwrap_or(0)
            .max("kernel".len());
        let mut out = format!(
            "{:<width$}  {:<9}  {:>11}  {:>9}\n",
            "kernel", "from", "compile ms", "load ms"
        );
        for k in &self.kernels {
            let from = match (k.reused, k.from) {
                (true, _) => "memory",
                (false, Origin::CacheHit) => "cache",
                (false, Origin::Compiled) if k.rebuilt => "rebuilt",
                (false, Origin::Compiled) => "compiled",
            };
            out += &format!(
                "{:<width$}  {:<9}  {:>11.1}  {:>9.1}\n",
                k.name, from, k.compile_ms, k.load_ms
            );
        }
        out += &format!(
            "{:<width$}  {:<9}  {:>11.1}  {:>9.1}\n",
            "sum",
            format!("{}+{}", self.cache_hits, self.compiled),
            self.compile_ms,
            self.load_ms
        );
        out += &format!(
            "wall {:.1} ms on {} threads ({} from cache, {} compiled)\n",
            self.wall_ms, self.threads, self.cache_hits, self.compiled
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(name: &str, from: Origin, reused: bool, compile_ms: f64) -> KernelLoad {
        KernelLoad {
            name: name.into(),
            from,
            rebuilt: false,
            reused,
            compile_ms,
            load_ms: compile_ms / 10.0,
        }
    }

    #[test]
    fn totals_count_only_kernels_loaded_in_the_call() {
        let report = LoadReport::new(
            vec![
                load("a", Origin::Compiled, false, 100.0),
                load("b", Origin::CacheHit, false, 2.0),
                load("c", Origin::Compiled, true, 50.0),
            ],
            4,
            90.0,
        );
        assert_eq!((report.compiled, report.cache_hits), (1, 1));
        assert_eq!(report.compile_ms, 102.0);
        assert!((report.load_ms - 10.2).abs() < 1e-9);
        assert!(!report.all_cached());
        let table = report.table();
        for row in ["a ", "b ", "c ", "compiled", "cache", "memory", "sum"] {
            assert!(table.contains(row), "{row} missing from\n{table}");
        }
    }
}

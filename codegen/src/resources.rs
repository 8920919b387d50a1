//! What each entry point of a kernel uses on the GPU (registers, shared memory, stack, spills),
//! as ptxas reports it when NVRTC compiles the source for a real architecture with
//! `--ptxas-options=-v`. It needs no GPU, so `emit` records it in the manifest and says which
//! entries spill: a tile that spills registers to local memory is usually a slow one, and the
//! only other way to see it is to time it.

use crate::nvrtc::{self, NvrtcError};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One entry point's resources, as ptxas reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryResources {
    /// The entry point.
    pub entry: String,
    /// Registers per thread.
    pub registers: u32,
    /// Static shared memory per block, bytes.
    pub shared_bytes: u64,
    /// Stack frame per thread, bytes.
    pub stack_bytes: u64,
    /// Registers spilled to local memory per thread: bytes stored.
    pub spill_store_bytes: u64,
    /// Registers spilled to local memory per thread: bytes loaded back.
    pub spill_load_bytes: u64,
}

impl EntryResources {
    /// Whether ptxas spilled registers of this entry to local memory.
    pub fn spills(&self) -> bool {
        self.spill_store_bytes > 0 || self.spill_load_bytes > 0
    }
}

/// Why the resources could not be read.
#[derive(Debug, Error)]
pub enum ResourcesError {
    #[error(
        "{arch} is a virtual architecture: ptxas runs, and reports resources, only for a real \
         one (sm_XY, e.g. sm_90)"
    )]
    VirtualArch { arch: String },
    #[error(transparent)]
    Compile(#[from] NvrtcError),
    #[error("ptxas reported no {what} for entry {entry}; its log:\n{log}")]
    Missing {
        entry: String,
        what: &'static str,
        log: String,
    },
}

/// Compiles `source` for `arch` with `options` and ptxas's report, and returns the resources of
/// `entries`, in their order.
pub fn measure(
    source: &str,
    file_name: &str,
    arch: &str,
    options: &[String],
    entries: &[String],
) -> Result<Vec<EntryResources>, ResourcesError> {
    if !arch.starts_with("sm_") {
        return Err(ResourcesError::VirtualArch {
            arch: arch.to_string(),
        });
    }
    let mut all = options.to_vec();
    all.push("--ptxas-options=-v".to_string());
    let compiled = nvrtc::compile(source, file_name, arch, &all)?;
    entries
        .iter()
        .map(|entry| parse_entry(&compiled.log, entry))
        .collect()
}

/// The resources of `entry` in a ptxas log: its block runs from `Compiling entry function
/// '<entry>'` to the next `Compiling` line and holds `<n> bytes stack frame, <n> bytes spill
/// stores, <n> bytes spill loads` and `Used <n> registers[, ...][, <n> bytes smem][, ...]`.
pub fn parse_entry(log: &str, entry: &str) -> Result<EntryResources, ResourcesError> {
    let missing = |what| ResourcesError::Missing {
        entry: entry.to_string(),
        what,
        log: log.to_string(),
    };
    let header = format!("Compiling entry function '{entry}'");
    let start = log.find(&header).ok_or_else(|| missing("block"))?;
    let rest = &log[start + header.len()..];
    let block = &rest[..rest.find("Compiling entry function").unwrap_or(rest.len())];

    let registers = number_before(block, " registers").ok_or_else(|| missing("registers"))?;
    let stack_bytes =
        number_before(block, " bytes stack frame").ok_or_else(|| missing("stack frame"))?;
    let spill_store_bytes =
        number_before(block, " bytes spill stores").ok_or_else(|| missing("spill stores"))?;
    let spill_load_bytes =
        number_before(block, " bytes spill loads").ok_or_else(|| missing("spill loads"))?;
    Ok(EntryResources {
        entry: entry.to_string(),
        registers: u32::try_from(registers).map_err(|_| missing("registers"))?,
        // ptxas leaves the shared-memory clause out when the entry uses none.
        shared_bytes: number_before(block, " bytes smem").unwrap_or(0),
        stack_bytes,
        spill_store_bytes,
        spill_load_bytes,
    })
}

/// The decimal number that ends just before the first `suffix` in `text`.
fn number_before(text: &str, suffix: &str) -> Option<u64> {
    let end = text.find(suffix)?;
    let digits = text[..end]
        .bytes()
        .rev()
        .take_while(u8::is_ascii_digit)
        .count();
    text[end - digits..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
ptxas info    : 48 bytes gmem
ptxas info    : Compiling entry function 'k_write' for 'sm_90'
ptxas info    : Function properties for k_write
ptxas         .     16 bytes stack frame, 12 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 36 bytes smem
ptxas info    : Compile time = 71.956 ms
ptxas info    : Compiling entry function 'k_pick' for 'sm_90'
ptxas info    : Function properties for k_pick
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 28 registers, used 1 barriers
ptxas info    : Compile time = 10.097 ms
";

    #[test]
    fn each_entry_gets_the_figures_of_its_own_block() {
        let write = parse_entry(LOG, "k_write").unwrap();
        assert_eq!(
            write,
            EntryResources {
                entry: "k_write".into(),
                registers: 64,
                shared_bytes: 36,
                stack_bytes: 16,
                spill_store_bytes: 12,
                spill_load_bytes: 8,
            }
        );
        assert!(write.spills());
        let pick = parse_entry(LOG, "k_pick").unwrap();
        assert_eq!((pick.registers, pick.shared_bytes), (28, 0));
        assert!(!pick.spills());
    }

    #[test]
    fn an_entry_ptxas_did_not_report_is_an_error_that_shows_the_log() {
        let e = parse_entry(LOG, "k_union").unwrap_err();
        assert!(matches!(e, ResourcesError::Missing { what: "block", .. }));
        assert!(e.to_string().contains("k_union") && e.to_string().contains("k_pick"));
        let cut = LOG.replace("Used 28 registers", "Used registers");
        assert!(matches!(
            parse_entry(&cut, "k_pick").unwrap_err(),
            ResourcesError::Missing {
                what: "registers",
                ..
            }
        ));
    }

    #[test]
    fn a_virtual_architecture_is_refused_before_compiling() {
        let e = measure("", "x.cu", "compute_90", &[], &[]).unwrap_err();
        assert!(matches!(e, ResourcesError::VirtualArch { .. }));
        assert!(e.to_string().contains("sm_90"));
    }
}

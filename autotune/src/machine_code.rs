//! The kernels a record's winners run, as the GPU runs them (`autotune --report RECORD
//! --machine-code DIR`, no GPU): every winning tile's spec, as the tuner built it for its case
//! ([`tile_spec`]), compiled to machine code with ptxas's report of each entry point
//! (`codegen::machine_code`). It shows which winners keep data in local memory, which only a
//! timing would otherwise hint at.

use std::collections::BTreeMap;
use std::path::Path;

use codegen::machine_code::{self, MachineCode};
use codegen::KernelSpec;
use runtime::tuning::{TuningRecord, Variant};

use crate::candidates::{tile_spec, Case};

/// A winning kernel and the record entries (key and winner's name) it won.
pub struct Winning {
    pub spec: KernelSpec,
    pub won: Vec<String>,
}

/// The distinct kernel specs of `record`'s winners, by kernel name, with the entries each won.
/// Transfer winners are not kernels of their own and are left out.
pub fn winning_specs(record: &TuningRecord) -> Result<Vec<Winning>, String> {
    let mut by_name: BTreeMap<String, Winning> = BTreeMap::new();
    for entry in &record.entries {
        let Some(winner) = &entry.winner else {
            continue;
        };
        if !matches!(winner.variant, Variant::Tile(_)) {
            continue;
        }
        let case = Case::of_entry(entry, 1, Default::default());
        let spec = tile_spec(&case, &winner.variant)
            .map_err(|e| format!("{}: winner {}: {e}", entry.key, winner.name))?;
        by_name
            .entry(spec.kernel_name())
            .or_insert_with(|| Winning {
                spec,
                won: Vec::new(),
            })
            .won
            .push(format!("{} ({})", entry.key, winner.name));
    }
    Ok(by_name.into_values().collect())
}

/// Compiles every winner of `record` for `arch`, writes them into `out`
/// (`codegen::machine_code::write`) and returns one line per entry point, those that keep data
/// in local memory first.
pub fn report(record: &TuningRecord, arch: &str, out: &Path) -> Result<Vec<String>, String> {
    let winning = winning_specs(record)?;
    let mut kernels: Vec<MachineCode> = Vec::with_capacity(winning.len());
    for (i, w) in winning.iter().enumerate() {
        eprintln!(
            "autotune: machine code [{}/{}] {}",
            i + 1,
            winning.len(),
            w.spec.kernel_name()
        );
        kernels.push(machine_code::build(&w.spec, arch, false).map_err(|e| e.to_string())?);
    }
    machine_code::write(out, &kernels).map_err(|e| e.to_string())?;
    let mut lines: Vec<(bool, String)> = Vec::new();
    for (k, w) in kernels.iter().zip(&winning) {
        for r in &k.resources {
            let local = r.stack_bytes > 0 || r.spills();
            lines.push((
                !local,
                format!("{} | won {}", machine_code::describe(r), w.won.join(", ")),
            ));
        }
    }
    lines.sort();
    Ok(lines.into_iter().map(|(_, line)| line).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::tuning::{Subject, TunedFamily};

    /// Every tile winner of the committed H200 record has its spec (transfers have none), each
    /// kernel once with every entry it won, and the 1M HBM scan winners are the tensor-core
    /// tiles the record holds.
    #[test]
    fn the_h200_record_winners_map_to_their_specs() {
        let record = TuningRecord::read(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../runtime/records/nvidia-h200.json"
        )))
        .unwrap();
        let winning = winning_specs(&record).unwrap();
        // A virtual architecture has no machine code: refused before anything is written.
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("mc");
        let e = report(&record, "compute_90", &out).unwrap_err();
        assert!(e.contains("virtual architecture"), "{e}");
        assert!(!out.exists());
        let tiles = record
            .entries
            .iter()
            .filter(|e| {
                e.winner
                    .as_ref()
                    .is_some_and(|w| matches!(w.variant, Variant::Tile(_)))
            })
            .count();
        assert_eq!(winning.iter().map(|w| w.won.len()).sum::<usize>(), tiles);
        assert!(tiles > 50 && winning.len() < tiles, "{tiles} tile winners");
        let mut names: Vec<String> = winning.iter().map(|w| w.spec.kernel_name()).collect();
        names.dedup();
        assert_eq!(names.len(), winning.len());
        assert!(winning.iter().all(|w| w.spec.validate().is_ok()));
        for entry in &record.entries {
            let key = entry.key;
            if key.subject == Subject::Kernel(TunedFamily::Scan)
                && key.context_bucket == 20
                && key.placement == codegen::spec::Placement::Hbm
            {
                let w = winning
                    .iter()
                    .find(|w| w.won.iter().any(|s| s.starts_with(&key.to_string())))
                    .unwrap();
                assert!(w.spec.kernel_name().ends_with("_tc"), "{key}");
            }
        }
    }
}

//! The `mapped_read` family: the probe that measures how fast a kernel reads mapped host memory
//! (SPEC §9, the ceiling of the host placement's scans; `runtime::ceilings`). It is a template
//! family like the others so that it is compiled and cached by the JIT, never by a side road.

use super::{checks, Family, SpecError};
use serde::{Deserialize, Serialize};

/// Spec of the mapped-read probe.
///
/// Launch ABI of `extern "C" __global__ void <kernel_name>(...)`, parameters in order:
///
/// 1. `const uint4* src`: the buffer to read (16-byte vectors), mapped host memory.
/// 2. `unsigned long long vectors`: how many 16-byte vectors it holds.
/// 3. `uint4* sink`: one vector, written only when the xor of everything read is a fixed
///    constant (never, in practice): it keeps the loads alive.
///
/// Any grid and a block of `threads`: the threads stride over the buffer, `loads_in_flight`
/// loads per thread per step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MappedReadSpec {
    /// 16-byte loads each thread has in flight: 1 to 16.
    pub loads_in_flight: u32,
    /// Threads per block: a multiple of 32, at most 1024.
    pub threads: u32,
}

impl Default for MappedReadSpec {
    /// The probe `runtime::ceilings` has always measured with: four loads in flight, 256
    /// threads.
    fn default() -> Self {
        MappedReadSpec {
            loads_in_flight: 4,
            threads: 256,
        }
    }
}

impl Family for MappedReadSpec {
    const FAMILY: &'static str = "mapped_read";

    fn validate(&self) -> Result<(), SpecError> {
        if !(1..=16).contains(&self.loads_in_flight) {
            return Err(SpecError::new(
                Self::FAMILY,
                "loads_in_flight",
                self.loads_in_flight,
                "1 to 16",
            ));
        }
        checks::threads(Self::FAMILY, self.threads)
    }

    fn kernel_name(&self) -> String {
        format!(
            "fathom_mapped_read_l{}_t{}",
            self.loads_in_flight, self.threads
        )
    }

    fn context(&self) -> tera::Context {
        let mut c = tera::Context::new();
        c.insert("loads_in_flight", &self.loads_in_flight);
        c.insert("threads", &self.threads);
        c
    }
}

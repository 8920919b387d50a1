//! The presets' kernel sets, rendered at build time by `fathom_macros::kernels!` and embedded in
//! the runtime: the JIT ([`crate::jit::Jit`]) takes a kernel's source from here (or from the
//! sources a user's crate embeds the same way, [`crate::jit::Jit::with_sources`]) and renders
//! only a spec found in none of them (a new `config.json`, a tuning candidate). Either way NVRTC
//! compiles it on first use for the device's own architecture, through the content-keyed
//! cache, so an embedded kernel and a rendered one of the same spec are the same PTX.

fathom_macros::kernels! {
    /// Every kernel of every preset's default set (`codegen::kernels_for`), with typed
    /// launchers.
    #[fathom(runtime = crate)]
    pub mod presets {
        preset("qwen3-8b");
        preset("qwen3-4b");
        preset("qwen2.5-7b");
        preset("qwen2.5-7b-instruct-1m");
        preset("llama-3.1-8b");
        preset("llama-3.1-70b");
    }
}

/// Every embedded `(kernel name, CUDA source)`.
pub const SOURCES: &[(&str, &str)] = presets::SOURCES;

/// The source of the kernel called `name` among `sets`, first match first: a kernel's name
/// carries every parameter of its spec, so it is the spec's identity.
pub fn find(sets: &[&'static [(&'static str, &'static str)]], name: &str) -> Option<&'static str> {
    sets.iter()
        .flat_map(|set| set.iter())
        .find(|(kernel, _)| *kernel == name)
        .map(|(_, source)| *source)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use codegen::model::presets;
    use codegen::{kernels_for, KernelSetOptions};

    use super::*;

    #[test]
    fn every_embedded_source_is_the_run_time_rendering() {
        let mut embedded = BTreeSet::new();
        for preset in presets() {
            for spec in kernels_for(&preset.shape(), &KernelSetOptions::default()) {
                let name = spec.kernel_name();
                let source = find(&[SOURCES], &name)
                    .unwrap_or_else(|| panic!("{}: {name} is not embedded", preset.name));
                assert_eq!(source, spec.render().unwrap(), "{name}");
                embedded.insert(name);
            }
        }
        // Nothing else is embedded, and no kernel twice.
        let names: Vec<&str> = SOURCES.iter().map(|(name, _)| *name).collect();
        assert_eq!(names.len(), embedded.len(), "a kernel embedded twice");
        assert!(names.iter().all(|n| embedded.contains(*n)));
    }

    #[test]
    fn a_kernel_is_found_in_the_first_set_that_has_it() {
        const OWN: &[(&str, &str)] = &[("fathom_own", "// own"), ("fathom_twice", "// own")];
        const OTHER: &[(&str, &str)] = &[("fathom_twice", "// other")];
        assert_eq!(find(&[OWN, OTHER], "fathom_twice"), Some("// own"));
        assert_eq!(find(&[OTHER, OWN], "fathom_twice"), Some("// other"));
        assert_eq!(find(&[OWN], "fathom_absent"), None);
        assert_eq!(find(&[], "fathom_own"), None);
    }
}

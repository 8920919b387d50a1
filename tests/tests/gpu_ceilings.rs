//! The ceilings (SPEC §9) measured with the mapped-read probe that the JIT compiles from its
//! template (`codegen::spec::MappedReadSpec`), into a temporary cache.

use codegen::spec::{Family, MappedReadSpec};
use fathom_tests::gpu_test;
use runtime::ceilings;
use runtime::jit::{Jit, JitCache, Origin};

gpu_test!(
    the_probe_compiles_through_the_jit_and_every_rate_is_physical,
    |t| {
        let dir = tempfile::tempdir().unwrap();
        let jit = Jit::new(t.gpu.clone(), JitCache::new(dir.path().to_path_buf())).unwrap();
        // 64 MiB plus a partial stride: the probe's tail loop runs too.
        let bytes = (64 << 20) + 16 * 1_000;
        let c = ceilings::measure(&jit, bytes, 3).unwrap();
        assert_eq!(c.bytes, bytes / 8 * 8);
        for (what, rate) in [
            ("pinned copy", c.pinned_copy_gbps),
            ("mapped read", c.mapped_read_gbps),
            ("HBM copy", c.hbm_copy_gbps),
        ] {
            // PCIe/NVLink-C2C host links and HBM3e: well above 1 GB/s, well below 20 TB/s.
            assert!(
                rate.is_finite() && rate > 1.0 && rate < 20_000.0,
                "{what}: {rate} GB/s"
            );
        }
        // The probe went through the JIT's cache: a second load of its spec is a cache hit.
        let spec = MappedReadSpec::default();
        let again = Jit::new(t.gpu, JitCache::new(dir.path().to_path_buf())).unwrap();
        let kernel = again.kernel(&spec.into()).unwrap();
        assert_eq!(kernel.from, Origin::CacheHit, "{}", spec.kernel_name());
    }
);

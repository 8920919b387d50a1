//! `codegen machine-code` on the pinned NVRTC: the files it writes, what it reports, and what it
//! does with a file that is not a list of specs. The ParisKV rerank's `_score` is the case that
//! made the command: its table of levels sits in local memory unless `decode_table` moves it to
//! shared memory.

use std::path::Path;
use std::process::Command;

use codegen::resources::EntryResources;
use codegen::spec::pariskv::RerankSelect;
use codegen::spec::{Family, PariskvRerankSpec, Placement};
use codegen::KernelSpec;

fn rerank(decode_table: bool) -> PariskvRerankSpec {
    PariskvRerankSpec {
        head_dim: 128,
        group: 4,
        k_max: 2048,
        threads: 128,
        placement: Placement::Host,
        vector_loads: true,
        select: RerankSelect::Multiblock,
        decode_table,
    }
}

/// `codegen machine-code --specs SPECS --out OUT [EXTRA...]`.
fn machine_code_with(specs: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_codegen"))
        .arg("machine-code")
        .arg("--specs")
        .arg(specs)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn machine_code(specs: &Path, out: &Path) -> std::process::Output {
    machine_code_with(specs, out, &[])
}

#[derive(serde::Deserialize)]
struct Row {
    kernel: String,
    spec: KernelSpec,
    resources: Vec<EntryResources>,
}

#[test]
fn machine_code_writes_each_kernel_and_says_which_entries_use_local_memory() {
    let dir = tempfile::tempdir().unwrap();
    let specs: Vec<KernelSpec> = vec![rerank(false).into(), rerank(true).into()];
    let file = dir.path().join("specs.json");
    std::fs::write(&file, serde_json::to_string(&specs).unwrap()).unwrap();
    let out = dir.path().join("out");
    let o = machine_code(&file, &out);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for spec in &specs {
        let name = spec.kernel_name();
        let cu = std::fs::read_to_string(out.join(format!("{name}.cu"))).unwrap();
        assert_eq!(cu, codegen::render_any(spec).unwrap());
        let cubin = std::fs::read(out.join(format!("{name}.cubin"))).unwrap();
        assert_eq!(&cubin[..4], b"\x7fELF", "{name}: a CUBIN is an ELF image");
    }
    let rows: Vec<Row> =
        serde_json::from_str(&std::fs::read_to_string(out.join("resources.json")).unwrap())
            .unwrap();
    assert_eq!(rows.len(), 2);
    let score = |row: &Row| -> EntryResources {
        let KernelSpec::PariskvRerank(s) = row.spec else {
            panic!("{}", row.kernel)
        };
        assert_eq!(row.kernel, s.kernel_name());
        assert_eq!(row.resources.len(), row.spec.entry_points().len());
        row.resources
            .iter()
            .find(|r| r.entry == s.score_entry())
            .unwrap()
            .clone()
    };
    // Without the tables `_score`'s levels are a stack array; with them nothing is local.
    let (plain, tables) = (score(&rows[0]), score(&rows[1]));
    assert!(plain.stack_bytes >= 64, "{plain:?}");
    assert_eq!(
        (tables.stack_bytes, tables.spills()),
        (0, false),
        "{tables:?}"
    );
    assert!(stdout.contains(&format!("{}: ", plain.entry)) && stdout.contains("LOCAL MEMORY"));
    assert!(stdout.contains(&format!("{}: ", tables.entry)));
}

#[test]
fn a_file_that_is_not_a_list_of_specs_writes_nothing_and_says_what_a_spec_is() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for (text, says) in [
        (
            "[{\"family\": \"scan\", \"head_dim\": 128}]",
            "missing field `group`",
        ),
        ("{\"family\": \"nope\"}", "unknown variant `nope`"),
        ("not json", "is not JSON"),
        ("[]", "holds no kernel spec"),
        (
            "{\"family\": \"scan\", \"head_dim\": 128, \"group\": 4, \"block\": 64, \
             \"segment_words\": 512, \"tile_words\": 8, \"threads\": 100, \"placement\": \"hbm\"}",
            "`threads` is 100; allowed: a multiple of 32",
        ),
    ] {
        let file = dir.path().join("specs.json");
        std::fs::write(&file, text).unwrap();
        let o = machine_code(&file, &out);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{text}: {stderr}");
        assert!(stderr.contains(says), "{text}: {stderr}");
        assert!(stderr.contains("nothing was written"), "{stderr}");
        assert!(!out.exists(), "{text}");
    }
    // A virtual architecture has no machine code: ptxas does not run for it.
    let file = dir.path().join("specs.json");
    let spec: KernelSpec = rerank(true).into();
    std::fs::write(&file, serde_json::to_string(&spec).unwrap()).unwrap();
    let o = machine_code_with(&file, &out, &["--arch", "compute_90"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("virtual architecture"), "{stderr}");
    assert!(!out.exists());
    let missing = dir.path().join("absent.json");
    let o = machine_code(&missing, &out);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("absent.json"));
}

/// Local memory in the default kernel set of qwen3-8b is where it is known to be, and nowhere
/// else: a new array indexed at run time (as the rerank's table of levels was) or a new spill
/// fails here, and so does one that went away (update the list and `bench/NOTES.md`).
#[test]
fn the_default_kernels_keep_local_memory_only_where_known() {
    let known = [
        // 4 bytes spilled.
        "fathom_encode_d128_b64_s512_append_raw_t256",
        "fathom_encode_d128_b64_s512_bulk_raw_t256",
        // `count[G]` indexed by a run-time head.
        "fathom_select_g4_k2048_t256_i16_union",
        // The table of levels (`pariskv_level`) and a spill.
        "fathom_pariskv_index_d128_t256_hbm",
        "fathom_pariskv_index_d128_t256_host",
        // The table of levels, until `decode_table` is the default.
        "fathom_pariskv_rerank_d128_g4_k2048_t256_hbm_score",
        "fathom_pariskv_rerank_d128_g4_k2048_t256_host_score",
        // 8 bytes spilled.
        "fathom_pariskv_topc_d128_t256_write",
    ];
    let shape = codegen::model::preset("qwen3-8b").unwrap();
    let options: Vec<String> = codegen::emit::COMPILE_OPTIONS
        .iter()
        .map(|o| o.to_string())
        .collect();
    let mut local = Vec::new();
    for spec in codegen::kernels_for(&shape, &codegen::KernelSetOptions::default()) {
        let source = codegen::render_any(&spec).unwrap();
        let file = format!("{}.cu", spec.kernel_name());
        let resources =
            codegen::resources::measure(&source, &file, "sm_90", &options, &spec.entry_points())
                .unwrap();
        local.extend(
            resources
                .into_iter()
                .filter(|r| r.stack_bytes > 0 || r.spills())
                .map(|r| r.entry),
        );
    }
    local.sort();
    let mut known: Vec<String> = known.iter().map(|s| s.to_string()).collect();
    known.sort();
    assert_eq!(local, known);
}

//! Embeds the committed autotune records (`runtime/records/*.json`: the runtime owns the tables
//! it ships, so nothing here reads outside this crate) so that a binary finds the record of its
//! GPU wherever it runs, not only inside this checkout.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("records");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    // Sorted so the generated file, and the binary, are the same on every build.
    files.sort();
    let mut out = String::from("/// `(file name, contents)` of every committed record.\n");
    out.push_str("pub static EMBEDDED_RECORDS: &[(&str, &str)] = &[\n");
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let name = path.file_name().unwrap().to_string_lossy();
        let full = path.canonicalize().unwrap_or_else(|_| path.clone());
        writeln!(out, "    ({name:?}, include_str!({:?})),", full.display()).unwrap();
    }
    out.push_str("];\n");
    let target = Path::new(&std::env::var("OUT_DIR").unwrap()).join("embedded_records.rs");
    std::fs::write(target, out).unwrap();
}

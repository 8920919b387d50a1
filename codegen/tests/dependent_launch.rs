//! Programmatic dependent launch is safe on a kernel only when the kernel waits for the one
//! before it before it touches memory (`runtime::gpu::Gpu::set_programmatic_launch` launches
//! every kernel with the attribute). These checks hold every template to it: each entry point's
//! body begins with `await_previous_kernel();`, and each kernel source includes the helper.

use std::fs;
use std::path::PathBuf;

fn templates() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../templates");
    let mut out: Vec<(String, String)> = fs::read_dir(&dir)
        .expect("the templates directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tera"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read_to_string(&p).expect("a template"))
        })
        .collect();
    out.sort();
    out
}

/// The first statement of every `__global__` function's body in `text`, with the line of its
/// declaration.
fn first_statements(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.contains("__global__") && !line.trim_start().starts_with("//") {
            let open = (i..lines.len())
                .find(|&j| lines[j].trim_end() == "{")
                .unwrap_or_else(|| panic!("line {}: a kernel without a body", i + 1));
            let first = lines[open + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty() && !l.starts_with("//"))
                .unwrap_or("")
                .to_string();
            out.push((i + 1, first));
            i = open;
        }
        i += 1;
    }
    out
}

#[test]
fn every_entry_point_waits_for_the_kernel_before_it_first() {
    let mut kernels = 0;
    let mut wrong = Vec::new();
    for (name, text) in templates() {
        for (line, first) in first_statements(&text) {
            kernels += 1;
            if first != "await_previous_kernel();" {
                wrong.push(format!("{name}:{line}: begins with `{first}`"));
            }
        }
    }
    assert!(kernels >= 38, "found only {kernels} entry points");
    assert!(
        wrong.is_empty(),
        "entry points that do not wait first:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_kernel_source_includes_the_helper() {
    for (name, text) in templates() {
        if name.ends_with(".cu.tera") {
            assert!(
                text.contains(r#"{% include "common.cuh.tera" %}"#),
                "{name} does not include common.cuh.tera, which defines await_previous_kernel"
            );
        }
    }
}

#[test]
fn the_check_sees_a_kernel_that_does_not_wait() {
    let text = "extern \"C\" __global__ void k(int* x)\n{\n    // why\n    x[0] = 1;\n}\n";
    assert_eq!(first_statements(text), vec![(1, "x[0] = 1;".to_string())]);
}

//! `codegen`: the command line of the kernel generator.
fn main() {}

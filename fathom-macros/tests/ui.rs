//! Bad specs are compile errors at the argument at fault; a launcher refuses an input pointer
//! where the kernel writes.

#[test]
fn compile_errors() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}

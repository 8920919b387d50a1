fathom_macros::kernels! {
    mod kernels {
        preset("qwen9-1t");
    }
}

fn main() {}

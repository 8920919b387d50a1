fathom_macros::kernels! {
    mod kernels {
        select(group = 4, k_max = 2048, threads = 256, items_per_thread = 16, warps = 8);
    }
}

fn main() {}

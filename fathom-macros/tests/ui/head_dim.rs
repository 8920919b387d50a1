fathom_macros::kernels! {
    mod kernels {
        scan(head_dim = 72, group = 4, block = 64, segment_words = 512, tile_words = 16,
             threads = 256, placement = hbm);
    }
}

fn main() {}

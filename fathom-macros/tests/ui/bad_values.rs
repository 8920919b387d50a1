// Every bad item is reported, each at its own argument.
fathom_macros::kernels! {
    mod kernels {
        oracle(head_dim = 128, group = 4, threads = 256, placement = ssd);
        oracle(head_dim = 128, group = "four", threads = 256, placement = hbm);
        oracle(head_dim = 128, group = 4, placement = hbm);
        plan(head_dim = 64, group = 2, block = 64, segment_words = 512, method = sparq(r = 99),
             rotate = false, threads = 256);
        plan(head_dim = 64, group = 2, block = 64, segment_words = 512, method = loki(),
             rotate = true, threads = 256);
        gather(head_dim = 64, block = 64, segment_words = 512, loads_in_flight = 4, threads = 0,
               head_dim = 128);
        attension(head_dim = 128);
        preset("qwen3-8b", block = 48);
    }
}

fn main() {}

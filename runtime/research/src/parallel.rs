//! A scoped parallel map for the CPU-heavy reference code.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `f` over `items` on `threads` scoped threads (at least one); results in item order.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = f(item);
                results.lock().expect("no worker panics holding the lock")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("workers are done")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_item_order_on_any_thread_count() {
        let items: Vec<u64> = (0..100).collect();
        for threads in [0, 1, 3, 200] {
            let squares = parallel_map(&items, threads, |x| x * x);
            assert_eq!(squares, items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
        assert!(parallel_map(&[] as &[u8], 4, |x| *x).is_empty());
    }
}

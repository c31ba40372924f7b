//! Independent git processes run a few at a time. A look at every agent's branch runs
//! several short gits per agent (tips, merge base, diffs), and each mostly waits on
//! starting a process: one after the other, 20 agents took most of a `grove merge`.

/// At most this many at once: enough to hide a process's start-up behind another's,
/// few enough not to crowd a small machine.
const WORKERS: usize = 4;

/// `f` of each item, in the items' order, on up to [`WORKERS`] threads.
pub fn map<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    if items.len() < 2 {
        return items.into_iter().map(f).collect();
    }
    let workers = WORKERS.min(items.len());
    let mut queues: Vec<Vec<(usize, T)>> = (0..workers).map(|_| Vec::new()).collect();
    for (n, item) in items.into_iter().enumerate() {
        queues[n % workers].push((n, item));
    }
    let f = &f;
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = queues
            .into_iter()
            .map(|queue| {
                scope.spawn(move || {
                    queue
                        .into_iter()
                        .map(|(n, item)| (n, f(item)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            // A panic in `f` is a bug; it goes on as the panic it was.
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    done.sort_unstable_by_key(|(n, _)| *n);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_in_the_items_order() {
        let items: Vec<u32> = (0..23).collect();
        let doubled = super::map(items, |n| n * 2);
        assert_eq!(doubled, (0..23).map(|n| n * 2).collect::<Vec<_>>());
        assert_eq!(super::map(Vec::<u32>::new(), |n| n), Vec::<u32>::new());
    }
}

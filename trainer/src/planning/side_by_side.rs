//! Independent planning work run side by side: the chains of a tier's candidates, the head
//! chunks tried for a plan, the runs a plan suggests. Each job probes on meta devices of its
//! own, so the results are the same whether the jobs run at once or in turn.

/// The results of `jobs`, in order: each on a thread of its own where the machine runs
/// several threads at once, one after another where it does not; each logging where the
/// caller logs. A job's panic is raised again here.
pub(crate) fn side_by_side<T, F>(jobs: Vec<F>) -> Vec<T>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || jobs.len() < 2 {
        return jobs.into_iter().map(|job| job()).collect();
    }
    let log = tracing::dispatcher::get_default(|log| log.clone());
    std::thread::scope(|scope| {
        let mut jobs = jobs.into_iter();
        let here = jobs.next();
        let others: Vec<_> = jobs
            .map(|job| {
                let log = &log;
                scope.spawn(move || tracing::dispatcher::with_default(log, job))
            })
            .collect();
        let mut results: Vec<T> = here.into_iter().map(|job| job()).collect();
        for other in others {
            results.push(
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        results
    })
}

#[cfg(test)]
mod tests {
    use super::side_by_side;

    #[test]
    fn results_come_back_in_the_order_of_the_jobs() {
        let jobs: Vec<_> = (0..5u64)
            .map(|i| {
                move || {
                    // The later jobs finish first.
                    std::thread::sleep(std::time::Duration::from_millis(10 * (5 - i)));
                    i * i
                }
            })
            .collect();
        assert_eq!(side_by_side(jobs), [0, 1, 4, 9, 16]);
        let none: Vec<fn() -> u8> = Vec::new();
        assert!(side_by_side(none).is_empty());
    }
}

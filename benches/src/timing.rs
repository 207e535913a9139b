//! Timing helpers shared by the bench binaries: the median of repeated runs, and the host's
//! memory bandwidth as a parallel copy measures it.

use std::convert::Infallible;
use std::time::Instant;

use rayon::prelude::*;

/// The median seconds of `runs` calls of `f`, after one untimed call (a warm-up: caches,
/// the allocator's regions, the thread pool).
pub fn median_seconds<E>(runs: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The host's memory bandwidth in GB/s (bytes read plus bytes written): the median of `runs`
/// parallel copies of `elements` f32 between two vectors.
pub fn host_copy_gbps(elements: usize, runs: usize) -> f64 {
    let source: Vec<f32> = (0..elements).map(|i| i as f32).collect();
    let mut target = vec![0f32; elements];
    let Ok(seconds) = median_seconds::<Infallible>(runs, || {
        target
            .par_chunks_mut(1 << 16)
            .zip(source.par_chunks(1 << 16))
            .for_each(|(t, s)| t.copy_from_slice(s));
        Ok(())
    });
    2.0 * (elements * 4) as f64 / seconds / 1e9
}

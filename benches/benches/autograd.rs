//! Criterion benches of one forward + backward step on the CPU: the MLP 784-1024-1024-10 on a
//! batch of 256, and one transformer block (width 256, 4 heads, 32 sequences of 64).

use criterion::{Criterion, criterion_group, criterion_main};
use headroom_benches::models::Workload;

fn steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("forward+backward");
    group.sample_size(20);
    for workload in [Workload::mlp(), Workload::transformer_block()] {
        group.bench_function(workload.name, |b| {
            b.iter(|| workload.step().expect("a step"))
        });
    }
    group.finish();
}

criterion_group!(benches, steps);
criterion_main!(benches);

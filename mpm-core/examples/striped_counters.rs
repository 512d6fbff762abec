//! What a counter every core adds to costs, kept on one cache line against
//! kept in a stripe per CPU (`mpm_core::shared::Counters`): one thread per
//! CPU adds to it as fast as it can, and the time per add is printed.
//!
//! ```text
//! cargo run --release -p mpm-core --example striped_counters [ADDS_PER_THREAD]
//! ```
//!
//! The one-line counter is what the proxy's per-upstream counters were
//! before they were striped: every add takes the line from the core that
//! added last. Threads are not pinned; the ratio, not the figures, is the
//! answer (a server adds between other work, so its line moves less often
//! than here, and more often the more cores it has).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use mpm_core::shared::{stripe_count, Counters, Shared};

fn main() {
    let adds: u64 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 10_000_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("striped_counters: ADDS_PER_THREAD must be a positive whole number");
            std::process::exit(2);
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one_line = Shared::<AtomicU64>::new().expect("shared memory");
    let striped = Counters::new(1).expect("shared memory");
    let time = |add: &(dyn Fn() + Sync)| {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..adds {
                        add();
                    }
                });
            }
        });
        start.elapsed().as_nanos() as f64 / adds as f64
    };
    let line_ns = time(&|| {
        one_line.fetch_add(1, Ordering::Relaxed);
    });
    let striped_ns = time(&|| striped.add(0, 1));
    let total = threads as u64 * adds;
    assert_eq!(
        one_line.load(Ordering::Relaxed),
        total,
        "one line lost an add"
    );
    assert_eq!(striped.get(0), total, "the stripes lost an add");
    println!(
        "{threads} threads, {adds} adds each; {} stripes",
        stripe_count()
    );
    println!("one line:          {line_ns:6.1} ns an add");
    println!(
        "a stripe per CPU:  {striped_ns:6.1} ns an add ({:.1}x faster)",
        line_ns / striped_ns
    );
}

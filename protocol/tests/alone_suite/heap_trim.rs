//! A long-lived process gives back what a burst of work freed: after many small
//! allocations on worker threads are freed, the heap trimmer's call brings the process's
//! resident memory down to what is still held (glibc keeps freed chunks in its arenas
//! otherwise). In a test binary of its own, so no other test allocates meanwhile.

#![allow(clippy::expect_used)]

use antler_protocol::sys::{rss_kib, trim_heap};

/// 64 MiB in 256-byte blocks per thread, of which every 64th stays alive (as long-lived
/// state would) and the rest is freed: the free runs between the kept blocks are not at
/// the top of any arena, so glibc does not give them back by itself.
fn burst() -> Vec<Vec<Vec<u8>>> {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let blocks: Vec<Vec<u8>> = (0..(64 << 20) / 256)
                    .map(|i| vec![(i % 251) as u8; 256])
                    .collect();
                blocks.into_iter().step_by(64).collect::<Vec<_>>()
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("burst thread"))
        .collect()
}

#[test]
fn trimming_returns_the_memory_a_burst_freed() {
    let _alone = crate::ALONE.blocking_lock();
    if !trim_heap() {
        eprintln!("this allocator has no malloc_trim; nothing to return");
        return;
    }
    let me = std::process::id();
    let before = rss_kib(me);
    let kept = burst();
    let untrimmed = rss_kib(me);
    trim_heap();
    let trimmed = rss_kib(me);
    std::hint::black_box(&kept);
    eprintln!("rss: {before} KiB before, {untrimmed} KiB after the burst, {trimmed} KiB trimmed");
    assert!(
        trimmed < untrimmed / 2,
        "after trimming the process holds {trimmed} KiB ({untrimmed} KiB untrimmed, {before} KiB before the burst)"
    );
}

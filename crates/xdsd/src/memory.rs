//! Giving back what a burst freed (`--release-memory`).
//!
//! glibc's allocator keeps the memory a burst frees — the first responses of a thousand streams
//! that connect at once, a change fanned out to all of them, a reload that parsed thousands of
//! files, streams that closed — in the arena of the thread that freed it, and returns pages to
//! the system only from the top of an arena. A server that synced its fleet then holds the
//! burst's pages for as long as it runs: measured at 1,000 streams, some 20 MiB, more than the
//! streams themselves hold. `serve` runs a thread that reads, a few times a second, the process's
//! resident size and what the allocator has handed out; once the resident size has stopped
//! growing and what it holds beyond the allocations stands well above what it held after the last
//! release, the thread asks the allocator to return every free page (`malloc_trim`), as Envoy's
//! `shrink_heap` overload action asks tcmalloc.
//!
//! The thread is no tokio worker: reading the allocator's figures and releasing each hold an
//! arena's lock while they walk its free chunks (a few milliseconds for tens of MiB, tens of
//! milliseconds in a heap fragmented into hundreds of thousands of pieces), and only allocations
//! in that arena wait. Each is paced by what it cost: the next one comes no sooner than a hundred
//! times as long after it, so that together they take at most about 2 % of a core.

use std::time::{Duration, Instant};

/// How often the resident size is read.
const PERIOD: Duration = Duration::from_millis(200);
/// At most one release per this long: under steady load the pages a release returns are taken
/// again soon, and each taken page costs a fault.
const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// A walk of the allocator's free chunks (a reading of its figures, a release) is followed by a
/// pause of this many times what it took, when longer than [`PERIOD`] or [`MIN_INTERVAL`].
const PACE: u32 = 100;
/// Growth of the resident size within one period that counts as "still growing" (a burst under
/// way).
const GROWING: u64 = 1 << 20;
/// A release is worth it when the resident memory beyond the allocations stands this much above
/// what it was after the last release (or a 32nd of the allocations, when more: [`slack`]).
const SLACK: u64 = 1 << 20;

/// How much more than after the last release the allocator may keep beyond the allocations
/// (`in_use`) before it is asked to give it back: 1 MiB, or a 32nd of the allocations when
/// more. The resident size is at least the allocations, so what is kept stays within about 3 %
/// of it (5 % at the 1 MiB floor for a process of 20 MiB): a never-restarted process's resident
/// size follows its allocations, not the high-water mark of its free pages. (An eighth, before,
/// let a process of 35 MiB in use keep 4.4 MiB more: +6-7 % of its resident size in a soak of
/// 40-100 minutes with its allocations flat.)
fn slack(in_use: u64) -> u64 {
    SLACK.max(in_use / 32)
}

/// When the next walk of the allocator may come, after one that took `took`.
fn pause(least: Duration, took: Duration) -> Duration {
    least.max(took.saturating_mul(PACE))
}

/// One reading: the process's resident size and what the allocator has handed out (0 where the
/// allocator cannot say).
#[derive(Clone, Copy, Debug)]
struct Sizes {
    resident: u64,
    in_use: u64,
}

impl Sizes {
    /// Resident memory that no allocation holds: free pages the allocator keeps (plus the
    /// program's code, stacks and other mappings, which hardly move).
    fn held(self) -> u64 {
        self.resident.saturating_sub(self.in_use)
    }
}

/// When to release, from the sizes read one period apart: the pure rule, tested below.
#[derive(Debug)]
struct Rule {
    /// What was held beyond the allocations after the last release (or the least since).
    floor: u64,
    last_resident: u64,
    /// No release before this (paced by what the last one took).
    rested_at: Option<Instant>,
}

impl Rule {
    fn new(after: Sizes) -> Rule {
        Rule {
            floor: after.held(),
            last_resident: after.resident,
            rested_at: None,
        }
    }

    /// Whether to release now, given the sizes just read.
    fn should_release(&mut self, now: Sizes, at: Instant) -> bool {
        let growing = now.resident > self.last_resident.saturating_add(GROWING);
        self.last_resident = now.resident;
        let held = now.held();
        self.floor = self.floor.min(held);
        let above = held > self.floor.saturating_add(slack(now.in_use));
        let rested = self.rested_at.is_none_or(|t| at >= t);
        !growing && above && rested
    }

    /// Records a release that started at `at` and took `took`, and the sizes after it.
    fn released(&mut self, after: Sizes, at: Instant, took: Duration) {
        self.floor = after.held();
        self.last_resident = after.resident;
        self.rested_at = Some(at + pause(MIN_INTERVAL, took));
    }
}

/// Releases what is free now (what start-up left behind), then starts the releasing thread;
/// logs why not where the allocator has no such call (not glibc) or the resident size cannot be
/// read.
pub fn start() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let Some(resident) = glibc::resident() else {
            tracing::warn!("--release-memory: cannot read /proc/self/statm; not releasing");
            return;
        };
        let (mut in_use, took) = timed(glibc::in_use);
        let mut in_use_due = Instant::now() + pause(PERIOD, took);
        let (after, _) = release(Sizes { resident, in_use });
        let spawned = std::thread::Builder::new()
            .name("xdsd-release-memory".into())
            .spawn(move || {
                let mut rule = Rule::new(after);
                loop {
                    std::thread::sleep(PERIOD);
                    let Some(resident) = glibc::resident() else {
                        continue;
                    };
                    let at = Instant::now();
                    if at >= in_use_due {
                        let took;
                        (in_use, took) = timed(glibc::in_use);
                        in_use_due = at + pause(PERIOD, took);
                    }
                    if rule.should_release(Sizes { resident, in_use }, at) {
                        let (after, took) = release(Sizes { resident, in_use });
                        rule.released(after, at, took);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("--release-memory: cannot start its thread: {e}; not releasing");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        tracing::info!("--release-memory: only with glibc on Linux; not releasing");
    }
}

/// A reading of the allocator's figures for scrapes, paced by what it cost: a scrape within a
/// hundred times as long as the last reading took is given that reading again, so that scrapes
/// however frequent walk a fragmented heap's arenas (each under its lock) for at most about 1 %
/// of the time; a reading that took microseconds is fresh for a millisecond.
#[derive(Debug, Default)]
struct Paced {
    value: u64,
    /// No new reading before this.
    due: Option<Instant>,
}

impl Paced {
    /// The reading for a scrape at `now`: `read`'s (what it gives and how long it took) when
    /// the last one's pause is over, else the last one's.
    fn get(&mut self, now: Instant, read: impl FnOnce() -> (u64, Duration)) -> u64 {
        if self.due.is_some_and(|due| now < due) {
            return self.value;
        }
        let (value, took) = read();
        self.value = value;
        self.due = Some(now + pause(Duration::ZERO, took));
        value
    }
}

/// Adds `xdsd_heap_in_use_bytes` to `metrics`: what the allocator has handed out and not taken
/// back (glibc's `mallinfo2`, read on a scrape and paced as [`Paced`] says), the process's live
/// allocations without the free pages the allocator keeps. Unlike the resident size, it does not
/// move with the allocator's high-water mark nor with `--release-memory`'s releases, so that a
/// leak (memory kept for every closed stream or every change) shows in it alone. None where the
/// allocator cannot say (not glibc, or glibc older than 2.33).
pub(crate) fn add_metrics(metrics: &xdsd_core::Metrics) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let paced = std::sync::Mutex::new(Paced::default());
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    metrics.add_series(move || {
        let in_use = match paced.lock() {
            Ok(mut paced) => paced.get(Instant::now(), || timed(glibc::in_use)),
            Err(_) => glibc::in_use(),
        };
        match in_use {
            0 => Vec::new(),
            in_use => vec![xdsd_core::MetricSeries::gauge(
                "heap_in_use_bytes",
                "Bytes the allocator has handed out and not taken back (glibc mallinfo2: in \
             arenas and mapped apart), free pages it keeps excluded.",
                i64::try_from(in_use).unwrap_or(i64::MAX),
            )],
        }
    });
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = metrics;
}

/// What `f` gives and how long it took.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    (f(), started.elapsed())
}

/// Returns every free page to the system (the allocations are what they were); the sizes after
/// it and how long it took.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release(before: Sizes) -> (Sizes, Duration) {
    let ((), took) = timed(glibc::trim);
    let after = Sizes {
        resident: glibc::resident().unwrap_or(before.resident),
        in_use: before.in_use,
    };
    tracing::debug!(
        before_kib = before.resident / 1024,
        after_kib = after.resident / 1024,
        in_use_kib = after.in_use / 1024,
        took_us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
        "released free memory"
    );
    (after, took)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    use std::sync::OnceLock;

    /// Returns every free page of every arena to the system.
    pub(super) fn trim() {
        // SAFETY: malloc_trim takes no pointer and may be called from any thread.
        unsafe { libc::malloc_trim(0) };
    }

    /// The resident size (`/proc/self/statm`'s second field, in pages).
    pub(super) fn resident() -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
        // SAFETY: sysconf takes an integer and reads no memory of ours.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Some(pages.saturating_mul(u64::try_from(page).ok().filter(|p| *p > 0)?))
    }

    type Mallinfo2 = unsafe extern "C" fn() -> libc::mallinfo2;

    /// Bytes the allocator has handed out (in its arenas and mapped apart), from `mallinfo2`;
    /// 0 with a glibc older than 2.33, which has none: looked up when first needed rather than
    /// linked, so that the binary still builds and starts there (and releases by the resident
    /// size alone).
    pub(super) fn in_use() -> u64 {
        static MALLINFO2: OnceLock<Option<Mallinfo2>> = OnceLock::new();
        let found = MALLINFO2.get_or_init(|| {
            // SAFETY: dlsym reads the NUL-terminated name; RTLD_DEFAULT searches the loaded
            // objects, libc among them.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
            // SAFETY: glibc's mallinfo2 has this signature (malloc.h), and a non-null symbol of
            // that name is it.
            (!symbol.is_null())
                .then(|| unsafe { std::mem::transmute::<*mut libc::c_void, Mallinfo2>(symbol) })
        });
        let Some(mallinfo2) = found else {
            return 0;
        };
        // SAFETY: mallinfo2 takes no argument and returns a struct by value.
        let info = unsafe { mallinfo2() };
        u64::try_from(info.uordblks.saturating_add(info.hblkhd)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn sizes(resident_mib: u64, in_use_mib: u64) -> Sizes {
        Sizes {
            resident: resident_mib * MIB,
            in_use: in_use_mib * MIB,
        }
    }

    #[test]
    fn memory_is_released_once_a_burst_has_stopped_growing() {
        let t0 = Instant::now();
        let mut rule = Rule::new(sizes(60, 40));
        // The burst: growing each period, nothing released while it grows.
        assert!(!rule.should_release(sizes(70, 45), t0 + PERIOD));
        assert!(!rule.should_release(sizes(80, 44), t0 + PERIOD * 2));
        // Stopped growing, 16 MiB more held beyond the allocations: release.
        assert!(rule.should_release(sizes(80, 44), t0 + PERIOD * 3));
        rule.released(sizes(64, 44), t0 + PERIOD * 3, Duration::from_millis(2));
        // Idle after it: nothing more to release.
        assert!(!rule.should_release(sizes(64, 44), t0 + PERIOD * 10));
    }

    #[test]
    fn memory_freed_without_growing_is_released() {
        let t0 = Instant::now();
        let mut rule = Rule::new(sizes(100, 80));
        // Streams closed: 30 MiB freed, the resident size unchanged.
        assert!(rule.should_release(sizes(100, 50), t0 + PERIOD));
    }

    #[test]
    fn memory_within_the_slack_of_the_last_release_is_not_released() {
        let t0 = Instant::now();
        let mut rule = Rule::new(sizes(60, 24));
        // 1 MiB of slack for 24 MiB in use (a 32nd would be 0.75).
        assert!(!rule.should_release(sizes(61, 24), t0 + PERIOD));
        assert!(rule.should_release(sizes(62, 24), t0 + PERIOD * 2));
        // At 96 MiB in use the slack is 3 MiB.
        let mut rule = Rule::new(sizes(120, 96));
        assert!(!rule.should_release(sizes(122, 96), t0 + PERIOD));
        assert!(!rule.should_release(sizes(123, 96), t0 + PERIOD * 2));
        assert!(rule.should_release(sizes(124, 96), t0 + PERIOD * 3));
    }

    #[test]
    fn what_the_allocator_may_keep_is_within_five_percent_of_the_resident_size() {
        // The resident size is at least the heap in use: a slack of a 32nd of the heap is
        // under 5 % of it, and the 1 MiB floor is for processes of 20 MiB and more.
        for in_use_mib in [20u64, 35, 80, 400] {
            let in_use = in_use_mib * MIB;
            assert!(
                slack(in_use) * 20 <= in_use.max(20 * MIB),
                "{in_use_mib} MiB"
            );
        }
    }

    #[test]
    fn releases_under_steady_load_are_a_second_apart_at_least() {
        let t0 = Instant::now();
        let mut rule = Rule::new(sizes(10, 5));
        assert!(!rule.should_release(sizes(30, 5), t0));
        assert!(rule.should_release(sizes(30, 5), t0 + PERIOD));
        rule.released(sizes(10, 5), t0 + PERIOD, Duration::from_millis(2));
        // The load takes the pages back within the second: no release before it is over.
        assert!(!rule.should_release(sizes(30, 5), t0 + PERIOD * 2));
        assert!(!rule.should_release(sizes(30, 5), t0 + PERIOD * 5));
        assert!(rule.should_release(sizes(30, 5), t0 + PERIOD + MIN_INTERVAL));
    }

    #[test]
    fn a_release_that_took_long_is_followed_by_a_pause_a_hundred_times_as_long() {
        let t0 = Instant::now();
        let mut rule = Rule::new(sizes(10, 5));
        rule.released(sizes(10, 5), t0, Duration::from_millis(30));
        // Grown, then still: a release is due but for the pause.
        assert!(!rule.should_release(sizes(30, 5), t0 + PERIOD));
        assert!(!rule.should_release(sizes(30, 5), t0 + MIN_INTERVAL));
        assert!(!rule.should_release(sizes(30, 5), t0 + Duration::from_millis(2999)));
        assert!(rule.should_release(sizes(30, 5), t0 + Duration::from_secs(3)));
        // Readings of the allocator are paced the same way, from one period.
        assert_eq!(pause(PERIOD, Duration::from_micros(100)), PERIOD);
        assert_eq!(
            pause(PERIOD, Duration::from_millis(26)),
            Duration::from_millis(2600)
        );
    }

    #[test]
    fn a_scrape_reads_the_heap_again_only_after_a_hundred_times_what_the_last_reading_took() {
        let t0 = Instant::now();
        let mut paced = Paced::default();
        let reading = |value, micros| move || (value, Duration::from_micros(micros));
        // A slow walk (20 ms): the next 2 s of scrapes are given its reading.
        assert_eq!(paced.get(t0, reading(7, 20_000)), 7);
        let not_read = || -> (u64, Duration) { panic!("read within the pause") };
        assert_eq!(paced.get(t0 + Duration::from_secs(1), not_read), 7);
        assert_eq!(paced.get(t0 + Duration::from_millis(1999), not_read), 7);
        // Its pause over: read again; a quick one (5 us) is fresh for half a millisecond.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(paced.get(t1, reading(9, 5)), 9);
        assert_eq!(paced.get(t1 + Duration::from_micros(499), not_read), 9);
        assert_eq!(
            paced.get(t1 + Duration::from_micros(500), reading(11, 5)),
            11
        );
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_heap_in_use_is_a_metric_that_follows_the_allocations() {
        let metrics = xdsd_core::Metrics::new();
        add_metrics(&metrics);
        let snapshot = xdsd_core::store::Store::new().snapshot();
        let read = |text: &str| -> u64 {
            let line = text
                .lines()
                .find(|l| l.starts_with("xdsd_heap_in_use_bytes "))
                .unwrap_or_else(|| panic!("no xdsd_heap_in_use_bytes in {text}"));
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        // A scrape may be given the last reading for a hundred times what it took (Paced):
        // scrape until the figure shows what the test did, for up to 10 s.
        let scrape_until = |what: &str, done: &dyn Fn(u64) -> bool| -> u64 {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let value = read(&metrics.encode(&snapshot));
                if done(value) || Instant::now() >= deadline {
                    assert!(done(value), "{what}: the metric stayed at {value}");
                    return value;
                }
                std::thread::yield_now();
            }
        };
        let before = read(&metrics.encode(&snapshot));
        // 64 MiB, so that what other tests allocate meanwhile is lost in it.
        let held = std::hint::black_box(vec![1u8; 64 * MIB as usize]);
        let during = scrape_until(&format!("64 MiB held show, from {before}"), &|v| {
            v >= before + 48 * MIB
        });
        drop(held);
        scrape_until(&format!("64 MiB freed show, from {during}"), &|v| {
            v + 48 * MIB <= during
        });
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_sizes_are_read_from_proc_and_the_allocator() {
        let Some(resident) = glibc::resident() else {
            panic!("/proc/self/statm is readable");
        };
        assert!(
            resident > MIB,
            "a test process holds more than 1 MiB: {resident}"
        );
        let held = std::hint::black_box(vec![1u8; 8 * MIB as usize]);
        let in_use = glibc::in_use();
        assert!(
            in_use >= 8 * MIB,
            "at least the 8 MiB held are in use: {in_use}"
        );
        drop(held);
    }
}

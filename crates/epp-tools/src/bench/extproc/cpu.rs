//! CPU time of a process (this one, or an external epp by pid) and of its threads grouped by
//! name prefix (Linux `/proc`), so the in-process epp's worker threads can be told apart from
//! the load generator's. Uses
//! `schedstat` (nanoseconds) where the kernel has it, else `stat` (clock ticks, 10 ms).
//! Threads that exited between two samples drop out of the per-name sums (their time stays
//! in the process total). `schedstat` also gives the time threads were runnable but waited
//! for a CPU (run-queue wait): on a shared machine this shows how much of the latency tail
//! is other processes' doing. Elsewhere every reading is `None`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::time::Duration;

/// Clock ticks per second of `/proc/*/stat` times (`USER_HZ`, 100 on every Linux ABI).
const TICKS_PER_S: f64 = 100.0;

/// One reading: whole-process CPU and CPU per thread-name prefix.
#[derive(Clone, Debug, Default)]
pub struct CpuSample {
    /// Whole process (all threads, live and exited).
    pub process: Option<Duration>,
    /// Live threads whose name starts with each tracked prefix.
    pub by_prefix: HashMap<String, Duration>,
    /// Run-queue wait of the same threads (only where `schedstat` exists).
    pub waited: HashMap<String, Duration>,
    /// Voluntary context switches of the same threads: each is a thread that ran out of work
    /// and parked, to be woken by another thread (a hand-off) or a timer.
    pub parks: HashMap<String, u64>,
}

/// Differences between two samples for one thread-name prefix.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuDelta {
    /// Whole-process CPU.
    pub process: Option<Duration>,
    /// CPU of the prefix's threads.
    pub threads: Option<Duration>,
    /// Run-queue wait of the prefix's threads.
    pub waited: Option<Duration>,
    /// Voluntary context switches of the prefix's threads.
    pub parks: Option<u64>,
}

impl CpuSample {
    /// Reads `/proc/self` now, summing live threads named with each of `prefixes`.
    pub fn now(prefixes: &[&str]) -> Self {
        Self::of(Path::new("/proc/self"), prefixes)
    }

    /// Reads process `pid` now; its live threads are summed under the prefix `""`.
    pub fn of_pid(pid: u32) -> Self {
        Self::of(&Path::new("/proc").join(pid.to_string()), &[""])
    }

    fn of(proc_dir: &Path, prefixes: &[&str]) -> Self {
        let mut by_prefix: HashMap<String, Duration> =
            prefixes.iter().map(|p| (p.to_string(), Duration::ZERO)).collect();
        let mut waited = HashMap::new();
        let mut parks = HashMap::new();
        if let Ok(tasks) = fs::read_dir(proc_dir.join("task")) {
            for task in tasks.flatten() {
                let dir = task.path();
                let Ok(name) = fs::read_to_string(dir.join("comm")) else { continue };
                let Some(prefix) = prefixes.iter().find(|p| name.starts_with(**p)) else { continue };
                let (cpu, wait) = thread_times(&dir);
                if let Some(t) = cpu {
                    *by_prefix.entry(prefix.to_string()).or_default() += t;
                }
                if let Some(w) = wait {
                    *waited.entry(prefix.to_string()).or_insert(Duration::ZERO) += w;
                }
                if let Some(n) = fs::read_to_string(dir.join("status")).ok().and_then(|s| voluntary_switches(&s)) {
                    *parks.entry(prefix.to_string()).or_insert(0) += n;
                }
            }
        }
        let process = fs::read_to_string(proc_dir.join("stat")).ok().and_then(|s| stat_cpu(&s));
        Self { process, by_prefix, waited, parks }
    }

    /// What was spent between `earlier` and `self` (process, and one prefix's threads).
    pub fn since(&self, earlier: &CpuSample, prefix: &str) -> CpuDelta {
        let diff = |a: Option<&Duration>, b: Option<&Duration>| a.zip(b).map(|(a, b)| a.saturating_sub(*b));
        CpuDelta {
            process: diff(self.process.as_ref(), earlier.process.as_ref()),
            threads: diff(self.by_prefix.get(prefix), earlier.by_prefix.get(prefix)),
            waited: diff(self.waited.get(prefix), earlier.waited.get(prefix)),
            parks: self.parks.get(prefix).zip(earlier.parks.get(prefix)).map(|(a, b)| a.saturating_sub(*b)),
        }
    }
}

/// (CPU, run-queue wait) of one thread.
fn thread_times(dir: &Path) -> (Option<Duration>, Option<Duration>) {
    if let Ok(s) = fs::read_to_string(dir.join("schedstat")) {
        let mut fields = s.split_whitespace().map(|f| f.parse::<u64>().ok().map(Duration::from_nanos));
        return (fields.next().flatten(), fields.next().flatten());
    }
    (fs::read_to_string(dir.join("stat")).ok().and_then(|s| stat_cpu(&s)), None)
}

/// `voluntary_ctxt_switches` of a `status` file.
fn voluntary_switches(status: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).and_then(|v| v.trim().parse().ok())
}

/// utime + stime of a `stat` line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn stat_cpu(stat: &str) -> Option<Duration> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), ... utime is field 14, stime 15 (1-based).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_secs_f64((utime + stime) / TICKS_PER_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_odd_name_parses() {
        let line = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0 1 2 3";
        assert_eq!(stat_cpu(line), Some(Duration::from_secs(3)));
        assert_eq!(stat_cpu("garbage"), None);
        assert_eq!(stat_cpu("1 (x) S 1"), None);
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t42\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(voluntary_switches(status), Some(42));
        assert_eq!(voluntary_switches("Name:\tx\n"), None);
    }

    #[test]
    fn a_named_thread_is_found_and_within_the_process_total() {
        let sample = std::thread::Builder::new()
            .name("cpu-probe-t".into())
            .spawn(|| {
                let before = CpuSample::now(&["cpu-probe"]);
                let mut x = 0u64;
                // Bounded busy work: a few million iterations.
                for i in 0..20_000_000u64 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                }
                let after = CpuSample::now(&["cpu-probe"]);
                let d = after.since(&before, "cpu-probe");
                (d.process, d.threads)
            })
            .expect("spawn")
            .join()
            .expect("join");
        if std::path::Path::new("/proc/self/task").exists() {
            let (process, thread) = sample;
            assert!(process.is_some() && thread.is_some(), "{sample:?}");
            assert!(thread <= process.map(|p| p + Duration::from_millis(20)), "{sample:?}");
        }
    }
}

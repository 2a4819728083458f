//! `process_*` metrics of this process (CPU seconds, resident and virtual memory, open and
//! maximum file descriptors, threads, start time), the same family names Go's and Python's
//! Prometheus clients export, read from `/proc` by the prometheus crate's process collector.
//! On systems without `/proc` the collector exports nothing.

use prometheus::Registry;

/// Registers the process collector on `registry`.
pub fn register(registry: &Registry) -> Result<(), prometheus::Error> {
    #[cfg(target_os = "linux")]
    registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn exports_the_usual_process_families() {
        let registry = prometheus::Registry::new();
        super::register(&registry).unwrap();
        let names: Vec<String> = registry.gather().iter().map(|f| f.name().to_string()).collect();
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
        }
    }
}

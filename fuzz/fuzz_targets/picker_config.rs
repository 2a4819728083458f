//! The EndpointPickerConfig loader (`--config-file` / `--config-text`): YAML, validation and
//! plugin construction against the built-in registry.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let cx = epp::framework::build::BuildContext::default();
    let _ = epp::app::load_config(Some(text), &cx, epp::scheduling::metrics::SchedulerMetrics::detached());
});

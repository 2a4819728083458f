//! Model-server `/metrics` text: the Prometheus line parser and the load extraction of
//! every built-in engine mapping.
#![no_main]

use epp::endpoints::prom_text::samples;
use epp::endpoints::vllm_metrics::{BUILTIN_ENGINES, builtin_engine, extract};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for sample in samples(&text) {
        if let Ok(s) = sample {
            let _ = s.labels().count();
        }
    }
    for engine in BUILTIN_ENGINES {
        if let Some(mapping) = builtin_engine(engine) {
            let got = extract(&text, &mapping);
            assert!(got.metrics.kv_cache_usage.is_finite() && got.metrics.kv_cache_usage >= 0.0);
        }
    }
});

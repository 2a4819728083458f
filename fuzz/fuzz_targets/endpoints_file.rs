//! The `--endpoints-file` / `file-discovery` YAML.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = epp::endpoints::discovery::parse_endpoints(text, std::path::Path::new("fuzz"));
});

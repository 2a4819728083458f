//! CEL expressions (plugin parameters): compile, then evaluate against a small request map.
#![no_main]

use std::collections::BTreeMap;

use epp::cel::{Program, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let Ok(program) = Program::compile(source, &["request", "usage"]) else { return };
    let mut request = BTreeMap::new();
    request.insert("model".to_string(), Value::String("m".into()));
    request.insert("priority".to_string(), Value::Int(-1));
    let mut usage = BTreeMap::new();
    usage.insert("prompt_tokens".to_string(), Value::Uint(12));
    usage.insert("ratio".to_string(), Value::Double(0.5));
    let vars = BTreeMap::from([("request", Value::Map(request)), ("usage", Value::Map(usage))]);
    let _ = program.eval(&vars);
});

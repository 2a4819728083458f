//! Request parser plugin types (`openai-parser`, `passthrough-parser`, `vllmhttp-parser`,
//! `anthropic-parser`, `vllmgrpc-parser`, `sglanghttp-parser`, `vertexai-parser`): each
//! takes no parameters and fills the request-parser role with its
//! [`ParserKind`](crate::request::parsers::ParserKind). The config loader turns the
//! parsers named by `parser` / `requestHandler.parsers` into the scheduler's
//! [`ParserSet`](crate::request::parsers::ParserSet); the parsing itself lives in
//! `request::parsers`.

use crate::framework::build::{BuildContext, BuildError, PluginSpec, decode_params};
use crate::framework::plugin::PluginInstance;
use crate::plugins::producer::passive::NoParams;
use crate::plugins::registry::Factory;
use crate::request::parsers::ParserKind;

fn build(spec: &PluginSpec, _: &BuildContext) -> Result<PluginInstance, BuildError> {
    let _: NoParams = decode_params(spec)?;
    let kind = ParserKind::ALL
        .into_iter()
        .find(|k| k.type_name() == spec.type_name)
        .ok_or_else(|| BuildError::new(&spec.path, format!("{} is not a request parser type", spec.type_name)))?;
    Ok(PluginInstance::new(spec.name.clone(), kind.type_name()).with_parser(kind))
}

/// Parser types and their factory.
pub const TYPES: [(&str, Factory); 7] = [
    (ParserKind::ALL[0].type_name(), build),
    (ParserKind::ALL[1].type_name(), build),
    (ParserKind::ALL[2].type_name(), build),
    (ParserKind::ALL[3].type_name(), build),
    (ParserKind::ALL[4].type_name(), build),
    (ParserKind::ALL[5].type_name(), build),
    (ParserKind::ALL[6].type_name(), build),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::registry::builtin;

    fn spec(type_name: &str, parameters: serde_json::Value) -> PluginSpec {
        PluginSpec { name: "p".into(), type_name: type_name.into(), parameters, path: "plugins[0]".into() }
    }

    #[test]
    fn every_parser_type_loads_with_no_parameters_and_rejects_any() {
        let registry = builtin();
        for kind in ParserKind::ALL {
            let factory = registry.get(kind.type_name()).expect("registered").factory;
            let inst = factory(&spec(kind.type_name(), serde_json::Value::Null), &BuildContext::default());
            let inst = inst.unwrap_or_else(|e| panic!("{}: {e}", kind.type_name()));
            assert_eq!(inst.parser, Some(kind));
            assert_eq!(inst.type_name, kind.type_name());
            assert!(!inst.passive, "parsers are not passive any more");
            assert_eq!(inst.roles(), "request parser");
            let bad = factory(&spec(kind.type_name(), serde_json::json!({"x": 1})), &BuildContext::default());
            let err = bad.expect_err("unknown parameter rejected");
            assert!(err.path.starts_with("plugins[0].parameters"), "{err}");
        }
    }
}

//! Every registered plugin type and alias is documented in docs/plugins.md.

#[test]
fn every_registered_type_is_documented() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/plugins.md")).unwrap();
    let missing: Vec<&str> =
        epp::plugins::registry::builtin().names().into_iter().filter(|n| !doc.contains(&format!("`{n}`"))).collect();
    assert!(missing.is_empty(), "undocumented plugin types: {missing:?}");
}

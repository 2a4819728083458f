//! `file-discovery` end to end: a config naming the plugin (and no `--endpoints-file`) loads
//! the endpoints from its file and routes to them; `watchFile: true` follows edits; the same
//! file as the flag is accepted, a different one fails the start; a missing file fails the
//! start.

mod common;

use common::*;
use epp::app::{App, Settings};

fn config(path: &std::path::Path, watch: bool) -> String {
    format!(
        r#"
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: file-discovery
  parameters: {{path: "{}", watchFile: {watch}}}
- type: queue-scorer
dataLayer:
  discovery: {{pluginRef: file-discovery}}
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}]
"#,
        path.display()
    )
}

/// llm-d's spelling of the file: string ports, a namespace.
fn llmd_file(eps: &[(&str, std::net::SocketAddr)]) -> String {
    let mut s = String::from("endpoints:\n");
    for (name, addr) in eps {
        s.push_str(&format!(
            "  - name: {name}\n    namespace: inference\n    address: \"{}\"\n    port: \"{}\"\n",
            addr.ip(),
            addr.port()
        ));
    }
    s
}

async fn route(epp: &TestEpp) -> String {
    let mut client = epp.client().await;
    let mut ex = Exchange::open(&mut client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    set_header(&ex.next().await, "x-gateway-destination-endpoint").expect("destination")
}

#[tokio::test]
async fn config_file_discovery_loads_routes_and_watches() {
    let a = FakeVllm::start([127, 0, 0, 81], 0, 0, 0.0).await;
    let b = FakeVllm::start([127, 0, 0, 82], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, llmd_file(&[("a", a.addr)])).unwrap();
    let cfg = config(&file, true);
    let epp = TestEpp::start("unused", Some(&cfg), |s| s.endpoints_file = None).await;
    epp.wait_endpoints(&["a"]).await;
    assert_eq!(route(&epp).await, a.addr.to_string());
    std::fs::write(&file, llmd_file(&[("b", b.addr)])).unwrap();
    epp.wait_endpoints(&["b"]).await;
    assert_eq!(route(&epp).await, b.addr.to_string());
}

#[tokio::test]
async fn flag_and_plugin_must_agree_on_the_file() {
    let a = FakeVllm::start([127, 0, 0, 83], 0, 0, 0.0).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pool.yaml");
    std::fs::write(&file, llmd_file(&[("a", a.addr)])).unwrap();
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, llmd_file(&[("a", a.addr)])).unwrap();

    // Same file as the flag: fine (the flag's watcher applies).
    let cfg = config(&file, false);
    let flag = file.clone();
    let epp = TestEpp::start("unused", Some(&cfg), move |s| s.endpoints_file = Some(flag)).await;
    epp.wait_endpoints(&["a"]).await;
    assert_eq!(route(&epp).await, a.addr.to_string());

    // A different file: the start fails and names both.
    let start = |config: String, flag: Option<std::path::PathBuf>| {
        let mut s = Settings::loopback();
        s.config_text = Some(config);
        s.endpoints_file = flag;
        App::start(s)
    };
    let err = start(config(&file, false), Some(other.clone())).await.expect_err("two files").to_string();
    assert!(err.contains("different files"), "{err}");
    // A missing file fails the start too.
    let err = start(config(&dir.path().join("missing.yaml"), false), None).await.expect_err("missing").to_string();
    assert!(err.contains("file-discovery"), "{err}");
}

//! EndpointPickerConfig hot reload over a real ext_proc server: a ConfigMap-style update (the
//! `..data` symlink swapped) changes decisions; a broken file keeps routing on the running
//! config and counts a failure; a stream in flight during the swap completes on its config.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use epp::reload::ReloadSettings;

/// Publishes `text` as Kubernetes does for a ConfigMap volume: a new timestamped directory,
/// then `..data` swapped to it by renaming a fresh symlink over it.
fn publish(dir: &Path, version: u32, text: &str) {
    let data = dir.join(format!("..v{version}"));
    std::fs::create_dir(&data).expect("version dir");
    std::fs::write(data.join("config.yaml"), text).expect("write config");
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..v{version}"), &tmp).expect("symlink");
    std::fs::rename(&tmp, dir.join("..data")).expect("swap ..data");
    if version == 1 {
        std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).expect("link file");
    }
}

fn reloads(epp: &TestEpp, result: &str) -> f64 {
    epp.app
        .registry
        .gather()
        .iter()
        .find(|f| f.name() == "epp_config_reloads_total")
        .and_then(|f| {
            f.get_metric()
                .iter()
                .find(|m| m.get_label().iter().any(|l| l.value() == result))
                .map(|m| m.get_counter().get_value())
        })
        .unwrap_or(0.0)
}

fn generation(epp: &TestEpp) -> f64 {
    let families = epp.app.registry.gather();
    let family = families.iter().find(|f| f.name() == "epp_config_generation").expect("generation gauge");
    family.get_metric()[0].get_gauge().get_value()
}

/// Polls `check` every 10 ms until it holds (panics after [`WAIT`]).
async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn destination(
    client: &mut epp::proto::ext_proc::external_processor_client::ExternalProcessorClient<tonic::transport::Channel>,
) -> Option<String> {
    let mut ex = Exchange::open(client).await;
    ex.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;
    ex.send(request_body(&chat("m", "hi", false), true)).await;
    let replies = ex.take(2).await;
    set_header(&replies[0], "x-gateway-destination-endpoint")
}

#[tokio::test]
async fn config_file_changes_switch_decisions_and_broken_files_keep_the_old_config() {
    let a = FakeVllm::start([127, 0, 0, 51], 0, 0, 0.0).await;
    let b = FakeVllm::start([127, 0, 0, 52], 0, 0, 0.0).await;
    let endpoints = endpoints_yaml(&[("a", a.addr, &[("pool", "a")]), ("b", b.addr, &[("pool", "b")])]);
    let config_dir = tempfile::tempdir().expect("tempdir");
    publish(config_dir.path(), 1, &pool_config("a", false));
    let path = config_dir.path().join("config.yaml");
    let epp = TestEpp::start(&endpoints, Some(&pool_config("a", false)), |s| {
        s.config_reload = Some(ReloadSettings { path: path.clone(), interval: Duration::from_millis(20) });
    })
    .await;
    epp.wait_endpoints(&["a", "b"]).await;
    let mut client = epp.client().await;
    assert_eq!(destination(&mut client).await, Some(a.addr.to_string()));
    assert_eq!(generation(&epp), 1.0);

    // A stream in flight when the config changes...
    let mut old = Exchange::open(&mut client).await;
    old.send(request_headers("/v1/chat/completions", &[], false, Some((FULL_DUPLEX, FULL_DUPLEX)))).await;

    // ConfigMap update: pool b.
    publish(config_dir.path(), 2, &pool_config("b", false));
    until("the reload succeeds", || reloads(&epp, "success") == 1.0).await;
    assert_eq!(generation(&epp), 2.0);
    assert_eq!(destination(&mut client).await, Some(b.addr.to_string()), "new streams use the new config");

    // ...completes on the config it started with.
    old.send(request_body(&chat("m", "hi", false), true)).await;
    let replies = old.take(2).await;
    assert_eq!(set_header(&replies[0], "x-gateway-destination-endpoint"), Some(a.addr.to_string()));
    old.send(response_headers("200", "application/json")).await;
    old.next().await;
    old.send(response_body(b"{}", true)).await;
    old.next().await;

    // A broken document (plain rewrite through the symlink): rejected, routing unchanged.
    std::fs::write(&path, pool_config("b", false).replace("pluginRef: queue-scorer", "pluginRef: queue-scorr"))
        .expect("rewrite");
    until("the reload fails", || reloads(&epp, "failure") == 1.0).await;
    assert_eq!(generation(&epp), 2.0);
    assert_eq!(destination(&mut client).await, Some(b.addr.to_string()), "still routing on the running config");

    // Fixing the file reloads again.
    std::fs::write(&path, pool_config("a", false)).expect("rewrite");
    until("the fixed file reloads", || reloads(&epp, "success") == 2.0).await;
    assert_eq!(destination(&mut client).await, Some(a.addr.to_string()));
    assert_eq!(reloads(&epp, "failure"), 1.0);
}

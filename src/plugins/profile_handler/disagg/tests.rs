//! Handler tests through the real loader and scheduler.

use crate::config::{ConfigErrors, LoadedConfig, load};
use crate::framework::build::BuildContext;
use crate::plugins::registry::builtin;
use crate::request::headers::{ENCODER_HOSTS_PORTS, PREFILLER_HOST_PORT};
use crate::scheduling::metrics::SchedulerMetrics;
use crate::test_util::{chat_request, endpoint};

fn try_load(yaml: &str, cx: &BuildContext) -> Result<LoadedConfig, ConfigErrors> {
    load(yaml, &builtin(), cx, SchedulerMetrics::detached())
}

const PD: &str = "
plugins:
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
- type: prefill-filter
- type: decode-filter
schedulingProfiles:
- {name: prefill, plugins: [{pluginRef: prefill-filter}]}
- {name: decode, plugins: [{pluginRef: decode-filter}]}
";

fn pool() -> Vec<crate::endpoints::model::Candidate> {
    vec![endpoint("p1").role("prefill").build(), endpoint("d1").role("decode").build()]
}

#[test]
fn decode_first_runs_decode_then_prefill_and_sets_the_header() {
    let cx = BuildContext::default();
    let loaded = try_load(PD, &cx).unwrap();
    let d = loaded.scheduler.schedule(&chat_request("m", &["hi"]), pool()).unwrap();
    assert_eq!(&*d.result.primary_profile, "decode");
    assert_eq!(d.result.destination(), &*pool()[1].endpoint.host_port);
    let prefill = d.headers.set.iter().find(|(k, _)| k == PREFILLER_HOST_PORT).map(|(_, v)| v.clone());
    assert_eq!(prefill.as_deref(), Some(&*pool()[0].endpoint.host_port));
    assert!(d.headers.remove.contains(&ENCODER_HOSTS_PORTS.to_string()));
    let counted = cx
        .metrics
        .disagg_decisions
        .with_label_values(&["disagg-profile-handler", "disagg-profile-handler", "m", "prefill-decode"])
        .get();
    assert_eq!(counted, 1);
    assert_eq!(cx.metrics.disagg_decisions_legacy.with_label_values(&["m", "prefill-decode"]).get(), 1);
}

#[test]
fn no_prefill_endpoint_goes_decode_only_and_no_decode_fails() {
    let cx = BuildContext::default();
    let loaded = try_load(PD, &cx).unwrap();
    let d = loaded.scheduler.schedule(&chat_request("", &["hi"]), vec![endpoint("d1").role("decode").build()]).unwrap();
    assert!(d.result.profile("prefill").is_none());
    assert!(d.headers.remove.contains(&PREFILLER_HOST_PORT.to_string()));
    assert_eq!(
        cx.metrics
            .disagg_decisions
            .with_label_values(&["disagg-profile-handler", "disagg-profile-handler", "unknown", "decode-only"])
            .get(),
        1
    );
    let err = loaded
        .scheduler
        .schedule(&chat_request("m", &["hi"]), vec![endpoint("p1").role("prefill").build()])
        .unwrap_err();
    assert!(err.to_string().contains("decode-filter"), "{err}");
}

#[test]
fn no_decider_means_decode_only() {
    let yaml = PD.replace("  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n", "");
    let loaded = try_load(&yaml, &BuildContext::default()).unwrap();
    let d = loaded.scheduler.schedule(&chat_request("m", &["hi"]), pool()).unwrap();
    assert_eq!(d.result.profiles.len(), 1);
}

#[test]
fn prefill_first_order_runs_prefill_without_a_decider() {
    let yaml = PD.replace(
        "parameters: {deciders: {prefill: always-disagg-pd-decider}}",
        "parameters: {stageOrder: Prefill_First}",
    );
    let d = try_load(&yaml, &BuildContext::default())
        .unwrap()
        .scheduler
        .schedule(&chat_request("m", &["hi"]), pool())
        .unwrap();
    assert_eq!(&*d.result.primary_profile, "decode");
    assert!(d.result.profile("prefill").is_some());
}

#[test]
fn decider_references_are_checked_with_suggestions() {
    let undeclared =
        PD.replace("deciders: {prefill: always-disagg-pd-decider}", "deciders: {prefill: always-disagg-pd-decidr}");
    let errs = try_load(&undeclared, &BuildContext::default()).unwrap_err().0;
    let e = errs.iter().find(|e| e.path == "plugins[1].parameters.deciders.prefill").expect("path-qualified error");
    assert!(e.message.contains("\"always-disagg-pd-decider\""), "{e}");
    let later = "plugins:\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n- type: always-disagg-pd-decider\n- type: decode-filter\nschedulingProfiles: [{name: decode, plugins: [{pluginRef: decode-filter}]}]";
    let errs = try_load(later, &BuildContext::default()).unwrap_err().0;
    assert!(
        errs.iter().any(|e| e.path == "plugins[0].parameters.deciders.prefill" && e.message.contains("declared after")),
        "{errs:?}"
    );
    let wrong_role = PD
        .replace("deciders: {prefill: always-disagg-pd-decider}", "deciders: {prefill: decode-filter}")
        .replace("- type: prefill-filter\n- type: decode-filter\n", "")
        .replace(
            "- type: always-disagg-pd-decider\n",
            "- type: always-disagg-pd-decider\n- type: prefill-filter\n- type: decode-filter\n",
        );
    let errs = try_load(&wrong_role, &BuildContext::default()).unwrap_err().0;
    assert!(errs.iter().any(|e| e.message.contains("not a decider")), "{errs:?}");
}

#[test]
fn pd_profile_handler_maps_its_legacy_parameters() {
    let yaml = "plugins:\n- type: pd-profile-handler\n  parameters: {threshold: 0, primaryPort: 8000, hashBlockSize: 64}\n- type: prefill-filter\n- type: decode-filter\nschedulingProfiles:\n- {name: prefill, plugins: [{pluginRef: prefill-filter}]}\n- {name: decode, plugins: [{pluginRef: decode-filter}]}";
    let cx = BuildContext::default();
    let d = try_load(yaml, &cx).unwrap().scheduler.schedule(&chat_request("m", &["hi"]), pool()).unwrap();
    assert!(d.result.profile("prefill").is_some(), "threshold 0 = always");
    let labels = ["pd-profile-handler", "pd-profile-handler", "m", "prefill-decode"];
    assert_eq!(cx.metrics.pd_decisions.with_label_values(&labels).get(), 1);
    assert_eq!(cx.metrics.pd_decisions_legacy.with_label_values(&["m", "prefill-decode"]).get(), 1);
    assert_eq!(cx.metrics.disagg_decisions.with_label_values(&labels).get(), 0, "not double-counted");
    assert!(d.result.destination().ends_with(":8000"));
    assert!(d.headers.set.iter().any(|(k, _)| k == "x-data-parallel-host-port"));
    let missing = yaml.replace("threshold: 0, ", "");
    let errs = try_load(&missing, &BuildContext::default()).unwrap_err().0;
    assert!(errs.iter().any(|e| e.path == "plugins[0].parameters.deciderPluginName"), "{errs:?}");
}

/// Test filter: keeps only candidates other than `peer-endpoint`, and nothing when no peer
/// endpoint is visible, so its profile finds an endpoint only if the handler set the peer first.
#[derive(Debug)]
struct NeedsPeer;

impl crate::framework::plugin::Filter for NeedsPeer {
    fn filter(
        &self,
        cx: &crate::framework::context::SchedulingContext<'_>,
        candidates: Vec<crate::endpoints::model::Candidate>,
    ) -> Vec<crate::endpoints::model::Candidate> {
        let Some(peer) = cx.data.peer_endpoint() else { return Vec::new() };
        candidates.into_iter().filter(|c| c.id() != peer.id()).collect()
    }
}

fn needs_peer(
    spec: &crate::framework::build::PluginSpec,
    _: &BuildContext,
) -> Result<crate::framework::plugin::PluginInstance, crate::framework::build::BuildError> {
    Ok(crate::framework::plugin::PluginInstance::new(spec.name.clone(), "needs-peer")
        .with_filter(std::sync::Arc::new(NeedsPeer)))
}

#[test]
fn peer_endpoint_is_visible_to_the_second_profile() {
    let mut registry = builtin();
    registry.add("needs-peer", needs_peer);
    let cx = BuildContext::default();
    // Decode-first: the prefill profile sees the decode pick.
    let yaml = PD.replace("- type: decode-filter\n", "- type: decode-filter\n- type: needs-peer\n").replace(
        "{name: prefill, plugins: [{pluginRef: prefill-filter}]}",
        "{name: prefill, plugins: [{pluginRef: prefill-filter}, {pluginRef: needs-peer}]}",
    );
    let loaded = load(&yaml, &registry, &cx, SchedulerMetrics::detached()).unwrap();
    let d = loaded.scheduler.schedule(&chat_request("m", &["hi"]), pool()).unwrap();
    assert!(d.result.profile("prefill").is_some(), "prefill ran with the peer visible");
    assert_eq!(d.data.peer_endpoint().map(|c| c.id().to_string()), Some(pool()[1].id().to_string()));
    // Prefill-first: the decode profile sees the prefill pick.
    let yaml = PD
        .replace(
            "parameters: {deciders: {prefill: always-disagg-pd-decider}}",
            "parameters: {stageOrder: prefill-first}",
        )
        .replace("- type: decode-filter\n", "- type: decode-filter\n- type: needs-peer\n")
        .replace(
            "{name: decode, plugins: [{pluginRef: decode-filter}]}",
            "{name: decode, plugins: [{pluginRef: decode-filter}, {pluginRef: needs-peer}]}",
        );
    let loaded = load(&yaml, &registry, &cx, SchedulerMetrics::detached()).unwrap();
    let d = loaded.scheduler.schedule(&chat_request("m", &["hi"]), pool()).unwrap();
    assert_eq!(d.result.destination(), &*pool()[1].endpoint.host_port);
    assert_eq!(d.data.peer_endpoint().map(|c| c.id().to_string()), Some(pool()[0].id().to_string()));
}

//! kube's kubeconfig loader against the mock API server's TLS mode: a client certificate
//! (kind, minikube, kubeadm) and an exec credential plugin (EKS, GKE, AKS: a script printing
//! an ExecCredential) authenticate; a kubeconfig without credentials gets 401; a CA that did
//! not sign the server is refused.

mod common;

use ::kube::Api;
use common::kube::{MockKube, pod};
use epp::k8s::client::{KubeSource, connect};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

const PODS: &str = "/api/v1/namespaces/ns/pods";

async fn list_pods(kubeconfig: std::path::PathBuf) -> Result<Vec<String>, ::kube::Error> {
    let client = connect(&KubeSource::Kubeconfig(kubeconfig)).await.expect("kubeconfig loads");
    let pods = Api::<Pod>::namespaced(client, "ns").list(&Default::default()).await?;
    Ok(pods.items.into_iter().filter_map(|p| p.metadata.name).collect())
}

#[tokio::test]
async fn client_certificate_and_exec_plugin_authenticate_over_tls() {
    use base64::Engine;
    let mock = MockKube::start_tls(&["exec-token"]).await;
    mock.apply(PODS, pod("p", json!({"app": "x"}), Some("127.0.0.71"), true));
    let tls = mock.tls.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);

    // Client certificate (inline data).
    let user = format!(
        "{{client-certificate-data: {}, client-key-data: {}}}",
        b64(&tls.client_cert_pem),
        b64(&tls.client_key_pem)
    );
    assert_eq!(list_pods(mock.tls_kubeconfig(dir.path(), &user)).await.unwrap(), ["p"]);

    // Exec plugin: a script printing an ExecCredential with a token.
    let script = dir.path().join("credential.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"exec-token\"}}'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let user = format!(
        "{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: '{}', interactiveMode: Never}}}}",
        script.display()
    );
    assert_eq!(list_pods(mock.tls_kubeconfig(dir.path(), &user)).await.unwrap(), ["p"]);

    // A static token that is not accepted: 401.
    let denied = list_pods(mock.tls_kubeconfig(dir.path(), "{token: wrong}")).await.unwrap_err();
    assert!(matches!(&denied, ::kube::Error::Api(s) if s.code == 401), "{denied:?}");

    // Another CA: the server certificate is refused.
    let other = MockKube::start_tls(&[]).await;
    let mut kubeconfig = std::fs::read_to_string(mock.tls_kubeconfig(dir.path(), "{token: exec-token}")).unwrap();
    kubeconfig = kubeconfig.replace(&b64(&tls.ca_pem), &b64(&other.tls.as_ref().unwrap().ca_pem));
    let path = dir.path().join("other-ca");
    std::fs::write(&path, kubeconfig).unwrap();
    assert!(list_pods(path).await.is_err(), "a server the CA did not sign is refused");
}

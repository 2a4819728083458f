//! End to end: a real `zeromq` PUB (and a replay ROUTER) in the test process
//! publishes recorded vLLM payloads to the real subscriber on 127.0.0.1, in
//! central and pod-discovery modes, with restart, gap and replay.

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::kv::*;
use epp::kvcache::subscriber::SubscriberConfig;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn central_mode_topics_restart_gap_and_removal() {
    let cfg = SubscriberConfig {
        zmq_endpoint: Some("tcp://127.0.0.1:0".into()),
        discover_pods: false,
        concurrency: 2,
        ..SubscriberConfig::default()
    };
    let s = start(cfg, source(None)).await;
    let (h, m) = (&s.handle, &s.metrics);
    let mut publisher = PubSocket::new();
    publisher.connect(h.central_endpoint().expect("bound")).await.expect("connect");
    warm_up(&mut publisher, h).await;
    assert_eq!(m.active_subscribers.get(), 1);
    wait_for(h, "accepted publisher", || m.peer_events.with_label_values(&["connected"]).get() == 1).await;

    publish(&mut publisher, TOPIC, 0, payload(0)).await;
    wait_for(h, "prefill", || data_msgs(m) >= 1).await;
    assert_eq!(blocks(&s.index), 3);
    publish(&mut publisher, TOPIC, 1, payload(1)).await;
    publish(&mut publisher, TOPIC, 2, payload(2)).await;
    publish(&mut publisher, "kv@10.9.9.9:1@m", 0, payload(0)).await;
    wait_for(h, "three batches", || data_msgs(m) >= 4).await;
    let want = reference(&[payload(0), payload(1), payload(2)]);
    assert_eq!(s.index.lookup(&all_keys()), want.lookup(&all_keys()));
    assert_eq!(s.index.entries(), want.entries());
    assert_eq!(m.dropped.with_label_values(&["unknown_endpoint"]).get(), 1);
    assert_eq!(m.endpoint_block_size.with_label_values(&["pod-a"]).get(), 16);

    // vLLM restarted: seq back to 0 -> purge, then apply.
    publish(&mut publisher, TOPIC, 0, payload(0)).await;
    wait_for(h, "restart", || m.restarts.get() == 1).await;
    assert_eq!(m.clears.with_label_values(&["restart"]).get(), 1);
    assert_eq!(s.index.entries(), reference(&[payload(0)]).entries());

    // Gap with no replay endpoint: purge; the continuation cannot chain.
    publish(&mut publisher, TOPIC, 5, payload(1)).await;
    wait_for(h, "gap", || m.gaps.get() == 1).await;
    assert_eq!(m.clears.with_label_values(&["gap"]).get(), 1);
    assert_eq!(s.index.entries(), 0);
    assert_eq!(m.events.with_label_values(&["block_stored", "unknown_parent"]).get(), 1);

    // The endpoint leaves the pool.
    publish(&mut publisher, TOPIC, 0, payload(0)).await;
    wait_for(h, "re-store", || s.index.entries() > 0).await;
    s.sources.send(vec![]).expect("watch");
    wait_for(h, "removal", || s.index.entries() == 0 && s.index.endpoints() == 0).await;
    s.handle.shutdown().await;
    assert!(s.cancel.is_cancelled());
}

/// A replay ROUTER answering from `store` with vLLM 0.26+ reply frames.
fn spawn_router(mut router: RouterSocket, store: Arc<Mutex<Vec<(u64, Bytes)>>>, requests: Arc<Mutex<Vec<u64>>>) {
    tokio::spawn(async move {
        while let Ok(req) = router.recv().await {
            let f = req.into_vec();
            let (id, start) = (f[0].clone(), u64::from_be_bytes(f[2][..].try_into().expect("8 bytes")));
            requests.lock().expect("lock").push(start);
            let batches: Vec<_> = store.lock().expect("lock").iter().filter(|(s, _)| *s >= start).cloned().collect();
            for (seq, p) in batches {
                let reply = vec![
                    id.clone(),
                    Bytes::new(),
                    Bytes::from_static(TOPIC.as_bytes()),
                    Bytes::copy_from_slice(&seq.to_be_bytes()),
                    p,
                ];
                router.send(msg(reply)).await.expect("reply");
            }
            let end = vec![id, Bytes::new(), Bytes::new(), Bytes::from_static(&[0xff; 8]), Bytes::new()];
            router.send(msg(end)).await.expect("end");
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_discovery_mode_replays_gaps_and_purges_on_restart() {
    let mut publisher = PubSocket::new();
    let pub_ep = publisher.bind("tcp://127.0.0.1:0").await.expect("bind pub").to_string();
    let mut router = RouterSocket::new();
    let replay_port = match router.bind("tcp://127.0.0.1:0").await.expect("bind router") {
        zeromq::Endpoint::Tcp(_, port) => port,
        other => panic!("{other}"),
    };
    let store = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    spawn_router(router, store.clone(), requests.clone());

    let cfg = SubscriberConfig { replay_socket_port: Some(replay_port), ..SubscriberConfig::default() };
    let s = start(cfg, source(Some(pub_ep))).await;
    let (h, m) = (&s.handle, &s.metrics);
    warm_up(&mut publisher, h).await;
    assert_eq!(m.active_subscribers.get(), 1);

    // The topic names another pod: pod-discovery attributes by socket anyway.
    let topic = "kv@10.1.1.1:9999@m";
    *store.lock().expect("lock") = vec![(0, payload(0)), (1, payload(1)), (2, payload(2))];
    publish(&mut publisher, topic, 0, payload(0)).await;
    publish(&mut publisher, topic, 2, payload(2)).await; // seq 1 lost
    wait_for(h, "replayed gap", || m.replays.with_label_values(&["complete"]).get() == 1).await;
    assert_eq!(*requests.lock().expect("lock"), [1]);
    assert_eq!(m.gaps.get(), 1);
    let want = reference(&[payload(0), payload(1), payload(2)]);
    assert_eq!(s.index.lookup(&all_keys()), want.lookup(&all_keys()));
    assert_eq!(s.index.entries(), want.entries());

    // Restart: purge, then only the new generation's batch.
    publish(&mut publisher, topic, 0, payload(0)).await;
    wait_for(h, "restart", || m.restarts.get() == 1).await;
    assert_eq!(blocks(&s.index), 3);
    assert_eq!(s.index.entries(), reference(&[payload(0)]).entries());

    // A gap the publisher can no longer replay: purge, never keep stale state.
    store.lock().expect("lock").clear();
    publish(&mut publisher, topic, 3, payload(1)).await;
    wait_for(h, "unrepairable gap", || m.replays.with_label_values(&["incomplete"]).get() == 1).await;
    assert_eq!(s.index.entries(), 0);

    // Endpoint removed: its socket is dropped and its entries purged.
    publish(&mut publisher, topic, 4, payload(0)).await;
    wait_for(h, "re-store", || s.index.entries() > 0).await;
    s.sources.send(vec![]).expect("watch");
    wait_for(h, "removal", || s.index.entries() == 0 && m.active_subscribers.get() == 0).await;
    s.handle.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_client_accepts_pre_026_three_frame_replies() {
    let mut router = RouterSocket::new();
    let ep = router.bind("tcp://127.0.0.1:0").await.expect("bind").to_string();
    tokio::spawn(async move {
        if let Ok(req) = router.recv().await {
            let f = req.into_vec();
            let id = f[0].clone();
            for seq in 1u64..=3 {
                let reply = vec![id.clone(), Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), payload(0)];
                router.send(msg(reply)).await.expect("reply");
            }
            let end = vec![id, Bytes::new(), Bytes::from_static(&[0xff; 8]), Bytes::new()];
            router.send(msg(end)).await.expect("end");
        }
    });
    let got = epp::kvcache::subscriber::fetch_replay(&ep, 1, 3, Default::default(), &Default::default())
        .await
        .expect("replay");
    assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(got[0].1, payload(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_discovery_counts_the_publisher_going_away_and_the_reconnection() {
    let mut publisher = PubSocket::new();
    let pub_ep = publisher.bind("tcp://127.0.0.1:0").await.expect("bind pub").to_string();
    let s = start(SubscriberConfig::default(), source(Some(pub_ep.clone()))).await;
    let (h, m) = (&s.handle, &s.metrics);
    warm_up(&mut publisher, h).await;
    let events = |e: &str| m.peer_events.with_label_values(&[e]).get();
    assert_eq!((events("connected"), events("reconnected"), events("disconnected")), (1, 0, 0));

    // vLLM restarts: its PUB socket goes away and comes back on the same port.
    let errors = publisher.close().await; // returns once the listener is gone
    assert!(errors.is_empty(), "{errors:?}");
    let mut publisher = PubSocket::new();
    publisher.bind(&pub_ep).await.expect("rebind pub");
    warm_up(&mut publisher, h).await;
    wait_for(h, "reconnection counted", || events("reconnected") >= 1 && events("disconnected") >= 1).await;
    assert_eq!(m.active_subscribers.get(), 1, "the same SUB socket kept serving");
    publish(&mut publisher, TOPIC, 0, payload(0)).await;
    wait_for(h, "batch after reconnection", || s.index.entries() > 0).await;
    s.handle.shutdown().await;
}

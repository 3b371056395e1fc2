//! Namespaces, the one cluster-scoped resource, through `KubeApi` and kube-rs: the requests
//! kube-runtime's `watcher(Api::<Namespace>::all(..), Config::default().labels(..))` makes (a
//! LIST, then a WATCH from its resourceVersion, both with the label selector), and the
//! cluster-scoped paths. Here rather than in `tests/kube_api.rs` because testkit's kube
//! dev-dependency has no `runtime` feature: `Api::list` and `Api::watch` are what the watcher
//! calls.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Config};
use serde_json::{Value, json};

use super::{KubeApi, KubeApiOptions, KubeconfigUser, Resource};

const SELECTOR: &str = "plumb.example/dynamic=true";

fn namespace(name: &str, dynamic: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"plumb.example/dynamic": dynamic}}})
}

/// A started server and a token-authenticated client of it, built from a written kubeconfig
/// as plumb builds its own.
async fn setup() -> (KubeApi, tempfile::TempDir, Client) {
    let api = KubeApi::start(KubeApiOptions::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = api.write_kubeconfig(dir.path().join("kubeconfig"), KubeconfigUser::Token);
    let kubeconfig = Kubeconfig::read_from(&path).expect("read the written kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig");
    let client = Client::try_from(config).expect("client from config");
    (api, dir, client)
}

fn names(list: kube::core::ObjectList<Namespace>) -> Vec<String> {
    list.items
        .into_iter()
        .map(|n| n.metadata.name.unwrap_or_default())
        .collect()
}

fn api_status(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

/// The next event that is not a bookmark, as a watcher acts on them.
async fn next_change(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Namespace>>> + Unpin),
) -> String {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream is open")
            .expect("a well-formed event");
        let name = |n: &Namespace| n.metadata.name.clone().unwrap_or_default();
        return match event {
            WatchEvent::Added(n) => format!("ADDED {}", name(&n)),
            WatchEvent::Modified(n) => format!("MODIFIED {}", name(&n)),
            WatchEvent::Deleted(n) => format!("DELETED {}", name(&n)),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(s) => format!("ERROR {} {}", s.code, s.reason),
        };
    }
}

#[test]
fn put_get_and_delete_a_cluster_scoped_object() {
    let api = KubeApi::start(KubeApiOptions::http());
    // A namespace in the body is not kept: the object has none.
    let mut body = namespace("team-a", "true");
    body["metadata"]["namespace"] = json!("default");
    let stored = api.put(Resource::Namespaces, body);
    assert!(stored["metadata"].get("namespace").is_none(), "{stored}");
    assert_eq!(
        (&stored["kind"], &stored["apiVersion"]),
        (&json!("Namespace"), &json!("v1"))
    );
    assert_eq!(api.get(Resource::Namespaces, "", "team-a"), Some(stored));
    assert_eq!(api.list(Resource::Namespaces, None).len(), 1);
    // Namespaced resources still default to `default`.
    let pod = api.put(Resource::Pods, json!({"metadata": {"name": "p"}}));
    assert_eq!(pod["metadata"]["namespace"], "default");

    assert!(api.delete(Resource::Namespaces, "", "team-a").is_some());
    assert_eq!(api.get(Resource::Namespaces, "", "team-a"), None);
    assert!(api.list(Resource::Namespaces, None).is_empty());
}

#[tokio::test]
async fn a_namespace_is_read_at_its_cluster_scoped_path() {
    let (api, _dir, client) = setup().await;
    api.put(Resource::Namespaces, namespace("team-a", "true"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team = namespaces.get("team-a").await.expect("GET namespace");
    assert_eq!(team.metadata.namespace, None);
    assert_eq!(
        api.requests().pop().map(|r| (r.path, r.status)),
        Some(("/api/v1/namespaces/team-a".to_owned(), 200))
    );
    let status = api_status(namespaces.get("gone").await.unwrap_err());
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "namespaces \"gone\" not found")
    );

    // Namespaces are not inside a namespace: that path does not exist (a 404 for the path,
    // not for an object).
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("", "v1", "Namespace"),
        "namespaces",
    );
    let inside: Api<DynamicObject> = Api::namespaced_with(client.clone(), "team-a", &resource);
    let status = api_status(inside.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        api.requests().pop().map(|r| r.path),
        Some("/api/v1/namespaces/team-a/namespaces".to_owned())
    );

    // A namespaced field does not select namespaces.
    let status = api_status(
        namespaces
            .list(&ListParams::default().fields("metadata.namespace=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        status.message,
        "field label not supported: metadata.namespace"
    );
}

#[tokio::test]
async fn a_label_selector_lists_and_watches_only_the_matching_namespaces() {
    let (api, _dir, client) = setup().await;
    api.put(Resource::Namespaces, namespace("team-a", "true"));
    api.put(Resource::Namespaces, namespace("team-b", "false"));
    api.put(
        Resource::Namespaces,
        json!({"metadata": {"name": "kube-system"}}),
    );
    let namespaces: Api<Namespace> = Api::all(client);

    let list = namespaces
        .list(&ListParams::default().labels(SELECTOR))
        .await
        .unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    assert_eq!(rv, api.resource_version().to_string());
    assert_eq!(names(list), ["team-a"]);
    let list = api.requests().pop().unwrap();
    assert_eq!(list.path, "/api/v1/namespaces");
    assert_eq!(list.query_param("labelSelector").as_deref(), Some(SELECTOR));
    assert_eq!(
        names(
            namespaces
                .list(&ListParams::default().labels("plumb.example/dynamic in (true,false)"))
                .await
                .unwrap()
        ),
        ["team-a", "team-b"]
    );
    assert_eq!(
        names(
            namespaces
                .list(&ListParams::default().labels("plumb.example/dynamic"))
                .await
                .unwrap()
        ),
        ["team-a", "team-b"]
    );

    let mut events = namespaces
        .watch(&WatchParams::default().labels(SELECTOR).timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let watch = api.requests().pop().unwrap();
    assert_eq!(watch.path, "/api/v1/namespaces");
    for (key, value) in [
        ("watch", "true"),
        ("labelSelector", SELECTOR),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", rv.as_str()),
    ] {
        assert_eq!(watch.query_param(key).as_deref(), Some(value), "{key}");
    }

    // team-b starts matching, team-a stops, a label change of a matching one, one that never
    // matches, then a delete.
    api.put(Resource::Namespaces, namespace("team-b", "true"));
    api.put(Resource::Namespaces, namespace("team-a", "false"));
    let mut team_b = namespace("team-b", "true");
    team_b["metadata"]["labels"]["tier"] = json!("gold");
    api.put(Resource::Namespaces, team_b);
    api.put(Resource::Namespaces, namespace("team-c", "false"));
    api.delete(Resource::Namespaces, "", "team-b");
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_change(&mut events).await);
    }
    assert_eq!(
        seen,
        [
            "ADDED team-b",
            "DELETED team-a",
            "MODIFIED team-b",
            "DELETED team-b"
        ]
    );

    // From the start (no resourceVersion), the matching namespaces are the initial ADDEDs.
    api.put(Resource::Namespaces, namespace("team-c", "true"));
    let mut events = namespaces
        .watch(&WatchParams::default().labels(SELECTOR).timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(next_change(&mut events).await, "ADDED team-c");
}

#[tokio::test]
async fn namespaces_are_created_patched_and_deleted_over_http() {
    let (api, _dir, client) = setup().await;
    let namespaces: Api<Namespace> = Api::all(client);
    let created = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(namespace("team-a", "false")).unwrap(),
        )
        .await
        .expect("POST namespace");
    assert_eq!(created.metadata.namespace, None);
    assert_eq!(created.metadata.generation, None);
    let labels = created.metadata.labels.unwrap();
    assert_eq!(labels["kubernetes.io/metadata.name"], "team-a");
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    let req = api.requests().pop().unwrap();
    assert_eq!(
        (req.method.as_str(), req.path.as_str(), req.status),
        ("POST", "/api/v1/namespaces", 201)
    );

    let patched = namespaces
        .patch(
            "team-a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"plumb.example/dynamic": "true"}}})),
        )
        .await
        .expect("strategic merge PATCH");
    assert_eq!(
        patched.metadata.labels.unwrap()["plumb.example/dynamic"],
        "true"
    );
    let stored = api.get(Resource::Namespaces, "", "team-a").unwrap();
    assert_eq!(
        stored["metadata"]["labels"]["plumb.example/dynamic"],
        "true"
    );

    let deleted = namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .expect("DELETE namespace");
    assert!(
        deleted.is_left(),
        "the namespace strategy answers the object"
    );
    assert_eq!(api.get(Resource::Namespaces, "", "team-a"), None);
}

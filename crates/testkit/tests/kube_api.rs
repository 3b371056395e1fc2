//! The Kubernetes API stand-in, driven through kube-rs and a written kubeconfig exactly as
//! plumb drives a real cluster: each test proves one behaviour plumb relies on.

use std::path::Path;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind, Status};
use kube::{Client, Config};
use serde_json::{Value, json};
use testkit::kube_api::{
    Fault, FaultKind, KubeApi, KubeApiOptions, KubeconfigUser, LoggedRequest, Resource,
};

const POD_PATH: &str = "/api/v1/namespaces/default/pods";

fn pod(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5"},
    })
}

fn nad(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"config": r#"{"cniVersion":"1.0.0","type":"macvlan","master":"eth0"}"#},
    })
}

fn nad_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition"),
        "network-attachment-definitions",
    )
}

fn ipamclaim_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("k8s.cni.cncf.io", "v1alpha1", "IPAMClaim"),
        "ipamclaims",
    )
}

/// What plumb does: read the kubeconfig file, build a Config from it.
async fn config(api: &KubeApi, dir: &Path, user: KubeconfigUser<'_>) -> Config {
    let path = api.write_kubeconfig(dir.join("kubeconfig"), user);
    let kubeconfig = Kubeconfig::read_from(&path).expect("read the written kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config from kubeconfig")
}

async fn client(api: &KubeApi, dir: &Path, user: KubeconfigUser<'_>) -> Client {
    Client::try_from(config(api, dir, user).await).expect("client from config")
}

/// A started server with one pod, and a token-authenticated client of it.
async fn setup() -> (KubeApi, tempfile::TempDir, Client) {
    let api = KubeApi::start(KubeApiOptions::default());
    api.put(Resource::Pods, pod("default", "p1", json!({"app": "web"})));
    let dir = tempfile::tempdir().expect("tempdir");
    let client = client(&api, dir.path(), KubeconfigUser::Token).await;
    (api, dir, client)
}

fn api_status(err: kube::Error) -> Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

fn last(api: &KubeApi) -> LoggedRequest {
    api.requests().pop().expect("a logged request")
}

#[tokio::test]
async fn get_a_pod_over_https_with_a_token() {
    let (api, _dir, client) = setup().await;
    assert!(api.url().starts_with("https://127.0.0.1:"));
    let pods: Api<Pod> = Api::default_namespaced(client);
    let p = pods.get("p1").await.expect("GET pod");
    assert_eq!(p.metadata.name.as_deref(), Some("p1"));
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-1"));
    assert_eq!(p.status.unwrap().pod_ip.as_deref(), Some("10.0.0.5"));
    assert_eq!(p.metadata.resource_version.as_deref(), Some("1"));
    assert!(p.metadata.uid.is_some() && p.metadata.creation_timestamp.is_some());

    let req = last(&api);
    assert_eq!(
        (req.method.as_str(), req.path.as_str(), req.status),
        ("GET", "/api/v1/namespaces/default/pods/p1", 200)
    );
    assert_eq!(req.bearer_token, api.token());
    assert!(!req.client_certificate);
}

#[tokio::test]
async fn a_wrong_token_or_none_is_401_with_the_api_server_body() {
    let (api, dir, client) = setup().await;
    let good = api.token().unwrap();
    api.revoke_token(&good);
    api.accept_token("another-token");
    let pods: Api<Pod> = Api::default_namespaced(client);
    let status = api_status(pods.get("p1").await.unwrap_err());
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );
    assert_eq!(last(&api).status, 401);
    assert_eq!(last(&api).bearer_token.as_deref(), Some(good.as_str()));

    let anonymous: Api<Pod> = Api::default_namespaced(client_anonymous(&api, dir.path()).await);
    assert_eq!(api_status(anonymous.get("p1").await.unwrap_err()).code, 401);
    // /version is public, as the default RBAC rules make it.
    let info = client_anonymous(&api, dir.path())
        .await
        .apiserver_version()
        .await
        .expect("GET /version");
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "34"));
}

async fn client_anonymous(api: &KubeApi, dir: &Path) -> Client {
    client(api, &dir.join("anon"), KubeconfigUser::Anonymous).await
}

/// kube-rs reads a `tokenFile` when the client is built and then caches the token for 60 s
/// (re-reading only once fewer than 10 s are left; a 401 does not trigger a re-read). A
/// long-lived client therefore keeps sending a revoked token for up to a minute: plumb must
/// build its client from the kubeconfig per CNI call (the thin plugin does, being a new
/// process each time) or rebuild it on 401 (the daemon).
#[tokio::test]
async fn token_file_rotation_needs_a_fresh_client() {
    let api = KubeApi::start(KubeApiOptions::default());
    api.put(Resource::Pods, pod("default", "p1", json!({})));
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let cfg = config(&api, dir.path(), KubeconfigUser::TokenFile(&token_file)).await;
    let old_token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(Some(&old_token), api.token().as_ref());

    let long_lived: Api<Pod> = Api::default_namespaced(Client::try_from(cfg.clone()).unwrap());
    long_lived.get("p1").await.expect("the first token works");

    // Rotate as the kubelet does for a projected service-account token, then revoke the old.
    std::fs::write(&token_file, "rotated-token").unwrap();
    api.accept_token("rotated-token");
    api.revoke_token(&old_token);

    assert_eq!(
        api_status(long_lived.get("p1").await.unwrap_err()).code,
        401,
        "kube-rs still sends the cached token"
    );
    assert_eq!(last(&api).bearer_token.as_deref(), Some(old_token.as_str()));

    let fresh: Api<Pod> = Api::default_namespaced(Client::try_from(cfg).unwrap());
    fresh
        .get("p1")
        .await
        .expect("a client built after the rotation reads the new token");
    assert_eq!(last(&api).bearer_token.as_deref(), Some("rotated-token"));

    // kube-rs does not trim the file (client-go does): a trailing newline makes every request
    // fail before it is sent. plumb should trim, or at least report this clearly.
    std::fs::write(&token_file, "rotated-token\n").unwrap();
    let with_newline: Api<Pod> = Api::default_namespaced(
        Client::try_from(config(&api, dir.path(), KubeconfigUser::TokenFile(&token_file)).await)
            .unwrap(),
    );
    let before = api.requests().len();
    let err = with_newline.get("p1").await.unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
    assert_eq!(
        api.requests().len(),
        before,
        "the request never reached the server"
    );
}

#[tokio::test]
async fn client_certificate_auth() {
    let api = KubeApi::start(KubeApiOptions {
        tokens: vec![],
        ..KubeApiOptions::default()
    });
    api.put(Resource::Pods, pod("default", "p1", json!({})));
    let dir = tempfile::tempdir().unwrap();
    let pods: Api<Pod> =
        Api::default_namespaced(client(&api, dir.path(), KubeconfigUser::ClientCertificate).await);
    pods.get("p1").await.expect("GET with a client certificate");
    let req = last(&api);
    assert!(req.client_certificate);
    assert_eq!(req.bearer_token, None);

    // With client-certificate auth off the server does not ask for one: 401.
    let no_certs = KubeApi::start(KubeApiOptions {
        client_cert_auth: false,
        ..KubeApiOptions::default()
    });
    let pods: Api<Pod> = Api::default_namespaced(
        client(&no_certs, dir.path(), KubeconfigUser::ClientCertificate).await,
    );
    assert_eq!(api_status(pods.get("p1").await.unwrap_err()).code, 401);
}

#[tokio::test]
async fn plain_http_with_a_token() {
    let api = KubeApi::start(KubeApiOptions::http());
    api.put(Resource::Pods, pod("default", "p1", json!({})));
    assert!(api.url().starts_with("http://"));
    assert!(api.ca_pem().is_none());
    let dir = tempfile::tempdir().unwrap();
    let pods: Api<Pod> =
        Api::default_namespaced(client(&api, dir.path(), KubeconfigUser::Token).await);
    assert_eq!(
        pods.get("p1").await.unwrap().metadata.name.as_deref(),
        Some("p1")
    );
}

#[tokio::test]
async fn list_with_label_and_field_selectors() {
    let (api, _dir, client) = setup().await;
    api.put(Resource::Pods, pod("default", "p2", json!({"app": "db"})));
    api.put(Resource::Pods, pod("other", "p3", json!({"app": "web"})));
    let mut p4 = pod("default", "p4", json!({"app": "web", "tier": "front"}));
    p4["spec"]["nodeName"] = json!("node-2");
    api.put(Resource::Pods, p4);

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let names = |list: kube::core::ObjectList<Pod>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let web = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        web.metadata.resource_version,
        Some(api.resource_version().to_string())
    );
    assert_eq!(names(web), ["p1", "p4"]);
    assert_eq!(
        names(
            pods.list(&ListParams::default().labels("app in (web,db),!tier"))
                .await
                .unwrap()
        ),
        ["p1", "p2"]
    );
    assert_eq!(
        names(
            pods.list(&ListParams::default().fields("spec.nodeName=node-2"))
                .await
                .unwrap()
        ),
        ["p4"]
    );
    let req = last(&api);
    assert_eq!(
        req.query_param("fieldSelector").as_deref(),
        Some("spec.nodeName=node-2")
    );

    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(
        names(
            all.list(&ListParams::default().labels("app=web"))
                .await
                .unwrap()
        ),
        ["p1", "p4", "p3"]
    );
    assert_eq!(last(&api).path, "/api/v1/pods");

    // Pagination: limit and continue.
    let page = pods.list(&ListParams::default().limit(2)).await.unwrap();
    let token = page.metadata.continue_.clone().expect("a continue token");
    assert_eq!(page.metadata.remaining_item_count, Some(1));
    assert_eq!(names(page), ["p1", "p2"]);
    assert_eq!(
        names(
            pods.list(&ListParams::default().limit(2).continue_token(&token))
                .await
                .unwrap()
        ),
        ["p4"]
    );

    // Field labels the real server does not support are a 400 there too.
    let status = api_status(
        pods.list(&ListParams::default().fields("spec.containers=x"))
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
    assert_eq!(status.message, "field label not supported: spec.containers");

    // NADs, as plumb reads them: a typed wrapper over DynamicObject.
    api.put(
        Resource::NetworkAttachmentDefinitions,
        nad("default", "macvlan-conf"),
    );
    api.put(
        Resource::NetworkAttachmentDefinitions,
        nad("kube-system", "bridge"),
    );
    let nads: Api<DynamicObject> = Api::namespaced_with(client, "default", &nad_resource());
    let list = nads.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].data["spec"]["config"],
        nad("", "")["spec"]["config"]
    );
    let one = nads.get("macvlan-conf").await.unwrap();
    assert_eq!(one.types.unwrap().kind, "NetworkAttachmentDefinition");
    assert_eq!(
        last(&api).path,
        "/apis/k8s.cni.cncf.io/v1/namespaces/default/network-attachment-definitions/macvlan-conf"
    );
}

async fn next_event(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Pod>>> + Unpin),
) -> WatchEvent<Pod> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("an event within 5 s")
        .expect("the stream is open")
        .expect("a well-formed event")
}

fn describe(event: &WatchEvent<Pod>) -> String {
    match event {
        WatchEvent::Added(p) => format!("ADDED {}", p.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Modified(p) => format!("MODIFIED {}", p.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Deleted(p) => format!("DELETED {}", p.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Bookmark(b) => format!("BOOKMARK {}", b.metadata.resource_version),
        WatchEvent::Error(s) => format!("ERROR {} {}", s.code, s.reason),
    }
}

#[tokio::test]
async fn held_watches_deliver_nothing_until_released_and_then_everything_in_order() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let mut events = pods
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    // setup()'s pod, from the watch's start.
    assert_eq!(describe(&next_event(&mut events).await), "ADDED p1");
    api.hold_watches(true);
    api.put(Resource::Pods, pod("default", "a", json!({})));
    api.put(Resource::Pods, pod("default", "b", json!({})));
    let nothing = tokio::time::timeout(Duration::from_millis(300), events.next()).await;
    assert!(nothing.is_err(), "an event while held: {nothing:?}");
    api.hold_watches(false);
    let seen = [
        describe(&next_event(&mut events).await),
        describe(&next_event(&mut events).await),
    ];
    assert_eq!(seen, ["ADDED a", "ADDED b"]);
}

#[tokio::test]
async fn a_registered_node_is_served_and_another_is_404() {
    use k8s_openapi::api::core::v1::Node;
    let (api, _dir, client) = setup().await;
    api.register_node("n1", "uid-1");
    let nodes: Api<Node> = Api::all(client);
    let n1 = nodes.get_metadata_opt("n1").await.unwrap().unwrap();
    assert_eq!(n1.metadata.uid.as_deref(), Some("uid-1"));
    assert!(nodes.get_metadata_opt("n2").await.unwrap().is_none());
    let e = api_status(nodes.get("n2").await.unwrap_err());
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "nodes \"n2\" not found")
    );
}

#[tokio::test]
async fn watch_sees_added_modified_deleted() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = pods
        .watch(&WatchParams::default().labels("app=web").timeout(10), &rv)
        .await
        .unwrap()
        .boxed();

    let created: Pod = serde_json::from_value(pod("default", "w", json!({"app": "web"}))).unwrap();
    pods.create(&PostParams::default(), &created).await.unwrap();
    pods.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
    )
    .await
    .unwrap();
    api.put(Resource::Pods, pod("default", "db", json!({"app": "db"}))); // not selected
    pods.delete("w", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(describe(&next_event(&mut events).await));
    }
    assert_eq!(seen, ["ADDED w", "MODIFIED w", "DELETED w"]);

    // A watch request is logged once its stream starts.
    let watch = api
        .requests()
        .into_iter()
        .find(|r| r.query_param("watch").as_deref() == Some("true"))
        .unwrap();
    assert_eq!(
        (watch.status, watch.query_param("resourceVersion")),
        (200, Some(rv.clone()))
    );
    assert_eq!(
        watch.query_param("allowWatchBookmarks").as_deref(),
        Some("true")
    );

    // From "0": synthetic ADDED for what exists; a relabel out of the selector is a DELETED.
    let mut events = pods
        .watch(&WatchParams::default().labels("app=web").timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next_event(&mut events).await), "ADDED p1");
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "gone"}}})),
    )
    .await
    .unwrap();
    assert_eq!(describe(&next_event(&mut events).await), "DELETED p1");

    // A compacted resourceVersion: the watch answers 200, then one ERROR event with a 410.
    api.compact();
    let mut events = pods
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let WatchEvent::Error(status) = next_event(&mut events).await else {
        panic!("expected an ERROR event")
    };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert!(
        status
            .message
            .starts_with(&format!("too old resource version: {rv} (")),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn watch_bookmarks_and_streaming_lists() {
    let api = KubeApi::start(KubeApiOptions {
        bookmark_interval: Duration::from_millis(50),
        ..KubeApiOptions::default()
    });
    api.put(Resource::Pods, pod("default", "p1", json!({})));
    let dir = tempfile::tempdir().unwrap();
    let pods: Api<Pod> =
        Api::default_namespaced(client(&api, dir.path(), KubeconfigUser::Token).await);

    let mut events = pods
        .watch(&WatchParams::streaming_lists().timeout(10), "")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next_event(&mut events).await), "ADDED p1");
    let WatchEvent::Bookmark(end) = next_event(&mut events).await else {
        panic!("expected the initial-events-end bookmark")
    };
    assert_eq!(
        end.metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        end.metadata.resource_version,
        api.resource_version().to_string()
    );
    // Periodic bookmarks carry the current resourceVersion.
    let WatchEvent::Bookmark(periodic) = next_event(&mut events).await else {
        panic!("expected a bookmark")
    };
    assert_eq!(
        periodic.metadata.resource_version,
        api.resource_version().to_string()
    );
}

#[tokio::test]
async fn merge_and_strategic_merge_patch_of_annotations() {
    let (api, _dir, client) = setup().await;
    api.put(
        Resource::NetworkAttachmentDefinitions,
        nad("default", "macvlan-conf"),
    );
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let status_annotation = "k8s.v1.cni.cncf.io/network-status";

    let patched = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {status_annotation: "[]", "x": "1"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.annotations.as_ref().unwrap()[status_annotation],
        "[]"
    );
    assert_eq!(patched.metadata.resource_version.as_deref(), Some("3"));
    assert_eq!(
        last(&api).content_type.as_deref(),
        Some("application/merge-patch+json")
    );

    let patched = pods
        .patch(
            "p1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"annotations": {"x": null, "y": "2"}}})),
        )
        .await
        .unwrap();
    let annotations = patched.metadata.annotations.unwrap();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        [status_annotation, "y"]
    );
    assert_eq!(
        last(&api).content_type.as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    // The stored object is what the patch answered.
    assert_eq!(
        api.get(Resource::Pods, "default", "p1").unwrap()["metadata"]["annotations"]["y"],
        "2"
    );

    // A no-op patch writes nothing: the resourceVersion stays.
    let rv = api.resource_version();
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"y": "2"}}})),
    )
    .await
    .unwrap();
    assert_eq!(api.resource_version(), rv);

    // Custom resources take no strategic merge patch: 415, as the real server answers.
    let nads: Api<DynamicObject> = Api::default_namespaced_with(client, &nad_resource());
    let status = api_status(
        nads.patch(
            "macvlan-conf",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
    assert_eq!(
        status.message,
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    );
}

#[tokio::test]
async fn pod_status_subresource_takes_annotations_and_status_but_not_spec() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let patched = pods
        .patch_status(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"k8s.v1.cni.cncf.io/network-status": "[]"}},
                                 "spec": {"nodeName": "elsewhere"}, "status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.annotations.unwrap()["k8s.v1.cni.cncf.io/network-status"],
        "[]"
    );
    assert_eq!(patched.spec.unwrap().node_name.as_deref(), Some("node-1"));
    assert_eq!(patched.status.unwrap().phase.as_deref(), Some("Succeeded"));
    assert_eq!(last(&api).path, "/api/v1/namespaces/default/pods/p1/status");

    // IPAMClaims: through `status` only the status changes.
    api.put(
        Resource::IpamClaims,
        json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
               "metadata": {"name": "c1", "namespace": "default"}, "spec": {"network": "n", "interface": "eth1"}}),
    );
    let claims: Api<DynamicObject> = Api::default_namespaced_with(client, &ipamclaim_resource());
    let claim = claims
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"network": "other"}, "status": {"ips": ["10.1.0.4/24"], "ownerPod": {"name": "p1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(claim.data["spec"]["network"], "n");
    assert_eq!(claim.data["status"]["ips"][0], "10.1.0.4/24");
}

/// kube's `Patch::Json` needs its `jsonpatch` feature, which plumb does not enable; the same
/// request (body and content type) goes through `Client::request`.
async fn json_patch_pod(client: &Client, name: &str, ops: Value) -> kube::Result<Pod> {
    let request = hyper::Request::patch(format!("{POD_PATH}/{name}"))
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).unwrap())
        .unwrap();
    client.request::<Pod>(request).await
}

#[tokio::test]
async fn json_patch() {
    let (api, _dir, client) = setup().await;
    let ops = json!([
        {"op": "add", "path": "/metadata/annotations", "value": {}},
        {"op": "add", "path": "/metadata/annotations/k8s.v1.cni.cncf.io~1network-status", "value": "[]"},
        {"op": "replace", "path": "/metadata/labels/app", "value": "api"},
    ]);
    let patched = json_patch_pod(&client, "p1", ops).await.unwrap();
    assert_eq!(
        patched.metadata.annotations.unwrap()["k8s.v1.cni.cncf.io/network-status"],
        "[]"
    );
    assert_eq!(patched.metadata.labels.unwrap()["app"], "api");
    assert_eq!(
        last(&api).content_type.as_deref(),
        Some("application/json-patch+json")
    );

    // A failing `test` operation changes nothing and is a 422.
    let rv = api.resource_version();
    let ops = json!([
        {"op": "test", "path": "/metadata/labels/app", "value": "web"},
        {"op": "remove", "path": "/metadata/labels/app"},
    ]);
    let status = api_status(json_patch_pod(&client, "p1", ops).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(api.resource_version(), rv);
    // Not a JSON patch document at all: 400.
    let status = api_status(
        json_patch_pod(&client, "p1", json!({"op": "add"}))
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn server_side_apply_creates_then_updates() {
    let (api, _dir, client) = setup().await;
    let claims: Api<DynamicObject> = Api::default_namespaced_with(client, &ipamclaim_resource());
    let applied = json!({"apiVersion": "k8s.cni.cncf.io/v1alpha1", "kind": "IPAMClaim",
                         "metadata": {"name": "c1", "labels": {"owner": "plumb"}},
                         "spec": {"network": "tenant-a", "interface": "net1"}});
    let params = PatchParams::apply("plumb").force();
    let created = claims
        .patch("c1", &params, &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(last(&api).status, 201);
    assert_eq!(
        last(&api).content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(
        last(&api).query_param("fieldManager").as_deref(),
        Some("plumb")
    );
    assert_eq!(created.data["spec"]["network"], "tenant-a");
    assert_eq!(created.metadata.generation, Some(1));

    let mut changed = applied.clone();
    changed["spec"]["interface"] = json!("net2");
    let updated = claims
        .patch("c1", &params, &Patch::Apply(&changed))
        .await
        .unwrap();
    assert_eq!(last(&api).status, 200);
    assert_eq!(updated.data["spec"]["interface"], "net2");
    assert_eq!(updated.metadata.labels.unwrap()["owner"], "plumb");
    assert_eq!(updated.metadata.generation, Some(2));
    assert_eq!(updated.metadata.uid, created.metadata.uid);
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_is_a_409_conflict() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut stale = pods.get("p1").await.unwrap();
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"v": "2"}}})),
    )
    .await
    .unwrap();

    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "3".into());
    let status = api_status(
        pods.replace("p1", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on pods \"p1\": the object has been modified; please apply your \
         changes to the latest version and try again"
    );
    let details = status.details.unwrap();
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.group.as_str()
        ),
        ("p1", "pods", "")
    );
    assert_eq!(last(&api).method, "PUT");

    // With the current resourceVersion it goes through.
    let mut current = pods.get("p1").await.unwrap();
    current
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "3".into());
    let replaced = pods
        .replace("p1", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.labels.unwrap()["v"], "3");

    // A stale resourceVersion in a patch is a precondition as well.
    let status = api_status(
        pods.patch(
            "p1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1", "labels": {"v": "4"}}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status.code, 409);

    // Creating what exists: 409 AlreadyExists.
    let dup: Pod = serde_json::from_value(pod("default", "p1", json!({}))).unwrap();
    let status = api_status(pods.create(&PostParams::default(), &dup).await.unwrap_err());
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (409, "AlreadyExists", "pods \"p1\" already exists")
    );

    // NADs are custom resources: the group is part of the message.
    api.put(Resource::NetworkAttachmentDefinitions, nad("default", "n1"));
    let nads: Api<DynamicObject> = Api::default_namespaced_with(client, &nad_resource());
    let mut nad_obj = nads.get("n1").await.unwrap();
    nad_obj.metadata.resource_version = Some("1".into());
    let status = api_status(
        nads.replace("n1", &PostParams::default(), &nad_obj)
            .await
            .unwrap_err(),
    );
    assert!(status.message.starts_with(
        "Operation cannot be fulfilled on network-attachment-definitions.k8s.cni.cncf.io \"n1\": the object has been modified"
    ));
}

#[tokio::test]
async fn not_found_has_the_api_server_body() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let status = api_status(pods.get("nope").await.unwrap_err());
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (404, "NotFound", "pods \"nope\" not found")
    );
    let details = status.details.unwrap();
    assert_eq!(
        (details.name.as_str(), details.kind.as_str()),
        ("nope", "pods")
    );
    assert_eq!(last(&api).status, 404);

    let nads: Api<DynamicObject> = Api::namespaced_with(client, "default", &nad_resource());
    let status = api_status(nads.get("missing").await.unwrap_err());
    assert_eq!(
        status.message,
        "network-attachment-definitions.k8s.cni.cncf.io \"missing\" not found"
    );
    assert_eq!(status.details.unwrap().group, "k8s.cni.cncf.io");
}

#[tokio::test]
async fn create_and_delete() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut generated = pod("default", "", json!({}));
    generated["metadata"]["generateName"] = json!("gen-");
    generated["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("name");
    let created = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(generated).unwrap(),
        )
        .await
        .unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    assert_eq!(last(&api).status, 201);
    // The status is the server's to set on create.
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));

    // Pods answer a delete with the object; custom resources with a success Status.
    let deleted = pods.delete(&name, &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left());
    assert!(api.get(Resource::Pods, "default", &name).is_none());
    api.put(Resource::NetworkAttachmentDefinitions, nad("default", "n1"));
    let nads: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &nad_resource());
    let status = nads
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status");
    assert_eq!(
        status.details.unwrap().kind,
        "network-attachment-definitions"
    );

    // A finalizer holds a deleted object until it is removed.
    let mut held = pod("default", "held", json!({}));
    held["metadata"]["finalizers"] = json!(["plumb.example/cleanup"]);
    api.put(Resource::Pods, held);
    let marked = pods
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(api.get(Resource::Pods, "default", "held").is_some());
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get(Resource::Pods, "default", "held").is_none());

    // Invalid names are refused as the real server refuses them.
    let bad: Pod = serde_json::from_value(pod("default", "Bad_Name", json!({}))).unwrap();
    let status = api_status(pods.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .starts_with("Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\"")
    );
}

#[tokio::test]
async fn faults_errors_then_success_latency_and_disconnects() {
    let (api, dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);

    // 500 twice, then success: kube-rs does not retry a 500, so the caller sees both.
    api.add_fault(
        Fault::new(FaultKind::Status(500, "InternalError".into()))
            .method("GET")
            .path(POD_PATH)
            .times(2),
    );
    for _ in 0..2 {
        let status = api_status(pods.get("p1").await.unwrap_err());
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError")
        );
    }
    pods.get("p1").await.expect("third GET succeeds");
    let codes: Vec<u16> = api.requests().iter().map(|r| r.status).collect();
    assert_eq!(codes, [500, 500, 200]);

    // 503 twice: kube-rs's default retry policy (429/503/504, from 5 ms with backoff) hides
    // them from the caller.
    api.clear_requests();
    api.add_fault(Fault::new(FaultKind::Unavailable).path(POD_PATH).times(2));
    pods.get("p1").await.expect("kube-rs retries 503");
    let codes: Vec<u16> = api.requests().iter().map(|r| r.status).collect();
    assert_eq!(codes, [503, 503, 200]);

    // Latency: the answer comes no sooner.
    api.add_fault(Fault::new(FaultKind::Latency(Duration::from_millis(100))).times(1));
    let start = Instant::now();
    pods.get("p1").await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(100));

    // A dropped connection is an error, not a hang.
    api.add_fault(Fault::new(FaultKind::Disconnect).times(1));
    let err = pods.get("p1").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::HyperError(_) | kube::Error::Service(_)),
        "{err:?}"
    );
    assert_eq!(last(&api).status, 0);
    pods.get("p1")
        .await
        .expect("the next request gets a new connection");

    // A server that never answers hangs a default kube-rs client (read_timeout is None);
    // plumb must set one. With it, the call fails in time.
    let mut cfg = config(&api, &dir.path().join("timeout"), KubeconfigUser::Token).await;
    cfg.read_timeout = Some(Duration::from_millis(200));
    let impatient: Api<Pod> = Api::default_namespaced(Client::try_from(cfg).unwrap());
    api.add_fault(Fault::new(FaultKind::Latency(Duration::from_secs(3))).times(1));
    let start = Instant::now();
    impatient.get("p1").await.unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn the_api_down_is_connection_refused_not_a_hang() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.get("p1").await.unwrap();
    let mut watch = pods
        .watch(&WatchParams::default().timeout(30), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next_event(&mut watch).await), "ADDED p1");

    api.set_down(true);
    assert!(api.is_down());
    let start = Instant::now();
    let err = pods.get("p1").await.unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}",
        start.elapsed()
    );
    assert!(format!("{err:?}").contains("onnection refused"), "{err:?}");
    // The open watch ends with the server.
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .expect("the watch ends");
    assert!(!matches!(ended, Some(Ok(_))), "{ended:?}");

    api.set_down(false);
    assert_eq!(
        pods.get("p1").await.unwrap().metadata.name.as_deref(),
        Some("p1")
    );
}

#[tokio::test]
async fn the_request_log_records_each_call_and_no_discovery_is_needed() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.get("p1").await.unwrap();
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    pods.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
    )
    .await
    .unwrap();
    let _ = pods.get("missing").await;
    let mut watch = pods
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    next_event(&mut watch).await;

    let log: Vec<(String, String, String, Option<String>, u16)> = api
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.query, r.content_type, r.status))
        .collect();
    let p = |s: &str| s.to_owned();
    assert_eq!(
        log[0],
        (
            p("GET"),
            p("/api/v1/namespaces/default/pods/p1"),
            p(""),
            None,
            200
        )
    );
    assert_eq!(
        log[1],
        (
            p("GET"),
            p(POD_PATH),
            p("&labelSelector=app%3Dweb"),
            None,
            200
        )
    );
    assert_eq!(
        log[2],
        (
            p("PATCH"),
            p("/api/v1/namespaces/default/pods/p1"),
            p(""),
            Some(p("application/merge-patch+json")),
            200
        )
    );
    assert_eq!(log[3].4, 404);
    assert_eq!(
        (log[4].0.as_str(), log[4].1.as_str(), log[4].4),
        ("GET", POD_PATH, 200)
    );
    assert!(log[4].2.contains("watch=true"));
    assert_eq!(
        log.len(),
        5,
        "typed Api<Pod> calls need no discovery requests: {log:?}"
    );
    assert_eq!(
        api.requests()[2].body_json().unwrap(),
        json!({"metadata": {"annotations": {"a": "b"}}})
    );

    // A test can wait for a request it expects (a subprocess's watch, say).
    let found = api.wait_for_request(Duration::from_secs(1), |r| r.query.contains("watch=true"));
    assert!(found.is_some());
    assert!(
        api.wait_for_request(Duration::from_millis(20), |r| r.method == "DELETE")
            .is_none()
    );
}

/// 1000 sequential GETs over one keep-alive connection through kube-rs over HTTPS, as plumb
/// makes them. Printed, not asserted: timings are not tests (run with `--nocapture`).
#[tokio::test]
async fn latency_of_sequential_gets() {
    let (api, _dir, client) = setup().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.get("p1").await.unwrap();
    let mut samples = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let start = Instant::now();
        pods.get("p1").await.unwrap();
        samples.push(start.elapsed());
    }
    let connections: std::collections::HashSet<u64> =
        api.requests().iter().map(|r| r.connection).collect();
    assert_eq!(connections.len(), 1, "one keep-alive connection");
    samples.sort();
    println!(
        "kube-rs over HTTPS, 1000 sequential GETs: median {:?}, p90 {:?}, max {:?}",
        samples[500], samples[900], samples[999]
    );
}

/// The same over plain HTTP from a raw socket (the server's own share of the time), from a
/// synchronous test: no runtime on the test's side, as in a test that runs plumb as a
/// subprocess. The server also goes down and comes back on the same port.
#[test]
fn latency_of_raw_gets_from_a_synchronous_test() {
    let api = KubeApi::start(KubeApiOptions::http());
    api.put(Resource::Pods, pod("default", "p1", json!({})));
    let token = api.token().unwrap();
    let samples = raw_gets(&api, &token, 1000);
    println!(
        "raw HTTP/1.1 keep-alive, 1000 sequential GETs: median {:?}, p90 {:?}, max {:?}",
        samples[500], samples[900], samples[999]
    );

    api.set_down(true);
    let refused = std::net::TcpStream::connect(api.addr()).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    api.set_down(false);
    assert_eq!(raw_gets(&api, &token, 1).len(), 1);
}

fn raw_gets(api: &KubeApi, token: &str, n: usize) -> Vec<Duration> {
    use std::io::{BufRead, BufReader, Read, Write};
    let stream = std::net::TcpStream::connect(api.addr()).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let request = format!(
        "GET /api/v1/namespaces/default/pods/p1 HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\n\r\n",
        api.addr()
    );
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        writer.write_all(request.as_bytes()).unwrap();
        let mut length = 0;
        let mut line = String::new();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        samples.push(start.elapsed());
    }
    samples.sort();
    samples
}

#[tokio::test]
async fn events_and_metadata_only_reads() {
    let (api, _dir, client) = setup().await;
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "p1.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "reason": "AddedInterface", "message": "Add net1 [10.1.0.4/24] from default/macvlan-conf", "type": "Normal",
    }))
    .unwrap();
    let events: Api<Event> = Api::default_namespaced(client.clone());
    events.create(&PostParams::default(), &event).await.unwrap();
    let listed = events
        .list(&ListParams::default().fields("involvedObject.name=p1"))
        .await
        .unwrap();
    assert_eq!(listed.items[0].reason.as_deref(), Some("AddedInterface"));

    let event_v1: EventV1 = serde_json::from_value(json!({
        "metadata": {"name": "p1.2", "namespace": "default"},
        "eventTime": "2026-11-23T16:42:24.000000Z",
        "regarding": {"kind": "Pod", "name": "p1", "namespace": "default"},
        "reason": "AddedInterface", "action": "Add", "reportingController": "plumb",
        "reportingInstance": "node-1", "type": "Normal",
    }))
    .unwrap();
    let events_v1: Api<EventV1> = Api::default_namespaced(client.clone());
    events_v1
        .create(&PostParams::default(), &event_v1)
        .await
        .unwrap();
    assert_eq!(
        last(&api).path,
        "/apis/events.k8s.io/v1/namespaces/default/events"
    );
    assert!(api.get(Resource::EventsV1, "default", "p1.2").is_some());
    assert!(api.get(Resource::Events, "default", "p1.2").is_none());

    // kube-rs's metadata-only reads ask for PartialObjectMetadata.
    let pods: Api<Pod> = Api::default_namespaced(client);
    let meta = pods.get_metadata("p1").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["app"], "web");
    assert_eq!(meta.types.unwrap().kind, "PartialObjectMetadata");
    let list = pods.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("p1"));
}

/// Malformed requests get the Status error the API server would send, and the server keeps
/// serving.
#[tokio::test]
async fn bad_requests_get_status_errors() {
    let (api, _dir, client) = setup().await;
    let send = |method: &str, path: &str, content_type: &str, body: Vec<u8>| {
        let request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .body(body)
            .unwrap();
        let client = client.clone();
        async move { api_status(client.request::<Value>(request).await.unwrap_err()) }
    };

    let s = send("POST", POD_PATH, "application/json", b"{not json".to_vec()).await;
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    let s = send("POST", POD_PATH, "text/plain", b"{}".to_vec()).await;
    assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType"));
    let s = send(
        "PATCH",
        &format!("{POD_PATH}/p1"),
        "application/x-unknown",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(s.code, 415);
    let s = send(
        "PATCH",
        &format!("{POD_PATH}/p1"),
        "application/apply-patch+yaml",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (s.code, s.reason.as_str()),
        (422, "Invalid"),
        "apply needs a fieldManager"
    );
    let s = send(
        "POST",
        POD_PATH,
        "application/json",
        json!({"metadata": {}}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(
        s.message,
        "Pod \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    let s = send(
        "GET",
        "/api/v1/namespaces/default/widgets",
        "application/json",
        vec![],
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        s.message,
        "the server could not find the requested resource"
    );
    let s = send("POST", "/api/v1/pods", "application/json", b"{}".to_vec()).await;
    assert_eq!((s.code, s.reason.as_str()), (405, "MethodNotAllowed"));
    let s = send(
        "GET",
        &format!("{POD_PATH}?watch=true&resourceVersion=abc"),
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(s.code, 400);
    let s = send(
        "GET",
        &format!("{POD_PATH}?labelSelector=a%20b%20c"),
        "application/json",
        vec![],
    )
    .await;
    assert_eq!(s.code, 400);
    let s = send(
        "PUT",
        &format!("{POD_PATH}/p1"),
        "application/json",
        vec![b' '; 4 * 1024 * 1024],
    )
    .await;
    assert_eq!((s.code, s.reason.as_str()), (413, "RequestEntityTooLarge"));

    // The server is still serving.
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.get("p1").await.unwrap();
    assert!(
        api.requests()
            .iter()
            .all(|r| r.status != 0 && r.status != 500)
    );
}

/// A client whose TLS connector offers h2 and http/1.1 by ALPN, as plumb's does (kube's own
/// offers http/1.1 only).
async fn h2_client(api: &KubeApi, dir: &Path) -> Client {
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;
    let cfg = config(api, dir, KubeconfigUser::Token).await;
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(cfg.rustls_client_config().unwrap())
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, kube::client::Body>(https);
    let service = ServiceBuilder::new()
        .layer(cfg.base_uri_layer())
        .option_layer(cfg.auth_layer().unwrap())
        .map_err(tower::BoxError::from)
        .service(hyper);
    Client::new(service, cfg.default_namespace)
}

/// The HTTP version of a GET of pod `p1` through `client`.
async fn version_of_a_get(client: &Client) -> http::Version {
    let request = http::Request::get(format!("{POD_PATH}/p1"))
        .body(kube::client::Body::empty())
        .unwrap();
    let answer = client.send(request).await.unwrap();
    assert_eq!(answer.status(), 200);
    answer.version()
}

#[tokio::test]
async fn a_client_that_offers_h2_gets_http2_and_its_requests_share_one_connection() {
    let api = KubeApi::start(KubeApiOptions::default());
    api.put(Resource::Pods, pod("default", "p1", json!({"app": "web"})));
    let dir = tempfile::tempdir().unwrap();
    let client = h2_client(&api, dir.path()).await;
    assert_eq!(version_of_a_get(&client).await, http::Version::HTTP_2);

    // Requests sent together are handled together, on the one connection.
    api.add_fault(Fault::new(FaultKind::Latency(Duration::from_millis(200))).path(POD_PATH));
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let (a, b, c) = tokio::join!(pods.get("p1"), pods.get("p1"), pods.get("p1"));
    assert!(a.is_ok() && b.is_ok() && c.is_ok());
    assert!(api.max_in_flight() >= 2, "{}", api.max_in_flight());
    assert_eq!(api.connections_accepted(), 1);
    api.clear_faults();

    // A watch streams over HTTP/2 too, while other requests share its connection.
    let mut events = pods
        .watch(&WatchParams::default().labels("app=web").timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next_event(&mut events).await), "ADDED p1");
    let created: Pod = serde_json::from_value(pod("default", "w", json!({"app": "web"}))).unwrap();
    pods.create(&PostParams::default(), &created).await.unwrap();
    assert_eq!(describe(&next_event(&mut events).await), "ADDED w");
    assert_eq!(api.connections_accepted(), 1);
}

#[tokio::test]
async fn an_http1_only_server_gives_the_same_client_http1() {
    let api = KubeApi::start(KubeApiOptions {
        http2: false,
        ..KubeApiOptions::default()
    });
    api.put(Resource::Pods, pod("default", "p1", json!({"app": "web"})));
    let dir = tempfile::tempdir().unwrap();
    let client = h2_client(&api, dir.path()).await;
    assert_eq!(version_of_a_get(&client).await, http::Version::HTTP_11);
    assert_eq!(version_of_a_get(&client).await, http::Version::HTTP_11);
    assert_eq!(api.connections_accepted(), 1, "kept alive");
    assert_eq!(api.max_in_flight(), 1);
}

#[tokio::test]
async fn a_token_request_bound_to_a_node_issues_a_token_the_server_then_accepts() {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    let (api, dir, first) = setup().await;
    let accounts: Api<ServiceAccount> = Api::namespaced(first, "kube-system");
    let request = |seconds: i64, kind: &str| TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(seconds),
            bound_object_ref: Some(BoundObjectReference {
                kind: Some(kind.into()),
                name: Some("node-1".into()),
                ..BoundObjectReference::default()
            }),
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request("plumb", &PostParams::default(), &request(86_400, "Node"))
        .await
        .expect("a token");
    let status = issued.status.expect("a status");
    // A JWT, as the API server's: its claims name the service account and the node.
    let parts: Vec<&str> = status.token.split('.').collect();
    assert_eq!(parts.len(), 3, "{}", status.token);
    let mut payload = parts[1].replace('-', "+").replace('_', "/");
    while !payload.len().is_multiple_of(4) {
        payload.push('=');
    }
    let claims: Value = serde_json::from_slice(&decode_base64(&payload)).unwrap();
    assert_eq!(claims["sub"], "system:serviceaccount:kube-system:plumb");
    assert_eq!(claims["kubernetes.io"]["node"]["name"], "node-1");
    assert!(claims["kubernetes.io"].get("pod").is_none());
    assert_eq!(
        claims["exp"].as_i64().unwrap(),
        status.expiration_timestamp.0.as_second()
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let left = status.expiration_timestamp.0.as_second() - now;
    assert!((86_390..=86_400).contains(&left), "{left}");
    let req = last(&api);
    assert_eq!(
        (req.method.as_str(), req.path.as_str(), req.status),
        (
            "POST",
            "/api/v1/namespaces/kube-system/serviceaccounts/plumb/token",
            201
        )
    );
    let tokens = api.issued_tokens();
    assert_eq!(tokens.len(), 1);
    assert_eq!(
        (
            tokens[0].namespace.as_str(),
            tokens[0].service_account.as_str(),
            tokens[0].bound.clone(),
            tokens[0].expiration_seconds,
        ),
        (
            "kube-system",
            "plumb",
            Some(("Node".to_string(), "node-1".to_string())),
            86_400
        )
    );
    // The issued token authenticates from now on; the first token is still the first.
    let token_file = dir.path().join("issued");
    std::fs::write(&token_file, &status.token).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(
        client(&api, dir.path(), KubeconfigUser::TokenFile(&token_file)).await,
    );
    pods.get("p1").await.expect("GET with the issued token");
    assert_eq!(
        last(&api).bearer_token.as_deref(),
        Some(status.token.as_str())
    );
    assert_ne!(api.token().as_deref(), Some(status.token.as_str()));
    // What the API server refuses: under ten minutes (422), a kind it cannot bind to (400).
    for (seconds, kind, code, said) in [
        (599, "Node", 422, "spec.expirationSeconds"),
        (3600, "Deployment", 400, "to object of type Deployment"),
    ] {
        let e = api_status(
            accounts
                .create_token_request("plumb", &PostParams::default(), &request(seconds, kind))
                .await
                .unwrap_err(),
        );
        assert_eq!(e.code, code, "{e:?}");
        assert!(e.message.contains(said), "{e:?}");
    }
    assert_eq!(api.issued_tokens().len(), 1);
}

#[tokio::test]
async fn node_bound_tokens_follow_the_node_and_the_api_servers_lifetime_cap() {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    let api = KubeApi::start(KubeApiOptions {
        max_token_expiration: Some(7200),
        ..KubeApiOptions::default()
    });
    api.put(Resource::Pods, pod("default", "p1", json!({"app": "web"})));
    let dir = tempfile::tempdir().unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(
        client(&api, dir.path(), KubeconfigUser::Token).await,
        "kube-system",
    );
    api.register_node("node-1", "uid-1");
    let request = |uid: Option<&str>| TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(86_400),
            bound_object_ref: Some(BoundObjectReference {
                kind: Some("Node".into()),
                name: Some("node-1".into()),
                uid: uid.map(Into::into),
                ..BoundObjectReference::default()
            }),
        },
        ..TokenRequest::default()
    };
    let create = |uid: Option<&'static str>| {
        let accounts = accounts.clone();
        async move {
            accounts
                .create_token_request("plumb", &PostParams::default(), &request(uid))
                .await
        }
    };
    // A day asked, two hours granted: the answer's spec says so, and the expiry follows.
    let issued = create(Some("uid-1")).await.expect("a token");
    assert_eq!(issued.spec.expiration_seconds, Some(7200));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let left = issued
        .status
        .as_ref()
        .unwrap()
        .expiration_timestamp
        .0
        .as_second()
        - now;
    assert!((7190..=7200).contains(&left), "{left}");
    let tokens = api.issued_tokens();
    assert_eq!(
        (tokens[0].expiration_seconds, tokens[0].bound_uid.as_deref()),
        (7200, Some("uid-1"))
    );
    // No UID named: the registered Node's.
    create(None).await.expect("a token");
    assert_eq!(api.issued_tokens()[1].bound_uid.as_deref(), Some("uid-1"));
    // Registered again with another UID: the old tokens are refused, a reference naming the
    // old UID is a conflict, and one naming the new UID is granted.
    let old = issued.status.unwrap().token;
    let token_file = dir.path().join("issued");
    std::fs::write(&token_file, &old).unwrap();
    let pods: Api<Pod> = Api::default_namespaced(
        client(&api, dir.path(), KubeconfigUser::TokenFile(&token_file)).await,
    );
    pods.get("p1").await.expect("taken before");
    api.register_node("node-1", "uid-2");
    assert_eq!(api_status(pods.get("p1").await.unwrap_err()).code, 401);
    let e = api_status(create(Some("uid-1")).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"), "{e:?}");
    assert!(
        e.message.starts_with(
            "Operation cannot be fulfilled on Node \"node-1\": the UID in the bound object \
             reference (uid-1) does not match the UID in record"
        ),
        "{e:?}"
    );
    create(Some("uid-2"))
        .await
        .expect("a token for the new Node");
    assert_eq!(api.issued_tokens().len(), 3);
}

/// Standard padded base64, decoded (the test's own, to read what the stand-in wrote).
fn decode_base64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for quad in s.as_bytes().chunks(4) {
        let data: Vec<u8> = quad.iter().copied().filter(|c| *c != b'=').collect();
        let n = data
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | u32::from(value(*c)) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..data.len()]);
    }
    out
}

//! The resources the stand-in serves, and how a request path maps onto them. Paths are exactly
//! the API server's: `/api/v1/…` for the core group, `/apis/{group}/{version}/…` for the others;
//! namespaced objects under `…/namespaces/{ns}/{plural}`, cluster-scoped ones (namespaces) under
//! `…/{plural}/{name}`.

/// A kind of object the stand-in stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// core/v1 `pods` (with the `status` subresource).
    Pods,
    /// core/v1 `events`.
    Events,
    /// events.k8s.io/v1 `events` (what `kube::runtime::events::Recorder` writes). Stored apart
    /// from core/v1 events: the real server converts between the two, the stand-in does not.
    EventsV1,
    /// k8s.cni.cncf.io/v1 `network-attachment-definitions` (no status subresource).
    NetworkAttachmentDefinitions,
    /// k8s.cni.cncf.io/v1alpha1 `ipamclaims` (with the `status` subresource).
    IpamClaims,
    /// core/v1 `namespaces`, the one cluster-scoped resource: stored with the namespace `""` and
    /// no `metadata.namespace`. No `status` or `finalize` subresource.
    Namespaces,
}

struct Def {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
    status_subresource: bool,
    /// Built-in types take strategic merge patch; custom resources do not.
    builtin: bool,
    /// `false`: cluster-scoped, served at `…/{plural}[/{name}]` only.
    namespaced: bool,
}

const PODS: Def = Def {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    short_names: &["po"],
    status_subresource: true,
    builtin: true,
    namespaced: true,
};
const EVENTS: Def = Def {
    group: "",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    short_names: &["ev"],
    status_subresource: false,
    builtin: true,
    namespaced: true,
};
const EVENTS_V1: Def = Def {
    group: "events.k8s.io",
    version: "v1",
    plural: "events",
    singular: "event",
    kind: "Event",
    short_names: &["ev"],
    status_subresource: false,
    builtin: true,
    namespaced: true,
};
const NADS: Def = Def {
    group: "k8s.cni.cncf.io",
    version: "v1",
    plural: "network-attachment-definitions",
    singular: "network-attachment-definition",
    kind: "NetworkAttachmentDefinition",
    short_names: &["net-attach-def"],
    status_subresource: false,
    builtin: false,
    namespaced: true,
};
const IPAMCLAIMS: Def = Def {
    group: "k8s.cni.cncf.io",
    version: "v1alpha1",
    plural: "ipamclaims",
    singular: "ipamclaim",
    kind: "IPAMClaim",
    short_names: &[],
    status_subresource: true,
    builtin: false,
    namespaced: true,
};
const NAMESPACES: Def = Def {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    short_names: &["ns"],
    status_subresource: false,
    builtin: true,
    namespaced: false,
};

/// The PATCH content types, in the order the API server lists them in its 415 answer.
pub(crate) const PATCH_TYPES_BUILTIN: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
pub(crate) const PATCH_TYPES_CUSTOM: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

impl Resource {
    /// Every resource, in discovery order.
    pub const ALL: [Resource; 6] = [
        Resource::Pods,
        Resource::Events,
        Resource::Namespaces,
        Resource::EventsV1,
        Resource::NetworkAttachmentDefinitions,
        Resource::IpamClaims,
    ];

    fn def(self) -> &'static Def {
        match self {
            Resource::Pods => &PODS,
            Resource::Events => &EVENTS,
            Resource::EventsV1 => &EVENTS_V1,
            Resource::NetworkAttachmentDefinitions => &NADS,
            Resource::IpamClaims => &IPAMCLAIMS,
            Resource::Namespaces => &NAMESPACES,
        }
    }

    /// API group (`""` for core).
    pub fn group(self) -> &'static str {
        self.def().group
    }

    pub fn version(self) -> &'static str {
        self.def().version
    }

    /// The URL path segment, e.g. `network-attachment-definitions`.
    pub fn plural(self) -> &'static str {
        self.def().plural
    }

    pub fn kind(self) -> &'static str {
        self.def().kind
    }

    /// `apiVersion` of the objects: `v1` or `{group}/{version}`.
    pub fn api_version(self) -> String {
        if self.group().is_empty() {
            self.version().to_owned()
        } else {
            format!("{}/{}", self.group(), self.version())
        }
    }

    /// `GroupResource.String()`: `pods`, `network-attachment-definitions.k8s.cni.cncf.io`.
    pub fn group_resource(self) -> String {
        if self.group().is_empty() {
            self.plural().to_owned()
        } else {
            format!("{}.{}", self.plural(), self.group())
        }
    }

    /// `false` for cluster-scoped resources, whose objects have no `metadata.namespace`.
    pub fn is_namespaced(self) -> bool {
        self.def().namespaced
    }

    pub(crate) fn has_status(self) -> bool {
        self.def().status_subresource
    }

    pub(crate) fn is_builtin(self) -> bool {
        self.def().builtin
    }

    pub(crate) fn patch_types(self) -> &'static [&'static str] {
        if self.is_builtin() {
            PATCH_TYPES_BUILTIN
        } else {
            PATCH_TYPES_CUSTOM
        }
    }

    fn lookup(group: &str, version: &str, plural: &str) -> Option<Resource> {
        Resource::ALL
            .into_iter()
            .find(|r| r.group() == group && r.version() == version && r.plural() == plural)
    }

    /// The `APIResource` entries of one group version, for discovery.
    pub(crate) fn discovery(group: &str, version: &str) -> Option<serde_json::Value> {
        let mut resources = Vec::new();
        for r in Resource::ALL
            .into_iter()
            .filter(|r| r.group() == group && r.version() == version)
        {
            let d = r.def();
            resources.push(serde_json::json!({
                "name": d.plural,
                "singularName": d.singular,
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": d.short_names,
            }));
            if d.status_subresource {
                resources.push(serde_json::json!({
                    "name": format!("{}/status", d.plural),
                    "singularName": "",
                    "namespaced": d.namespaced,
                    "kind": d.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        if resources.is_empty() {
            return None;
        }
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        Some(serde_json::json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }))
    }

    /// `APIGroupList` for `/apis`: every non-core group with its versions.
    pub(crate) fn groups() -> serde_json::Value {
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for r in Resource::ALL.into_iter().filter(|r| !r.group().is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == r.group()) {
                Some((_, versions)) if !versions.contains(&r.version()) => {
                    versions.push(r.version())
                }
                Some(_) => {}
                None => groups.push((r.group(), vec![r.version()])),
            }
        }
        let groups: Vec<serde_json::Value> = groups
            .into_iter()
            .map(|(g, versions)| {
                let versions: Vec<serde_json::Value> = versions
                    .iter()
                    .map(|v| serde_json::json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                    .collect();
                serde_json::json!({
                    "name": g,
                    "versions": versions,
                    "preferredVersion": versions[0],
                })
            })
            .collect();
        serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }
}

/// What a request path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Version,
    Health,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/{group}`
    Group(String),
    /// `/api/v1`, `/apis/{group}/{version}`
    GroupVersion(String, String),
    /// `…/{plural}` (all namespaces, or a cluster-scoped collection) or
    /// `…/namespaces/{ns}/{plural}`
    Collection {
        res: Resource,
        ns: Option<String>,
    },
    /// `…/namespaces/{ns}/{plural}/{name}[/status]`, or `…/{plural}/{name}[/status]` for a
    /// cluster-scoped resource (`ns` empty)
    Object {
        res: Resource,
        ns: String,
        name: String,
        status: bool,
    },
    /// `/api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: a TokenRequest (POST only; the
    /// stand-in serves no ServiceAccount objects, only their tokens).
    TokenRequest {
        ns: String,
        name: String,
    },
    /// `/api/v1/nodes/{name}`: a Node registered with `register_node` (GET only; the stand-in
    /// serves no other Node requests).
    Node(String),
    NotFound,
}

impl Route {
    pub(crate) fn parse(path: &str) -> Route {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        match segs.as_slice() {
            ["version"] => Route::Version,
            ["healthz" | "livez" | "readyz"] => Route::Health,
            ["api"] => Route::CoreVersions,
            ["apis"] => Route::Groups,
            ["api", "v1"] => Route::GroupVersion(String::new(), "v1".into()),
            [
                "api",
                "v1",
                "namespaces",
                ns,
                "serviceaccounts",
                name,
                "token",
            ] if !ns.is_empty() && !name.is_empty() => Route::TokenRequest {
                ns: (*ns).to_owned(),
                name: (*name).to_owned(),
            },
            ["api", "v1", "nodes", name] if !name.is_empty() => Route::Node((*name).to_owned()),
            ["api", "v1", rest @ ..] => Self::resource_path("", "v1", rest),
            ["apis", group] => Route::Group((*group).to_owned()),
            ["apis", group, version] => {
                Route::GroupVersion((*group).to_owned(), (*version).to_owned())
            }
            ["apis", group, version, rest @ ..] => Self::resource_path(group, version, rest),
            _ => Route::NotFound,
        }
    }

    /// A namespaced resource is served only under `namespaces/{ns}/` (apart from its
    /// all-namespaces collection), a cluster-scoped one never is.
    fn resource_path(group: &str, version: &str, rest: &[&str]) -> Route {
        let lookup = |plural: &str, namespaced: bool| {
            Resource::lookup(group, version, plural).filter(|r| r.is_namespaced() == namespaced)
        };
        let object = |res: Resource, ns: &str, name: &str, status| {
            if (ns.is_empty() && res.is_namespaced()) || name.is_empty() {
                return Route::NotFound;
            }
            Route::Object {
                res,
                ns: ns.to_owned(),
                name: name.to_owned(),
                status,
            }
        };
        match rest {
            [plural] => match Resource::lookup(group, version, plural) {
                Some(res) => Route::Collection { res, ns: None },
                None => Route::NotFound,
            },
            [plural, name] => match lookup(plural, false) {
                Some(res) => object(res, "", name, false),
                None => Route::NotFound,
            },
            [plural, name, "status"] => match lookup(plural, false) {
                Some(res) if res.has_status() => object(res, "", name, true),
                _ => Route::NotFound,
            },
            ["namespaces", ns, plural] if !ns.is_empty() => match lookup(plural, true) {
                Some(res) => Route::Collection {
                    res,
                    ns: Some((*ns).to_owned()),
                },
                None => Route::NotFound,
            },
            ["namespaces", ns, plural, name] => match lookup(plural, true) {
                Some(res) => object(res, ns, name, false),
                None => Route::NotFound,
            },
            ["namespaces", ns, plural, name, "status"] => match lookup(plural, true) {
                Some(res) if res.has_status() => object(res, ns, name, true),
                _ => Route::NotFound,
            },
            _ => Route::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_like_the_api_server() {
        assert_eq!(
            Route::parse("/api/v1/namespaces/default/pods/p1/status"),
            Route::Object {
                res: Resource::Pods,
                ns: "default".into(),
                name: "p1".into(),
                status: true
            }
        );
        assert_eq!(
            Route::parse("/api/v1/pods"),
            Route::Collection {
                res: Resource::Pods,
                ns: None
            }
        );
        assert_eq!(
            Route::parse("/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions"),
            Route::Collection {
                res: Resource::NetworkAttachmentDefinitions,
                ns: Some("ns".into())
            }
        );
        assert_eq!(
            Route::parse("/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ns/ipamclaims/c/status"),
            Route::Object {
                res: Resource::IpamClaims,
                ns: "ns".into(),
                name: "c".into(),
                status: true
            }
        );
        // NADs have no status subresource; pods have no `log` here.
        assert_eq!(
            Route::parse(
                "/apis/k8s.cni.cncf.io/v1/namespaces/ns/network-attachment-definitions/n/status"
            ),
            Route::NotFound
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/ns/pods/p/log"),
            Route::NotFound
        );
        assert_eq!(
            Route::parse("/apis/k8s.cni.cncf.io/v2/namespaces/ns/ipamclaims"),
            Route::NotFound
        );
        assert_eq!(
            Route::parse("/apis/events.k8s.io/v1/namespaces/ns/events"),
            Route::Collection {
                res: Resource::EventsV1,
                ns: Some("ns".into())
            }
        );
    }

    #[test]
    fn namespaces_are_served_cluster_scoped() {
        assert_eq!(
            Route::parse("/api/v1/namespaces"),
            Route::Collection {
                res: Resource::Namespaces,
                ns: None
            }
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/team-a"),
            Route::Object {
                res: Resource::Namespaces,
                ns: String::new(),
                name: "team-a".into(),
                status: false
            }
        );
        // Namespaced resources are still reached through their namespace, and only there.
        assert_eq!(
            Route::parse("/api/v1/namespaces/team-a/pods"),
            Route::Collection {
                res: Resource::Pods,
                ns: Some("team-a".into())
            }
        );
        assert_eq!(
            Route::parse("/api/v1/namespaces/team-a/pods/p"),
            Route::Object {
                res: Resource::Pods,
                ns: "team-a".into(),
                name: "p".into(),
                status: false
            }
        );
        assert_eq!(Route::parse("/api/v1/pods/p"), Route::NotFound);
        assert_eq!(
            Route::parse("/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ipamclaims"),
            Route::NotFound
        );
        // No namespace inside a namespace, no status subresource, no other group's namespaces.
        for path in [
            "/api/v1/namespaces/x/namespaces",
            "/api/v1/namespaces/x/namespaces/team-a",
            "/api/v1/namespaces/team-a/status",
            "/api/v1/namespaces/team-a/finalize",
            "/apis/k8s.cni.cncf.io/v1/namespaces/team-a",
        ] {
            assert_eq!(Route::parse(path), Route::NotFound, "{path}");
        }
        assert!(!Resource::Namespaces.is_namespaced());
        assert!(Resource::Pods.is_namespaced());
        assert_eq!(Resource::Namespaces.api_version(), "v1");
        assert_eq!(Resource::Namespaces.group_resource(), "namespaces");
    }

    #[test]
    fn discovery_lists_status_subresources() {
        let core = Resource::discovery("", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["pods", "pods/status", "events", "namespaces"]);
        let scoped: Vec<bool> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["namespaced"].as_bool().unwrap())
            .collect();
        assert_eq!(scoped, [true, true, true, false]);
        let groups = Resource::groups();
        assert_eq!(groups["groups"][0]["name"], "events.k8s.io");
        assert_eq!(groups["groups"][1]["versions"].as_array().unwrap().len(), 2);
    }
}

//! Planning a pod's attachments: pod + NADs + plumb's configuration + the CNI request → the
//! ordered list of attachments (multi-net spec §6.2), each with everything its delegates will be
//! given. Nothing runs here; objects and files are reached only through the [`Networks`] seam, so
//! a plan can be computed and shown without touching the node (`plumb plan`) and tested
//! table-style, and every check that can fail is made before anything runs.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use cni::NetworkConfigList;
use cni::error::{CniError, ErrorCode};
use netattach::nad::NadConfig;
use netattach::runtime_config::{
    apply_cni_args, capability, capability_args, check_capabilities, set_device_id,
};
use netattach::selection::{self, NETWORKS_ANNOTATION, NetworkSelectionElement};
use netattach::{NetworkAttachmentDefinition, NetworkRef};
use serde_json::{Map, Value};

use crate::config::Config;

/// Multus's annotation replacing the cluster-wide default network for one pod.
pub const DEFAULT_NETWORK_ANNOTATION: &str = "v1.multus-cni.io/default-network";

/// The `args.cni` key that carries an element's `ipam-claim-reference` to the delegates
/// (§4.1.2.1.11; Multus drops the key, so IPAM plugins that support claims read it here).
pub const IPAM_CLAIM_ARG: &str = "ipam-claim-reference";

/// What the planner needs to know of the pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub annotations: BTreeMap<String, String>,
}

/// The pod annotation the kubelet sets on static pods (their API object is a mirror, whose UID
/// differs from the one the runtime has).
const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// Whether the plan reads the pod annotation `key`: a cache of pods keeps these and no others.
pub fn reads_annotation(key: &str) -> bool {
    [
        NETWORKS_ANNOTATION,
        DEFAULT_NETWORK_ANNOTATION,
        CONFIG_SOURCE_ANNOTATION,
    ]
    .contains(&key)
}

impl Pod {
    /// Its `k8s.v1.cni.cncf.io/networks` annotation (multi-net spec §4.1.2); empty: none.
    pub fn selection(&self) -> &str {
        self.annotations
            .get(NETWORKS_ANNOTATION)
            .map_or("", String::as_str)
    }

    /// A static (mirror) pod: the kubelet made it from a file, and its API UID is not the one
    /// the runtime passes.
    pub fn is_static(&self) -> bool {
        self.annotations
            .get(CONFIG_SOURCE_ANNOTATION)
            .is_some_and(|s| s != "api")
    }
}

/// Where delegate configurations come from: NADs, and configuration files on disk.
pub trait Networks {
    /// The NAD `namespace/name`; `Ok(None)` when it does not exist.
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError>;
    /// The configuration named `name` in plumb's `confDir` (`.conflist` before `.conf`,
    /// multi-net spec §3.4.1); `Ok(None)` when there is none.
    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError>;
    /// A configuration file, or the first one in a directory (`clusterNetwork` as a path).
    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError>;
}

impl<T: Networks + ?Sized> Networks for &T {
    fn nad(&self, r: &NetworkRef) -> Result<Option<NetworkAttachmentDefinition>, CniError> {
        (**self).nad(r)
    }
    fn conf_by_name(&self, name: &str) -> Result<Option<NetworkConfigList>, CniError> {
        (**self).conf_by_name(name)
    }
    fn conf_at(&self, path: &Path) -> Result<NetworkConfigList, CniError> {
        (**self).conf_at(path)
    }
}

/// Which devices the pod was given (the kubelet's PodResources API in production).
pub trait Devices {
    /// The IDs of the devices of `resource` allocated to `pod`, in the order attachments take
    /// them (none allocated is an empty list); `None` when no device plugin offers the resource,
    /// whose attachments then need no device (KubeVirt's bridge markers, as Multus allows).
    fn allocated(&self, pod: &Pod, resource: &str) -> Result<Option<Vec<String>>, CniError>;
}

/// The device an attachment uses (device-info spec; docs/multus-behaviour.md §2.9).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// The device ID (for SR-IOV, the VF's PCI address).
    pub id: String,
    /// The device-plugin resource it was allocated from (the NAD's `resourceName`); `None` when
    /// the selection element named the device itself (Multus's `deviceID` key).
    pub resource: Option<String>,
}

/// One attachment, ready to run.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    /// How network-status names it (§5.3.1): `namespace/name` for a NAD, the configuration's
    /// `name` for a file or an inline delegate.
    pub network: String,
    /// `CNI_IFNAME` for its delegates.
    pub ifname: String,
    /// Whether its selection element named the interface (§4.1.2.1.5), rather than the name
    /// being the runtime's or generated (`net<N>`).
    pub ifname_requested: bool,
    /// The delegates' configuration list, `name` injected and `cni-args` merged.
    pub list: NetworkConfigList,
    /// The network's own configuration list (`name` injected), without what this attachment
    /// adds to it (`cni-args`, an IPAM claim, a device ID): what GC and STATUS run the network
    /// with, since they concern the network and no one pod.
    pub network_list: NetworkConfigList,
    /// The capability arguments its delegates get as `runtimeConfig` (each plugin only those
    /// it declares).
    pub capability_args: Map<String, Value>,
    /// The cluster-wide default network (§5.2): its result is the one the runtime gets.
    pub is_default: bool,
    /// The element's `default-route` gateways (§4.1.2.1.9), when it had the key.
    pub default_route: Option<Vec<IpAddr>>,
    /// Its device, when the network is device-backed or the element names one.
    pub device: Option<Device>,
    /// The NAD's `k8s.v1.cni.cncf.io/resourceName`, when it has one (the attachment may still
    /// have no device: see [`Devices::allocated`]).
    pub resource: Option<String>,
}

/// The ordered attachments, and what the caller should log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub attachments: Vec<Attachment>,
    pub warnings: Vec<String>,
}

/// The one network a `v1.multus-cni.io/default-network` annotation names, or why it names
/// none (the planner and `plumb validate` read it alike). Present but empty is not absent:
/// Multus fails such a pod's ADD (its parser finds no network), and falling back to the cluster
/// network would attach the pod to a network it asked to replace.
pub fn default_network_element(value: &str) -> Result<NetworkSelectionElement, String> {
    if value.trim().is_empty() {
        return Err(
            "it is empty; it must name exactly one network (without the annotation \
                    the pod gets the cluster network)"
                .into(),
        );
    }
    // Not `selection::parse`: the spec's rules for the secondary attachments of the networks
    // annotation do not apply to the default network (`ips` with `ipam-claim-reference`, both
    // ignored here, is OVN-Kubernetes's request for a VM's address).
    let mut elements = selection::parse_default_network(value).map_err(|e| e.detail())?;
    if elements.len() != 1 {
        return Err(format!(
            "it must name exactly one network, not {}",
            elements.len()
        ));
    }
    Ok(elements.remove(0))
}

fn invalid(msg: String) -> CniError {
    CniError::new(ErrorCode::InvalidConfig, msg)
}

/// multi-net spec §7.4: whether namespace isolation lets `pod` use NAD `r`.
fn may_use(config: &Config, pod: &Pod, r: &NetworkRef) -> bool {
    !config.namespace_isolation
        || r.namespace == pod.namespace
        || config.global_namespaces.contains(&r.namespace)
}

/// The NADs the planner will ask for to plan `pod`, so that they can be fetched together
/// before: the `clusterNetwork` given by name (a NAD of that name comes before a file), unless
/// the pod replaces it, then those of the pod's `k8s.v1.cni.cncf.io/networks` annotation. In
/// order, each once, at most `max`, and none from the first one namespace isolation refuses
/// on (the planner stops there). None of the annotation's when it does not parse: the planner
/// says what is wrong with it.
pub fn nads_to_prefetch(config: &Config, pod: &Pod, max: usize) -> Vec<NetworkRef> {
    let cluster_network = config
        .cluster_network
        .as_deref()
        .filter(|v| !v.contains('/') && !pod.annotations.contains_key(DEFAULT_NETWORK_ANNOTATION))
        .map(|name| NetworkRef::new(config.multus_namespace.clone(), name));
    let mut refs: Vec<NetworkRef> = Vec::new();
    for r in cluster_network
        .into_iter()
        .chain(selected_nads(config, pod))
    {
        if refs.len() == max {
            break;
        }
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    refs
}

/// The NADs of the pod's `k8s.v1.cni.cncf.io/networks` annotation, in order, up to the first
/// one namespace isolation refuses; none when it is absent or does not parse.
fn selected_nads(config: &Config, pod: &Pod) -> Vec<NetworkRef> {
    let value = pod.selection();
    if value.trim().is_empty() {
        return Vec::new();
    }
    let Ok(elements) = selection::parse(value) else {
        return Vec::new();
    };
    elements
        .iter()
        .map(|e| e.network_ref(&pod.namespace))
        .take_while(|r| may_use(config, pod, r))
        .collect()
}

/// Plans the attachments of `pod` (`None` without Kubernetes: the default network and the
/// configured extra networks only) for a request whose runtime interface name is `ifname`.
///
/// `devices` gives device-backed networks their devices. Without it (DEL without a record,
/// GC, STATUS, a plan shown offline) they are planned without one, and a warning says so.
///
/// The order (multi-net spec §6.2, Multus `GetNetworkDelegates`): the cluster-wide default
/// network first (`clusterNetwork`, or the pod's `v1.multus-cni.io/default-network` override, or
/// `delegates[0]`), then the other inline `delegates`, then `defaultNetworks` (not for pods in
/// `systemNamespaces`), then each element of the pod's `k8s.v1.cni.cncf.io/networks` annotation.
///
/// Every check that can fail is made here, before anything runs (docs/architecture.md, practice
/// 7): an invalid annotation, a NAD that is missing or not allowed (§7.4), a capability no plugin
/// declares (§4.1.2.1.3.2), an interface name used twice (§4.1.2.1.5), a device-backed NAD
/// (`k8s.v1.cni.cncf.io/resourceName`) without a device of its own for the pod
/// (docs/multus-behaviour.md §2.9).
pub fn plan(
    config: &Config,
    pod: Option<&Pod>,
    ifname: &str,
    networks: &dyn Networks,
    devices: Option<&dyn Devices>,
) -> Result<Plan, CniError> {
    let mut p = Planner {
        config,
        pod,
        networks,
        devices,
        taken: BTreeMap::new(),
        out: Plan::default(),
    };
    p.default_network(ifname)?;
    p.extra_networks()?;
    if let Some(pod) = pod {
        p.selected_networks(pod)?;
    }
    check_interface_names(&p.out.attachments)?;
    p.check_devices()?;
    Ok(p.out)
}

struct Planner<'a> {
    config: &'a Config,
    pod: Option<&'a Pod>,
    networks: &'a dyn Networks,
    devices: Option<&'a dyn Devices>,
    /// Per resource: the devices allocated to the pod, and the attachments that need one.
    taken: BTreeMap<String, Taken>,
    out: Plan,
}

/// The devices of one resource, and the networks of the attachments that need one.
struct Taken {
    /// `None`: no device plugin offers the resource, so its attachments need no device.
    allocated: Option<Vec<String>>,
    users: Vec<String>,
}

/// A network's configuration and, when it is device-backed, its device.
struct Resolved {
    network: String,
    list: NetworkConfigList,
    /// `list` before a device ID was set in it ([`Attachment::network_list`]).
    network_list: NetworkConfigList,
    device: Option<Device>,
    resource: Option<String>,
}

impl Planner<'_> {
    /// `net<N>`, N being the attachment's position in the whole list (Multus numbering: the
    /// default network is 0 and named attachments take a number too). When an earlier
    /// attachment already has that name (it asked for it, or it is the runtime's), the next
    /// free number: a generated name must be unique (multi-net spec §4.2.1), and only a
    /// *requested* name in use fails the pod (§4.1.2.1.5). Multus fails such a pod, so no pod
    /// it attached is named differently.
    fn next_ifname(&self) -> String {
        generated_ifname(
            self.out.attachments.len(),
            self.out.attachments.iter().map(|a| a.ifname.as_str()),
        )
    }

    /// A configured network (the default network, an inline delegate, `defaultNetworks`).
    fn push(&mut self, r: Resolved, ifname: String) {
        let is_default = self.out.attachments.is_empty();
        // multi-net spec §7.5: the runtime's runtimeConfig goes to the default network only.
        let mut capability_args = if is_default {
            self.config.runtime_config.clone()
        } else {
            Map::new()
        };
        if let Some(d) = &r.device {
            capability_args.insert(capability::DEVICE_ID.into(), Value::String(d.id.clone()));
        }
        self.out.attachments.push(Attachment {
            network: r.network,
            ifname,
            ifname_requested: false,
            list: r.list,
            network_list: r.network_list,
            capability_args,
            is_default,
            default_route: None,
            device: r.device,
            resource: r.resource,
        });
    }

    fn default_network(&mut self, ifname: &str) -> Result<(), CniError> {
        if let Some(pod) = self.pod
            && let Some(value) = pod.annotations.get(DEFAULT_NETWORK_ANNOTATION)
        {
            let element = default_network_element(value).map_err(|e| {
                invalid(format!(
                    "pod {}/{}: annotation {DEFAULT_NETWORK_ANNOTATION:?}: {e}",
                    pod.namespace, pod.name
                ))
            })?;
            let r = element.network_ref(&self.config.multus_namespace);
            self.check_isolation(pod, &r, DEFAULT_NETWORK_ANNOTATION)?;
            if element.interface.is_some() {
                self.out.warnings.push(format!(
                    "annotation {DEFAULT_NETWORK_ANNOTATION:?}: \"interface\" is ignored; the \
                     default network always gets the runtime's interface name {ifname:?}"
                ));
            }
            // The default network gets the runtime's runtimeConfig (§7.5), not the element's:
            // say so rather than drop what the pod asked for silently.
            let ignored: Vec<&str> = [
                ("ips", !element.ips.is_empty()),
                ("mac", element.mac.is_some()),
                ("cni-args", element.cni_args.is_some()),
                ("portMappings", !element.port_mappings.is_empty()),
                ("bandwidth", element.bandwidth.is_some()),
                ("default-route", element.default_route.is_some()),
                ("infiniband-guid", element.infiniband_guid.is_some()),
                (
                    "ipam-claim-reference",
                    element.ipam_claim_reference.is_some(),
                ),
                ("deviceID", element.device_id.is_some()),
            ]
            .into_iter()
            .filter_map(|(k, set)| set.then_some(k))
            .collect();
            self.warn_unknown_keys(
                &format!("annotation {DEFAULT_NETWORK_ANNOTATION:?}"),
                &element,
            );
            if !ignored.is_empty() {
                self.out.warnings.push(format!(
                    "annotation {DEFAULT_NETWORK_ANNOTATION:?}: keys {ignored:?} are ignored for \
                     the default network"
                ));
            }
            let resolved = self.nad_network(&r)?;
            self.push(resolved, ifname.to_string());
            return Ok(());
        }
        if let Some(cluster) = &self.config.cluster_network {
            let resolved = self.resolve_configured(cluster, "clusterNetwork")?;
            self.push(resolved, ifname.to_string());
            return Ok(());
        }
        let first = self.config.delegates.first().ok_or_else(|| {
            invalid("plumb configuration gives no cluster-wide default network".into())
        })?;
        let list = inline_delegate(first, 0)?;
        self.push(Resolved::file(list), ifname.to_string());
        Ok(())
    }

    /// The other inline delegates (without `clusterNetwork`), then `defaultNetworks`, which
    /// pods in `systemNamespaces` do not get (as in Multus; the inline delegates they do get).
    fn extra_networks(&mut self) -> Result<(), CniError> {
        if self.config.cluster_network.is_none() {
            for (i, d) in self.config.delegates.iter().enumerate().skip(1) {
                let list = inline_delegate(d, i)?;
                let ifname = self.next_ifname();
                self.push(Resolved::file(list), ifname);
            }
        }
        if let Some(pod) = self.pod
            && self.config.system_namespaces.contains(&pod.namespace)
        {
            return Ok(());
        }
        for name in self.config.default_networks.clone() {
            let resolved = self.resolve_configured(&name, "defaultNetworks")?;
            let ifname = self.next_ifname();
            self.push(resolved, ifname);
        }
        Ok(())
    }

    fn selected_networks(&mut self, pod: &Pod) -> Result<(), CniError> {
        let value = pod.selection();
        if value.trim().is_empty() {
            return Ok(());
        }
        let elements = selection::parse(value).map_err(CniError::from)?;
        for element in &elements {
            let r = element.network_ref(&pod.namespace);
            self.check_isolation(pod, &r, NETWORKS_ANNOTATION)?;
            let Resolved {
                network,
                list,
                network_list,
                device,
                resource,
            } = self.nad_network(&r)?;
            check_capabilities(&network, &list, element)?;
            let list = apply_cni_args(&network, &list, &element_cni_args(element))?;
            let ifname_requested = element.interface.is_some();
            let ifname = element
                .interface
                .clone()
                .unwrap_or_else(|| self.next_ifname());
            self.warn_unknown_keys(&format!("network {network}"), element);
            // The resource's device wins over one the element names (as in Multus).
            let device = device.or_else(|| {
                element
                    .device_id
                    .clone()
                    .map(|id| Device { id, resource: None })
            });
            self.out.attachments.push(Attachment {
                network,
                ifname,
                ifname_requested,
                list,
                network_list,
                capability_args: capability_args(
                    element,
                    device.as_ref().map(|d| d.id.as_str()),
                    None,
                ),
                is_default: false,
                default_route: element.default_route.clone(),
                device,
                resource,
            });
        }
        Ok(())
    }

    /// multi-net spec §7.4, Multus `namespaceIsolation`: a pod may use NADs of its own
    /// namespace and of `globalNamespaces` only.
    fn check_isolation(&self, pod: &Pod, r: &NetworkRef, source: &str) -> Result<(), CniError> {
        if may_use(self.config, pod, r) {
            return Ok(());
        }
        Err(invalid(format!(
            "namespace isolation: pod {}/{} may not use network-attachment-definition {r} \
             (annotation {source:?}): with \"namespaceIsolation\" a pod may select only NADs of \
             its own namespace {:?} or of the global namespaces {:?}",
            pod.namespace, pod.name, pod.namespace, self.config.global_namespaces
        )))
    }

    /// Warns of the selection keys of `element` that the specification does not define (they
    /// are ignored); `what` says where the element comes from.
    fn warn_unknown_keys(&mut self, what: &str, element: &NetworkSelectionElement) {
        let mut unknown: Vec<&str> = element.unknown_keys().collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            self.out.warnings.push(format!(
                "{what}: selection keys {unknown:?} are not part of the specification and are \
                 ignored"
            ));
        }
    }

    /// For errors about a NAD: the pod that selected it, if there is one.
    fn selected_by(&self) -> String {
        self.pod
            .map(|p| format!(" (selected by pod {}/{})", p.namespace, p.name))
            .unwrap_or_default()
    }

    /// The configuration of NAD `r` (multi-net spec §3.4.1): `spec.config`, else a file on
    /// disk named like it, else the request fails.
    fn nad_network(&mut self, r: &NetworkRef) -> Result<Resolved, CniError> {
        let nad = self.networks.nad(r)?.ok_or_else(|| {
            invalid(format!(
                "network-attachment-definition {r} not found{}",
                self.selected_by()
            ))
        })?;
        self.nad_config(r, &nad)
    }

    fn nad_config(
        &mut self,
        r: &NetworkRef,
        nad: &NetworkAttachmentDefinition,
    ) -> Result<Resolved, CniError> {
        let list = match nad.cni_config()? {
            NadConfig::Inline(list) => list,
            NadConfig::OnDisk { name } => {
                let selected_by = self.selected_by();
                self.networks
                    .conf_by_name(&name)
                    .map_err(|e| {
                        e.context(format!(
                            "network-attachment-definition {r}{selected_by} has no spec.config, \
                             and its configuration file {name:?} could not be looked up"
                        ))
                    })?
                    .ok_or_else(|| {
                        invalid(format!(
                            "network-attachment-definition {r}{selected_by} has no spec.config \
                             and no configuration file named {name:?} is in {}",
                            self.config.conf_dir.display()
                        ))
                    })?
            }
        };
        let device = match nad.resource_name() {
            Some(resource) => self.take_device(r, resource)?,
            None => None,
        };
        let network_list = list.clone();
        let list = match &device {
            Some(d) => set_device_id(&list, &d.id),
            None => list,
        };
        Ok(Resolved {
            network: r.to_string(),
            list,
            network_list,
            device,
            resource: nad.resource_name().map(str::to_string),
        })
    }

    /// The next device of `resource` not yet taken by an earlier attachment of this pod
    /// (docs/multus-behaviour.md §2.9: each attachment of a resource gets its own device, in plan
    /// order). Running out is reported once planning is done, with every attachment counted.
    fn take_device(&mut self, r: &NetworkRef, resource: &str) -> Result<Option<Device>, CniError> {
        let (Some(devices), Some(pod)) = (self.devices, self.pod) else {
            self.out.warnings.push(format!(
                "network-attachment-definition {r} is backed by resource {resource:?}, but no \
                 device allocation is known here: it is planned without a device"
            ));
            return Ok(None);
        };
        if !self.taken.contains_key(resource) {
            let allocated = devices.allocated(pod, resource).map_err(|e| {
                e.context(format!(
                    "the devices of resource {resource:?} (network-attachment-definition {r})"
                ))
            })?;
            if allocated.is_none() {
                self.out.warnings.push(format!(
                    "resource {resource:?} of network-attachment-definition {r} is not offered \
                     by a device plugin on this node (a marker resource, or a kubelet that cannot \
                     say): its attachments run without a device"
                ));
            }
            self.taken.insert(
                resource.to_string(),
                Taken {
                    allocated,
                    users: Vec::new(),
                },
            );
        }
        let taken = self.taken.get_mut(resource).expect("inserted above");
        taken.users.push(r.to_string());
        let Some(allocated) = &taken.allocated else {
            return Ok(None);
        };
        Ok(allocated.get(taken.users.len() - 1).map(|id| Device {
            id: id.clone(),
            resource: Some(resource.to_string()),
        }))
    }

    /// After planning: a resource with fewer devices than attachments fails the plan, before
    /// anything runs, with the whole count.
    fn check_devices(&self) -> Result<(), CniError> {
        let Some(pod) = self.pod else {
            return Ok(());
        };
        for (resource, taken) in &self.taken {
            let Some(allocated) = &taken.allocated else {
                continue;
            };
            if taken.users.len() <= allocated.len() {
                continue;
            }
            return Err(invalid(format!(
                "pod {}/{} has {} attachment(s) of device resource {resource:?} ({}) but the \
                 kubelet allocated {} device(s) of it to the pod{}: each attachment needs its own \
                 device, so request {resource:?} in a container's resources (limits) once per \
                 attachment",
                pod.namespace,
                pod.name,
                taken.users.len(),
                taken.users.join(", "),
                allocated.len(),
                if allocated.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", allocated.join(", "))
                }
            )));
        }
        Ok(())
    }

    /// `clusterNetwork` or a `defaultNetworks` entry (docs/multus-behaviour.md §1.1): a name is a NAD
    /// in `multusNamespace`, else a configuration file in `confDir`; a value with `/` is a path.
    fn resolve_configured(&mut self, value: &str, key: &str) -> Result<Resolved, CniError> {
        if value.contains('/') {
            let list = self
                .networks
                .conf_at(Path::new(value))
                .map_err(|e| e.context(format!("plumb configuration {key:?}")))?;
            return Ok(Resolved::file(list));
        }
        let r = NetworkRef::new(self.config.multus_namespace.clone(), value);
        if let Some(nad) = self.networks.nad(&r)? {
            return self.nad_config(&r, &nad);
        }
        match self.networks.conf_by_name(value)? {
            Some(list) => Ok(Resolved::file(list)),
            None => Err(invalid(format!(
                "plumb configuration {key:?}: {value:?} is neither a \
                 network-attachment-definition in namespace {:?} nor a configuration in {}",
                self.config.multus_namespace,
                self.config.conf_dir.display()
            ))),
        }
    }
}

impl Resolved {
    /// A configuration file or inline delegate: named by its `name`, no device.
    fn file(list: NetworkConfigList) -> Resolved {
        Resolved {
            network: list.name.clone(),
            network_list: list.clone(),
            list,
            device: None,
            resource: None,
        }
    }
}

/// An inline `delegates` entry: a configuration list, or a single configuration.
fn inline_delegate(v: &Value, i: usize) -> Result<NetworkConfigList, CniError> {
    let bytes = serde_json::to_vec(v)
        .map_err(|e| invalid(format!("plumb configuration \"delegates\" entry {i}: {e}")))?;
    let list = NetworkConfigList::from_any_bytes(&bytes)
        .map_err(|e| e.context(format!("plumb configuration \"delegates\" entry {i}")))?;
    list.require_plugins()?;
    Ok(list)
}

/// What goes into `args.cni` for an element: its `cni-args`, and its `ipam-claim-reference`.
fn element_cni_args(element: &NetworkSelectionElement) -> Map<String, Value> {
    let mut args = element.cni_args.clone().unwrap_or_default();
    if let Some(claim) = &element.ipam_claim_reference {
        args.insert(IPAM_CLAIM_ARG.into(), Value::String(claim.clone()));
    }
    args
}

/// The name [`Planner::next_ifname`] gives the attachment at `position` in the whole list (the
/// default network is 0) when `taken` are the names of the attachments before it: `net<N>`
/// from N = `position` up, the first no earlier attachment has. Also `plumb validate`'s.
pub fn generated_ifname<'a>(
    position: usize,
    taken: impl Iterator<Item = &'a str> + Clone,
) -> String {
    (position..)
        .map(|n| format!("net{n}"))
        .find(|name| taken.clone().all(|t| t != name))
        .expect("fewer attachments than numbers")
}

/// multi-net spec §4.1.2.1.5: an interface name already used by a previous attachment fails
/// the request; checked here, before anything runs (Multus finds out half-way through).
fn check_interface_names(attachments: &[Attachment]) -> Result<(), CniError> {
    // Which network holds each name, so that the error names both sides of the clash (the
    // earlier one may be the default network or a generated `net<N>`, not in the annotation).
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for a in attachments {
        if let Some(first) = seen.insert(a.ifname.as_str(), a.network.as_str()) {
            return Err(invalid(format!(
                "interface name {:?} of network {} is already used by network {first}, an \
                 earlier attachment of this pod (multi-net spec §4.1.2.1.5)",
                a.ifname, a.network
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

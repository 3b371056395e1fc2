//! What a selection element asks of the delegate's configuration (multi-net spec §4.1.2.1.3.2,
//! §4.1.2.1.4.2, §4.1.2.1.6.2, §4.1.2.1.7.2, §4.1.2.1.8.2, §4.1.2.1.10.2; device-info spec §5.1):
//! its `runtimeConfig` values ([`capability_args`]), the check that some plugin declares each
//! capability it asks for ([`check_capabilities`]), and `cni-args` merged into every plugin's
//! `args.cni` ([`apply_cni_args`]). All pure: the caller owns the list and decides when to apply
//! what.

use cni::NetworkConfigList;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::selection::Bandwidth;
use crate::selection::NetworkSelectionElement;

/// The `runtimeConfig` keys (capability names) an attachment may fill.
pub mod capability {
    /// §4.1.2.1.3.2.
    pub const IPS: &str = "ips";
    /// §4.1.2.1.4.2.
    pub const MAC: &str = "mac";
    /// §4.1.2.1.7.2.
    pub const PORT_MAPPINGS: &str = "portMappings";
    /// §4.1.2.1.8.2.
    pub const BANDWIDTH: &str = "bandwidth";
    /// §4.1.2.1.10.2.
    pub const INFINIBAND_GUID: &str = "infinibandGUID";
    /// CONVENTIONS.md `deviceID`; from Multus's element key or a device-plugin resource.
    pub const DEVICE_ID: &str = "deviceID";
    /// device-info spec §5.1.
    pub const CNI_DEVICE_INFO_FILE: &str = "CNIDeviceInfoFile";
    /// The pod's annotations, which containerd and CRI-O hand a plugin that declares it.
    pub const POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

    /// Every capability name of the CNI conventions (CONVENTIONS.md) and of the NPWG
    /// specifications. Runtimes match these exactly, in this case.
    pub const KNOWN: &[&str] = &[
        PORT_MAPPINGS,
        "ipRanges",
        BANDWIDTH,
        "dns",
        IPS,
        MAC,
        INFINIBAND_GUID,
        DEVICE_ID,
        "aliases",
        "cgroupPath",
        CNI_DEVICE_INFO_FILE,
        POD_ANNOTATIONS,
    ];
}

/// A configuration that cannot carry what the element asks for.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RuntimeConfigError {
    /// No plugin of the network's configuration declares a capability the element needs.
    #[error(
        "network {network}: the selection element asks for {key:?}, but no plugin in the \
         network's configuration declares the {capability:?} capability"
    )]
    MissingCapability {
        network: String,
        /// The selection element's key (`ips`, `infiniband-guid`, …).
        key: &'static str,
        capability: &'static str,
    },
    /// `args` or `args.cni` in a plugin is not an object, so `cni-args` cannot be merged in.
    #[error(
        "network {network}: cannot add \"cni-args\" to plugin {plugin} ({plugin_type:?}): its \
         {what} is not a JSON object"
    )]
    ArgsNotObject {
        network: String,
        plugin: usize,
        plugin_type: String,
        what: &'static str,
    },
}

impl From<RuntimeConfigError> for cni::CniError {
    fn from(e: RuntimeConfigError) -> Self {
        cni::CniError::new(cni::ErrorCode::InvalidConfig, e.to_string())
    }
}

/// The burst the kubelet gives a bandwidth limit of its own (`math.MaxInt32` bits: no limit to
/// speak of), given to a rate the element sets without one. Multi-net spec §4.1.2.1.8: "choose
/// reasonable default values for ingressBurst and egressBurst as some bandwidth management plugins
/// (like the CNI reference bandwidth plugin) require these values"; the reference plugin refuses a
/// rate without a burst ("if rate is set, burst must also be set"), so the pod would not start.
pub const DEFAULT_BANDWIDTH_BURST: u64 = i32::MAX as u64;

/// `bw` with [`DEFAULT_BANDWIDTH_BURST`] for each rate that has no burst.
fn with_default_bursts(bw: &Bandwidth) -> Bandwidth {
    let burst = |rate: Option<u64>, burst: Option<u64>| match (rate, burst) {
        (Some(_), None) => Some(DEFAULT_BANDWIDTH_BURST),
        _ => burst,
    };
    Bandwidth {
        ingress_burst: burst(bw.ingress_rate, bw.ingress_burst),
        egress_burst: burst(bw.egress_rate, bw.egress_burst),
        ..bw.clone()
    }
}

/// The capability arguments for one attachment (the `runtimeConfig` keys of CONVENTIONS.md):
/// `ips`, `mac`, `portMappings`, `bandwidth` (a rate without its burst gets
/// [`DEFAULT_BANDWIDTH_BURST`]), `infinibandGUID` from the element; `deviceID` from
/// `device_id` (found through the NAD's resource) or else the element's `deviceID` (Multus gives
/// the resource's ID precedence); `CNIDeviceInfoFile` when a path is given (device-info §5.1.1).
pub fn capability_args(
    element: &NetworkSelectionElement,
    device_id: Option<&str>,
    device_info_file: Option<&str>,
) -> Map<String, Value> {
    let mut args = Map::new();
    if !element.ips.is_empty() {
        let ips = element
            .ips
            .iter()
            .map(|ip| Value::String(ip.to_string()))
            .collect();
        args.insert(capability::IPS.into(), Value::Array(ips));
    }
    if let Some(mac) = &element.mac {
        args.insert(capability::MAC.into(), Value::String(mac.to_string()));
    }
    if !element.port_mappings.is_empty() {
        args.insert(
            capability::PORT_MAPPINGS.into(),
            serde_json::to_value(&element.port_mappings).unwrap_or(Value::Null),
        );
    }
    if let Some(bw) = &element.bandwidth {
        args.insert(
            capability::BANDWIDTH.into(),
            serde_json::to_value(with_default_bursts(bw)).unwrap_or(Value::Null),
        );
    }
    if let Some(guid) = &element.infiniband_guid {
        args.insert(
            capability::INFINIBAND_GUID.into(),
            Value::String(guid.to_string()),
        );
    }
    if let Some(id) = device_id.or(element.device_id.as_deref()) {
        args.insert(capability::DEVICE_ID.into(), Value::String(id.to_string()));
    }
    if let Some(path) = device_info_file {
        args.insert(
            capability::CNI_DEVICE_INFO_FILE.into(),
            Value::String(path.to_string()),
        );
    }
    args
}

/// The capabilities the spec requires some plugin to declare for this element, with the element
/// key that asks for each: `ips`, `mac`, `portMappings`, `bandwidth`, `infinibandGUID`.
/// (`deviceID` and `CNIDeviceInfoFile` are passed only to plugins that declare them, with no
/// requirement.)
pub fn required_capabilities(
    element: &NetworkSelectionElement,
) -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    if !element.ips.is_empty() {
        out.push(("ips", capability::IPS));
    }
    if element.mac.is_some() {
        out.push(("mac", capability::MAC));
    }
    if !element.port_mappings.is_empty() {
        out.push(("portMappings", capability::PORT_MAPPINGS));
    }
    if element.bandwidth.is_some() {
        out.push(("bandwidth", capability::BANDWIDTH));
    }
    if element.infiniband_guid.is_some() {
        out.push(("infiniband-guid", capability::INFINIBAND_GUID));
    }
    out
}

/// Whether any plugin of the list declares `capability` as true (§4.1.2.1.3.2: "by inspecting
/// each plugin's JSON configuration capabilities key").
pub fn list_has_capability(list: &NetworkConfigList, capability: &str) -> bool {
    list.plugins.iter().any(|p| p.has_capability(capability))
}

/// Fails when the element asks for a capability no plugin of `list` declares ("the entire
/// attachment request must fail"). `network` names the network in the error (`namespace/name`).
pub fn check_capabilities(
    network: &str,
    list: &NetworkConfigList,
    element: &NetworkSelectionElement,
) -> Result<(), RuntimeConfigError> {
    for (key, capability) in required_capabilities(element) {
        if !list_has_capability(list, capability) {
            return Err(RuntimeConfigError::MissingCapability {
                network: network.to_string(),
                key,
                capability,
            });
        }
    }
    Ok(())
}

/// Merges `cni_args` into `args.cni` of every plugin of the list (§4.1.2.1.6.2: the annotation's
/// values win over the NAD's `args`; other keys of `args` and `args.cni` stay). `args` and
/// `args.cni` are created when missing; an empty `cni_args` changes nothing. The list's `raw` and `bytes` are rewritten to match.
pub fn apply_cni_args(
    network: &str,
    list: &NetworkConfigList,
    cni_args: &Map<String, Value>,
) -> Result<NetworkConfigList, RuntimeConfigError> {
    let mut out = list.clone();
    if cni_args.is_empty() {
        return Ok(out);
    }
    for (i, plugin) in out.plugins.iter_mut().enumerate() {
        let not_object = |what| RuntimeConfigError::ArgsNotObject {
            network: network.to_string(),
            plugin: i,
            plugin_type: plugin.plugin_type.clone(),
            what,
        };
        let args = plugin
            .raw
            .entry("args")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(args) = args else {
            return Err(not_object("\"args\""));
        };
        let cni = args
            .entry("cni")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(cni) = cni else {
            return Err(not_object("\"args.cni\""));
        };
        for (k, v) in cni_args {
            cni.insert(k.clone(), v.clone());
        }
    }
    // Keep the list's own view consistent: a single config's list holds its one plugin; a
    // conflist's `plugins` holds them all.
    Ok(rebuilt(out))
}

/// The config key Multus sets to the device ID in every plugin of a device-backed network
/// (docs/multus-behaviour.md §2.9), next to `deviceID`: SR-IOV-style plugins read one or the other.
pub const PCI_BUS_ID_KEY: &str = "pciBusID";

/// The list with `deviceID` and `pciBusID` set to `device_id` in every plugin's configuration
/// (docs/multus-behaviour.md §2.9: delegates that do not declare the `deviceID` capability read the
/// device from their configuration). A value the NAD already had is replaced: the kubelet's
/// allocation is what the pod owns.
pub fn set_device_id(list: &NetworkConfigList, device_id: &str) -> NetworkConfigList {
    let mut out = list.clone();
    for plugin in &mut out.plugins {
        for key in [capability::DEVICE_ID, PCI_BUS_ID_KEY] {
            plugin
                .raw
                .insert(key.into(), Value::String(device_id.to_string()));
        }
    }
    rebuilt(out)
}

/// `raw` and `bytes` of a list made again from its plugins, after they were changed.
fn rebuilt(mut out: NetworkConfigList) -> NetworkConfigList {
    let plugins: Vec<Value> = out
        .plugins
        .iter()
        .map(|p| Value::Object(p.raw.clone()))
        .collect();
    out.raw.insert("plugins".into(), Value::Array(plugins));
    out.bytes = serde_json::to_vec(&out.raw).unwrap_or_default();
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::selection;

    fn element(v: Value) -> NetworkSelectionElement {
        NetworkSelectionElement::from_value(1, &v).unwrap()
    }

    fn list(v: Value) -> NetworkConfigList {
        NetworkConfigList::from_any_bytes(&serde_json::to_vec(&v).unwrap()).unwrap()
    }

    #[test]
    fn a_rate_without_a_burst_gets_the_kubelets_burst() {
        // The reference bandwidth plugin refuses a rate without a burst (spec §4.1.2.1.8 says
        // to choose a default); a burst given is kept, and no rate gets no burst.
        let bw = |v: Value| {
            let e = element(json!({"name": "n", "bandwidth": v}));
            capability_args(&e, None, None)["bandwidth"].clone()
        };
        assert_eq!(
            bw(json!({"ingressRate": 1000, "egressRate": 2000, "egressBurst": 300})),
            json!({"ingressRate": 1000, "ingressBurst": 2147483647u64,
                   "egressRate": 2000, "egressBurst": 300})
        );
        assert_eq!(
            bw(json!({"egressRate": 2000})),
            json!({"egressRate": 2000, "egressBurst": 2147483647u64})
        );
    }

    #[test]
    fn capability_args_take_the_conventions_shapes() {
        let e = element(json!({
            "name": "net-b",
            "ips": ["10.2.2.42/24", "2001:db8::5/64"],
            "mac": "02:23:45:67:89:01",
            "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "TCP"}],
            "bandwidth": {"ingressRate": 2048, "ingressBurst": 300},
            "infiniband-guid": "24:8a:07:03:00:8d:ae:2f",
            "deviceID": "0000:04:00.5"
        }));
        assert_eq!(
            Value::Object(capability_args(
                &e,
                None,
                Some("/var/run/k8s.cni.cncf.io/devinfo/cni/x")
            )),
            json!({
                "ips": ["10.2.2.42/24", "2001:db8::5/64"],
                "mac": "02:23:45:67:89:01",
                "portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                "bandwidth": {"ingressRate": 2048, "ingressBurst": 300},
                "infinibandGUID": "24:8a:07:03:00:8d:ae:2f",
                "deviceID": "0000:04:00.5",
                "CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/x"
            })
        );
        // A device from the NAD's resource wins over the element's deviceID.
        let args = capability_args(&e, Some("0000:18:02.5"), None);
        assert_eq!(args["deviceID"], json!("0000:18:02.5"));
        assert!(!args.contains_key("CNIDeviceInfoFile"));
        assert!(
            capability_args(&selection::NetworkSelectionElement::named("a"), None, None).is_empty()
        );
    }

    #[test]
    fn a_missing_capability_fails_with_the_network_and_key() {
        let e = element(json!({"name": "net-b", "mac": "02:23:45:67:89:01", "ips": ["10.0.0.1"]}));
        let l = list(json!({"cniVersion": "1.0.0", "name": "net-b", "plugins": [
            {"type": "macvlan", "capabilities": {"ips": true}},
            {"type": "tuning", "capabilities": {"mac": false}}
        ]}));
        let err = check_capabilities("ns1/net-b", &l, &e).unwrap_err();
        assert_eq!(
            err.to_string(),
            "network ns1/net-b: the selection element asks for \"mac\", but no plugin in the \
             network's configuration declares the \"mac\" capability"
        );
        assert_eq!(cni::CniError::from(err).code, 7);
        let ok = list(json!({"cniVersion": "1.0.0", "name": "net-b", "plugins": [
            {"type": "macvlan", "capabilities": {"ips": true}},
            {"type": "tuning", "capabilities": {"mac": true}}
        ]}));
        assert!(check_capabilities("ns1/net-b", &ok, &e).is_ok());
        let ib = element(json!({"name": "ib", "infiniband-guid": "24:8a:07:03:00:8d:ae:2f"}));
        let err = check_capabilities("ns1/ib", &ok, &ib).unwrap_err();
        assert!(err.to_string().contains("\"infiniband-guid\""), "{err}");
        assert!(
            err.to_string().contains("\"infinibandGUID\" capability"),
            "{err}"
        );
        // Nothing asked, nothing required.
        assert!(check_capabilities("ns1/x", &ok, &element(json!({"name": "x"}))).is_ok());
    }

    #[test]
    fn port_mappings_and_bandwidth_need_a_plugin_that_declares_them() {
        // §4.1.2.1.7.2 and §4.1.2.1.8.2: "If no plugin has the portMappings (bandwidth)
        // capability set to true the entire attachment request must fail."
        let without = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "bridge", "capabilities": {"ips": true}},
            {"type": "portmap", "capabilities": {"portMappings": false}}
        ]}));
        let pm = element(json!({"name": "n",
            "portMappings": [{"hostPort": 8080, "containerPort": 80}]}));
        let bw = element(json!({"name": "n", "bandwidth": {"egressRate": 8000}}));
        for (e, key) in [(&pm, "portMappings"), (&bw, "bandwidth")] {
            let err = check_capabilities("ns1/n", &without, e).unwrap_err();
            assert_eq!(
                err,
                RuntimeConfigError::MissingCapability {
                    network: "ns1/n".into(),
                    key,
                    capability: key,
                }
            );
        }
        let with = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "bridge"},
            {"type": "portmap", "capabilities": {"portMappings": true}},
            {"type": "bandwidth", "capabilities": {"bandwidth": true}}
        ]}));
        assert!(check_capabilities("ns1/n", &with, &pm).is_ok());
        assert!(check_capabilities("ns1/n", &with, &bw).is_ok());
    }

    #[test]
    fn cni_args_merge_into_every_plugin_with_the_annotation_winning() {
        let l = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "sriov", "args": {"cni": {"spoofchk": "off", "trust": "on"}, "other": 1}},
            {"type": "tuning"}
        ]}));
        let args = json!({"spoofchk": "on"});
        let out = apply_cni_args("ns1/n", &l, args.as_object().unwrap()).unwrap();
        assert_eq!(
            Value::Object(out.plugins[0].raw.clone())["args"],
            json!({"cni": {"spoofchk": "on", "trust": "on"}, "other": 1})
        );
        assert_eq!(
            out.plugins[1].raw["args"],
            json!({"cni": {"spoofchk": "on"}})
        );
        let bytes: Value = serde_json::from_slice(&out.bytes).unwrap();
        assert_eq!(bytes["plugins"][1]["args"]["cni"]["spoofchk"], json!("on"));
        // A single config stays a one-plugin list.
        let single = list(json!({"cniVersion": "0.3.1", "name": "s", "type": "bridge"}));
        let out = apply_cni_args("ns1/s", &single, args.as_object().unwrap()).unwrap();
        assert_eq!(out.plugins.len(), 1);
        assert_eq!(out.plugins[0].raw["args"]["cni"]["spoofchk"], json!("on"));
    }

    #[test]
    fn cni_args_cannot_go_into_a_non_object() {
        for (args, what) in [
            (json!("x"), "\"args\""),
            (json!({"cni": [1]}), "\"args.cni\""),
        ] {
            let l = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
                {"type": "a"}, {"type": "b", "args": args}
            ]}));
            let e =
                apply_cni_args("ns1/n", &l, json!({"k": "v"}).as_object().unwrap()).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "network ns1/n: cannot add \"cni-args\" to plugin 1 (\"b\"): its {what} is \
                     not a JSON object"
                )
            );
        }
    }

    #[test]
    fn the_device_id_goes_into_every_plugin_as_both_keys() {
        let l = list(json!({"cniVersion": "1.0.0", "name": "n", "plugins": [
            {"type": "sriov", "deviceID": "0000:00:00.0", "vlan": 5},
            {"type": "tuning"}
        ]}));
        let out = set_device_id(&l, "0000:18:02.5");
        for p in &out.plugins {
            assert_eq!(p.raw["deviceID"], json!("0000:18:02.5"));
            assert_eq!(p.raw["pciBusID"], json!("0000:18:02.5"));
        }
        assert_eq!(out.plugins[0].raw["vlan"], json!(5));
        let bytes: Value = serde_json::from_slice(&out.bytes).unwrap();
        assert_eq!(bytes["plugins"][1]["deviceID"], json!("0000:18:02.5"));
        // The input is untouched.
        assert_eq!(l.plugins[0].raw["deviceID"], json!("0000:00:00.0"));
    }
}

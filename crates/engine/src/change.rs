//! What a change of a running pod's `k8s.v1.cni.cncf.io/networks` annotation does to its
//! sandbox (dynamic attachments: the multi-net spec leaves how a running pod's attachments
//! change to implementations, its open question 2): the attachments recorded for the sandbox set
//! against those the new selection plans. Only computed here; running it (DEL of what went, in
//! reverse order, then ADD of what came, under the container's lock) is the caller's.
//!
//! Identity, so that an attachment keeps its interface name, and with it its addresses, for its
//! whole life: an element that names its interface is the recorded attachment of the same
//! network with that name; the elements that name none match the other recorded attachments of
//! their network in order, so removing one never renames or re-attaches the others. A kept
//! attachment whose `ips`, `mac` or `default-route` changed, or that an earlier change did not
//! finish attaching (`pending`), is detached and attached again under its name. New attachments
//! get names no interface of the pod has. The default network is never touched.

use std::collections::BTreeSet;

use netattach::runtime_config::capability;

use crate::plan::Attachment;
use crate::record::RecordedAttachment;

/// What to do to the sandbox.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Indexes into the recorded attachments, to detach in this order (the reverse of the
    /// order they were attached in).
    pub detach: Vec<usize>,
    /// The attachments to attach, in the order of the plan, each with the interface name it
    /// gets.
    pub attach: Vec<Attachment>,
    /// The recorded attachments kept as they are (indexes), the default network's among them.
    pub kept: Vec<usize>,
}

impl Change {
    /// Whether the sandbox stays as it is.
    pub fn is_empty(&self) -> bool {
        self.detach.is_empty() && self.attach.is_empty()
    }
}

/// The change from the sandbox's `recorded` attachments to the `planned` ones (the plan of the
/// pod with its new annotation), the pod's network namespace holding the interfaces `in_netns`.
/// An error says why the change cannot be made; then nothing is to be done.
pub fn change(
    recorded: &[RecordedAttachment],
    planned: &[Attachment],
    in_netns: &[&str],
) -> Result<Change, String> {
    let mut claimed = vec![false; recorded.len()];
    let mut kept = Vec::new();
    for (i, r) in recorded.iter().enumerate() {
        if r.default {
            claimed[i] = true;
            kept.push(i);
        }
    }
    let secondary: Vec<&Attachment> = planned.iter().filter(|a| !a.is_default).collect();
    let mut matched: Vec<Option<usize>> = vec![None; secondary.len()];
    // Named first: an unnamed element must not take the attachment a named one is. Then the
    // unnamed ones, first to an attachment they ask nothing different of (three elements that
    // differ only by `ips`, the first removed: the other two keep theirs), then in order.
    for (named, same) in [(true, false), (false, true), (false, false)] {
        for (p, a) in secondary.iter().enumerate() {
            if a.ifname_requested != named || matched[p].is_some() {
                continue;
            }
            let found = (0..recorded.len()).find(|&i| {
                !claimed[i]
                    && recorded[i].network == a.network
                    && (!named || recorded[i].ifname == a.ifname)
                    && (!same || !changed(&recorded[i], a))
            });
            if let Some(i) = found {
                claimed[i] = true;
                matched[p] = Some(i);
            }
        }
    }
    let mut detach: Vec<usize> = (0..recorded.len()).filter(|&i| !claimed[i]).collect();
    // Attached again: a kept attachment whose element asks for other addresses, MAC or routes,
    // or one an earlier change did not finish.
    let mut again = Vec::new();
    for (p, found) in matched.iter().enumerate() {
        let Some(i) = *found else { continue };
        if changed(&recorded[i], secondary[p]) {
            detach.push(i);
            again.push(p);
        } else {
            kept.push(i);
        }
    }
    detach.sort_unstable_by(|a, b| b.cmp(a));
    kept.sort_unstable();
    let gone: BTreeSet<&str> = detach
        .iter()
        .map(|&i| recorded[i].ifname.as_str())
        .collect();
    // Names in use once the detaches are done: the kept attachments' and any other interface
    // of the pod (`lo`, one a container made), then each new attachment's.
    let mut in_use: BTreeSet<String> = kept
        .iter()
        .map(|&i| recorded[i].ifname.clone())
        .chain(
            (in_netns.iter())
                .filter(|n| !gone.contains(**n))
                .map(|n| n.to_string()),
        )
        .collect();
    // A generated name is also none the pod had before the change.
    let had: BTreeSet<&str> = (recorded.iter().map(|r| r.ifname.as_str()))
        .chain(in_netns.iter().copied())
        .collect();
    let mut attach = Vec::new();
    for (p, a) in secondary.iter().enumerate() {
        let ifname = match matched[p] {
            Some(_) if !again.contains(&p) => continue,
            // Attached again under the name it had.
            Some(i) => recorded[i].ifname.clone(),
            None if a.ifname_requested => {
                if in_use.contains(&a.ifname) {
                    return Err(format!(
                        "interface name {:?} of network {} is in use in the pod (multi-net \
                         spec §4.1.2.1.5)",
                        a.ifname, a.network
                    ));
                }
                a.ifname.clone()
            }
            None => crate::plan::generated_ifname(
                1,
                (in_use.iter().map(String::as_str)).chain(had.iter().copied()),
            ),
        };
        // A device-plugin resource (the plan asked the kubelet): not a marker resource no
        // device plugin offers (KubeVirt's bridge markers), nor a device the element names.
        if let Some(resource) = a.device.as_ref().and_then(|d| d.resource.as_deref()) {
            return Err(format!(
                "network {} is backed by a device plugin (resourceName {resource}): a running \
                 pod cannot get its device (the kubelet allocates devices when it admits a pod)",
                a.network,
            ));
        }
        in_use.insert(ifname.clone());
        attach.push(Attachment {
            ifname,
            ..(*a).clone()
        });
    }
    Ok(Change {
        detach,
        attach,
        kept,
    })
}

/// Whether `planned` asks its attachment for other addresses, another MAC or other default
/// routes than `recorded` was made with.
/// Whether the recorded attachment is to be attached again for the planned one: its element
/// asks for other addresses, MAC or routes, or an earlier change never finished attaching it.
fn changed(recorded: &RecordedAttachment, planned: &Attachment) -> bool {
    recorded.pending
        || [capability::IPS, capability::MAC]
            .iter()
            .any(|k| recorded.capability_args.get(*k) != planned.capability_args.get(*k))
        || recorded.default_route != planned.default_route
}

#[cfg(test)]
mod tests {
    use super::*;
    use cni::config::NetworkConfigList;
    use serde_json::{Map, Value, json};

    /// A planned attachment of `network` on `ifname` (`requested`: the element named it).
    fn planned(network: &str, ifname: &str, requested: bool) -> Attachment {
        let list = NetworkConfigList::from_any_bytes(
            json!({"cniVersion": "1.0.0", "name": network.replace('/', "-"), "type": "bridge"})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        Attachment {
            network: network.into(),
            ifname: ifname.into(),
            ifname_requested: requested,
            network_list: list.clone(),
            list,
            capability_args: Map::new(),
            is_default: network == "default-net",
            default_route: None,
            device: None,
            resource: None,
        }
    }

    fn recorded(network: &str, ifname: &str) -> RecordedAttachment {
        RecordedAttachment {
            network: network.into(),
            ifname: ifname.into(),
            config: Value::Null,
            network_config: None,
            capability_args: Map::new(),
            default: network == "default-net",
            default_route: None,
            device_info_file: None,
            pending: false,
        }
    }

    /// The names a change attaches, and the names it detaches, of `record`.
    fn names(record: &[RecordedAttachment], c: &Change) -> (Vec<String>, Vec<String>) {
        (
            c.attach
                .iter()
                .map(|a| format!("{}@{}", a.network, a.ifname))
                .collect(),
            c.detach
                .iter()
                .map(|&i| format!("{}@{}", record[i].network, record[i].ifname))
                .collect(),
        )
    }

    const NETNS: &[&str] = &["lo", "eth0", "net1", "net2", "net3"];

    #[test]
    fn the_same_selection_changes_nothing() {
        let record = [recorded("default-net", "eth0"), recorded("ns/a", "net1")];
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "net1", false),
        ];
        let c = change(&record, &plan, &["lo", "eth0", "net1"]).unwrap();
        assert!(c.is_empty() && c.kept == [0, 1], "{c:?}");
    }

    #[test]
    fn an_attachment_an_earlier_change_did_not_finish_is_attached_again_under_its_name() {
        let mut unfinished = recorded("ns/a", "net2");
        unfinished.pending = true;
        let record = [
            recorded("default-net", "eth0"),
            recorded("ns/a", "net1"),
            unfinished,
        ];
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "net1", false),
            planned("ns/a", "net2", false),
        ];
        let c = change(&record, &plan, &["lo", "eth0", "net1"]).unwrap();
        assert_eq!(
            (c.detach.as_slice(), c.kept.as_slice()),
            (&[2][..], &[0, 1][..])
        );
        assert_eq!(c.attach.len(), 1);
        assert_eq!(c.attach[0].ifname, "net2");
        // Not in the selection any more: only detached.
        let c = change(&record, &plan[..2], &["lo", "eth0", "net1"]).unwrap();
        assert_eq!((c.detach.as_slice(), c.attach.len()), (&[2][..], 0));
    }

    #[test]
    fn removing_the_first_of_three_unnamed_elements_keeps_the_other_two_as_they_are() {
        let record = [
            recorded("default-net", "eth0"),
            recorded("ns/a", "net1"),
            recorded("ns/a", "net2"),
            recorded("ns/a", "net3"),
        ];
        // The planner names the two that are left net1 and net2 by position.
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "net1", false),
            planned("ns/a", "net2", false),
        ];
        let c = change(&record, &plan, NETNS).unwrap();
        // The last of the network's recorded ones goes, not the first: an unnamed element is
        // any of its network's, and the others keep their names (and addresses).
        assert_eq!(names(&record, &c), (vec![], vec!["ns/a@net3".to_string()]));
        assert_eq!(c.kept, [0, 1, 2]);
    }

    #[test]
    fn removing_the_first_of_three_elements_that_differ_by_ips_keeps_the_others_addresses() {
        let with_ips = |mut a: Attachment, ip: &str| {
            a.capability_args.insert("ips".into(), json!([ip]));
            a
        };
        let mut record = vec![recorded("default-net", "eth0")];
        for (ifname, ip) in [
            ("net1", "10.0.0.1/24"),
            ("net2", "10.0.0.2/24"),
            ("net3", "10.0.0.3/24"),
        ] {
            let mut r = recorded("ns/a", ifname);
            r.capability_args.insert("ips".into(), json!([ip]));
            record.push(r);
        }
        let plan = [
            planned("default-net", "eth0", false),
            with_ips(planned("ns/a", "net1", false), "10.0.0.2/24"),
            with_ips(planned("ns/a", "net2", false), "10.0.0.3/24"),
        ];
        let c = change(&record, &plan, NETNS).unwrap();
        assert_eq!(names(&record, &c), (vec![], vec!["ns/a@net1".to_string()]));
        assert_eq!(c.kept, [0, 2, 3]);
    }

    #[test]
    fn removing_a_named_element_detaches_that_one_and_an_added_one_gets_a_new_name() {
        let record = [
            recorded("default-net", "eth0"),
            recorded("ns/a", "data0"),
            recorded("ns/a", "net2"),
        ];
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "net1", false),
            planned("ns/b", "net2", false),
        ];
        let c = change(&record, &plan, &["lo", "eth0", "data0", "net2"]).unwrap();
        // The unnamed ns/a element is the first recorded ns/a attachment, data0: net2 goes, and
        // ns/b gets a name the pod never had.
        assert_eq!(
            names(&record, &c),
            (vec!["ns/b@net1".to_string()], vec!["ns/a@net2".to_string()])
        );
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "net2", true),
        ];
        let c = change(&record, &plan, &["lo", "eth0", "data0", "net2"]).unwrap();
        assert_eq!(names(&record, &c), (vec![], vec!["ns/a@data0".to_string()]));
    }

    #[test]
    fn a_changed_ips_mac_or_default_route_is_a_detach_then_an_attach_under_the_same_name() {
        let record = [recorded("default-net", "eth0"), recorded("ns/a", "net1")];
        let mut with_ips = planned("ns/a", "net1", false);
        with_ips
            .capability_args
            .insert("ips".into(), json!(["10.1.1.5/24"]));
        let mut with_route = planned("ns/a", "net1", false);
        with_route.default_route = Some(vec!["10.1.1.1".parse().unwrap()]);
        for p in [with_ips, with_route] {
            let plan = [planned("default-net", "eth0", false), p];
            let c = change(&record, &plan, &["lo", "eth0", "net1"]).unwrap();
            assert_eq!(
                names(&record, &c),
                (vec!["ns/a@net1".to_string()], vec!["ns/a@net1".to_string()])
            );
        }
    }

    #[test]
    fn the_default_network_is_never_touched_and_detaches_go_in_reverse_order() {
        let record = [
            recorded("default-net", "eth0"),
            recorded("ns/a", "net1"),
            recorded("ns/b", "net2"),
        ];
        let plan = [planned("default-net", "eth0", false)];
        let c = change(&record, &plan, &["lo", "eth0", "net1", "net2"]).unwrap();
        assert_eq!(c.detach, [2, 1]);
        assert_eq!(c.kept, [0]);
    }

    #[test]
    fn a_device_backed_network_or_a_name_in_use_is_refused() {
        let record = [recorded("default-net", "eth0")];
        let mut sriov = planned("ns/sriov", "net1", false);
        sriov.resource = Some("intel.com/sriov".into());
        sriov.device = Some(crate::plan::Device {
            id: "0000:03:00.2".into(),
            resource: sriov.resource.clone(),
        });
        let plan = [planned("default-net", "eth0", false), sriov.clone()];
        let e = change(&record, &plan, &["lo", "eth0"]).unwrap_err();
        assert!(
            e.contains("ns/sriov") && e.contains("intel.com/sriov"),
            "{e}"
        );
        // A resource no device plugin offers (a marker), or a device the element names: made.
        sriov.device = None;
        let plan = [planned("default-net", "eth0", false), sriov.clone()];
        assert_eq!(
            change(&record, &plan, &["lo", "eth0"])
                .unwrap()
                .attach
                .len(),
            1
        );
        sriov.resource = None;
        sriov.device = Some(crate::plan::Device {
            id: "0000:03:00.2".into(),
            resource: None,
        });
        let plan = [planned("default-net", "eth0", false), sriov];
        assert_eq!(
            change(&record, &plan, &["lo", "eth0"])
                .unwrap()
                .attach
                .len(),
            1
        );
        // A container made an interface of that name.
        let plan = [
            planned("default-net", "eth0", false),
            planned("ns/a", "tap0", true),
        ];
        let e = change(&record, &plan, &["lo", "eth0", "tap0"]).unwrap_err();
        assert!(e.contains("\"tap0\""), "{e}");
    }
}

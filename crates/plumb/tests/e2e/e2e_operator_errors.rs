//! What an operator sees when an ADD or a DEL fails: the CNI error plumb returns (which the
//! kubelet shows in the pod's `FailedCreatePodSandBox` event), plumb's log at `logLevel: error`,
//! and plumb's own events on the pod. The built binary, the reference plugins in real network
//! namespaces, and testkit's API stand-in, as in e2e_kubernetes.rs. Each test asserts the parts
//! of the text an operator needs: the pod, the network, the interface, the cause, once each.
//! Needs root.

use std::fs;
use std::process::Output;

use crate::common::cluster::{Cluster, NETWORKS, nad};
use crate::common::err;
use serde_json::{Value, json};
use testkit::kube_api::Resource;
use testkit::netns::Netns;

/// A cluster whose plumb logs failures only (`logLevel: error`, to stderr), as an operator
/// would first set it.
fn cluster(net: u8) -> Cluster {
    Cluster::new(net).with("logLevel", json!("error"))
}

/// The error's message, after asserting that plumb's log holds the same story as one line,
/// naming the pod and the container.
fn msg_and_log_line(out: &Output, command: &str, pod: &str, cid: &str) -> String {
    let e: Value = err(out);
    let msg = e["msg"].as_str().unwrap().to_string();
    let log = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("[error]")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&format!("{command}: pod {pod} (container {cid}): "))
            && lines[0].contains(&msg),
        "{log}\n{e}"
    );
    msg
}

#[test]
fn an_api_server_down_or_refusing_the_token_is_said_with_its_cause_once() {
    let c = cluster(189);
    let uid = c.pod("default", "api", json!({NETWORKS: "net-a"}));
    let pod = ("default", "api", uid.as_str());
    let ns = Netns::new();

    c.api.set_down(true);
    let out = c.call("ADD", &ns, pod, "capi1");
    assert_eq!(err(&out)["code"], 11);
    let msg = msg_and_log_line(&out, "ADD", "default/api", "capi1");
    assert!(
        msg.contains(&format!(
            "Kubernetes API {}: get pod default/api: ",
            c.api.url()
        )) && msg.contains("Connection refused"),
        "{msg}"
    );
    // Each layer of the cause once: not kube-rs's "ServiceError: client error (Connect):
    // client error (Connect): tcp connect error: …".
    assert!(!msg.contains("ServiceError"), "{msg}");
    assert_eq!(msg.matches("client error (Connect)").count(), 1, "{msg}");
    c.api.set_down(false);

    // A token the API server refuses: its 401 said once, not "Unauthorized (401 Unauthorized)".
    fs::write(&c.token_file, "not-a-token").unwrap();
    let out = c.call("ADD", &ns, pod, "capi2");
    assert_eq!(err(&out)["code"], 5);
    let msg = msg_and_log_line(&out, "ADD", "default/api", "capi2");
    assert!(
        msg.ends_with("get pod default/api: 401 Unauthorized"),
        "{msg}"
    );
    assert_eq!(ns.links(), ["lo"]);
}

#[test]
fn a_nad_whose_plugin_is_not_installed_names_it_and_each_directory_searched_once() {
    let c = cluster(188);
    c.api.put(
        Resource::NetworkAttachmentDefinitions,
        nad(
            "default",
            "noplugin",
            json!({"cniVersion": "1.0.0", "type": "nosuchplugin"}),
        ),
    );
    let uid = c.pod("default", "np", json!({NETWORKS: "noplugin"}));
    let ns = Netns::new();
    // The runtime's CNI_PATH is binDir, as containerd's default (/opt/cni/bin) is plumb's.
    assert_eq!(c.config["binDir"], crate::common::PLUGINS);
    let out = c.call("ADD", &ns, ("default", "np", &uid), "cnp");
    assert_eq!(err(&out)["code"], 7);
    let msg = msg_and_log_line(&out, "ADD", "default/np", "cnp");
    assert!(
        msg.contains("(network default/noplugin, interface net1)")
            && msg.ends_with(&format!(
                "failed to find plugin \"nosuchplugin\" in path [{}]",
                crate::common::PLUGINS
            )),
        "{msg}"
    );
    assert!(
        c.events_for("default", "np")
            .iter()
            .any(|e| e["reason"] == "AttachFailed"
                && e["message"].as_str().unwrap().contains("nosuchplugin")),
        "{:?}",
        c.events_for("default", "np")
    );
    assert_eq!(ns.links(), ["lo"]);
}

#[test]
fn a_default_route_gateway_of_a_family_the_network_gave_no_address_of_says_so() {
    let c = cluster(187);
    // net-a gives net1 an IPv4 address only; the gateway asked for is IPv6.
    let uid = c.pod(
        "default",
        "gw6",
        json!({NETWORKS: json!([{"name": "net-a", "default-route": ["fd00::1"]}]).to_string()}),
    );
    let ns = Netns::new();
    let out = c.call("ADD", &ns, ("default", "gw6", &uid), "cgw6");
    let e = err(&out);
    assert_eq!(e["code"], 7);
    let msg = msg_and_log_line(&out, "ADD", "default/gw6", "cgw6");
    // "default-route" once: not "default-route of network …: default-route: cannot add …".
    assert!(
        msg.contains(
            "network default/net-a: default-route: cannot add default route via fd00::1 on net1"
        ) && msg.matches("default-route").count() == 1,
        "{msg}"
    );
    // The kernel's "No route to host" comes with what the network gave the interface.
    let why = "fd00::1 is an IPv6 gateway, and network default/net-a gave net1 no IPv6 \
               address (only 10.187.2.2/24)";
    assert!(e["details"].as_str().unwrap().contains(why), "{e}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(why));
    let events = c.events_for("default", "gw6");
    assert!(
        events
            .iter()
            .any(|ev| ev["reason"] == "AttachFailed"
                && ev["message"].as_str().unwrap().contains(why)),
        "{events:?}"
    );
    // Rolled back; the runtime's DEL that follows has nothing left to undo.
    assert_eq!(c.node.left_to_undo("cgw6"), Vec::<String>::new());
    crate::common::ok(&c.call("DEL", &ns, ("default", "gw6", &uid), "cgw6"));
    c.assert_nothing_left(&ns, "cgw6");
}

#[test]
fn a_pod_missing_or_recreated_is_named_once() {
    let c = cluster(186);
    let ns = Netns::new();
    let out = c.call("ADD", &ns, ("default", "ghost", "u1"), "cghost");
    assert_eq!(err(&out)["code"], 3);
    let msg = msg_and_log_line(&out, "ADD", "default/ghost", "cghost");
    assert_eq!(
        msg,
        "pod default/ghost (container cghost): not found in the Kubernetes API; nothing was \
         attached"
    );

    // The sandbox of a pod deleted and created again under its name.
    let uid = c.pod("default", "re", json!({NETWORKS: "net-a"}));
    let out = c.call("ADD", &ns, ("default", "re", "old-uid"), "cre");
    assert_eq!(err(&out)["code"], 3);
    let msg = msg_and_log_line(&out, "ADD", "default/re", "cre");
    assert!(
        msg.starts_with(
            "pod default/re (container cre): the pod was recreated: the runtime asks for UID \
             old-uid but the API server has UID "
        ) && msg.contains(&uid)
            && msg.matches("default/re").count() == 1,
        "{msg}"
    );
    assert_eq!(ns.links(), ["lo"]);
}

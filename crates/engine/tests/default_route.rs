//! `default-route` (multi-net spec §4.1.2.1.9) in real network namespaces: a pod netns with
//! veth interfaces whose peers sit in a second netns, routes set up with `ip`, then read back
//! both with `ip -j route` and with `plumb_engine::routes::default_routes`. Needs root (CI runs as root).
//!
//! Every test makes its own namespaces (testkit names them by pid and counter), so the tests run
//! in parallel, and deleting a namespace on drop takes its links with it even when a test fails.

use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plumb_engine::routes::{DefaultRoute, IpFamily, RouteError, default_routes, set_default_route};
use testkit::netns::{Netns, ip};

/// A pod's netns, and a second netns holding the far ends of its veth interfaces.
struct Pod {
    ns: Netns,
    peers: Netns,
}

impl Pod {
    fn new() -> Pod {
        Pod {
            ns: Netns::new(),
            peers: Netns::new(),
        }
    }

    /// Adds interface `ifname` (a veth whose peer is in `peers`), up, with `addrs`. IPv6
    /// addresses get `nodad` so they are usable at once.
    fn interface(&self, ifname: &str, addrs: &[&str]) -> &Pod {
        let peer = format!("p-{ifname}");
        ip(&[
            "-n",
            self.ns.name(),
            "link",
            "add",
            ifname,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            self.peers.name(),
        ]);
        ip(&["-n", self.peers.name(), "link", "set", &peer, "up"]);
        ip(&["-n", self.ns.name(), "link", "set", ifname, "up"]);
        for addr in addrs {
            let mut args = vec!["-n", self.ns.name(), "addr", "add", addr, "dev", ifname];
            if addr.contains(':') {
                args.push("nodad");
            }
            ip(&args);
        }
        // Each address's subnet must be reachable through `ifname` before a route may use a
        // gateway there: the kernel sees the veth's carrier some time after both ends are up
        // (linkwatch), and until then IPv6 answers EHOSTUNREACH.
        for addr in addrs {
            self.wait_reachable(&another_host(addr), ifname);
        }
        self
    }

    /// Waits until `ip route get target oif ifname` finds a route (the kernel's own test of a
    /// gateway), for at most 30 s.
    fn wait_reachable(&self, target: &str, ifname: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut args = vec!["-n", self.ns.name(), "route", "get", target, "oif", ifname];
        if target.contains(':') {
            args.insert(2, "-6");
        }
        loop {
            let out = Command::new("ip").args(&args).output().unwrap();
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{target} never became reachable through {ifname}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `ip route add default via gw dev ifname` (what the default network's plugin does).
    fn default_via(&self, gw: &str, ifname: &str) -> &Pod {
        let family = if gw.contains(':') { "-6" } else { "-4" };
        ip(&[
            "-n",
            self.ns.name(),
            family,
            "route",
            "add",
            "default",
            "via",
            gw,
            "dev",
            ifname,
        ]);
        self
    }

    /// The default routes of one family ("-4" or "-6") as `ip -j route` shows them:
    /// (dev, gateway, metric), in the kernel's order.
    fn ip_defaults(&self, family: &str) -> Vec<(String, String, u64)> {
        self.ns
            .routes(family)
            .into_iter()
            .filter(|r| r["dst"] == "default")
            .map(|r| {
                (
                    r["dev"].as_str().unwrap_or_default().to_string(),
                    r["gateway"].as_str().unwrap_or_default().to_string(),
                    // ip omits metric 0.
                    r["metric"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// The same through plumb: (family, dev, gateway, metric).
    fn plumb_defaults(&self) -> Vec<(IpFamily, String, String, u32)> {
        default_routes(&self.ns.path())
            .unwrap()
            .into_iter()
            .map(|r: DefaultRoute| {
                (
                    r.family,
                    r.ifname,
                    r.gateway.map(|g| g.to_string()).unwrap_or_default(),
                    r.metric,
                )
            })
            .collect()
    }

    fn set(&self, ifname: &str, gateways: &[&str]) -> Result<(), RouteError> {
        let gateways: Vec<IpAddr> = gateways.iter().map(|g| g.parse().unwrap()).collect();
        set_default_route(&self.ns.path(), ifname, &gateways)
    }
}

/// The first host of `addr`'s subnet (`10.1.0.2/24` → `10.1.0.1`), or the one after it when
/// that is `addr` itself: an address the subnet's route reaches, and not the pod's own.
fn another_host(addr: &str) -> String {
    let (ip, len) = addr
        .split_once('/')
        .expect("an address with its prefix length");
    let len: u32 = len.parse().unwrap();
    let ip: IpAddr = ip.parse().unwrap();
    let pick = |ip: u128, bits: u32| {
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (bits - len)
        };
        let first = (ip & mask) + 1;
        if first == ip { first + 1 } else { first }
    };
    match ip {
        IpAddr::V4(v4) => {
            std::net::Ipv4Addr::from(pick(u128::from(u32::from(v4)), 32) as u32).to_string()
        }
        IpAddr::V6(v6) => std::net::Ipv6Addr::from(pick(u128::from(v6), 128)).to_string(),
    }
}

fn row(dev: &str, gw: &str, metric: u64) -> (String, String, u64) {
    (dev.to_string(), gw.to_string(), metric)
}

fn prow(family: IpFamily, dev: &str, gw: &str, metric: u32) -> (IpFamily, String, String, u32) {
    (family, dev.to_string(), gw.to_string(), metric)
}

/// A pod whose default network (eth0, 10.1.0.0/24 and 2001:db8:1::/64) has the default routes,
/// and a second attachment net1 (10.2.0.0/24, 2001:db8:2::/64).
fn dual_stack_pod() -> Pod {
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24", "2001:db8:1::2/64"])
        .interface("net1", &["10.2.0.2/24", "2001:db8:2::2/64"])
        .default_via("10.1.0.1", "eth0")
        .default_via("2001:db8:1::1", "eth0");
    pod
}

/// The Multus v4.2.2 regression case: the default network's default route must go, not stay
/// beside the new one.
#[test]
fn the_default_networks_ipv4_default_moves_to_net1() {
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24"])
        .interface("net1", &["10.2.0.2/24"])
        .default_via("10.1.0.1", "eth0");
    assert_eq!(pod.ip_defaults("-4"), vec![row("eth0", "10.1.0.1", 0)]);
    assert_eq!(
        pod.plumb_defaults(),
        vec![prow(IpFamily::V4, "eth0", "10.1.0.1", 0)]
    );

    pod.set("net1", &["10.2.0.1"]).unwrap();

    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
    assert_eq!(
        pod.plumb_defaults(),
        vec![prow(IpFamily::V4, "net1", "10.2.0.1", 0)]
    );
    // Only the default route moved: eth0 keeps its subnet.
    let eth0_subnet = pod
        .ns
        .routes("-4")
        .into_iter()
        .any(|r| r["dst"] == "10.1.0.0/24" && r["dev"] == "eth0");
    assert!(eth0_subnet, "{:?}", pod.ns.routes("-4"));

    // Asking again is idempotent: the route is replaced by itself, not duplicated.
    pod.set("net1", &["10.2.0.1"]).unwrap();
    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
}

#[test]
fn ipv4_and_ipv6_defaults_move_together() {
    let pod = dual_stack_pod();
    pod.set("net1", &["10.2.0.1", "2001:db8:2::1"]).unwrap();

    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
    // IPv6 metrics start at 1024: the kernel would turn 0 into 1024 anyway.
    assert_eq!(
        pod.ip_defaults("-6"),
        vec![row("net1", "2001:db8:2::1", 1024)]
    );
    assert_eq!(
        pod.plumb_defaults(),
        vec![
            prow(IpFamily::V4, "net1", "10.2.0.1", 0),
            prow(IpFamily::V6, "net1", "2001:db8:2::1", 1024),
        ]
    );
}

#[test]
fn an_ipv4_only_request_leaves_the_ipv6_default_alone() {
    let pod = dual_stack_pod();
    pod.set("net1", &["10.2.0.1"]).unwrap();

    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
    assert_eq!(
        pod.ip_defaults("-6"),
        vec![row("eth0", "2001:db8:1::1", 1024)]
    );
    assert_eq!(
        pod.plumb_defaults(),
        vec![
            prow(IpFamily::V4, "net1", "10.2.0.1", 0),
            prow(IpFamily::V6, "eth0", "2001:db8:1::1", 1024),
        ]
    );

    // And the other way round.
    pod.set("net1", &["2001:db8:2::1"]).unwrap();
    assert_eq!(
        pod.ip_defaults("-6"),
        vec![row("net1", "2001:db8:2::1", 1024)]
    );
    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
}

#[test]
fn several_gateways_of_a_family_get_metrics_in_their_order() {
    let pod = dual_stack_pod();
    pod.set(
        "net1",
        &["10.2.0.1", "2001:db8:2::1", "10.2.0.254", "2001:db8:2::fe"],
    )
    .unwrap();

    assert_eq!(
        pod.ip_defaults("-4"),
        vec![row("net1", "10.2.0.1", 0), row("net1", "10.2.0.254", 1)]
    );
    assert_eq!(
        pod.ip_defaults("-6"),
        vec![
            row("net1", "2001:db8:2::1", 1024),
            row("net1", "2001:db8:2::fe", 1025)
        ]
    );
    assert_eq!(
        pod.plumb_defaults(),
        vec![
            prow(IpFamily::V4, "net1", "10.2.0.1", 0),
            prow(IpFamily::V4, "net1", "10.2.0.254", 1),
            prow(IpFamily::V6, "net1", "2001:db8:2::1", 1024),
            prow(IpFamily::V6, "net1", "2001:db8:2::fe", 1025),
        ]
    );
    // The order means something: the kernel sends traffic to the first gateway.
    for (dst, gw) in [
        ("192.0.2.7", "10.2.0.1"),
        ("2001:db8:ff::7", "2001:db8:2::1"),
    ] {
        let got = testkit::netns::ip_json(&["-n", pod.ns.name(), "route", "get", dst]);
        assert_eq!(got[0]["gateway"], gw, "{got}");
    }
}

#[test]
fn a_gateway_given_twice_is_installed_once() {
    let pod = dual_stack_pod();
    pod.set("net1", &["10.2.0.1", "10.2.0.254", "10.2.0.1"])
        .unwrap();
    assert_eq!(
        pod.ip_defaults("-4"),
        vec![row("net1", "10.2.0.1", 0), row("net1", "10.2.0.254", 1)]
    );
}

#[test]
fn an_unreachable_gateway_is_refused_and_the_old_default_stays() {
    let pod = dual_stack_pod();
    let path = pod.ns.path();
    let before4 = pod.ip_defaults("-4");
    let before6 = pod.ip_defaults("-6");

    let e = pod.set("net1", &["10.9.9.1"]).unwrap_err();
    let text = e.to_string();
    for part in ["10.9.9.1", "net1", &path.display().to_string()] {
        assert!(text.contains(part), "{part} missing from: {text}");
    }
    assert!(
        text.contains("the previous default routes are back in place"),
        "{text}"
    );
    assert_eq!(cni::CniError::from(e).code, 7, "{text}");
    assert_eq!(pod.ip_defaults("-4"), before4);
    assert_eq!(pod.ip_defaults("-6"), before6);

    // A good gateway before a bad one: the good one is taken back out, eth0's put back.
    let e = pod.set("net1", &["10.2.0.1", "10.9.9.1"]).unwrap_err();
    assert!(e.to_string().contains("10.9.9.1"), "{e}");
    assert_eq!(pod.ip_defaults("-4"), before4);

    // A bad IPv6 gateway undoes the IPv4 move made in the same call.
    let e = pod.set("net1", &["10.2.0.1", "2001:db8:9::1"]).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("2001:db8:9::1"), "{text}");
    assert_eq!(cni::CniError::from(e).code, 7, "{text}");
    assert_eq!(pod.ip_defaults("-4"), before4);
    assert_eq!(pod.ip_defaults("-6"), before6);
    assert_eq!(
        pod.plumb_defaults(),
        vec![
            prow(IpFamily::V4, "eth0", "10.1.0.1", 0),
            prow(IpFamily::V6, "eth0", "2001:db8:1::1", 1024),
        ]
    );
}

#[test]
fn a_default_route_through_a_nexthop_object_moves_and_comes_back() {
    // `ip route add default nhid N`: the kernel's dump also names the gateway the object
    // resolves to, and refuses a delete or an add that has both.
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24"])
        .interface("net1", &["10.2.0.2/24"]);
    let ns = pod.ns.name();
    ip(&[
        "-n", ns, "nexthop", "add", "id", "7", "via", "10.1.0.1", "dev", "eth0",
    ]);
    ip(&["-n", ns, "route", "add", "default", "nhid", "7"]);
    let before = pod.ip_defaults("-4");

    // A failed move puts it back, still through its nexthop object.
    let e = pod.set("net1", &["10.9.9.1"]).unwrap_err();
    assert!(e.to_string().contains("back in place"), "{e}");
    assert_eq!(pod.ip_defaults("-4"), before);
    assert_eq!(
        pod.ns
            .routes("-4")
            .iter()
            .filter(|r| r["nhid"] == 7)
            .count(),
        1
    );

    pod.set("net1", &["10.2.0.1"]).unwrap();
    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
}

#[test]
fn a_failed_move_restores_an_ecmp_default_with_a_hop_down() {
    // The kernel marks the hop whose link is down `linkdown` in its dump, and refuses that flag
    // when the route is added back.
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24"])
        .interface("eth1", &["10.3.0.2/24"])
        .interface("net1", &["10.2.0.2/24"]);
    let ns = pod.ns.name();
    ip(&[
        "-n", ns, "route", "add", "default", "nexthop", "via", "10.1.0.1", "dev", "eth0",
        "nexthop", "via", "10.3.0.1", "dev", "eth1",
    ]);
    ip(&["-n", pod.peers.name(), "link", "set", "p-eth1", "down"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !format!("{:?}", pod.ns.routes("-4")).contains("linkdown") {
        assert!(Instant::now() < deadline, "{:?}", pod.ns.routes("-4"));
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = pod.ns.routes("-4");

    let e = pod.set("net1", &["10.9.9.1"]).unwrap_err();
    assert!(e.to_string().contains("back in place"), "{e}");
    assert_eq!(pod.ns.routes("-4"), before);
}

#[test]
fn an_ipv6_gateway_on_an_interface_without_ipv6_is_a_configuration_error() {
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24"])
        .interface("net1", &["10.2.0.2/24"]);
    let out = Command::new("ip")
        .args(["netns", "exec", pod.ns.name(), "sysctl", "-qw"])
        .arg("net.ipv6.conf.net1.disable_ipv6=1")
        .status()
        .unwrap();
    assert!(out.success());
    let e = pod.set("net1", &["fe80::1"]).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("fe80::1") && text.contains("net1"), "{text}");
    assert_eq!(cni::CniError::from(e).code, 7, "{text}");
}

/// Sends one IPv6 router advertisement (router lifetime 1800 s, high preference) out of
/// `ifname` in `netns`, as a router on that link would. Python, as std has no raw sockets.
fn send_router_advertisement(netns: &str, ifname: &str) {
    const RA: &str = r#"
import socket, struct, sys
ifname = sys.argv[1]
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.SOL_SOCKET, 25, ifname.encode())  # SO_BINDTODEVICE
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
idx = socket.if_nametoindex(ifname)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
# type 134, code 0, checksum (the kernel's), hop limit 64, flags (high preference),
# router lifetime, reachable time, retransmit timer
s.sendto(struct.pack("!BBHBBHII", 134, 0, 0, 64, 0x08, 1800, 0, 0), ("ff02::1", 0, 0, idx))
"#;
    let out = Command::new("ip")
        .args(["netns", "exec", netns, "python3", "-c", RA, ifname])
        .output()
        .expect("python3 (scripts/install-deps.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_router_advertisement_does_not_bring_back_another_interfaces_ipv6_default() {
    // Spec §4.1.2.1.9: the default network's default route is cleared. A router advertising on
    // eth0's link would install it again at its next advertisement, unless eth0 stops taking
    // default routes from advertisements.
    let pod = Pod::new();
    for ns in [pod.ns.name(), pod.peers.name()] {
        // Link-local addresses usable at once: the advertisement's source is one.
        let ok = Command::new("ip")
            .args(["netns", "exec", ns, "sysctl", "-qw"])
            .arg("net.ipv6.conf.default.accept_dad=0")
            .status()
            .unwrap();
        assert!(ok.success());
    }
    pod.interface("eth0", &[])
        .interface("net1", &["2001:db8:2::2/64"]);
    let eth0_default = |pod: &Pod| {
        pod.ip_defaults("-6")
            .iter()
            .any(|(dev, _, _)| dev == "eth0")
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !eth0_default(&pod) {
        assert!(
            Instant::now() < deadline,
            "no default from the advertisement"
        );
        send_router_advertisement(pod.peers.name(), "p-eth0");
        std::thread::sleep(Duration::from_millis(100));
    }

    // A move that fails leaves eth0 taking advertisements, as it leaves its route.
    let accept_ra_defrtr = |pod: &Pod| {
        let out = Command::new("ip")
            .args(["netns", "exec", pod.ns.name(), "sysctl", "-n"])
            .arg("net.ipv6.conf.eth0.accept_ra_defrtr")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    pod.set("net1", &["2001:db8:9::1"]).unwrap_err();
    assert!(eth0_default(&pod));
    assert_eq!(accept_ra_defrtr(&pod), "1");

    pod.set("net1", &["2001:db8:2::1"]).unwrap();
    assert_eq!(pod.ip_defaults("-6"), [row("net1", "2001:db8:2::1", 1024)]);
    assert_eq!(accept_ra_defrtr(&pod), "0");
    // The router's next advertisements.
    for _ in 0..3 {
        send_router_advertisement(pod.peers.name(), "p-eth0");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(pod.ip_defaults("-6"), [row("net1", "2001:db8:2::1", 1024)]);
}

#[test]
fn the_pods_own_address_is_refused_as_a_gateway() {
    // The kernel would take it for IPv4, and the pod's traffic would go nowhere.
    let pod = dual_stack_pod();
    let before4 = pod.ip_defaults("-4");
    let before6 = pod.ip_defaults("-6");
    for own in ["10.2.0.2", "2001:db8:2::2"] {
        let e = pod.set("net1", &[own]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains(own) && text.contains("address of the pod itself"),
            "{text}"
        );
        assert_eq!(cni::CniError::from(e).code, 7, "{text}");
    }
    assert_eq!(pod.ip_defaults("-4"), before4);
    assert_eq!(pod.ip_defaults("-6"), before6);
}

#[test]
fn the_far_end_of_a_point_to_point_address_is_a_gateway() {
    // `ip addr add LOCAL peer REMOTE`: the kernel reports REMOTE as the address's IFA_ADDRESS
    // and LOCAL as its IFA_LOCAL. REMOTE is not the pod's own address but the one gateway
    // the link has.
    let pod = dual_stack_pod();
    pod.interface("ptp0", &[]);
    for (local, peer) in [
        ("10.9.0.2", "10.9.0.1/32"),
        ("2001:db8:9::2", "2001:db8:9::1/128"),
    ] {
        let mut args = vec![
            "-n",
            pod.ns.name(),
            "addr",
            "add",
            local,
            "peer",
            peer,
            "dev",
            "ptp0",
        ];
        if local.contains(':') {
            args.push("nodad");
        }
        ip(&args);
        pod.wait_reachable(peer.split('/').next().unwrap(), "ptp0");
    }
    pod.set("ptp0", &["10.9.0.1", "2001:db8:9::1"]).unwrap();
    assert_eq!(pod.ip_defaults("-4"), [row("ptp0", "10.9.0.1", 0)]);
    assert_eq!(pod.ip_defaults("-6"), [row("ptp0", "2001:db8:9::1", 1024)]);
    // Its own end still is the pod's own address.
    let e = pod.set("ptp0", &["10.9.0.2"]).unwrap_err();
    assert!(e.to_string().contains("address of the pod itself"), "{e}");
}

#[test]
fn an_unknown_interface_and_paths_that_are_not_a_netns_are_clear_errors() {
    let pod = dual_stack_pod();
    let path = pod.ns.path();

    let e = pod.set("net9", &["10.2.0.1"]).unwrap_err();
    assert!(matches!(e, RouteError::NoSuchInterface { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("net9") && text.contains(&path.display().to_string()),
        "{text}"
    );
    assert_eq!(cni::CniError::from(e).code, 7);
    assert_eq!(pod.ip_defaults("-4"), vec![row("eth0", "10.1.0.1", 0)]);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-netns");
    std::fs::write(&file, "").unwrap();
    for result in [
        set_default_route(&file, "net1", &["10.2.0.1".parse().unwrap()]),
        default_routes(&file).map(drop),
    ] {
        let e = result.unwrap_err();
        assert!(matches!(e, RouteError::NotANetns { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&file.display().to_string()) && text.contains("not a network namespace"),
            "{text}"
        );
        assert_eq!(cni::CniError::from(e).code, 8);
    }

    // A namespace, but not a network one.
    let e = default_routes("/proc/self/ns/mnt".as_ref()).unwrap_err();
    assert!(matches!(e, RouteError::NotANetns { .. }), "{e}");

    let missing = dir.path().join("gone");
    let e = default_routes(&missing).unwrap_err();
    assert!(matches!(e, RouteError::OpenNetns { .. }), "{e}");
    assert!(e.to_string().contains("gone"), "{e}");
}

fn thread_netns_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

#[test]
fn the_calling_thread_never_leaves_its_netns() {
    let pod = dual_stack_pod();
    let before = thread_netns_inode();
    let pod_inode = std::fs::metadata(pod.ns.path()).unwrap().ino();
    assert_ne!(before, pod_inode);

    pod.set("net1", &["10.2.0.1", "2001:db8:2::1"]).unwrap();
    assert_eq!(thread_netns_inode(), before);
    let _ = pod.set("net1", &["10.9.9.1"]).unwrap_err();
    assert_eq!(thread_netns_inode(), before);
    assert_eq!(pod.plumb_defaults().len(), 2);
    assert_eq!(thread_netns_inode(), before);
    assert_eq!(
        std::fs::metadata("/proc/self/ns/net").unwrap().ino(),
        before
    );
}

/// `ip netns exec NS sleep`, killed on drop: a process whose `/proc/PID/ns/net` is the pod's.
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_proc_pid_ns_net_path_works_as_cni_netns() {
    let pod = Pod::new();
    pod.interface("eth0", &["10.1.0.2/24"])
        .interface("net1", &["10.2.0.2/24"])
        .default_via("10.1.0.1", "eth0");
    let child = Command::new("ip")
        .args(["netns", "exec", pod.ns.name(), "sleep", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let sleeper = Sleeper(child);
    let proc_path = format!("/proc/{}/ns/net", sleeper.0.id());
    // `ip netns exec` enters the namespace, then execs sleep in the same process.
    let pod_inode = std::fs::metadata(pod.ns.path()).unwrap().ino();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::metadata(&proc_path).map(|m| m.ino()).ok() != Some(pod_inode) {
        assert!(
            Instant::now() < deadline,
            "{proc_path} never entered the pod netns"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    set_default_route(proc_path.as_ref(), "net1", &["10.2.0.1".parse().unwrap()]).unwrap();
    assert_eq!(pod.ip_defaults("-4"), vec![row("net1", "10.2.0.1", 0)]);
    let got = default_routes(proc_path.as_ref()).unwrap();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].to_string(), "default via 10.2.0.1 dev net1 metric 0");
}

use std::net::{Ipv4Addr, Ipv6Addr};

use netlink_packet_core::{NLM_F_ACK_TLVS, NLM_F_CAPPED};

use super::wire::NLMSGERR_ATTR_MSG;
use super::*;

fn dumped(family: AddressFamily, dst_len: u8, attributes: Vec<RouteAttribute>) -> RouteMessage {
    let mut r = RouteMessage::default();
    r.header.address_family = family;
    r.header.destination_prefix_length = dst_len;
    r.header.table = RouteHeader::RT_TABLE_MAIN;
    r.header.kind = RouteType::Unicast;
    r.attributes = attributes;
    r
}

#[test]
fn a_default_route_is_one_of_prefix_length_zero_with_or_without_a_destination() {
    let gw = RouteAttribute::Gateway(RouteAddress::Inet(Ipv4Addr::new(10, 0, 0, 1)));
    // What the kernel sends for IPv4: no RTA_DST at all.
    assert!(is_main_default(&dumped(
        AddressFamily::Inet,
        0,
        vec![gw.clone()]
    )));
    // What vishvananda/netlink 1.3.1 reports (Dst 0.0.0.0/0) and Multus v4.2.2 missed.
    assert!(is_main_default(&dumped(
        AddressFamily::Inet,
        0,
        vec![
            RouteAttribute::Destination(RouteAddress::Inet(Ipv4Addr::UNSPECIFIED)),
            gw.clone()
        ]
    )));
    assert!(is_main_default(&dumped(
        AddressFamily::Inet6,
        0,
        vec![RouteAttribute::Destination(RouteAddress::Inet6(
            Ipv6Addr::UNSPECIFIED
        ))]
    )));
    assert!(!is_main_default(&dumped(
        AddressFamily::Inet,
        24,
        vec![RouteAttribute::Destination(RouteAddress::Inet(
            Ipv4Addr::new(10, 0, 0, 0)
        ))]
    )));
}

#[test]
fn other_tables_types_and_source_routes_are_not_the_default_route() {
    let mut other_table = dumped(AddressFamily::Inet, 0, vec![RouteAttribute::Table(100)]);
    other_table.header.table = 100;
    assert!(!is_main_default(&other_table));
    // RTA_TABLE wins over the header's 8-bit field (RT_TABLE_COMPAT for big ids).
    let mut big_table = dumped(AddressFamily::Inet, 0, vec![RouteAttribute::Table(1000)]);
    big_table.header.table = 252;
    assert!(!is_main_default(&big_table));
    let mut unreachable = dumped(AddressFamily::Inet6, 0, vec![]);
    unreachable.header.kind = RouteType::Unreachable;
    assert!(!is_main_default(&unreachable));
    let mut from = dumped(AddressFamily::Inet6, 0, vec![]);
    from.header.source_prefix_length = 64;
    assert!(!is_main_default(&from));
}

#[test]
fn new_routes_say_what_ip_route_add_says() {
    let gw: IpAddr = "2001:db8::1".parse().unwrap();
    let r = new_default_route(7, gw, 1025);
    assert_eq!(r.header.address_family, AddressFamily::Inet6);
    assert_eq!(r.header.destination_prefix_length, 0);
    assert!(is_main_default(&r));
    assert_eq!(next_hops(&r), vec![(7, Some(gw))]);
    assert_eq!(metric(&r), 1025);
    assert_eq!(describe(&r), "default via 2001:db8::1 dev #7 metric 1025");
}

#[test]
fn restoring_drops_what_the_kernel_refuses() {
    let mut r = dumped(
        AddressFamily::Inet,
        0,
        vec![RouteAttribute::Oif(2), RouteAttribute::Priority(5)],
    );
    r.header.flags = RouteFlags::Linkdown | RouteFlags::Onlink | RouteFlags::Dead;
    let back = restorable(&r);
    assert_eq!(back.header.flags, RouteFlags::Onlink);
    assert_eq!(back.attributes, r.attributes);
}

#[test]
fn bad_input_is_refused_before_anything_is_touched() {
    let ns = Path::new("/nonexistent/netns");
    for gw in [
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "255.255.255.255",
        "127.0.0.1",
        "ff02::1",
    ] {
        let e = set_default_route(ns, "net1", &[gw.parse().unwrap()]).unwrap_err();
        assert!(matches!(e, RouteError::InvalidGateway { .. }), "{gw}: {e}");
        assert_eq!(cni::CniError::from(e).code, 7);
    }
    for name in ["", "a-name-of-16-byt", "ne\0t1"] {
        let e = set_default_route(ns, name, &["10.0.0.1".parse().unwrap()]).unwrap_err();
        assert!(
            matches!(e, RouteError::InvalidIfname { .. }),
            "{name:?}: {e}"
        );
    }
    // Nothing asked, nothing done: not even the netns is opened.
    set_default_route(ns, "net1", &[]).unwrap();
    let e = default_routes(ns).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/netns"), "{e}");
    assert_eq!(cni::CniError::from(e).code, 8);
}

#[test]
fn kernel_errors_read_like_the_kernel_and_are_classified() {
    let e = RouteError::AddRoute {
        netns: "/var/run/netns/x".into(),
        ifname: "net1".into(),
        gateway: "10.1.2.1".parse().unwrap(),
        source: NetlinkError::Kernel {
            errno: ENETUNREACH,
            message: None,
        },
        rollback: Rollback::Restored,
    };
    assert_eq!(
        e.to_string(),
        "default-route: cannot add default route via 10.1.2.1 on net1 in /var/run/netns/x: \
         Network is unreachable (os error 101); the previous default routes are back in place"
    );
    assert_eq!(cni::CniError::from(e).code, 7);
    let e = RouteError::AddRoute {
        netns: "/x".into(),
        ifname: "net1".into(),
        gateway: "10.1.2.1".parse().unwrap(),
        source: NetlinkError::Kernel {
            errno: 105,
            message: Some("out of buffers".into()),
        },
        rollback: Rollback::Failed(Box::new(["restoring default via 10.0.0.1 dev #2".into()])),
    };
    let text = e.to_string();
    assert!(
        text.contains(": out of buffers; restoring the previous"),
        "{text}"
    );
    assert_eq!(cni::CniError::from(e).code, 5);
}

#[test]
fn extended_ack_messages_are_read_from_capped_and_full_errors() {
    let tlv = |text: &str| {
        let mut v = Vec::new();
        let len = 4 + text.len() + 1;
        v.extend_from_slice(&(len as u16).to_ne_bytes());
        v.extend_from_slice(&NLMSGERR_ATTR_MSG.to_ne_bytes());
        v.extend_from_slice(text.as_bytes());
        v.push(0);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    };
    // Capped: the request's 16-byte header, then the TLVs.
    let mut capped = vec![0u8; 16];
    capped[..4].copy_from_slice(&60u32.to_ne_bytes());
    capped.extend(tlv("Nexthop has invalid gateway"));
    assert_eq!(
        ext_ack_message(NLM_F_ACK_TLVS | NLM_F_CAPPED, &capped).as_deref(),
        Some("Nexthop has invalid gateway")
    );
    // Not capped: the whole request (length from its header), then the TLVs.
    let mut full = vec![0u8; 22];
    full[..4].copy_from_slice(&22u32.to_ne_bytes());
    full.extend([0, 0]);
    full.extend(tlv("boom"));
    assert_eq!(
        ext_ack_message(NLM_F_ACK_TLVS, &full).as_deref(),
        Some("boom")
    );
    assert_eq!(ext_ack_message(0, &full), None);
    // Truncated or lying input gives nothing, never a panic.
    assert_eq!(ext_ack_message(NLM_F_ACK_TLVS, &full[..3]), None);
    assert_eq!(
        ext_ack_message(NLM_F_ACK_TLVS | NLM_F_CAPPED, &capped[..21]),
        None
    );
}

#[test]
fn garbage_datagrams_are_errors_not_panics() {
    assert!(parse_datagram(&[]).unwrap().is_empty());
    let mut lying = vec![0u8; 16];
    lying[..4].copy_from_slice(&400u32.to_ne_bytes());
    assert!(parse_datagram(&lying).is_err());
    let mut short = vec![0u8; 16];
    short[..4].copy_from_slice(&4u32.to_ne_bytes());
    assert!(parse_datagram(&short).is_err());
}

//! The value types of a selection element and the rule each must follow (multi-net spec
//! §4.1.2.1.3–§4.1.2.1.10). Every function here returns the reason a value is wrong, for the
//! caller to place (element, key) in its error.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use cni::quote;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

/// One entry of `ips` (§4.1.2.1.3): an IPv4 or IPv6 address with an optional prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpRequest {
    pub addr: IpAddr,
    pub prefix: Option<u8>,
}

impl FromStr for IpRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr_s, prefix_s) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr_s
            .parse()
            .map_err(|_| format!("{} is not an IPv4 or IPv6 address", quote::quoted(s)))?;
        let prefix = match prefix_s {
            None => None,
            Some(p) => {
                let max = if addr.is_ipv4() { 32 } else { 128 };
                // Digits only: "/+24" and "/ 24" are not prefix lengths.
                let n = (!p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| p.parse::<u8>().ok())
                    .flatten()
                    .filter(|n| *n <= max)
                    .ok_or_else(|| {
                        format!(
                            "{}: {} is not a prefix length between 0 and {max}",
                            quote::quoted(s),
                            quote::quoted(p)
                        )
                    })?;
                Some(n)
            }
        };
        Ok(IpRequest { addr, prefix })
    }
}

impl fmt::Display for IpRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix {
            Some(p) => write!(f, "{}/{}", self.addr, p),
            None => write!(f, "{}", self.addr),
        }
    }
}

impl Serialize for IpRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A hardware address of `N` bytes, written as Go's `net.ParseMAC` reads it: `xx:xx:…`,
/// `xx-xx-…` or `xxxx.xxxx.…`, in any case. Displays as lower-case, colon-separated hex.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HwAddr<const N: usize>(pub [u8; N]);

/// A 6-byte Ethernet MAC address (`mac`, §4.1.2.1.4).
pub type MacAddress = HwAddr<6>;
/// An 8-byte InfiniBand GUID (`infiniband-guid`, §4.1.2.1.10).
pub type InfinibandGuid = HwAddr<8>;

fn hex_byte(pair: &[u8]) -> Option<u8> {
    let digit = |c: u8| (c as char).to_digit(16);
    match pair {
        [a, b] => Some((digit(*a)? * 16 + digit(*b)?) as u8),
        _ => None,
    }
}

impl<const N: usize> FromStr for HwAddr<N> {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "{} is not a valid {N}-byte hardware address",
                quote::quoted(s)
            )
        };
        let b = s.as_bytes();
        let mut out = [0u8; N];
        let sep = b.get(2).copied();
        if matches!(sep, Some(b':') | Some(b'-')) {
            // xx:xx:xx…: N pairs, N-1 separators, all the same.
            if b.len() != N * 3 - 1 {
                return Err(bad());
            }
            for (i, chunk) in b.chunks(3).enumerate() {
                let (pair, rest) = chunk.split_at(chunk.len().min(2));
                if !(rest.is_empty() || rest == [sep.unwrap_or(0)]) {
                    return Err(bad());
                }
                *out.get_mut(i).ok_or_else(bad)? = hex_byte(pair).ok_or_else(bad)?;
            }
        } else if b.get(4) == Some(&b'.') && N.is_multiple_of(2) {
            // xxxx.xxxx.xxxx…: N/2 groups of four hex digits.
            if b.len() != N / 2 * 5 - 1 {
                return Err(bad());
            }
            for (g, chunk) in b.chunks(5).enumerate() {
                let (quad, rest) = chunk.split_at(chunk.len().min(4));
                if !(rest.is_empty() || rest == b".") || quad.len() != 4 {
                    return Err(bad());
                }
                let (hi, lo) = quad.split_at(2);
                *out.get_mut(2 * g).ok_or_else(bad)? = hex_byte(hi).ok_or_else(bad)?;
                *out.get_mut(2 * g + 1).ok_or_else(bad)? = hex_byte(lo).ok_or_else(bad)?;
            }
        } else {
            return Err(bad());
        }
        Ok(HwAddr(out))
    }
}

impl<const N: usize> fmt::Display for HwAddr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl<const N: usize> Serialize for HwAddr<N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A port mapping's protocol (§4.1.2.1.7): TCP, UDP or SCTP in any case; TCP by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    #[default]
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// Lower case, as CONVENTIONS.md's `portMappings` example writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl Serialize for Protocol {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One entry of `portMappings` (§4.1.2.1.7), in CONVENTIONS.md's shape. `hostIP` is not in the
/// spec; Multus and the container runtimes pass it and the `portmap` plugin reads it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct PortMapping {
    #[serde(rename = "hostPort")]
    pub host_port: u16,
    #[serde(rename = "containerPort")]
    pub container_port: u16,
    pub protocol: Protocol,
    #[serde(rename = "hostIP", skip_serializing_if = "Option::is_none")]
    pub host_ip: Option<IpAddr>,
}

/// `bandwidth` (§4.1.2.1.8): rates in bits per second, bursts in bits; each non-zero, at least
/// one present, a burst only with its rate.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Bandwidth {
    #[serde(rename = "ingressRate", skip_serializing_if = "Option::is_none")]
    pub ingress_rate: Option<u64>,
    #[serde(rename = "ingressBurst", skip_serializing_if = "Option::is_none")]
    pub ingress_burst: Option<u64>,
    #[serde(rename = "egressRate", skip_serializing_if = "Option::is_none")]
    pub egress_rate: Option<u64>,
    #[serde(rename = "egressBurst", skip_serializing_if = "Option::is_none")]
    pub egress_burst: Option<u64>,
}

/// A short description of a JSON value's type, for messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The value as a string, or why not.
pub(crate) fn string(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, not {}", type_name(v)))
}

fn strings(v: &Value) -> Result<&[Value], String> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(format!(
            "expected a list of strings, not {}",
            type_name(other)
        )),
    }
}

/// `ips` (§4.1.2.1.3): a non-empty list of addresses with optional prefix lengths.
pub fn ips(v: &Value) -> Result<Vec<IpRequest>, String> {
    let list = strings(v)?;
    if list.is_empty() {
        return Err("the list must contain at least one address".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            string(e)
                .and_then(str::parse)
                .map_err(|why| format!("entry {}: {why}", i + 1))
        })
        .collect()
}

/// `default-route` (§4.1.2.1.9): a list, possibly empty, of gateway addresses.
pub fn default_route(v: &Value) -> Result<Vec<IpAddr>, String> {
    strings(v)?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            string(e)
                .and_then(|s| {
                    s.parse::<IpAddr>()
                        .map_err(|_| format!("{} is not an IPv4 or IPv6 address", quote::quoted(s)))
                })
                .map_err(|why| format!("entry {}: {why}", i + 1))
        })
        .collect()
}

/// `interface` (§4.1.2.1.5): a valid Linux interface name, which the kernel gives the link as
/// it is. A '%' makes the kernel read the name as a template (`net%d` becomes `net0`), so the
/// pod would get another name than the one recorded and reported: refused. So are `all` and
/// `default`, the names of the per-family settings in `/proc/sys/net/*/conf/`: the kernel
/// refuses a link of either name (EINVAL), which the delegate would report mid-ADD as a bare
/// "invalid argument".
pub fn interface(v: &Value) -> Result<String, String> {
    let s = string(v)?;
    match cni::validate::interface_name_problem(s) {
        None if s.contains('%') => Err(format!(
            "{} is not a valid interface name: the kernel reads a name with '%' as a \
             template and would pick another",
            quote::quoted(s)
        )),
        None if s == "all" || s == "default" => Err(format!(
            "{s:?} is not a valid interface name: the kernel reserves it (its settings are \
             /proc/sys/net/*/conf/{s}) and refuses a link of that name"
        )),
        None => Ok(s.to_string()),
        Some(why) => Err(format!(
            "{} is not a valid interface name: {why}",
            quote::quoted(s)
        )),
    }
}

/// `cni-args` (§4.1.2.1.6): a JSON object, passed through.
pub fn cni_args(v: &Value) -> Result<Map<String, Value>, String> {
    match v {
        Value::Object(m) => Ok(m.clone()),
        other => Err(format!("expected an object, not {}", type_name(other))),
    }
}

/// An integer in `lo..=hi`.
fn integer(v: &Value, lo: u64, hi: u64) -> Result<u64, String> {
    match v.as_u64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ if v.is_number() => Err(format!("{v} is not an integer between {lo} and {hi}")),
        _ => Err(format!("expected an integer, not {}", type_name(v))),
    }
}

/// `portMappings` (§4.1.2.1.7): a non-empty list of `{hostPort, containerPort[, protocol]}`.
pub fn port_mappings(v: &Value) -> Result<Vec<PortMapping>, String> {
    let Value::Array(list) = v else {
        return Err(format!("expected a list of objects, not {}", type_name(v)));
    };
    if list.is_empty() {
        return Err("the list must contain at least one port mapping".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, e)| port_mapping(e).map_err(|why| format!("entry {}: {why}", i + 1)))
        .collect()
}

fn port_mapping(v: &Value) -> Result<PortMapping, String> {
    let Value::Object(m) = v else {
        return Err(format!("expected an object, not {}", type_name(v)));
    };
    // §4.1.2.1.7: a dict of "the following keys" (and CONVENTIONS.md's `hostIP`). Another key is
    // a typo, and ignoring it would attach with a default the user did not ask for.
    if let Some(key) = m.keys().find(|k| {
        !matches!(
            k.as_str(),
            "hostPort" | "containerPort" | "protocol" | "hostIP"
        )
    }) {
        return Err(format!(
            "unknown key {key:?}: expected hostPort, containerPort, protocol or hostIP"
        ));
    }
    let port = |key: &str| -> Result<u16, String> {
        let v = m.get(key).ok_or_else(|| format!("\"{key}\" is required"))?;
        integer(v, 1, 65535)
            .and_then(|n| u16::try_from(n).map_err(|_| format!("{n} is out of range")))
            .map_err(|why| format!("\"{key}\": {why}"))
    };
    let host_port = port("hostPort")?;
    let container_port = port("containerPort")?;
    let protocol = match m.get("protocol") {
        None | Some(Value::Null) => Protocol::Tcp,
        Some(p) => {
            let s = string(p).map_err(|why| format!("\"protocol\": {why}"))?;
            match s.to_ascii_lowercase().as_str() {
                "tcp" => Protocol::Tcp,
                "udp" => Protocol::Udp,
                "sctp" => Protocol::Sctp,
                _ => {
                    return Err(format!(
                        "\"protocol\": {} is not one of \"TCP\", \"UDP\" or \"SCTP\"",
                        quote::quoted(s)
                    ));
                }
            }
        }
    };
    let host_ip = match m.get("hostIP") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(h) => Some(
            string(h)
                .and_then(|s| {
                    s.parse::<IpAddr>()
                        .map_err(|_| format!("{} is not an IPv4 or IPv6 address", quote::quoted(s)))
                })
                .map_err(|why| format!("\"hostIP\": {why}"))?,
        ),
    };
    Ok(PortMapping {
        host_port,
        container_port,
        protocol,
        host_ip,
    })
}

/// `bandwidth` (§4.1.2.1.8).
pub fn bandwidth(v: &Value) -> Result<Bandwidth, String> {
    let Value::Object(m) = v else {
        return Err(format!("expected an object, not {}", type_name(v)));
    };
    let mut bw = Bandwidth::default();
    for (key, value) in m {
        let slot = match key.as_str() {
            "ingressRate" => &mut bw.ingress_rate,
            "ingressBurst" => &mut bw.ingress_burst,
            "egressRate" => &mut bw.egress_rate,
            "egressBurst" => &mut bw.egress_burst,
            _ => {
                return Err(format!(
                    "unknown key {key:?}: expected ingressRate, ingressBurst, egressRate or \
                     egressBurst"
                ));
            }
        };
        if value.is_null() {
            continue;
        }
        *slot = Some(
            integer(value, 1, u64::MAX)
                .map_err(|why| format!("\"{key}\": {why} (the value must be non-zero)"))?,
        );
    }
    if bw == Bandwidth::default() {
        return Err(
            "at least one of ingressRate, ingressBurst, egressRate, egressBurst is \
                    required"
                .into(),
        );
    }
    if bw.ingress_burst.is_some() && bw.ingress_rate.is_none() {
        return Err("\"ingressBurst\" is given without \"ingressRate\"".into());
    }
    if bw.egress_burst.is_some() && bw.egress_rate.is_none() {
        return Err("\"egressBurst\" is given without \"egressRate\"".into());
    }
    Ok(bw)
}

/// A hardware address of `N` bytes written as a string.
pub fn hw_addr<const N: usize>(v: &Value) -> Result<HwAddr<N>, String> {
    string(v).and_then(str::parse)
}

/// `mac` (§4.1.2.1.4): a 6-byte Ethernet address the pod's interface can take. The kernel gives
/// no interface a multicast (broadcast included) or all-zero address (`is_valid_ether_addr`): a
/// delegate would fail deep inside the ADD with EADDRNOTAVAIL, naming neither element nor key.
pub fn mac(v: &Value) -> Result<MacAddress, String> {
    let m: MacAddress = hw_addr(v)?;
    if m.0 == [0; 6] {
        return Err(format!(
            "{m} is not a usable interface address: it is all zeros"
        ));
    }
    if m.0[0] & 1 == 1 {
        let kind = if m.0 == [0xff; 6] {
            "broadcast"
        } else {
            "multicast"
        };
        return Err(format!(
            "{m} is not a usable interface address: it is a {kind} address (the least \
             significant bit of the first byte is set)"
        ));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ip_requests_take_an_optional_prefix() {
        for (s, shown) in [
            ("1.2.3.4", "1.2.3.4"),
            ("10.2.2.42/24", "10.2.2.42/24"),
            ("2001:db8::5/64", "2001:db8::5/64"),
            ("2001:DB8::5", "2001:db8::5"),
            ("0.0.0.0/0", "0.0.0.0/0"),
        ] {
            assert_eq!(s.parse::<IpRequest>().unwrap().to_string(), shown);
        }
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4/33",
            "::1/129",
            "1.2.3.4/",
            "1.2.3.4/+1",
            "1.2.3.4/ 1",
            "x",
            "fe80::1%eth0",
            "1.2.3.4/24/1",
            "01.2.3.4",
        ] {
            assert!(bad.parse::<IpRequest>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn macs_are_six_bytes_in_go_forms() {
        for s in ["02:23:45:67:89:01", "02-23-45-67-89-01", "0223.4567.8901"] {
            let m: MacAddress = s.parse().unwrap();
            assert_eq!(m.0, [0x02, 0x23, 0x45, 0x67, 0x89, 0x01], "{s}");
        }
        assert_eq!(
            "AA-BB-CC-DD-EE-FF"
                .parse::<MacAddress>()
                .unwrap()
                .to_string(),
            "aa:bb:cc:dd:ee:ff"
        );
        for bad in [
            "",
            "aa:bb:cc:dd:ee",
            "aa:bb:cc:dd:ee:ff:00",
            "aa:bb-cc:dd:ee:ff",
            "aa:bb:cc:dd:ee:fg",
            "aabb.ccdd.eeff.0011",
            "a:bb:cc:dd:ee:fff",
            "24:8a:07:03:00:8d:ae:2f",
            "aa:bb:cc:dd:ee:f",
        ] {
            assert!(bad.parse::<MacAddress>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn macs_must_be_unicast_and_not_all_zero() {
        // §4.1.2.1.4: the pod's interface takes the address, and the kernel refuses these.
        assert_eq!(
            mac(&json!("02:23:45:67:89:01")).unwrap().0,
            [0x02, 0x23, 0x45, 0x67, 0x89, 0x01]
        );
        assert!(mac(&json!("FE-00-00-00-00-01")).is_ok());
        for (bad, why) in [
            (
                "00:00:00:00:00:00",
                "00:00:00:00:00:00 is not a usable interface address: it is all zeros",
            ),
            ("0000.0000.0000", "all zeros"),
            (
                "ff:ff:ff:ff:ff:ff",
                "ff:ff:ff:ff:ff:ff is not a usable interface address: it is a broadcast address",
            ),
            (
                "01:00:5e:00:00:01",
                "01:00:5e:00:00:01 is not a usable interface address: it is a multicast address",
            ),
            ("33-33-00-00-00-01", "multicast"),
            ("03:00:00:00:00:00", "multicast"),
        ] {
            let e = mac(&json!(bad)).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(mac(&json!("zz")).unwrap_err().contains("6-byte"));
    }

    #[test]
    fn guids_are_eight_bytes() {
        let g: InfinibandGuid = "24:8a:07:03:00:8d:ae:2f".parse().unwrap();
        assert_eq!(g.to_string(), "24:8a:07:03:00:8d:ae:2f");
        assert_eq!("248a.0703.008d.ae2f".parse::<InfinibandGuid>().unwrap(), g);
        for bad in ["02:23:45:67:89:01", "24:8a:07:03:00:8d:ae:2f:00", ""] {
            assert!(bad.parse::<InfinibandGuid>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn port_mappings_follow_the_spec() {
        let pm = port_mappings(&json!([
            {"hostPort": 8080, "containerPort": 80, "protocol": "tcp"},
            {"hostPort": 1, "containerPort": 65535, "protocol": "Udp"},
            {"hostPort": 53, "containerPort": 53},
            {"hostPort": 9, "containerPort": 9, "protocol": "SCTP", "hostIP": "10.0.0.1"}
        ]))
        .unwrap();
        assert_eq!(pm[1].protocol, Protocol::Udp);
        assert_eq!(pm[2].protocol, Protocol::Tcp);
        assert_eq!(pm[3].host_ip, Some("10.0.0.1".parse().unwrap()));
        let cases = [
            (json!([]), "at least one"),
            (json!({}), "expected a list"),
            (
                json!([{"containerPort": 80}]),
                "entry 1: \"hostPort\" is required",
            ),
            (json!([{"hostPort": 80}]), "\"containerPort\" is required"),
            (
                json!([{"hostPort": 0, "containerPort": 80}]),
                "between 1 and 65535",
            ),
            (
                json!([{"hostPort": 65536, "containerPort": 80}]),
                "between 1 and 65535",
            ),
            (
                json!([{"hostPort": -1, "containerPort": 80}]),
                "between 1 and 65535",
            ),
            (
                json!([{"hostPort": 80.5, "containerPort": 80}]),
                "not an integer",
            ),
            (
                json!([{"hostPort": "80", "containerPort": 80}]),
                "expected an integer",
            ),
            (
                json!([{"hostPort": 80, "containerPort": 80, "protocol": "icmp"}]),
                "\"icmp\" is not one of",
            ),
            (
                json!([{"hostPort": 80, "containerPort": 80, "protocol": ""}]),
                "is not one of",
            ),
            (
                json!([{"hostPort": 80, "containerPort": 80, "hostIP": "x"}]),
                "hostIP",
            ),
            (
                json!([{"hostPort": 80, "containerPort": 80}, 5]),
                "entry 2: expected an object",
            ),
        ];
        for (v, needle) in cases {
            let e = port_mappings(&v).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn port_mappings_refuse_unknown_keys() {
        // §4.1.2.1.7: each entry is a dict of "the following keys". A misspelt "protocol" must
        // not silently give the TCP default; a misspelt "hostPort" is already "required".
        let e = port_mappings(&json!([{"hostPort": 53, "containerPort": 53, "protcol": "udp"}]))
            .unwrap_err();
        assert_eq!(
            e,
            "entry 1: unknown key \"protcol\": expected hostPort, containerPort, protocol or \
             hostIP"
        );
        assert!(
            port_mappings(&json!([{"hostPort": 1, "containerPort": 2, "hostIP": null}])).is_ok()
        );
    }

    #[test]
    fn bandwidth_needs_non_zero_values_and_a_rate_for_each_burst() {
        let bw = bandwidth(&json!({"ingressRate": 2048, "ingressBurst": 300, "egressRate": 8000, "egressBurst": 200})).unwrap();
        assert_eq!(bw.egress_burst, Some(200));
        assert!(bandwidth(&json!({"egressRate": 1})).is_ok());
        let cases = [
            (json!({}), "at least one"),
            (json!({"ingressRate": 0}), "non-zero"),
            (json!({"ingressRate": -5}), "non-zero"),
            (
                json!({"ingressBurst": 300}),
                "\"ingressBurst\" is given without \"ingressRate\"",
            ),
            (
                json!({"ingressRate": 1, "egressBurst": 300}),
                "\"egressBurst\" is given without \"egressRate\"",
            ),
            (json!({"ingressRate": "1"}), "expected an integer"),
            (json!({"ingresRate": 1}), "unknown key \"ingresRate\""),
            (json!([1]), "expected an object"),
        ];
        for (v, needle) in cases {
            let e = bandwidth(&v).unwrap_err();
            assert!(e.contains(needle), "{v}: {e}");
        }
    }

    #[test]
    fn default_route_entries_are_bare_addresses_and_may_be_empty() {
        assert_eq!(default_route(&json!([])).unwrap(), Vec::<IpAddr>::new());
        assert_eq!(
            default_route(&json!(["10.0.0.1", "2001:db8::1"]))
                .unwrap()
                .len(),
            2
        );
        let e = default_route(&json!(["10.0.0.1", "10.0.0.0/8"])).unwrap_err();
        assert!(
            e.contains("entry 2: \"10.0.0.0/8\" is not an IPv4 or IPv6 address"),
            "{e}"
        );
        assert!(default_route(&json!("10.0.0.1")).is_err());
    }

    #[test]
    fn ips_must_not_be_empty_and_name_the_bad_entry() {
        assert!(ips(&json!([])).unwrap_err().contains("at least one"));
        let e = ips(&json!(["10.2.2.42/24", "300.1.1.1"])).unwrap_err();
        assert!(
            e.contains("entry 2: \"300.1.1.1\" is not an IPv4 or IPv6 address"),
            "{e}"
        );
        assert!(
            ips(&json!(["1.2.3.4", 5]))
                .unwrap_err()
                .contains("entry 2: expected a string")
        );
    }

    #[test]
    fn interface_names_follow_linux_rules() {
        assert_eq!(interface(&json!("net1")).unwrap(), "net1");
        for bad in [
            json!(""),
            json!("a/b"),
            json!("sixteen-chars-xx"),
            json!("a b"),
            json!(".."),
            json!("net%d"),
            json!("all"),
            json!("default"),
            json!(1),
        ] {
            assert!(interface(&bad).is_err(), "{bad}");
        }
    }
}

//! An IP address with a prefix length, as CNI results and configs write it ("10.1.2.3/24").
//!
//! Unlike a network prefix, the address keeps its host bits: in a result, `address` is the
//! address assigned to the interface, and the prefix gives the subnet (spec §5 "ips").

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl IpNet {
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, String> {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("prefix length {prefix} is longer than {max}"));
        }
        Ok(IpNet { addr, prefix })
    }

    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
}

impl FromStr for IpNet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not in CIDR notation (address/prefix)"))?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?}: {addr:?} is not an IP address"))?;
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{s:?}: {prefix:?} is not a prefix length"));
        }
        let prefix: u8 = prefix
            .parse()
            .map_err(|_| format!("{s:?}: {prefix:?} is not a prefix length"))?;
        IpNet::new(addr, prefix).map_err(|e| format!("{s:?}: {e}"))
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Serialize for IpNet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_host_bits_and_rejects_bad_forms() {
        let n: IpNet = "10.1.2.3/24".parse().unwrap();
        assert_eq!(n.to_string(), "10.1.2.3/24");
        let n6: IpNet = "2001:db8::5/64".parse().unwrap();
        assert!(!n6.is_ipv4());
        for bad in [
            "10.1.2.3",
            "10.1.2.3/33",
            "::1/129",
            "10.1.2/24",
            "x/1",
            "1.2.3.4/",
            "1.2.3.4/+1",
        ] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }
}

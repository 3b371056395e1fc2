//! Default-route selection inside a pod's network namespace, over netlink: the `default-route`
//! key of the selection annotation (multi-net spec §4.1.2.1.9; the gateways it names are what
//! §5.3.6.4's network-status `default-route` reports). The attachment that asks for it gets the
//! requested gateways, and every other attachment's default routes, the cluster-wide default
//! network's included, are removed ([`set_default_route`]).

use std::fmt;
use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use cni::CniError;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_REQUEST, NetlinkHeader,
    NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkMessage};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteNextHopFlags,
    RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{Socket, SocketAddr};
use nix::sched::CloneFlags;
use nix::sys::statfs::{NSFS_MAGIC, PROC_SUPER_MAGIC, fstatfs};

mod accept_ra;
mod wire;

use accept_ra::write_accept_ra_defrtr;
use wire::{ext_ack_message, parse_datagram};

/// The kernel's main routing table (`RT_TABLE_MAIN`), the one `ip route` shows and the one CNI
/// plugins install default routes in.
const MAIN_TABLE: u32 = RouteHeader::RT_TABLE_MAIN as u32;

/// The IPv6 metric the kernel gives a route added with metric 0 (`IP6_RT_PRIO_USER`): for IPv6,
/// 0 means "unset", so gateways numbered 0, 1, 2… would come out as 1024, 1, 2 and the first
/// gateway would be preferred last. IPv6 gateways are numbered from here instead.
const IPV6_FIRST_METRIC: u32 = 1024;

/// errno values the kernel answers with (Linux, every architecture plumb runs on).
const ESRCH: i32 = 3;
const EACCES: i32 = 13;
const EINVAL: i32 = 22;
const EEXIST: i32 = 17;
const ENETUNREACH: i32 = 101;
const EHOSTUNREACH: i32 = 113;
const ENODEV: i32 = 19;

/// Attempts at a dump the kernel reports as interrupted by a concurrent change.
const DUMP_ATTEMPTS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IpFamily {
    V4,
    V6,
}

impl IpFamily {
    pub fn of(ip: &IpAddr) -> IpFamily {
        match ip {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    fn address_family(self) -> AddressFamily {
        match self {
            IpFamily::V4 => AddressFamily::Inet,
            IpFamily::V6 => AddressFamily::Inet6,
        }
    }

    fn first_metric(self) -> u32 {
        match self {
            IpFamily::V4 => 0,
            IpFamily::V6 => IPV6_FIRST_METRIC,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        })
    }
}

/// One default route of the main table, one per next hop (an ECMP route gives several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultRoute {
    pub family: IpFamily,
    /// The outgoing interface's name, or `#<index>` if the link vanished during the call.
    pub ifname: String,
    pub ifindex: u32,
    /// `None` for a route straight onto a link (`default dev wg0`).
    pub gateway: Option<IpAddr>,
    pub metric: u32,
}

impl fmt::Display for DefaultRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("default")?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        write!(f, " dev {} metric {}", self.ifname, self.metric)
    }
}

/// A failure on the netlink socket: the kernel's answer, or the socket itself.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// The kernel refused the request: its errno and, when it gave one, its extended-ack message
    /// (e.g. "Nexthop has invalid gateway").
    #[error("{}{}", io::Error::from_raw_os_error(*errno), ext_ack_suffix(message))]
    Kernel {
        errno: i32,
        message: Option<Box<str>>,
    },
    #[error(transparent)]
    Socket(#[from] io::Error),
    #[error("unexpected netlink reply: {0}")]
    Protocol(Box<str>),
    #[error("the dump was interrupted by concurrent changes {DUMP_ATTEMPTS} times")]
    DumpInterrupted,
}

fn ext_ack_suffix(message: &Option<Box<str>>) -> String {
    message
        .as_ref()
        .map(|m| format!(": {m}"))
        .unwrap_or_default()
}

impl NetlinkError {
    fn errno(&self) -> Option<i32> {
        match self {
            NetlinkError::Kernel { errno, .. } => Some(*errno),
            NetlinkError::Socket(e) => e.raw_os_error(),
            NetlinkError::Protocol(_) | NetlinkError::DumpInterrupted => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("default-route: cannot open network namespace {}: {source}", netns.display())]
    OpenNetns { netns: PathBuf, source: io::Error },
    #[error("default-route: {} is not a network namespace ({why})", netns.display())]
    NotANetns { netns: PathBuf, why: String },
    #[error("default-route: cannot enter network namespace {}: {source}", netns.display())]
    EnterNetns { netns: PathBuf, source: io::Error },
    #[error("default-route: netlink in {}: {what}: {source}", netns.display())]
    Netlink {
        netns: PathBuf,
        what: String,
        source: NetlinkError,
    },
    #[error("default-route: {ifname:?} is not a valid interface name")]
    InvalidIfname { ifname: String },
    #[error("default-route: no interface {ifname} in {}", netns.display())]
    NoSuchInterface { netns: PathBuf, ifname: String },
    #[error("default-route: {gateway} cannot be a gateway: {why}")]
    InvalidGateway { gateway: IpAddr, why: &'static str },
    #[error(
        "default-route: cannot add default route via {gateway} on {ifname} in {}: {source}; {rollback}",
        netns.display()
    )]
    AddRoute {
        netns: PathBuf,
        ifname: String,
        gateway: IpAddr,
        source: NetlinkError,
        rollback: Rollback,
    },
    #[error(
        "default-route: cannot delete default route {route} in {} (to move it to {ifname}): \
         {source}; {rollback}",
        netns.display()
    )]
    DeleteRoute {
        netns: PathBuf,
        ifname: String,
        route: String,
        source: NetlinkError,
        rollback: Rollback,
    },
    #[error(
        "default-route: cannot stop {ifname} in {} from taking a default route from IPv6 router \
         advertisements (net.ipv6.conf.{ifname}.accept_ra_defrtr): {source}; {rollback}",
        netns.display()
    )]
    RouterAdvertisements {
        netns: PathBuf,
        ifname: String,
        source: io::Error,
        rollback: Rollback,
    },
    #[error("default-route: the thread that enters {} failed: {why}", netns.display())]
    Thread { netns: PathBuf, why: String },
}

/// What undoing a failed change achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollback {
    /// The routes are as they were before the call.
    Restored,
    /// Some of it could not be undone; each entry says what.
    Failed(Box<[String]>),
}

impl fmt::Display for Rollback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rollback::Restored => f.write_str("the previous default routes are back in place"),
            Rollback::Failed(what) => write!(
                f,
                "restoring the previous default routes failed too: {}",
                what.join("; ")
            ),
        }
    }
}

impl From<RouteError> for cni::CniError {
    fn from(e: RouteError) -> Self {
        use cni::ErrorCode;
        let code = match &e {
            RouteError::OpenNetns { .. }
            | RouteError::NotANetns { .. }
            | RouteError::EnterNetns { .. } => ErrorCode::InvalidNetNs,
            RouteError::InvalidIfname { .. }
            | RouteError::NoSuchInterface { .. }
            | RouteError::InvalidGateway { .. } => ErrorCode::InvalidConfig,
            // The kernel's ways of saying the gateway is not reachable through that interface:
            // EINVAL "Nexthop has invalid gateway" (IPv4), EHOSTUNREACH (IPv6), ENETUNREACH,
            // EACCES "IPv6 is disabled on nexthop device" (an IPv6 gateway on an interface
            // without IPv6). The request is wrong, not the machine.
            RouteError::AddRoute { source, .. }
                if matches!(
                    source.errno(),
                    Some(EINVAL | ENETUNREACH | EHOSTUNREACH | EACCES)
                ) =>
            {
                ErrorCode::InvalidConfig
            }
            RouteError::AddRoute { .. }
            | RouteError::DeleteRoute { .. }
            | RouteError::RouterAdvertisements { .. }
            | RouteError::Netlink { .. } => ErrorCode::Io,
            RouteError::Thread { .. } => ErrorCode::Internal,
        };
        cni::CniError::new(code, e.to_string())
    }
}

/// Makes `ifname` the pod's default route for each address family that `gateways` contains:
/// every default route of that family (main table, any interface — the default network's eth0
/// included) is deleted, then one default route per gateway is added on `ifname`, in order, with
/// increasing metrics within a family (spec: "an implementation may choose to assign a metric to
/// each gateway in the list using that ordering"): 0, 1, 2… for IPv4 and 1024, 1025… for IPv6,
/// whose kernel reads metric 0 as "unset" and makes it 1024. Families absent from `gateways` are
/// left alone. An empty `gateways` changes nothing and touches nothing. When IPv6 gateways are
/// given, every other interface stops taking a default route from router advertisements
/// (`accept_ra_defrtr` 0), so that the next advertisement does not undo the move.
///
/// Failure leaves the previous default routes in place: nothing is changed until the netns, the
/// interface and every gateway's form are checked, and if the kernel then refuses a route (an
/// unreachable gateway), what was added is removed and what was deleted is put back. The kernel
/// is asked rather than predicted because only it knows every way a gateway can be reachable (a
/// subnet of an address, a link-scope route, an IPv6 link-local address); adding first and
/// deleting after is not possible either, as the new default would collide with an old one of
/// the same metric (EEXIST).
pub fn set_default_route(
    netns: &Path,
    ifname: &str,
    gateways: &[IpAddr],
) -> Result<(), RouteError> {
    if gateways.is_empty() {
        return Ok(());
    }
    // A gateway named twice is one gateway: installed again, it would be a second default
    // route through it at the next metric, and be reported twice.
    let mut unique: Vec<IpAddr> = Vec::with_capacity(gateways.len());
    for gw in gateways {
        if !unique.contains(gw) {
            unique.push(*gw);
        }
    }
    let gateways = &unique[..];
    check_ifname(ifname)?;
    for gw in gateways {
        check_gateway(*gw)?;
    }
    let mut nl = Netlink::open(netns)?;
    let ifindex = nl.link_index(ifname)?;
    // The pod's own address as its gateway: the kernel takes it for IPv4, and the pod's traffic
    // then goes nowhere.
    let own = nl.local_addresses()?;
    if let Some(gw) = gateways.iter().find(|g| own.contains(g)) {
        return Err(RouteError::InvalidGateway {
            gateway: *gw,
            why: "it is an address of the pod itself",
        });
    }

    let families: Vec<IpFamily> = [IpFamily::V4, IpFamily::V6]
        .into_iter()
        .filter(|f| gateways.iter().any(|g| IpFamily::of(g) == *f))
        .collect();
    let mut old = Vec::new();
    for family in &families {
        old.extend(nl.dump_routes(*family)?.into_iter().filter(is_main_default));
    }
    // The other interfaces, whose IPv6 default routes must stay cleared: a router advertisement
    // on one of them would install its default route again (the kernel takes one from every RA
    // while `accept_ra_defrtr` is 1, its default), and the pod's traffic would leave by it.
    let ra_off: Vec<(String, String)> = if families.contains(&IpFamily::V6) {
        nl.link_names()?
            .into_iter()
            .filter(|(_, name)| name != ifname && name != "lo")
            .map(|(_, name)| (name, "0".to_string()))
            .collect()
    } else {
        Vec::new()
    };

    let mut new = Vec::with_capacity(gateways.len());
    for family in &families {
        let same_family = gateways.iter().filter(|g| IpFamily::of(g) == *family);
        for (metric, gw) in (family.first_metric()..).zip(same_family) {
            new.push((*gw, new_default_route(ifindex, *gw, metric)));
        }
    }

    // Every check is done and nothing has changed yet. From here a failure is rolled back.
    let mut deleted: Vec<RouteMessage> = Vec::new();
    for route in &old {
        match nl.ack(RouteNetlinkMessage::DelRoute(by_nexthop_id(route)), 0) {
            Ok(()) => deleted.push(route.clone()),
            // Gone already (something else removed it meanwhile): that is what we wanted.
            Err(e) if e.errno() == Some(ESRCH) => {}
            Err(source) => {
                let rollback = nl.rollback(&[], &deleted);
                return Err(RouteError::DeleteRoute {
                    netns: netns.to_path_buf(),
                    ifname: ifname.to_string(),
                    route: describe(route),
                    source,
                    rollback,
                });
            }
        }
    }
    let mut added: Vec<RouteMessage> = Vec::new();
    for (gateway, route) in new {
        match nl.ack(
            RouteNetlinkMessage::NewRoute(route.clone()),
            NLM_F_CREATE | NLM_F_EXCL,
        ) {
            Ok(()) => added.push(route),
            Err(source) => {
                let rollback = nl.rollback(&added, &deleted);
                return Err(RouteError::AddRoute {
                    netns: netns.to_path_buf(),
                    ifname: ifname.to_string(),
                    gateway,
                    source,
                    rollback,
                });
            }
        }
    }
    let (changed, failure) = match write_accept_ra_defrtr(netns, ra_off) {
        Ok(outcome) => outcome,
        Err(e) => (
            Vec::new(),
            Some((ifname.to_string(), io::Error::other(e.to_string()))),
        ),
    };
    if let Some((link, source)) = failure {
        // Put back what was changed, then the routes.
        let _ = write_accept_ra_defrtr(netns, changed);
        let rollback = nl.rollback(&added, &deleted);
        return Err(RouteError::RouterAdvertisements {
            netns: netns.to_path_buf(),
            ifname: link,
            source,
            rollback,
        });
    }
    Ok(())
}

/// The default routes of the main table in the netns, IPv4 then IPv6, in the kernel's order.
pub fn default_routes(netns: &Path) -> Result<Vec<DefaultRoute>, RouteError> {
    let mut nl = Netlink::open(netns)?;
    let names = nl.link_names()?;
    let name_of = |index: u32| {
        names
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| format!("#{index}"))
    };
    let mut out = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        for route in nl.dump_routes(family)? {
            if !is_main_default(&route) {
                continue;
            }
            for (ifindex, gateway) in next_hops(&route) {
                out.push(DefaultRoute {
                    family,
                    ifname: name_of(ifindex),
                    ifindex,
                    gateway,
                    metric: metric(&route),
                });
            }
        }
    }
    Ok(out)
}

/// The names of the interfaces in the netns.
pub fn interface_names(netns: &Path) -> Result<Vec<String>, RouteError> {
    let mut nl = Netlink::open(netns)?;
    Ok(nl.link_names()?.into_iter().map(|(_, name)| name).collect())
}

/// Whether `route` is a unicast default route of the main table. The destination prefix length
/// decides, not the destination attribute: the kernel may send none (the default route's "nil"
/// destination) or `0.0.0.0`/`::` with length 0, and both are the default route. Multus's
/// `DeleteDefaultGW` deletes nothing since v4.2.2: its netlink library began to report a default
/// route's destination as `0.0.0.0/0` instead of nil, and Multus only matched nil
/// (docs/multus-behaviour.md §2.8). Source-specific routes (`from X`) and other types
/// (`unreachable default`, `blackhole default`) are not a gateway and are left alone, as is every
/// table but main (policy routing is not ours to undo).
pub fn is_main_default(route: &RouteMessage) -> bool {
    route.header.destination_prefix_length == 0
        && route.header.source_prefix_length == 0
        && route.header.kind == RouteType::Unicast
        && table(route) == MAIN_TABLE
}

/// The route's table: `RTA_TABLE` when present (it holds ids above 255), else the header's.
fn table(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(route.header.table))
}

fn metric(route: &RouteMessage) -> u32 {
    route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Priority(p) => Some(*p),
            _ => None,
        })
        .unwrap_or(0)
}

fn route_address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}

fn gateway_of(attributes: &[RouteAttribute]) -> Option<IpAddr> {
    attributes.iter().find_map(|a| match a {
        RouteAttribute::Gateway(g) => route_address(g),
        _ => None,
    })
}

/// (interface index, gateway) of each next hop: the route's own, or each of an ECMP route's.
fn next_hops(route: &RouteMessage) -> Vec<(u32, Option<IpAddr>)> {
    let multipath = route.attributes.iter().find_map(|a| match a {
        RouteAttribute::MultiPath(hops) => Some(hops),
        _ => None,
    });
    if let Some(hops) = multipath {
        return hops
            .iter()
            .map(|h| (h.interface_index, gateway_of(&h.attributes)))
            .collect();
    }
    let oif = route
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Oif(i) => Some(*i),
            _ => None,
        })
        .unwrap_or(0);
    vec![(oif, gateway_of(&route.attributes))]
}

/// A route for error messages, by interface index (names are not looked up on the error path).
fn describe(route: &RouteMessage) -> String {
    let hops: Vec<String> = next_hops(route)
        .into_iter()
        .map(|(oif, gw)| match gw {
            Some(gw) => format!("via {gw} dev #{oif}"),
            None => format!("dev #{oif}"),
        })
        .collect();
    format!("default {} metric {}", hops.join(" "), metric(route))
}

/// What `ip route add default via GW dev IF metric M` sends.
fn new_default_route(ifindex: u32, gateway: IpAddr, metric: u32) -> RouteMessage {
    let mut route = RouteMessage::default();
    route.header.address_family = IpFamily::of(&gateway).address_family();
    route.header.table = RouteHeader::RT_TABLE_MAIN;
    route.header.protocol = RouteProtocol::Boot;
    route.header.scope = RouteScope::Universe;
    route.header.kind = RouteType::Unicast;
    route.attributes = vec![
        RouteAttribute::Table(MAIN_TABLE),
        RouteAttribute::Oif(ifindex),
        RouteAttribute::Gateway(gateway.into()),
        RouteAttribute::Priority(metric),
    ];
    route
}

/// A dumped route that uses a nexthop object (`ip route add default nhid N`) as the kernel takes
/// it back: by its nexthop id alone. The dump also reports the gateway and interface the object
/// resolves to, and the kernel refuses a request that has both ("Nexthop specification and
/// nexthop id are mutually exclusive"). Other routes are unchanged.
fn by_nexthop_id(route: &RouteMessage) -> RouteMessage {
    let mut route = route.clone();
    if route
        .attributes
        .iter()
        .any(|a| matches!(a, RouteAttribute::NhId(_)))
    {
        route.attributes.retain(|a| {
            !matches!(
                a,
                RouteAttribute::Oif(_) | RouteAttribute::Gateway(_) | RouteAttribute::MultiPath(_)
            )
        });
    }
    route
}

/// A dumped route made fit to be added again: the kernel refuses the state flags it reports
/// (`linkdown`, `dead`), on the route and on each hop of an ECMP route, computes the cache info
/// itself, and takes a nexthop object's route by its id alone ([`by_nexthop_id`]).
fn restorable(route: &RouteMessage) -> RouteMessage {
    let mut route = by_nexthop_id(route);
    route.header.flags &= RouteFlags::Onlink;
    route
        .attributes
        .retain(|a| !matches!(a, RouteAttribute::CacheInfo(_)));
    for a in &mut route.attributes {
        if let RouteAttribute::MultiPath(hops) = a {
            for hop in hops {
                hop.flags &= RouteNextHopFlags::Onlink;
            }
        }
    }
    route
}

fn check_ifname(ifname: &str) -> Result<(), RouteError> {
    // The kernel's limit is IFNAMSIZ - 1 bytes; a NUL would cut the name short on its side.
    if ifname.is_empty() || ifname.len() > 15 || ifname.contains('\0') {
        return Err(RouteError::InvalidIfname {
            ifname: ifname.to_string(),
        });
    }
    Ok(())
}

fn check_gateway(gw: IpAddr) -> Result<(), RouteError> {
    let why = match gw {
        _ if gw.is_unspecified() => Some("it is the unspecified address"),
        _ if gw.is_multicast() => Some("it is a multicast address"),
        _ if gw.is_loopback() => Some("it is a loopback address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("it is the broadcast address"),
        _ => None,
    };
    match why {
        Some(why) => Err(RouteError::InvalidGateway { gateway: gw, why }),
        None => Ok(()),
    }
}

/// A rtnetlink socket bound to one network namespace, driven with blocking I/O from the caller's
/// thread, which never changes namespace ([`Netlink::open`]): no code ever runs inside the pod's
/// netns, and no delegate can be spawned from it.
struct Netlink {
    socket: Socket,
    netns: PathBuf,
    seq: u32,
}

impl Netlink {
    /// Opens a socket in the namespace at `netns` (`/var/run/netns/NAME`, `/proc/PID/ns/net`)
    /// without the calling thread ever leaving its own namespace.
    fn open(netns: &Path) -> Result<Netlink, RouteError> {
        let file = File::open(netns).map_err(|source| RouteError::OpenNetns {
            netns: netns.to_path_buf(),
            source,
        })?;
        // Go's ns.IsNSorErr: a namespace file lives on nsfs (or procfs for /proc/PID/ns/net on
        // old kernels). Without this check, a plain file would fail later with a bare EINVAL.
        let fs = fstatfs(&file).map_err(|e| RouteError::OpenNetns {
            netns: netns.to_path_buf(),
            source: e.into(),
        })?;
        let fs_type = fs.filesystem_type();
        if fs_type != NSFS_MAGIC && fs_type != PROC_SUPER_MAGIC {
            return Err(RouteError::NotANetns {
                netns: netns.to_path_buf(),
                why: format!(
                    "its file system has type {:#x}, not nsfs or procfs",
                    fs_type.0
                ),
            });
        }

        // setns changes only the calling thread, so a fresh thread enters the namespace, opens
        // the socket (which stays bound to the namespace it was made in) and ends. It is never
        // reused, so no other code ever runs in the pod's namespace.
        enum Step {
            Enter(nix::Error),
            Socket(io::Error),
        }
        let handle = std::thread::Builder::new()
            .name("plumb-netns".into())
            .spawn(move || -> Result<Socket, Step> {
                nix::sched::setns(&file, CloneFlags::CLONE_NEWNET).map_err(Step::Enter)?;
                let mut socket = Socket::new(NETLINK_ROUTE).map_err(Step::Socket)?;
                socket.bind_auto().map_err(Step::Socket)?;
                socket
                    .connect(&SocketAddr::new(0, 0))
                    .map_err(Step::Socket)?;
                Ok(socket)
            })
            .map_err(|e| RouteError::Thread {
                netns: netns.to_path_buf(),
                why: e.to_string(),
            })?;
        let socket = match handle.join() {
            Ok(Ok(socket)) => socket,
            // EINVAL from setns on a namespace file: a namespace of another kind (mnt, pid…).
            Ok(Err(Step::Enter(nix::Error::EINVAL))) => {
                return Err(RouteError::NotANetns {
                    netns: netns.to_path_buf(),
                    why: "setns: Invalid argument, so a namespace of another kind".into(),
                });
            }
            Ok(Err(Step::Enter(e))) => {
                return Err(RouteError::EnterNetns {
                    netns: netns.to_path_buf(),
                    source: e.into(),
                });
            }
            Ok(Err(Step::Socket(source))) => {
                return Err(RouteError::Netlink {
                    netns: netns.to_path_buf(),
                    what: "opening a netlink socket".into(),
                    source: source.into(),
                });
            }
            Err(_) => {
                return Err(RouteError::Thread {
                    netns: netns.to_path_buf(),
                    why: "it panicked".into(),
                });
            }
        };
        // The kernel's reason in error replies ("Nexthop has invalid gateway"), and errors that
        // do not echo the whole request back. Old kernels lack these options: not fatal.
        let _ = socket.set_ext_ack(true);
        let _ = socket.set_cap_ack(true);
        Ok(Netlink {
            socket,
            netns: netns.to_path_buf(),
            seq: 0,
        })
    }

    fn error(&self, what: impl Into<String>, source: NetlinkError) -> RouteError {
        RouteError::Netlink {
            netns: self.netns.clone(),
            what: what.into(),
            source,
        }
    }

    /// The index of the link named `ifname`.
    fn link_index(&mut self, ifname: &str) -> Result<u32, RouteError> {
        let mut link = LinkMessage::default();
        link.attributes
            .push(LinkAttribute::IfName(ifname.to_string()));
        match self.request(RouteNetlinkMessage::GetLink(link), NLM_F_ACK) {
            Ok(replies) => replies
                .into_iter()
                .find_map(|m| match m {
                    RouteNetlinkMessage::NewLink(l) => Some(l.header.index),
                    _ => None,
                })
                .ok_or_else(|| {
                    self.error(
                        format!("looking up {ifname}"),
                        NetlinkError::Protocol("no link in the reply".into()),
                    )
                }),
            Err(e) if e.errno() == Some(ENODEV) => Err(RouteError::NoSuchInterface {
                netns: self.netns.clone(),
                ifname: ifname.to_string(),
            }),
            Err(e) => Err(self.error(format!("looking up {ifname}"), e)),
        }
    }

    /// Every address of every interface in the namespace.
    fn local_addresses(&mut self) -> Result<Vec<IpAddr>, RouteError> {
        let replies = self
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .map_err(|e| self.error("listing addresses", e))?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => own_address(&a.attributes),
                _ => None,
            })
            .collect())
    }

    /// (index, name) of every link.
    fn link_names(&mut self) -> Result<Vec<(u32, String)>, RouteError> {
        let replies = self
            .dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))
            .map_err(|e| self.error("listing links", e))?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) => {
                    let name = l.attributes.iter().find_map(|a| match a {
                        LinkAttribute::IfName(n) => Some(n.clone()),
                        _ => None,
                    })?;
                    Some((l.header.index, name))
                }
                _ => None,
            })
            .collect())
    }

    /// Every route of `family`, all tables (the kernel filters a dump only in strict mode).
    fn dump_routes(&mut self, family: IpFamily) -> Result<Vec<RouteMessage>, RouteError> {
        let mut request = RouteMessage::default();
        request.header.address_family = family.address_family();
        let replies = self
            .dump(RouteNetlinkMessage::GetRoute(request))
            .map_err(|e| self.error(format!("listing {family} routes"), e))?;
        Ok(replies
            .into_iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewRoute(r)
                    if r.header.address_family == family.address_family() =>
                {
                    Some(r)
                }
                _ => None,
            })
            .collect())
    }

    /// A dump, taken again if a concurrent change interrupted it.
    fn dump(
        &mut self,
        message: RouteNetlinkMessage,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        for _ in 1..DUMP_ATTEMPTS {
            match self.request(message.clone(), NLM_F_DUMP) {
                Err(NetlinkError::DumpInterrupted) => {}
                other => return other,
            }
        }
        self.request(message, NLM_F_DUMP)
    }

    /// A request that only needs the kernel's acknowledgement.
    fn ack(&mut self, message: RouteNetlinkMessage, flags: u16) -> Result<(), NetlinkError> {
        self.request(message, flags | NLM_F_ACK).map(drop)
    }

    /// Sends one request and reads its replies up to the end of a dump (`NLMSG_DONE`) or the
    /// acknowledgement (`NLMSG_ERROR` with code 0); an error code ends it with that error.
    fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> Result<Vec<RouteNetlinkMessage>, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0)?;

        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        let mut replies = Vec::new();
        let mut interrupted = false;
        loop {
            // recv_from_full peeks at the datagram's size first, so a dump's datagrams (one
            // page or more each) are never truncated, whatever their size.
            let (datagram, _) = self.socket.recv_from_full()?;
            for reply in parse_datagram(&datagram)? {
                // Replies to an earlier request that we stopped reading (none, as every
                // request is read to its end; kept for safety).
                if reply.header.sequence_number != seq {
                    continue;
                }
                if reply.header.flags & NLM_F_DUMP_INTR != 0 {
                    interrupted = true;
                }
                match reply.payload {
                    NetlinkPayload::InnerMessage(m) => {
                        replies.push(m);
                        // A plain GET without NLM_F_ACK is answered by one message.
                        if !dump && flags & NLM_F_ACK == 0 {
                            return Ok(replies);
                        }
                    }
                    NetlinkPayload::Done(done) => {
                        if done.code != 0 {
                            return Err(NetlinkError::Kernel {
                                errno: done.code.saturating_abs(),
                                message: None,
                            });
                        }
                        if interrupted {
                            return Err(NetlinkError::DumpInterrupted);
                        }
                        return Ok(replies);
                    }
                    NetlinkPayload::Error(e) => match e.code {
                        None => return Ok(replies),
                        Some(code) => {
                            return Err(NetlinkError::Kernel {
                                errno: code.get().saturating_abs(),
                                message: ext_ack_message(reply.header.flags, &e.header)
                                    .map(Into::into),
                            });
                        }
                    },
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(NetlinkError::Protocol(
                            "the kernel reported an overrun".into(),
                        ));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Undoes a partial change: removes what was `added`, puts back what was `deleted`. Keeps
    /// going past failures and reports them all.
    fn rollback(&mut self, added: &[RouteMessage], deleted: &[RouteMessage]) -> Rollback {
        let mut failures = Vec::new();
        for route in added.iter().rev() {
            match self.ack(RouteNetlinkMessage::DelRoute(route.clone()), 0) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(ESRCH) => {}
                Err(e) => failures.push(format!("removing {}: {e}", describe(route))),
            }
        }
        for route in deleted {
            match self.ack(
                RouteNetlinkMessage::NewRoute(restorable(route)),
                NLM_F_CREATE | NLM_F_EXCL,
            ) {
                Ok(()) => {}
                Err(e) if e.errno() == Some(EEXIST) => {}
                Err(e) => failures.push(format!("restoring {}: {e}", describe(route))),
            }
        }
        if failures.is_empty() {
            Rollback::Restored
        } else {
            Rollback::Failed(failures.into_boxed_slice())
        }
    }
}

/// Where default routes are changed (the pod's netns, through netlink in production).
pub trait DefaultRoutes {
    /// Makes `ifname` carry the default route via `gateways` (multi-net spec §4.1.2.1.9).
    fn set_default_route(
        &self,
        netns: &Path,
        ifname: &str,
        gateways: &[IpAddr],
    ) -> Result<(), CniError>;

    /// The names of the interfaces in the network namespace (a change of a running pod's
    /// attachments names new ones apart from them).
    fn interfaces(&self, netns: &Path) -> Result<Vec<String>, CniError>;
}

/// Default routes changed through netlink in the pod's namespace ([`crate::routes`]).
pub struct NetlinkRoutes;

impl DefaultRoutes for NetlinkRoutes {
    fn set_default_route(
        &self,
        netns: &Path,
        ifname: &str,
        gateways: &[IpAddr],
    ) -> Result<(), CniError> {
        set_default_route(netns, ifname, gateways).map_err(CniError::from)
    }

    fn interfaces(&self, netns: &Path) -> Result<Vec<String>, CniError> {
        interface_names(netns).map_err(CniError::from)
    }
}

/// The interface's own end of an address: `IFA_LOCAL` when the kernel sends it, else
/// `IFA_ADDRESS`. On a point-to-point address (`ip addr add A peer B`) `IFA_ADDRESS` is the far
/// end B (rtnetlink(7)), which is the link's gateway, not an address of the pod.
fn own_address(attributes: &[AddressAttribute]) -> Option<IpAddr> {
    let local = attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    local.or_else(|| {
        attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })
}

#[cfg(test)]
mod tests;

//! Netlink messages as they come from the kernel: one datagram split into its messages, and the
//! extended ack's human-readable message of an error (netlink(7), `NLMSGERR_ATTR_MSG`).

use netlink_packet_core::{NLM_F_ACK_TLVS, NLM_F_CAPPED, NetlinkMessage};
use netlink_packet_route::RouteNetlinkMessage;

use super::NetlinkError;

/// Splits one datagram into its netlink messages.
pub(super) fn parse_datagram(
    datagram: &[u8],
) -> Result<Vec<NetlinkMessage<RouteNetlinkMessage>>, NetlinkError> {
    let mut out = Vec::new();
    let mut offset = 0;
    while datagram.len().saturating_sub(offset) >= NLMSG_HDRLEN {
        let rest = &datagram[offset..];
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            return Err(NetlinkError::Protocol(
                format!("a message claims {len} bytes where {} remain", rest.len()).into(),
            ));
        }
        let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len])
            .map_err(|e| NetlinkError::Protocol(e.to_string().into()))?;
        out.push(message);
        // Messages are 4-byte aligned (NLMSG_ALIGN).
        offset += (len + 3) & !3;
        if offset > datagram.len() {
            break;
        }
    }
    Ok(out)
}

pub(super) const NLMSG_HDRLEN: usize = 16;
/// `NLMSGERR_ATTR_MSG`: the extended ack's human-readable message.
pub(super) const NLMSGERR_ATTR_MSG: u16 = 1;

/// The kernel's extended-ack message in an `NLMSG_ERROR` payload. `payload` follows the error
/// code: the request's header (and, unless `NLM_F_CAPPED`, the request's body), then the TLVs
/// when `NLM_F_ACK_TLVS` is set.
pub(super) fn ext_ack_message(flags: u16, payload: &[u8]) -> Option<String> {
    if flags & NLM_F_ACK_TLVS == 0 {
        return None;
    }
    let request_len = if flags & NLM_F_CAPPED != 0 {
        NLMSG_HDRLEN
    } else {
        let len = payload.get(..4)?;
        u32::from_ne_bytes([len[0], len[1], len[2], len[3]]) as usize
    };
    let mut tlvs = payload.get((request_len + 3) & !3..)?;
    while tlvs.len() >= 4 {
        let len = u16::from_ne_bytes([tlvs[0], tlvs[1]]) as usize;
        let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]) & 0x3fff;
        if len < 4 || len > tlvs.len() {
            return None;
        }
        if kind == NLMSGERR_ATTR_MSG {
            let text = &tlvs[4..len];
            let text = text.split(|b| *b == 0).next().unwrap_or_default();
            return Some(String::from_utf8_lossy(text).into_owned());
        }
        tlvs = tlvs.get((len + 3) & !3..)?;
    }
    None
}

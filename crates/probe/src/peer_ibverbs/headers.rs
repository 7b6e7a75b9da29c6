//! What the headers of a received datagram and this host's interfaces say:
//! the sender's GID from the GRH (or the IPv4 header of RoCE v2), and the
//! prefix length of a local IPv4 address.

use super::*;

/// The prefix length of `addr` on this host's interfaces (`getifaddrs`):
/// with the GID's address, the subnet of the rail rule (IPv4) and of the
/// fabric peers are admitted in. `None` when no interface holds the
/// address.
pub fn ip_prefix_len(addr: std::net::IpAddr) -> Option<u8> {
    let mut head: *mut libc::ifaddrs = ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_netmask.is_null() {
            continue;
        }
        // SAFETY: a non-null ifa_addr points to a sockaddr of its family.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let (a, mask_ones) = match family {
            libc::AF_INET => {
                // SAFETY: AF_INET: both are sockaddr_in.
                let (a, m) = unsafe {
                    (
                        (*ifa.ifa_addr.cast::<libc::sockaddr_in>()).sin_addr.s_addr,
                        (*ifa.ifa_netmask.cast::<libc::sockaddr_in>())
                            .sin_addr
                            .s_addr,
                    )
                };
                (
                    std::net::IpAddr::V4(Ipv4Addr::from(u32::from_be(a))),
                    u32::from_be(m).leading_ones(),
                )
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6: both are sockaddr_in6.
                let (a, m) = unsafe {
                    (
                        (*ifa.ifa_addr.cast::<libc::sockaddr_in6>())
                            .sin6_addr
                            .s6_addr,
                        (*ifa.ifa_netmask.cast::<libc::sockaddr_in6>())
                            .sin6_addr
                            .s6_addr,
                    )
                };
                (
                    std::net::IpAddr::V6(Ipv6Addr::from(a)),
                    u128::from_be_bytes(m).leading_ones(),
                )
            }
            _ => continue,
        };
        if a == addr {
            found = u8::try_from(mask_ones).ok();
            break;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// [`ip_prefix_len`] of an IPv4 address.
pub fn ipv4_prefix_len(addr: Ipv4Addr) -> Option<u8> {
    ip_prefix_len(std::net::IpAddr::V4(addr))
}

/// The sender's GID from the 40 bytes a UD receive starts with, as
/// rdma-core's `get_grh_header_version` decides: on RoCE v2 over IPv4 the
/// last 20 bytes are the IPv4 header (version 4, IHL 5, valid checksum) and
/// the GID is the IPv4-mapped source address; otherwise it is an IPv6
/// header or IB GRH whose source GID sits at bytes 8..24.
pub fn sender_gid(grh: &[u8]) -> Option<Ipv6Addr> {
    grh_sender(grh).map(|(gid, _)| gid)
}

/// The sender's GID and whether the header is RoCE v2 over IPv4.
pub(super) fn grh_sender(grh: &[u8]) -> Option<(Ipv6Addr, bool)> {
    let grh: &[u8; 40] = grh.get(..40)?.try_into().ok()?;
    let ip6_version = grh[0] >> 4;
    let ip4 = &grh[20..40];
    let ipv4 = if ip6_version != 6 {
        if ip4[0] >> 4 != 4 {
            return None;
        }
        true
    } else {
        ip4[0] == 0x45 && ipv4_checksum_ok(ip4)
    };
    if ipv4 {
        let src = Ipv4Addr::new(ip4[12], ip4[13], ip4[14], ip4[15]);
        return Some((src.to_ipv6_mapped(), true));
    }
    let mut sgid = [0u8; 16];
    sgid.copy_from_slice(&grh[8..24]);
    Some((Ipv6Addr::from(sgid), false))
}

/// Whether a 20-byte IPv4 header carries a valid header checksum.
pub(super) fn ipv4_checksum_ok(h: &[u8]) -> bool {
    if h.len() < 20 {
        return false;
    }
    let mut sum = 0u32;
    for (i, pair) in h[..20].chunks(2).enumerate() {
        if i == 5 {
            continue;
        }
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let check = !(sum as u16);
    check == u16::from_be_bytes([h[10], h[11]])
}

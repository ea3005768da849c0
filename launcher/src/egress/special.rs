//! Addresses that are not the internet, which the proxy dials only when a
//! rule names the address itself: every range of IANA's IPv4 and IPv6
//! Special-Purpose Address Registries (RFC 6890 and the RFCs they list,
//! the 2025 registries), multicast, and IPv6 outside global unicast
//! (2000::/3, the rest being reserved by the IETF).
//!
//! An IPv6 address that carries an IPv4 address is decided on the address
//! it carries, before the tables: IPv4-mapped (::ffff:0:0/96),
//! IPv4-compatible (::/96), SIIT's IPv4-translated (::ffff:0:0:0/96),
//! NAT64's well-known prefix (64:ff9b::/96), 6to4 (2002::/16) and Teredo
//! (2001::/32, its server and its client both). So the 6to4 form of
//! 127.0.0.1 is loopback, and the NAT64 form of a public address is the
//! internet, as an IPv6-only host reaches it. NAT64's local-use prefix
//! (64:ff9b:1::/48) may put the IPv4 address anywhere: it is refused whole.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IANA's IPv4 registry, with multicast: (first address, prefix length,
/// name). The longest prefix that holds an address names it.
const V4: [([u8; 4], u8, &str); 20] = [
    ([0, 0, 0, 0], 8, "this network"),
    ([10, 0, 0, 0], 8, "private-use"),
    ([100, 64, 0, 0], 10, "shared address space"),
    ([127, 0, 0, 0], 8, "loopback"),
    ([169, 254, 0, 0], 16, "link-local"),
    ([172, 16, 0, 0], 12, "private-use"),
    ([192, 0, 0, 0], 24, "IETF protocol assignments"),
    ([192, 0, 2, 0], 24, "documentation"),
    ([192, 31, 196, 0], 24, "AS112"),
    ([192, 52, 193, 0], 24, "AMT"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast"),
    ([192, 168, 0, 0], 16, "private-use"),
    ([192, 175, 48, 0], 24, "AS112 direct delegation"),
    ([198, 18, 0, 0], 15, "benchmarking"),
    ([198, 51, 100, 0], 24, "documentation"),
    ([203, 0, 113, 0], 24, "documentation"),
    ([224, 0, 0, 0], 4, "multicast"),
    ([233, 252, 0, 0], 24, "documentation"),
    ([240, 0, 0, 0], 4, "reserved"),
    ([255, 255, 255, 255], 32, "limited broadcast"),
];

/// IANA's IPv6 registry, with multicast and the deprecated site-local
/// range, as [`V4`]. The ranges that carry an IPv4 address are in
/// [`carried`] instead.
const V6: [(u128, u8, &str); 14] = [
    (0, 128, "unspecified"),
    (1, 128, "loopback"),
    (
        0x0064_ff9b_0001 << 80,
        48,
        "local-use IPv4/IPv6 translation",
    ),
    (0x0100 << 112, 64, "discard-only"),
    (0x0100_0000_0000_0001 << 64, 64, "dummy prefix"),
    (0x2001 << 112, 23, "IETF protocol assignments"),
    (0x2001_0db8 << 96, 32, "documentation"),
    (0x2620_004f_8000 << 80, 48, "AS112 direct delegation"),
    (0x3fff << 112, 20, "documentation"),
    (0x5f00 << 112, 16, "segment routing SIDs"),
    (0xfc00 << 112, 7, "unique-local"),
    (0xfe80 << 112, 10, "link-local"),
    (0xfec0 << 112, 10, "site-local"),
    (0xff00 << 112, 8, "multicast"),
];

/// Why `addr` is not the internet (`loopback`, `6to4 of 10.0.0.1:
/// private-use`), or `None` when it is.
pub fn special(addr: IpAddr) -> Option<String> {
    match addr {
        IpAddr::V4(v4) => special_v4(v4).map(str::to_owned),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(addr: Ipv4Addr) -> Option<&'static str> {
    let bits = u32::from(addr);
    V4.iter()
        .filter(|(first, len, _)| {
            let mask = u32::MAX.checked_shl(32 - u32::from(*len)).unwrap_or(0);
            bits & mask == u32::from_be_bytes(*first)
        })
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, name)| *name)
}

fn special_v6(addr: Ipv6Addr) -> Option<String> {
    if let Some((form, carried)) = carried(addr) {
        return carried
            .iter()
            .find_map(|v4| special_v4(*v4).map(|why| format!("{form} of {v4}: {why}")));
    }
    let bits = u128::from(addr);
    let named = V6
        .iter()
        .filter(|(first, len, _)| {
            let mask = u128::MAX.checked_shl(128 - u32::from(*len)).unwrap_or(0);
            bits & mask == *first
        })
        .max_by_key(|(_, len, _)| *len)
        .map(|(_, _, name)| (*name).to_owned());
    // Outside 2000::/3 the IETF reserves everything the table leaves.
    named.or_else(|| (bits >> 125 != 1).then(|| "reserved by the IETF".to_owned()))
}

/// The IPv4 addresses an IPv6 address carries, and the form's name; none
/// for :: and ::1, which are themselves.
fn carried(addr: Ipv6Addr) -> Option<(&'static str, Vec<Ipv4Addr>)> {
    let bits = u128::from(addr);
    let low = Ipv4Addr::from(bits as u32);
    match bits >> 32 {
        0xffff => return Some(("IPv4-mapped", vec![low])),
        0 if bits > 1 => return Some(("IPv4-compatible", vec![low])),
        0xffff_0000 => return Some(("SIIT", vec![low])),
        0x0064_ff9b_0000_0000_0000_0000 => return Some(("NAT64", vec![low])),
        _ => {}
    }
    let s = addr.segments();
    let pair = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0x2002, hi, lo, ..] => Some(("6to4", vec![pair(hi, lo)])),
        [0x2001, 0, server_hi, server_lo, _, _, hi, lo] => {
            Some(("Teredo", vec![pair(server_hi, server_lo), pair(!hi, !lo)]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn why(addr: &str) -> Option<String> {
        special(addr.parse().unwrap())
    }

    #[test]
    fn every_special_purpose_range_is_refused() {
        for internal_addr in [
            "127.0.0.1",
            "127.8.8.8",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            // Every range of IANA's special-purpose registries.
            "198.18.0.1",
            "198.19.255.254",
            "192.0.0.1",
            "192.0.0.9",
            "192.0.2.1",
            "198.51.100.10",
            "203.0.113.7",
            "192.88.99.1",
            "192.31.196.1",
            "240.0.0.1",
            "100::1",
            "2001:db8::1",
            "2001:2::1",
            "2001:20::1",
            "3fff::1",
            "5f00::1",
            "ff02::1",
            "fec0::1",
            // Embedded IPv4 forms, decided on the address they carry:
            // 6to4, SIIT, NAT64 (well-known and local-use), Teredo.
            "2002:7f00:1::1",
            "2002:a00:1::",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::a00:1",
            "2001:0:4136:e378:8000:63bf:f5ff:fffe",
            "2001:0:a00:1:8000:63bf:3fff:fdd2",
        ] {
            assert!(why(internal_addr).is_some(), "{internal_addr}");
        }
        for external in [
            "151.101.0.223",
            "2a04:4e42::223",
            "8.8.8.8",
            "100.51.100.10",
            // An embedded address of the internet is the internet.
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        ] {
            assert_eq!(why(external), None, "{external}");
        }
    }

    #[test]
    fn the_reason_names_the_range_and_what_a_form_carries() {
        assert_eq!(why("127.0.0.1").unwrap(), "loopback");
        assert_eq!(why("198.18.0.10").unwrap(), "benchmarking");
        assert_eq!(why("255.255.255.255").unwrap(), "limited broadcast");
        assert_eq!(why("::").unwrap(), "unspecified");
        assert_eq!(why("::1").unwrap(), "loopback");
        assert_eq!(
            why("2002:c612:a::1").unwrap(),
            "6to4 of 198.18.0.10: benchmarking"
        );
        assert_eq!(
            why("::ffff:0:c612:a").unwrap(),
            "SIIT of 198.18.0.10: benchmarking"
        );
        assert_eq!(
            why("64:ff9b:1::c612:a").unwrap(),
            "local-use IPv4/IPv6 translation"
        );
        assert_eq!(
            why("2001:0:4136:e378:8000:63bf:f5ff:fffe").unwrap(),
            "Teredo of 10.0.0.1: private-use"
        );
        assert_eq!(why("4000::1").unwrap(), "reserved by the IETF");
    }
}

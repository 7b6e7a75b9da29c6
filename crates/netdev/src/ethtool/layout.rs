//! The `struct ethtool_*` layouts of `include/uapi/linux/ethtool.h` in a
//! buffer of native-endian `u64` words: `u32` fields by byte offset and the
//! pure decoders of the three replies (for the readers and for fuzzing).

use super::{ETH_GSTRING_LEN, ETH_SS_STATS, GSTRINGS_HEADER};

/// The native-endian `u32` at byte offset `byte` of `buf` (0 past its end),
/// for reading the `struct ethtool_*` headers.
pub fn u32_at(buf: &[u64], byte: usize) -> u32 {
    let Some(word) = buf.get(byte / 8) else {
        return 0;
    };
    let bytes = word.to_ne_bytes();
    let i = byte % 8;
    let mut b = [0u8; 4];
    match bytes.get(i..i + 4) {
        Some(s) => b.copy_from_slice(s),
        None => return 0,
    }
    u32::from_ne_bytes(b)
}

/// Writes the native-endian `u32` at byte offset `byte` (4-aligned) of
/// `buf`; false, writing nothing, past its end.
pub fn set_u32(buf: &mut [u64], byte: usize, v: u32) -> bool {
    let i = byte % 8;
    let Some(word) = buf.get_mut(byte / 8) else {
        return false;
    };
    let mut bytes = word.to_ne_bytes();
    let Some(s) = bytes.get_mut(i..i + 4) else {
        return false;
    };
    s.copy_from_slice(&v.to_ne_bytes());
    *word = u64::from_ne_bytes(bytes);
    true
}

/// The `ETH_SS_STATS` count in an `ETHTOOL_GSSET_INFO` reply (`struct
/// ethtool_sset_info`: cmd, reserved, sset_mask, then one u32 per set
/// present); 0 when the set is absent from the mask.
pub fn decode_sset_info(buf: &[u64]) -> usize {
    if buf.get(1).copied().unwrap_or(0) & (1u64 << ETH_SS_STATS) == 0 {
        return 0;
    }
    u32_at(buf, 16) as usize
}

/// The names in an `ETHTOOL_GSTRINGS` reply buffer (`struct
/// ethtool_gstrings`: cmd, string_set, len, then `len` NUL-padded 32-byte
/// names); `None` when `len` claims more names than the buffer holds (the
/// kernel's copy ran into the end of the buffer). A name without its NUL
/// keeps all 32 bytes. Pure, for the ioctl above and for fuzzing.
pub fn decode_gstrings(buf: &[u64]) -> Option<Vec<String>> {
    let len = u32_at(buf, 8) as usize;
    let end = len
        .checked_mul(ETH_GSTRING_LEN)?
        .checked_add(GSTRINGS_HEADER)?;
    if end > buf.len().checked_mul(8)? {
        return None;
    }
    let bytes: Vec<u8> = buf[..end.div_ceil(8)]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let mut names = Vec::with_capacity(len);
    for raw in bytes.get(GSTRINGS_HEADER..end)?.chunks(ETH_GSTRING_LEN) {
        let stop = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        names.push(String::from_utf8_lossy(&raw[..stop]).into_owned());
    }
    Some(names)
}

/// The values in an `ETHTOOL_GSTATS` reply buffer (`struct ethtool_stats`:
/// cmd, n_stats, then `n_stats` u64s); `None` when `n_stats` claims more
/// values than the buffer holds.
pub fn decode_gstats(buf: &[u64]) -> Option<&[u64]> {
    let n = u32_at(buf, 4) as usize;
    buf.get(1..n.checked_add(1)?)
}

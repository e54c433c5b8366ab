//! The key of the tables of allocations.
//!
//! The scheduler names allocations with UUIDs, and a walk down a hundred
//! thousand of them compares about eighteen keys. With `Arc<str>` keys each
//! comparison followed a pointer out of the tree node to the key's text,
//! and every lookup of a client's report paid for those misses on every
//! server. An [`AllocKey`] keeps a UUID's 128 bits in the tree node itself:
//! a comparison is two integer comparisons, and copying a tree node counts
//! no references for its keys.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// An allocation's id as the tables key it: its UUID's bits when the id
/// is a UUID as the scheduler writes them (lower-case, hyphenated), else
/// its text. Keys order as their texts do, whatever their form, so the
/// tables iterate in id order as before.
#[derive(Clone)]
pub enum AllocKey {
    /// The UUID's bits, high half first.
    Uuid([u64; 2]),
    Text(Arc<str>),
}

/// Where a hyphen is in a hyphenated UUID.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];
/// The length of a hyphenated UUID.
const UUID_LEN: usize = 36;

impl AllocKey {
    /// The key of the allocation named `id`. Made for every lookup: a UUID
    /// is parsed where it is, only another id's text is copied.
    pub fn new(id: &str) -> Self {
        match parse_uuid(id) {
            Some(bits) => Self::Uuid(bits),
            None => Self::Text(Arc::from(id)),
        }
    }

    /// Calls `f` with the key's text.
    fn with_text<T>(&self, f: impl FnOnce(&[u8]) -> T) -> T {
        match self {
            Self::Uuid(bits) => f(&uuid_text(*bits)),
            Self::Text(text) => f(text.as_bytes()),
        }
    }
}

/// The value of each byte as a lower-case hex digit; `NOT_HEX` if it is not one.
const HEX: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};
const NOT_HEX: u8 = 0xff;

/// The bits of `id` if it is a lower-case hyphenated UUID (the only form
/// whose text orders as its bits do), else `None`. Every lookup parses its
/// id, so this is a table lookup per digit.
fn parse_uuid(id: &str) -> Option<[u64; 2]> {
    let bytes = id.as_bytes();
    if bytes.len() != UUID_LEN || HYPHENS.iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    let mut bits: u128 = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if HYPHENS.contains(&i) {
            continue;
        }
        let digit = HEX[b as usize];
        if digit == NOT_HEX {
            return None;
        }
        bits = bits << 4 | u128::from(digit);
    }
    Some([(bits >> 64) as u64, bits as u64])
}

/// The hyphenated lower-case text of a UUID's bits.
fn uuid_text(bits: [u64; 2]) -> [u8; UUID_LEN] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut value = u128::from(bits[0]) << 64 | u128::from(bits[1]);
    let mut text = [0u8; UUID_LEN];
    for i in (0..UUID_LEN).rev() {
        if HYPHENS.contains(&i) {
            text[i] = b'-';
            continue;
        }
        text[i] = DIGITS[(value & 0xf) as usize];
        value >>= 4;
    }
    text
}

impl Ord for AllocKey {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Uuid(a), Self::Uuid(b)) => a.cmp(b),
            (Self::Text(a), Self::Text(b)) => a.cmp(b),
            _ => self.with_text(|a| other.with_text(|b| a.cmp(b))),
        }
    }
}

impl PartialOrd for AllocKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for AllocKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for AllocKey {}

/// A UUID hashes as its bits (random already, for the ids the scheduler
/// makes), other ids as their text. The two forms never hold equal ids: an
/// id in UUID form is always kept as its bits.
impl Hash for AllocKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            Self::Uuid([high, low]) => state.write_u64(high ^ low),
            Self::Text(text) => text.hash(state),
        }
    }
}

impl fmt::Display for AllocKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|text| f.write_str(&String::from_utf8_lossy(text)))
    }
}

impl fmt::Debug for AllocKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_uuid_is_kept_as_bits_and_written_back_as_it_came() {
        let id = uuid::Uuid::new_v4().to_string();
        let key = AllocKey::new(&id);
        assert!(matches!(key, AllocKey::Uuid(_)), "{id} kept as text");
        assert_eq!(key.to_string(), id);
    }

    #[test]
    fn other_ids_are_kept_as_text() {
        let upper = uuid::Uuid::new_v4().to_string().to_uppercase();
        let braced = format!("{{{}}}", uuid::Uuid::new_v4());
        let no_hyphens = uuid::Uuid::new_v4().simple().to_string();
        let hyphen_moved = "0123456-789ab-cdef-0123-456789abcdef0";
        for id in ["a1", "web-0", &upper, &braced, &no_hyphens, hyphen_moved] {
            let key = AllocKey::new(id);
            assert!(matches!(key, AllocKey::Text(_)), "{id} parsed as a UUID");
            assert_eq!(key.to_string(), id);
        }
    }

    #[test]
    fn keys_order_and_compare_as_their_texts_whatever_their_form() {
        let mut ids: Vec<String> = (0..200).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        ids.extend(
            [
                "a1",
                "00000000-0000-0000-0000-000000000000x",
                "ffffffff-ffff-ffff-ffff-ffffffffffff",
                "ffffffff-ffff-ffff-ffff-fffffffffffg",
                "0",
                "zzz",
                "7",
                "7fffffff-ffff-ffff-ffff-ffffffffffff",
                "8",
                "-",
                "G",
            ]
            .map(String::from),
        );
        let keys: Vec<AllocKey> = ids.iter().map(|id| AllocKey::new(id)).collect();
        for (a, ka) in ids.iter().zip(&keys) {
            for (b, kb) in ids.iter().zip(&keys) {
                assert_eq!(ka.cmp(kb), a.cmp(b), "{a} against {b}");
                assert_eq!(ka == kb, a == b, "{a} against {b}");
            }
        }
    }
}

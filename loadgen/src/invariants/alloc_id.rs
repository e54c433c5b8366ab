//! An allocation's id as the audit keeps it: a UUID as its 128 bits, so
//! that millions of them (two million on each server after `c2m`) take 16
//! bytes each, not a string; its own module, as both the record of the
//! stream and a server's state key allocations by it.

use std::fmt;

/// An allocation's id: a UUID (what the servers give) as its 128 bits, or
/// any other text as it is. Ordered as the ids' text is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AllocId {
    Uuid(u64, u64),
    Other(Box<str>),
}

impl AllocId {
    /// The id of `text`: its 128 bits when it is a UUID written as the
    /// servers write one (lowercase, hyphenated), so it prints back the same.
    pub fn new(text: &str) -> Self {
        parse_uuid(text).map_or_else(|| AllocId::Other(text.into()), |(h, l)| AllocId::Uuid(h, l))
    }
}

impl From<&str> for AllocId {
    fn from(text: &str) -> Self {
        AllocId::new(text)
    }
}

fn parse_uuid(text: &str) -> Option<(u64, u64)> {
    let b = text.as_bytes();
    if b.len() != 36 {
        return None;
    }
    let mut v: u128 = 0;
    for (i, c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if *c != b'-' {
                return None;
            }
            continue;
        }
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            _ => return None,
        };
        v = v << 4 | u128::from(d);
    }
    Some(((v >> 64) as u64, v as u64))
}

impl fmt::Display for AllocId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocId::Uuid(h, l) => {
                let v = u128::from(*h) << 64 | u128::from(*l);
                let hex = format!("{v:032x}");
                write!(
                    f,
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                )
            }
            AllocId::Other(s) => f.write_str(s),
        }
    }
}

impl Ord for AllocId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            // Lowercase hex of equal length: the text's order is the number's.
            (AllocId::Uuid(a, b), AllocId::Uuid(c, d)) => (a, b).cmp(&(c, d)),
            (AllocId::Other(a), AllocId::Other(b)) => a.cmp(b),
            _ => self.to_string().cmp(&other.to_string()),
        }
    }
}

impl PartialOrd for AllocId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

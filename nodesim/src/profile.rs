//! What each simulated node looks like: its id, datacenter, class, resources
//! and attributes, drawn from weighted lists. A node's draw depends only on
//! its index, so the same fleet comes back on every run and in every shard.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use stampede_proto::{Node, Resources};

/// A weighted list of values, written `a:3,b:1` (weights default to 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Weighted<T> {
    choices: Vec<(T, u64)>,
    total: u64,
}

impl<T: Clone> Weighted<T> {
    /// The value for node `index`; `salt` keeps one field's draw independent
    /// of another's.
    pub fn pick(&self, index: u64, salt: u64) -> T {
        let mut roll = mix(index ^ salt.rotate_left(32)) % self.total;
        for (value, weight) in &self.choices {
            if roll < *weight {
                return value.clone();
            }
            roll -= weight;
        }
        unreachable!("roll is below the total weight")
    }
}

impl<T> FromStr for Weighted<T>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut choices = Vec::new();
        for part in s.split(',').map(str::trim) {
            let (value, weight) = match part.rsplit_once(':') {
                Some((v, w)) => {
                    let w: u64 = w
                        .parse()
                        .map_err(|_| format!("{part:?}: weight {w:?} is not a whole number"))?;
                    (v, w)
                }
                None => (part, 1),
            };
            if value.is_empty() {
                return Err(format!("{s:?}: an empty value (write a:3,b:1)"));
            }
            if weight == 0 {
                return Err(format!("{part:?}: a weight must be at least 1"));
            }
            let value = value
                .parse()
                .map_err(|e| format!("{part:?}: {value:?} is not valid here: {e}"))?;
            choices.push((value, weight));
        }
        let total = choices.iter().map(|(_, w)| w).sum();
        Ok(Self { choices, total })
    }
}

/// A value for resource lists: a whole number at least 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Amount(pub u64);

impl FromStr for Amount {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(Amount(n)),
            _ => Err("expected a whole number above 0".into()),
        }
    }
}

/// Which part of the fleet this process runs: nodes whose index `k` has
/// `k % count == index`. Written `I/N`, with `I` from 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Self { index: 0, count: 1 }
    }
}

impl FromStr for Shard {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?}: a shard is I/N with 0 <= I < N, for example 0/4");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// The fleet-wide indexes of this shard's nodes in a fleet of `nodes`.
    pub fn indexes(&self, nodes: u64) -> impl Iterator<Item = u64> {
        (self.index..nodes).step_by(self.count as usize)
    }

    /// The fleet-wide index of this shard's `slot`th node (as `indexes`
    /// lists them).
    pub fn index_of(&self, slot: u32) -> u64 {
        self.index + slot as u64 * self.count
    }
}

/// The id of node `index` of a fleet whose ids start with `id_prefix`.
pub fn node_id(id_prefix: &str, index: u64) -> String {
    format!("{id_prefix}-{index}")
}

/// How to build node `index` of the fleet.
#[derive(Debug, Clone)]
pub struct NodeProfile {
    pub id_prefix: String,
    pub datacenters: Weighted<String>,
    pub classes: Weighted<String>,
    pub cpu_mhz: Weighted<Amount>,
    pub memory_mb: Weighted<Amount>,
}

impl NodeProfile {
    pub fn id(&self, index: u64) -> String {
        node_id(&self.id_prefix, index)
    }

    pub fn node(&self, index: u64) -> Node {
        let id = self.id(index);
        let attributes: BTreeMap<String, String> = [
            ("kernel.name", "linux".to_string()),
            ("cpu.arch", "amd64".to_string()),
            ("driver.mock", "1".to_string()),
            ("unique.hostname", id.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        Node {
            name: id.clone(),
            id,
            datacenter: self.datacenters.pick(index, 1),
            node_class: self.classes.pick(index, 2),
            resources: Some(Resources {
                cpu_mhz: self.cpu_mhz.pick(index, 3).0,
                memory_mb: self.memory_mb.pick(index, 4).0,
            }),
            attributes,
            ..Default::default()
        }
    }
}

/// splitmix64: a cheap, well-spread hash of the node index.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_lists_parse_and_follow_their_weights() {
        let w: Weighted<String> = "dc1:3,dc2".parse().unwrap();
        let picks: Vec<String> = (0..4000).map(|i| w.pick(i, 1)).collect();
        let dc1 = picks.iter().filter(|p| *p == "dc1").count();
        assert!((2800..3200).contains(&dc1), "dc1 drawn {dc1} times of 4000");
        assert_eq!(w.pick(17, 1), w.pick(17, 1), "a node's draw is stable");

        let err = "dc1:0".parse::<Weighted<String>>().unwrap_err();
        assert!(err.contains("at least 1"), "{err}");
        let err = "4000,lots".parse::<Weighted<Amount>>().unwrap_err();
        assert!(err.contains("\"lots\""), "{err}");
    }

    #[test]
    fn shards_split_the_fleet_without_overlap() {
        let shards: Vec<Shard> = ["0/3", "1/3", "2/3"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let mut all: Vec<u64> = shards.iter().flat_map(|s| s.indexes(10)).collect();
        all.sort();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        for bad in ["3/3", "1", "a/2", "0/0"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad} accepted");
        }
    }
}

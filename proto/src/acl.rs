//! ACL tokens. A cluster has one management token (a secret in a file every
//! server reads, `--acl-token-file`); read and write tokens are derived from
//! it: `st1.<scope>.<id>.<mac>`, where the mac is HMAC-SHA256 of
//! `<scope>.<id>` keyed with the management token. A server checks a token
//! without storing anything, and changing the management token revokes
//! every token derived from it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a token allows; each scope includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Reads of jobs, nodes, evaluations, deployments and workers.
    Read,
    /// Reads, and registering or stopping jobs and nodes.
    Write,
    /// Everything, including the admin calls (`/v1/workers`).
    Management,
}

impl Scope {
    pub fn name(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
            Scope::Management => "management",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "read" => Ok(Scope::Read),
            "write" => Ok(Scope::Write),
            _ => Err(format!("{s:?} is not a token scope (read or write)")),
        }
    }
}

/// Shortest management token we accept: anything shorter can be guessed.
pub const MIN_MANAGEMENT_TOKEN_LEN: usize = 16;

const PREFIX: &str = "st1";

#[derive(Debug, thiserror::Error)]
pub enum AclError {
    #[error(
        "the management token is {0} characters; it needs at least {MIN_MANAGEMENT_TOKEN_LEN}"
    )]
    TooShort(usize),
    #[error("the management token contains whitespace or control characters")]
    BadCharacters,
}

/// Checks tokens against the management token, and derives new ones.
#[derive(Clone)]
pub struct Acl {
    management: String,
}

impl std::fmt::Debug for Acl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acl { .. }")
    }
}

impl Acl {
    pub fn new(management: &str) -> Result<Self, AclError> {
        let management = management.trim();
        if management.len() < MIN_MANAGEMENT_TOKEN_LEN {
            return Err(AclError::TooShort(management.len()));
        }
        if management
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(AclError::BadCharacters);
        }
        Ok(Self {
            management: management.to_string(),
        })
    }

    /// A new random management token.
    pub fn generate_management_token() -> String {
        format!("stm-{}", hex::encode(rand::random::<[u8; 24]>()))
    }

    fn mac(&self) -> Hmac<Sha256> {
        Hmac::<Sha256>::new_from_slice(self.management.as_bytes())
            .expect("HMAC takes a key of any length")
    }

    /// A new token of `scope`, with a random id.
    pub fn derive(&self, scope: Scope) -> String {
        let id = hex::encode(rand::random::<[u8; 8]>());
        let mut mac = self.mac();
        mac.update(format!("{}.{id}", scope.name()).as_bytes());
        let sig = hex::encode(mac.finalize().into_bytes());
        format!("{PREFIX}.{}.{id}.{sig}", scope.name())
    }

    /// The scope `token` grants, or `None` for a token this cluster did not
    /// issue. The comparisons take the same time whatever the token.
    pub fn scope_of(&self, token: &str) -> Option<Scope> {
        if constant_time_eq(token.as_bytes(), self.management.as_bytes()) {
            return Some(Scope::Management);
        }
        let mut parts = token.split('.');
        let (prefix, scope, id, sig) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if prefix != PREFIX || parts.next().is_some() {
            return None;
        }
        let scope = match scope {
            "read" => Scope::Read,
            "write" => Scope::Write,
            _ => return None,
        };
        let sig = hex::decode(sig).ok()?;
        let mut mac = self.mac();
        mac.update(format!("{}.{id}", scope.name()).as_bytes());
        mac.verify_slice(&sig).ok()?;
        Some(scope)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_tokens_carry_their_scope_and_forgeries_carry_none() {
        let acl = Acl::new(&Acl::generate_management_token()).unwrap();
        let mgmt = acl.management.clone();
        assert_eq!(acl.scope_of(&mgmt), Some(Scope::Management));
        let read = acl.derive(Scope::Read);
        let write = acl.derive(Scope::Write);
        assert_eq!(acl.scope_of(&read), Some(Scope::Read));
        assert_eq!(acl.scope_of(&write), Some(Scope::Write));
        assert_ne!(acl.derive(Scope::Read), read, "ids are random");

        // A read token relabelled as write, another cluster's token, junk.
        let forged = read.replacen(".read.", ".write.", 1);
        assert_eq!(acl.scope_of(&forged), None);
        let other = Acl::new(&Acl::generate_management_token()).unwrap();
        assert_eq!(acl.scope_of(&other.derive(Scope::Write)), None);
        for junk in [
            "",
            "st1",
            "st1.read",
            "st1.read.x.zz",
            "st1.admin.x.00",
            &mgmt[1..],
        ] {
            assert_eq!(acl.scope_of(junk), None, "{junk:?}");
        }
        assert!(Scope::Management > Scope::Write && Scope::Write > Scope::Read);
    }

    #[test]
    fn short_or_spaced_management_tokens_are_refused() {
        assert!(matches!(Acl::new("short"), Err(AclError::TooShort(5))));
        assert!(matches!(
            Acl::new("0123456789 abcdefgh"),
            Err(AclError::BadCharacters)
        ));
        assert!(
            Acl::new("  0123456789abcdef\n").is_ok(),
            "a file's newline is fine"
        );
    }
}

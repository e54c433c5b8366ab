//! Where the servers are: the one flag (`--address`) and the one variable
//! (`STAMPEDE_ADDRESS`) of every command that talks to servers (`cluster`'s
//! operator commands, `nodesim`, `loadgen`), so that an address exported once
//! serves them all.

/// The variable every command that talks to servers reads their addresses
/// from, when `--address` is not given: `HOST:PORT`, or several
/// comma-separated.
pub const ADDRESS_ENV: &str = "STAMPEDE_ADDRESS";

/// One server's gRPC address as `--address` (and `STAMPEDE_ADDRESS`) take
/// it: `HOST:PORT`, optionally after `http://` or `https://` (the cluster's
/// security picks the scheme either way). A clap value parser: a bad address
/// is refused before anything runs, with a message that names both places
/// it may have come from.
pub fn parse_address(s: &str) -> Result<String, String> {
    let a = s.trim();
    let host_port = a
        .strip_prefix("http://")
        .or_else(|| a.strip_prefix("https://"))
        .unwrap_or(a);
    let fine = match host_port.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains(['/', ' ', '@', '?', '#'])
                && port.parse::<u16>().is_ok_and(|p| p != 0)
        }
        None => false,
    };
    if fine {
        Ok(a.to_string())
    } else {
        Err(format!(
            "{s:?} is not a server's address: give HOST:PORT (several comma-separated) \
             in --address or {ADDRESS_ENV}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_host_port_and_refuses_the_rest_naming_flag_and_variable() {
        for ok in [
            "127.0.0.1:4647",
            "server-1.stampede:4647",
            "[::1]:4647",
            "https://a:1",
        ] {
            assert_eq!(parse_address(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in [
            "",
            "4647",
            "localhost",
            "a:",
            "a:0",
            "a:70000",
            ":4647",
            "a:1/x",
        ] {
            let e = parse_address(bad).unwrap_err();
            assert!(
                e.contains("--address") && e.contains(ADDRESS_ENV),
                "{bad}: {e}"
            );
        }
    }
}

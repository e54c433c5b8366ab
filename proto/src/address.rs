//! Where the servers are: the one flag (`--address`) and the one variable
//! (`STAMPEDE_ADDRESS`) of every command that talks to servers (`cluster`'s
//! operator commands, `nodesim`, `loadgen`), so that an address exported once
//! serves them all.

/// The variable every command that talks to servers reads their addresses
/// from, when `--address` is not given: `HOST:PORT`, or several
/// comma-separated.
pub const ADDRESS_ENV: &str = "STAMPEDE_ADDRESS";

/// `--address` (alias `--servers`; else `STAMPEDE_ADDRESS`): the servers'
/// gRPC addresses, declared here once for every command that talks to
/// servers. A command flattens it and states its own rule for when it is
/// needed on its own options struct, e.g.
/// `#[command(mut_arg(ADDRESS_ARG, |a| a.required(true)))]` (a node fleet
/// needs servers), `a.default_value(...)` (an operator command tries the
/// local server) or nothing (a capacity run starts servers of its own
/// without one); `a.help(...)` says what the addresses are for there.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ServerAddresses {
    /// Servers' gRPC addresses, comma-separated (HOST:PORT,...).
    #[arg(
        id = ADDRESS_ARG,
        long = "address",
        visible_alias = "servers",
        env = ADDRESS_ENV,
        value_delimiter = ',',
        value_name = "HOST:PORT",
        value_parser = parse_address
    )]
    pub list: Vec<String>,
}

/// The id of [`ServerAddresses`]' argument, for `mut_arg` and for asking
/// where its value came from.
pub const ADDRESS_ARG: &str = "address";

impl std::ops::Deref for ServerAddresses {
    type Target = Vec<String>;
    fn deref(&self) -> &Vec<String> {
        &self.list
    }
}

impl std::ops::DerefMut for ServerAddresses {
    fn deref_mut(&mut self) -> &mut Vec<String> {
        &mut self.list
    }
}

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

    /// A command that needs servers, and one that has a default, each
    /// stating its rule where it flattens the one declaration.
    #[derive(Debug, clap::Parser)]
    #[command(mut_arg(ADDRESS_ARG, |a| a.required(true)))]
    struct Needs {
        #[command(flatten)]
        servers: ServerAddresses,
    }

    #[derive(Debug, clap::Parser)]
    #[command(mut_arg(ADDRESS_ARG, |a| a.default_value("127.0.0.1:4647")))]
    struct Defaults {
        #[command(flatten)]
        servers: ServerAddresses,
    }

    #[test]
    fn one_declaration_with_each_commands_own_rule() {
        use clap::Parser;
        let e = Needs::try_parse_from(["x"]).unwrap_err().to_string();
        assert!(e.contains("--address <HOST:PORT>"), "{e}");
        let n = Needs::try_parse_from(["x", "--servers", "a:1,b:2"]).unwrap();
        assert_eq!(*n.servers, ["a:1", "b:2"]);
        let e = Needs::try_parse_from(["x", "--address", "nowhere"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--address or STAMPEDE_ADDRESS"), "{e}");
        let d = Defaults::try_parse_from(["x"]).unwrap();
        assert_eq!(*d.servers, ["127.0.0.1:4647"]);
    }
}

//! The scenarios compiled into loadgen (`loadgen/scenarios/`), so that
//! `loadgen capacity --scenario NAME` needs no file.

/// A named built-in scenario and its TOML.
pub const BUILT_IN: &[(&str, &str)] = &[
    ("default", include_str!("../../scenarios/default.toml")),
    (
        "client-updates",
        include_str!("../../scenarios/client-updates.toml"),
    ),
    (
        "deployments",
        include_str!("../../scenarios/deployments.toml"),
    ),
    ("c2m-mini", include_str!("../../scenarios/c2m-mini.toml")),
    ("c2m", include_str!("../../scenarios/c2m.toml")),
    (
        "c2m-ceiling",
        include_str!("../../scenarios/c2m-ceiling.toml"),
    ),
    ("faults", include_str!("../../scenarios/faults.toml")),
    ("audit", include_str!("../../scenarios/audit.toml")),
    ("audit-gc", include_str!("../../scenarios/audit-gc.toml")),
    ("failover", include_str!("../../scenarios/failover.toml")),
    ("tls", include_str!("../../scenarios/tls.toml")),
    ("soak", include_str!("../../scenarios/soak.toml")),
    ("churn", include_str!("../../scenarios/churn.toml")),
    ("max-rate", include_str!("../../scenarios/max-rate.toml")),
    (
        "fleet-100k",
        include_str!("../../scenarios/fleet-100k.toml"),
    ),
    (
        "fleet-250k",
        include_str!("../../scenarios/fleet-250k.toml"),
    ),
];

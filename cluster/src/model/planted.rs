//! Bugs planted on purpose, to prove that an audit (a test, a loadgen
//! check) catches them. Each is named, and switched on only in debug builds,
//! by listing its name in `STAMPEDE_PLANTED_BUG` (comma-separated), read once
//! per process. Release builds know of none.

/// Whether the planted bug `name` is switched on: always false in release
/// builds; in debug builds, whether `STAMPEDE_PLANTED_BUG` lists `name`.
pub fn planted(name: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        static LIST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let list = LIST.get_or_init(|| std::env::var("STAMPEDE_PLANTED_BUG").unwrap_or_default());
        listed(list, name)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        false
    }
}

/// Whether the comma-separated `list` names `name` (spaces around a name
/// ignored).
#[cfg(debug_assertions)]
fn listed(list: &str, name: &str) -> bool {
    list.split(',').any(|n| n.trim() == name)
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::listed;

    #[test]
    fn a_bug_is_planted_only_when_listed_by_its_whole_name() {
        assert!(listed("deployment_ignores_kept", "deployment_ignores_kept"));
        assert!(listed(
            "other, deployment_ignores_kept",
            "deployment_ignores_kept"
        ));
        assert!(!listed("", "deployment_ignores_kept"));
        assert!(!listed("deployment_ignores", "deployment_ignores_kept"));
        assert!(!listed(
            "deployment_ignores_kept_too",
            "deployment_ignores_kept"
        ));
    }
}

//! Scheduler bugs planted on purpose, to prove that the invariant audit
//! (`loadgen capacity --audit`) catches each one. They exist only in debug
//! builds (tests); a release build compiles every check to `false`.
//!
//! `STAMPEDE_PLANTED_BUG` names the bugs to plant, comma-separated.

/// Whether the bug `name` is planted in this process.
pub fn planted(name: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        static PLANTED: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            std::env::var("STAMPEDE_PLANTED_BUG")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        });
        PLANTED.iter().any(|p| p == name)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = name;
        false
    }
}

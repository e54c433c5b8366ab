use super::*;

#[test]
fn duration_overrides_the_stream_and_keeps_faults_inside_it() {
    let d = Scenario::load("default")
        .unwrap()
        .with_duration(Duration::from_secs(1800))
        .unwrap();
    assert_eq!(d.duration, Duration::from_secs(1800));
    let e = Scenario::load("faults")
        .unwrap()
        .with_duration(Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--duration") && e.contains("not within the job stream"),
        "{e}"
    );
    let e = Scenario::load("default")
        .unwrap()
        .with_duration(Duration::from_secs(25 * 3600))
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 24h"), "{e}");
}

#[test]
fn every_built_in_scenario_parses() {
    for (name, _) in BUILT_IN {
        let s = Scenario::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.name, *name);
    }
    let s = Scenario::load("client-updates").unwrap();
    let names: Vec<String> = s.runs().into_iter().map(|v| v.name).collect();
    assert_eq!(names, ["legacy", "prioritized"]);
}

#[test]
fn a_bad_scenario_names_the_field_and_line() {
    let text = "name = \"x\"\nnodes = 10\nduration = \"10s\"\narival = { process = \"constant\", rate = 1.0 }\n";
    let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
    assert!(
        e.contains("x.toml") && e.contains("line 4") && e.contains("arival"),
        "{e}"
    );

    let text = "name = \"x\"\nnodes = 10\nduration = \"soon\"\n";
    let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
    assert!(
        e.contains("line 3") && e.contains("\"soon\" is not a duration"),
        "{e}"
    );

    let text = r#"
name = "x"
nodes = 10
duration = "10s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 0
cpu_mhz = 100
"#;
    let e = Scenario::parse(text, "x.toml").unwrap_err().to_string();
    assert!(e.contains("jobs[0].count (web)"), "{e}");

    let e = Scenario::load("no-such-scenario").unwrap_err().to_string();
    assert!(e.contains("c2m-mini"), "{e}");
}

#[test]
fn a_sweep_runs_one_variant_per_value() {
    let text = r#"
name = "grow"
nodes = 10
duration = "10s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 1
cpu_mhz = 100
[sweep]
parameter = "nodes"
values = [100, 1000]
"#;
    let s = Scenario::parse(text, "grow.toml").unwrap();
    let runs = s.runs();
    let names: Vec<&str> = runs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["nodes-100", "nodes-1000"]);
    assert_eq!(s.for_variant(&runs[1]).nodes, 1000);
    let bad = text.replace("[100, 1000]", "[100, 0.5]");
    let e = Scenario::parse(&bad, "grow.toml").unwrap_err().to_string();
    assert!(e.contains("sweep.values"), "{e}");
}

#[test]
fn a_search_block_needs_an_slo_and_no_variants() {
    let s = Scenario::load("max-rate").unwrap();
    assert_eq!(s.search.as_ref().unwrap().budget, DEFAULT_SEARCH_BUDGET);
    let text = BUILT_IN.iter().find(|(n, _)| *n == "max-rate").unwrap().1;
    let no_slo = text.replace("p99_placement_ms = 5000", "");
    let e = Scenario::parse(&no_slo, "x.toml").unwrap_err().to_string();
    assert!(e.contains("search: needs an [slo]"), "{e}");
    let zero = text.replace("budget = \"30m\"", "budget = \"0s\"");
    let e = Scenario::parse(&zero, "x.toml").unwrap_err().to_string();
    assert!(e.contains("search.budget"), "{e}");
    let swept = format!("{text}\n[sweep]\nparameter = \"nodes\"\nvalues = [10]\n");
    let e = Scenario::parse(&swept, "x.toml").unwrap_err().to_string();
    assert!(e.contains("no variants or sweep"), "{e}");
}

const WITH_FAULTS: &str = r#"
name = "f"
nodes = 10
duration = "60s"
arrival = { process = "constant", rate = 1.0 }
[[jobs]]
name = "web"
type = "service"
count = 1
cpu_mhz = 100
[[faults]]
at = "10s"
action = "kill_leader"
duration = "2s"
[[faults]]
at = "20s"
action = "partition_follower"
duration = "5s"
"#;

#[test]
fn fault_steps_parse_with_their_times_and_actions() {
    let s = Scenario::parse(WITH_FAULTS, "f.toml").unwrap();
    assert_eq!(
        s.faults,
        [
            FaultStep {
                at: Duration::from_secs(10),
                action: FaultAction::KillLeader,
                duration: Duration::from_secs(2),
            },
            FaultStep {
                at: Duration::from_secs(20),
                action: FaultAction::PartitionFollower,
                duration: Duration::from_secs(5),
            },
        ]
    );
    assert!(s.partitions());
    for a in FaultAction::ALL {
        let text = WITH_FAULTS.replace("partition_follower", a.name());
        let s = Scenario::parse(&text, "f.toml").unwrap_or_else(|e| panic!("{a:?}: {e}"));
        assert_eq!(s.faults[1].action, a);
    }
    // A scenario without faults serializes as before (no `faults` key).
    let plain = Scenario::load("default").unwrap();
    assert!(plain.faults.is_empty());
    let json = serde_json::to_value(&plain).unwrap();
    assert!(json.get("faults").is_none());
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["faults"][0]["action"], "kill_leader");
    assert_eq!(json["faults"][0]["at"], "10s");
}

#[test]
fn bad_fault_steps_are_refused_with_their_field() {
    let refused = |from: &str, to: &str| {
        let text = WITH_FAULTS.replace(from, to);
        Scenario::parse(&text, "f.toml").unwrap_err().to_string()
    };
    let e = refused("\"kill_leader\"", "\"kill_everything\"");
    assert!(
        e.contains("f.toml") && e.contains("line 13") && e.contains("kill_everything"),
        "{e}"
    );
    let e = refused("at = \"10s\"", "at = \"soon\"");
    assert!(e.contains("\"soon\" is not a duration"), "{e}");
    let e = refused("at = \"20s\"", "at = \"90s\"");
    assert!(
        e.contains("faults[1].at (partition_follower)") && e.contains("within the job stream"),
        "{e}"
    );
    let e = refused("at = \"20s\"", "at = \"11s\"");
    assert!(
        e.contains("faults[1].at") && e.contains("before faults[0] has ended"),
        "{e}"
    );
    let e = refused("duration = \"5s\"", "duration = \"0s\"");
    assert!(e.contains("faults[1].duration"), "{e}");
    let e = refused(
        "action = \"kill_leader\"\nduration = \"2s\"",
        "action = \"kill_leader\"",
    );
    assert!(e.contains("missing field `duration`"), "{e}");
    let e = refused("nodes = 10", "nodes = 10\nservers = 1");
    assert!(
        e.contains("faults[0].action (kill_leader)") && e.contains("at least 3 servers"),
        "{e}"
    );
    let e = refused("duration = \"2s\"", "duration = \"2s\"\nwhen = 3");
    assert!(e.contains("unknown field `when`"), "{e}");
    // A kill may restart at once.
    assert!(Scenario::parse(&WITH_FAULTS.replace("\"2s\"", "\"0s\""), "f.toml").is_ok());
}

#[test]
fn a_ramp_goes_from_one_rate_to_the_other() {
    let a = Arrival::Ramp {
        from: 1.0,
        to: 11.0,
    };
    assert_eq!(a.rate_at(0.0, 10.0), 1.0);
    assert_eq!(a.rate_at(5.0, 10.0), 6.0);
    assert_eq!(a.rate_at(20.0, 10.0), 11.0);
}

#[test]
fn every_example_scenario_loads_and_a_variant_names_its_build_one_way() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Scenario::load(path.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} in {}", dir.display());
    let two = std::fs::read_to_string(dir.join("two-builds.toml")).unwrap();
    let s = Scenario::parse(&two, "two-builds.toml").unwrap();
    assert_eq!(s.variants[0].git_rev.as_deref(), Some("HEAD~1"));
    let both = two.replace(
        "git_rev = \"HEAD~1\"",
        "git_rev = \"HEAD~1\"\nbin_dir = \"/opt\"",
    );
    let e = Scenario::parse(&both, "x.toml").unwrap_err().to_string();
    assert!(
        e.contains("variants[0].git_rev") && e.contains("not both"),
        "{e}"
    );
    let e = Scenario::parse(&two.replace("HEAD~1", "--upload-pack=x"), "x.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("must name a revision"), "{e}");
}

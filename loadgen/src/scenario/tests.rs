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
                share: None,
            },
            FaultStep {
                at: Duration::from_secs(20),
                action: FaultAction::PartitionFollower,
                duration: Duration::from_secs(5),
                share: None,
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
fn part_of_a_fleet_of_several_processes_is_paused_and_nothing_else() {
    let half = WITH_FAULTS
        .replace("nodes = 10", "nodes = 10\nfleet_processes = 3")
        .replace(
            "action = \"partition_follower\"",
            "action = \"pause_fleet\"\nshare = 0.5",
        );
    let s = Scenario::parse(&half, "f.toml").unwrap();
    assert_eq!(s.fleet_processes, 3);
    assert_eq!(s.faults[1].share, Some(0.5));
    // The first ceil(share × processes), at least one, at most all.
    assert_eq!(s.faults[1].fleet_processes_paused(3), 2);
    assert_eq!(s.faults[1].fleet_processes_paused(0), 0);
    assert_eq!(s.faults[0].fleet_processes_paused(3), 3);
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["fleet_processes"], 3);
    assert_eq!(json["faults"][1]["share"], 0.5);
    assert!(json["faults"][0].get("share").is_none());
    // One process, the default, is not written.
    let plain = serde_json::to_value(Scenario::load("default").unwrap()).unwrap();
    assert!(plain.get("fleet_processes").is_none());

    let refused = |from: &str, to: &str| {
        let text = half.replace(from, to);
        Scenario::parse(&text, "f.toml").unwrap_err().to_string()
    };
    for bad in ["0", "17"] {
        let e = refused("fleet_processes = 3", &format!("fleet_processes = {bad}"));
        assert!(
            e.contains("fleet_processes") && e.contains("1 to 16"),
            "{e}"
        );
    }
    let e = refused("nodes = 10", "nodes = 2");
    assert!(
        e.contains("fleet_processes") && e.contains("at most the nodes (2)"),
        "{e}"
    );
    for bad in ["0.0", "-0.5", "1.5", "nan"] {
        let e = refused("share = 0.5", &format!("share = {bad}"));
        assert!(
            e.contains("faults[1].share (pause_fleet)") && e.contains("above 0 and at most 1"),
            "{bad}: {e}"
        );
    }
    // A share of one process is all of it: the scenario says so.
    let e = refused("fleet_processes = 3", "fleet_processes = 1");
    assert!(
        e.contains("faults[1].share") && e.contains("is all of them"),
        "{e}"
    );
    // Only a fleet pause takes a share.
    let e = refused(
        "action = \"kill_leader\"",
        "action = \"kill_leader\"\nshare = 0.5",
    );
    assert!(
        e.contains("faults[0].share (kill_leader)") && e.contains("pause_fleet"),
        "{e}"
    );
    // The whole fleet, said either way.
    assert!(Scenario::parse(&half.replace("share = 0.5", "share = 1.0"), "f.toml").is_ok());
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

/// Arrivals of a constant stream, counted as the stream draws them: one
/// every `1 / rate` seconds from `1 / rate` on, while before the end.
fn constant_arrivals(s: &Scenario) -> u64 {
    let Arrival::Constant { rate } = s.arrival else {
        panic!("{}: a constant arrival", s.name)
    };
    let total = s.duration.as_secs_f64();
    let (mut t, mut n) = (0.0, 0);
    loop {
        t += 1.0 / rate;
        if t >= total {
            return n;
        }
        n += 1;
    }
}

/// The value of nodesim flag `flag` in the scenario's `nodesim_args`, or
/// nodesim's default (4,000 MHz, 8,192 MB).
fn node_amount(s: &Scenario, flag: &str, default: u64) -> u64 {
    let args = &s.nodesim_args;
    args.iter()
        .position(|a| a == flag)
        .map_or(default, |i| args[i + 1].parse().unwrap())
}

/// Whether `allocations` of the scenario's one job kind fit on its fleet
/// with `room` (0.25: a quarter of each node's CPU and memory left), spread
/// evenly.
fn fits_with_room(s: &Scenario, allocations: u64, room: f64) -> bool {
    let [job] = s.job_mix.as_slice() else {
        panic!("{}: one job kind", s.name)
    };
    let per_node = allocations.div_ceil(s.nodes);
    let cpu = node_amount(s, "--cpu-mhz", 4000) as f64;
    let memory = node_amount(s, "--memory-mb", 8192) as f64;
    (per_node * job.cpu_mhz) as f64 <= cpu * (1.0 - room)
        && (per_node * job.memory_mb) as f64 <= memory * (1.0 - room)
}

#[test]
fn c2m_offers_two_million_allocations_and_they_fit_its_fleet_with_room() {
    let s = Scenario::load("c2m").unwrap();
    assert_eq!(s.nodes, 10_000);
    assert_eq!(s.job_mix.len(), 1);
    let job = &s.job_mix[0];
    assert_eq!((job.kind, job.count), (Kind::Service, 1000));
    let jobs = constant_arrivals(&s);
    assert_eq!(jobs, 2000, "2,000 jobs of 1,000");
    let allocations = jobs * job.count as u64;
    assert_eq!(allocations, 2_000_000);
    assert!(fits_with_room(&s, allocations, 0.25));
    assert!(
        !fits_with_room(&s, allocations * 4, 0.0),
        "the check can fail"
    );
    assert_eq!(
        s.update_share + s.stop_share + s.scale_share + s.purge_share,
        0.0
    );
    assert!(s.faults.is_empty() && s.search.is_none());
    // A cluster at Nomad's C2M pace (about 1,500 placements/s) finishes
    // within the stream and its drain.
    let at_nomads_pace = allocations as f64 / 1500.0;
    assert!((s.duration + s.drain).as_secs_f64() > at_nomads_pace);
}

#[test]
fn c2m_ceiling_searches_c2m_minis_shape_against_a_ten_second_p99_to_running() {
    let s = Scenario::load("c2m-ceiling").unwrap();
    let mini = Scenario::load("c2m-mini").unwrap();
    assert_eq!(s.nodes, mini.nodes);
    assert_eq!(s.job_mix[0].count, mini.job_mix[0].count);
    assert!(s.search.is_some());
    assert_eq!(s.slo.p99_running_ms, Some(10_000.0));
    assert_eq!(s.slo.p99_placement_ms, None);
    // Every probe up to 100 jobs/s (100,000 placements/s, five times the
    // issue's moonshot) fits the fleet, so only the cluster's pace fails one.
    let v = Variant {
        rate: Some(100.0),
        ..Default::default()
    };
    let fast = s.for_variant(&v);
    let allocations = constant_arrivals(&fast) * s.job_mix[0].count as u64;
    assert!(allocations >= 2_900_000, "{allocations}");
    assert!(fits_with_room(&fast, allocations, 0.25));
    // A job not running within the drain is beyond the SLO.
    assert!(s.drain.as_secs_f64() * 1000.0 >= s.slo.p99_running_ms.unwrap());
}

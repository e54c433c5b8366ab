//! `summary.json`'s published JSON Schema, `loadgen/summary.schema.json`,
//! drawn from the serde types of [`RunSummary`] by `schemars`, so that the
//! schema and the types cannot disagree. It says what loadgen writes (the
//! serialize side: a field always written is required, one skipped when
//! empty is not); what it reads back is wider (any field may be missing
//! and takes its default), which the fixtures of earlier summaries test.
//!
//! The types derive `JsonSchema` under `cfg(test)` only: the schema is
//! made by the test below, and the binaries carry none of it. The test
//! fails when the checked-in file is not what the types say; to write it
//! again, run [`REGENERATE`].

use std::path::PathBuf;

use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::RunSummary;

/// The command that writes the schema file again from the types.
pub const REGENERATE: &str =
    "STAMPEDE_REGENERATE_SCHEMA=1 cargo test -p loadgen --lib summary::schema";

/// The schema the types draw, with the file's own id and a note saying it
/// is generated and how to regenerate it.
pub fn drawn() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator();
    let mut schema = generator.into_root_schema_for::<RunSummary>().to_value();
    let top = schema.as_object_mut().expect("a schema object");
    top.insert(
        "$id".into(),
        "https://stampede.invalid/loadgen/summary.schema.json".into(),
    );
    top.insert("title".into(), "loadgen capacity run summary".into());
    top.insert(
        "$comment".into(),
        format!(
            "Generated from loadgen's summary types (loadgen/src/summary/schema.rs); \
             do not edit. To regenerate: {REGENERATE}"
        )
        .into(),
    );
    schema
}

/// The checked-in schema file.
fn published_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("summary.schema.json")
}

#[test]
fn the_published_schema_is_the_one_the_types_draw() {
    let drawn = serde_json::to_string_pretty(&drawn()).unwrap() + "\n";
    let path = published_path();
    if std::env::var_os("STAMPEDE_REGENERATE_SCHEMA").is_some() {
        std::fs::write(&path, &drawn).unwrap();
        return;
    }
    let published = std::fs::read_to_string(&path).unwrap();
    let first_difference = (published.lines().zip(drawn.lines()).enumerate())
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| format!("line {}: {a:?}, the types say {b:?}", i + 1));
    assert!(
        published == drawn,
        "{} is not what the summary's types say ({}); regenerate it: {REGENERATE}",
        path.display(),
        first_difference.unwrap_or_else(|| "its length differs".into()),
    );
}

#[test]
fn the_schema_says_what_a_variant_is_and_requires_what_is_always_written() {
    let schema = drawn();
    let variant = &schema["$defs"]["VariantSummary"];
    let required: Vec<&str> = (variant["required"].as_array().unwrap().iter())
        .map(|r| r.as_str().unwrap())
        .collect();
    // Always written, so required; skipped when empty, so not.
    for field in [
        "name",
        "stream",
        "cpu_seconds_per_1000_placements_by_process",
    ] {
        assert!(required.contains(&field), "{field}: {required:?}");
    }
    for field in ["faults", "audit", "noise_floors"] {
        assert!(!required.contains(&field), "{field}");
    }
    // A flattened section's fields are the variant's own.
    assert!(variant["properties"]["stages"].is_object(), "{variant}");
    // A doc comment is the field's description.
    let cost = &variant["properties"]["cpu_seconds_per_1000_placements"];
    assert!(cost["description"].as_str().unwrap().contains("per 1,000"));
}

//! The types and services generated from `proto/stampede.proto` (package
//! `stampede.v1`), in a module of their own so that the modules that add
//! to them (`labels`) stand on them and not on the crate root, which
//! re-exports both.

tonic::include_proto!("stampede.v1");

//! Nothing to link: this crate's build script checks, before anything slow
//! is compiled, that the RocksDB `librocksdb-sys` is told to link
//! (`.cargo/config.toml`) is installed. Without it, that crate's build
//! would fail late and obscurely (bindgen on a missing header, or the final
//! link), or, with the variables unset, compile RocksDB's C++ for 20-25
//! minutes without a word.

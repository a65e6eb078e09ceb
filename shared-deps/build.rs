//! Empty: it exists so that cargo resolves this crate's
//! `[build-dependencies]` (Cargo.toml says why they are there).

fn main() {}

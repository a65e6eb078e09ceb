//! The integration tests of `pipe-engine`, linked into one binary: pipeline
//! files that load (`spec_valid`), that are refused with a located message
//! (`spec_malformed`), generated ones that must never panic
//! (`spec_fuzz`), and the YAML test suite through pipe's YAML layer
//! (`yaml_suite`).

mod spec_fuzz;
mod spec_malformed;
mod spec_valid;
mod yaml_suite;

/// The real data stages of `pipe-stage` (its `describe` answer) and a
/// training stage, as a worker would offer them: what `pipe_engine::load_pipeline`
/// checks `uses:` stages against.
fn fixture_catalog() -> pipe_engine::Catalog {
    let text = include_str!("../../../tests/fixtures/catalog.json");
    let mut catalog = pipe_engine::Catalog::default();
    catalog
        .add(
            std::path::Path::new("/fixture/pipe-stage"),
            serde_json::from_str(text).expect("catalog fixture"),
        )
        .expect("one worker per stage");
    catalog
}

//! The integration tests of the `pipe` binary, linked into one binary: one
//! module per subject, each driving the real `pipe` in temporary projects
//! (`pipe_test_support::TestProject`). `quickstart`, `imdb_pipeline` and
//! `resume` also need the libtorch worker.
//!
//! The modules share one process and run on parallel threads, so a test
//! gives an environment variable or a working directory to the child's
//! `Command`, never to the test process, where it would leak into others.

mod action_trust;
mod bootstrap_index;
mod cache_suite;
mod cache_trust;
mod ci_flow;
mod compare;
mod compare_page;
mod completions;
mod diff_units;
mod docs;
mod dvc_project;
mod from_dvc;
mod hostile_git;
mod hostile_project_files;
mod hostile_s3;
mod imdb_mirror;
mod imdb_pipeline;
mod incremental_property;
mod init;
mod install;
mod key_metrics;
mod keys_cover_inputs;
mod kill_safety;
mod launcher;
mod load_checks;
mod malformed;
mod many_stages;
mod noop_record;
mod parallel;
mod params_edits;
mod params_overrides;
mod plots;
mod progress_lines;
mod quickstart;
mod record_fields;
mod record_trust;
mod remote_cache;
mod report_page;
mod reports;
mod resolved_pipeline;
mod resume;
mod run_choice;
mod run_record;
mod run_report;
mod run_values;
mod samples_from_files;
mod secrets;
mod settings;
mod show_own_files;
mod slurm;
mod slurm_ranks;
mod spec_safety;
mod speed_study;
mod status_in_progress;
mod status_scale;
mod stdout_closed;
mod sweep_one_run;
mod sweep_rerun;
mod sweep_workspaces;
mod sweeps;
mod team_records;
mod team_runs;
mod transfer_progress;
mod true_reasons;
mod typos;
mod untrusted_files;
mod untrusted_input;
mod worker_build;
mod worker_pages;
mod worker_prebuild;
mod workers;

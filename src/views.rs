//! What the commands show: text, tables, Markdown, CSV, HTML and the
//! `--json` lines' types, each from what a use case returned.

pub mod cache_sync_text;
pub mod cache_text;
pub mod checkout_text;
pub mod compare_page;
pub mod compare_params;
pub mod compare_view;
pub mod count_text;
pub mod diff_fold;
pub mod diff_text;
pub mod field_changes;
pub mod from_dvc_text;
pub mod init_text;
pub mod json_results;
pub mod labels_text;
pub mod notice_text;
pub mod orphans_text;
pub mod remote_status;
pub mod run_setup_text;
pub mod runs_table;
pub mod show_json;
pub mod show_text;
pub mod stages_text;
pub mod status_text;
pub mod sweep_text;
pub mod validate_text;
pub mod value_text;
pub mod why_text;

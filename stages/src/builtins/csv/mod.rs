//! `data/from-csv@1`: a CSV or TSV table (optionally gzip or bzip2
//! compressed) to one JSONL dataset `{text, label, ...}`.

mod from_csv;
mod table;

pub(crate) use from_csv::FromCsv;

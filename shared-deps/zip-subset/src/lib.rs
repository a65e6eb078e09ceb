//! The part of the ZIP format that tch 0.24 and torch-sys 0.24 use, under
//! the `zip` 0.6 names they call: [`ZipArchive`] reads an archive's
//! entries (stored or deflated, ZIP64 sizes and offsets, each entry's
//! CRC-32 checked as it is read), [`ZipWriter`] writes one (stored or
//! deflated, ZIP64 where sizes, offsets or the number of entries need it).
//!
//! Left out: encryption, other compression methods, archives split over
//! several disks, comments, timestamps (entries are written dated
//! 1980-01-01), appending to an archive. The format is PKWARE's APPNOTE.

mod central;
mod compression;
mod entry_reader;
mod fields;
mod name;
pub mod read;
mod records;
pub mod result;
mod tail;
pub mod write;

pub use compression::CompressionMethod;
pub use read::ZipArchive;
pub use write::ZipWriter;

//! The format's records (APPNOTE 4.3): their signatures and fixed sizes,
//! and the bytes the writer lays out for each.

use crate::compression::CompressionMethod;
use crate::fields::{put_u16, put_u32, put_u64};

pub(crate) const LOCAL_HEADER: u32 = 0x0403_4b50;
pub(crate) const CENTRAL_HEADER: u32 = 0x0201_4b50;
pub(crate) const END_OF_DIRECTORY: u32 = 0x0605_4b50;
pub(crate) const ZIP64_END_OF_DIRECTORY: u32 = 0x0606_4b50;
pub(crate) const ZIP64_LOCATOR: u32 = 0x0706_4b50;

/// Fixed parts: a local header, a central directory header, the end of
/// central directory record, the ZIP64 one and its locator.
pub(crate) const LOCAL_HEADER_LEN: usize = 30;
pub(crate) const CENTRAL_HEADER_LEN: usize = 46;
pub(crate) const END_OF_DIRECTORY_LEN: usize = 22;
pub(crate) const ZIP64_END_OF_DIRECTORY_LEN: usize = 56;
pub(crate) const ZIP64_LOCATOR_LEN: usize = 20;

/// The extra field that holds ZIP64 sizes and offsets.
pub(crate) const ZIP64_EXTRA: u16 = 0x0001;
/// A 32-bit size or offset field whose value is in the ZIP64 extra field.
pub(crate) const SATURATED_32: u32 = u32::MAX;
/// A 16-bit count whose value is in the ZIP64 end of central directory.
pub(crate) const SATURATED_16: u16 = u16::MAX;

/// General purpose flags: encrypted, and the name is UTF-8.
pub(crate) const FLAG_ENCRYPTED: u16 = 1;
pub(crate) const FLAG_UTF8: u16 = 1 << 11;

/// Where the CRC-32 field is in a local header; both sizes follow it.
pub(crate) const LOCAL_CRC_AT: u64 = 14;

/// "Version needed to extract": 2.0 (deflate), 4.5 (ZIP64).
const VERSION_DEFLATE: u16 = 20;
const VERSION_ZIP64: u16 = 45;
/// "Version made by": made on Unix (3), so that the external attributes
/// are a Unix mode, by a writer of APPNOTE 4.5.
const MADE_BY: u16 = (3 << 8) | VERSION_ZIP64;
/// 1980-01-01 00:00, the first MS-DOS date: entries carry no time.
const DOS_TIME: u16 = 0;
const DOS_DATE: u16 = (1 << 5) | 1;
/// A regular file, rw-r--r--.
const UNIX_FILE_MODE: u32 = 0o100_644;

/// An entry the writer has written, as its central directory header
/// describes it.
pub(crate) struct EntryRecord {
    pub(crate) name: String,
    pub(crate) method: CompressionMethod,
    pub(crate) crc32: u32,
    pub(crate) compressed_size: u64,
    pub(crate) size: u64,
    pub(crate) header_offset: u64,
}

fn flags_for(name: &str) -> u16 {
    if name.is_ascii() {
        0
    } else {
        FLAG_UTF8
    }
}

/// A local header with its CRC-32 and sizes zero, written back once the
/// data is (`large`: sizes in a ZIP64 extra field, for entries that may
/// pass 4 GiB). The name's length was checked by the caller.
pub(crate) fn local_header(name: &str, method: CompressionMethod, large: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(LOCAL_HEADER_LEN + name.len() + 20);
    put_u32(&mut out, LOCAL_HEADER);
    put_u16(
        &mut out,
        if large {
            VERSION_ZIP64
        } else {
            VERSION_DEFLATE
        },
    );
    put_u16(&mut out, flags_for(name));
    put_u16(&mut out, method.code());
    put_u16(&mut out, DOS_TIME);
    put_u16(&mut out, DOS_DATE);
    put_u32(&mut out, 0);
    let size_field = if large { SATURATED_32 } else { 0 };
    put_u32(&mut out, size_field);
    put_u32(&mut out, size_field);
    put_u16(&mut out, name.len() as u16);
    put_u16(&mut out, if large { 20 } else { 0 });
    out.extend_from_slice(name.as_bytes());
    if large {
        put_u16(&mut out, ZIP64_EXTRA);
        put_u16(&mut out, 16);
        put_u64(&mut out, 0);
        put_u64(&mut out, 0);
    }
    out
}

/// Appends an entry's central directory header; sizes and the offset
/// that do not fit 32 bits go to a ZIP64 extra field, in APPNOTE's order.
pub(crate) fn central_header(out: &mut Vec<u8>, entry: &EntryRecord) {
    let mut extra = Vec::new();
    let mut field = |value: u64| {
        if value >= u64::from(SATURATED_32) {
            put_u64(&mut extra, value);
            SATURATED_32
        } else {
            value as u32
        }
    };
    let size = field(entry.size);
    let compressed_size = field(entry.compressed_size);
    let header_offset = field(entry.header_offset);
    let zip64 = !extra.is_empty();
    put_u32(out, CENTRAL_HEADER);
    put_u16(out, MADE_BY);
    put_u16(
        out,
        if zip64 {
            VERSION_ZIP64
        } else {
            VERSION_DEFLATE
        },
    );
    put_u16(out, flags_for(&entry.name));
    put_u16(out, entry.method.code());
    put_u16(out, DOS_TIME);
    put_u16(out, DOS_DATE);
    put_u32(out, entry.crc32);
    put_u32(out, compressed_size);
    put_u32(out, size);
    put_u16(out, entry.name.len() as u16);
    put_u16(out, if zip64 { extra.len() as u16 + 4 } else { 0 });
    put_u16(out, 0); // comment
    put_u16(out, 0); // disk
    put_u16(out, 0); // internal attributes
    put_u32(out, UNIX_FILE_MODE << 16);
    put_u32(out, header_offset);
    out.extend_from_slice(entry.name.as_bytes());
    if zip64 {
        put_u16(out, ZIP64_EXTRA);
        put_u16(out, extra.len() as u16);
        out.extend_from_slice(&extra);
    }
}

/// The records after the central directory: the ZIP64 end of central
/// directory and its locator when a count, size or offset needs them,
/// then the end of central directory record.
pub(crate) fn end_records(directory_start: u64, directory_size: u64, entries: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let zip64 = entries >= u64::from(SATURATED_16)
        || directory_start >= u64::from(SATURATED_32)
        || directory_size >= u64::from(SATURATED_32);
    if zip64 {
        let record_at = directory_start + directory_size;
        put_u32(&mut out, ZIP64_END_OF_DIRECTORY);
        put_u64(&mut out, (ZIP64_END_OF_DIRECTORY_LEN - 12) as u64);
        put_u16(&mut out, MADE_BY);
        put_u16(&mut out, VERSION_ZIP64);
        put_u32(&mut out, 0); // this disk
        put_u32(&mut out, 0); // the directory's disk
        put_u64(&mut out, entries);
        put_u64(&mut out, entries);
        put_u64(&mut out, directory_size);
        put_u64(&mut out, directory_start);
        put_u32(&mut out, ZIP64_LOCATOR);
        put_u32(&mut out, 0); // the disk of the ZIP64 record
        put_u64(&mut out, record_at);
        put_u32(&mut out, 1); // disks
    }
    let count = if zip64 { SATURATED_16 } else { entries as u16 };
    let (size, start) = if zip64 {
        (SATURATED_32, SATURATED_32)
    } else {
        (directory_size as u32, directory_start as u32)
    };
    put_u32(&mut out, END_OF_DIRECTORY);
    put_u16(&mut out, 0); // this disk
    put_u16(&mut out, 0); // the directory's disk
    put_u16(&mut out, count);
    put_u16(&mut out, count);
    put_u32(&mut out, size);
    put_u32(&mut out, start);
    put_u16(&mut out, 0); // comment
    out
}

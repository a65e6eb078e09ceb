//! The central directory: one header per entry, read in order, with the
//! ZIP64 extra field's sizes and offset where the 32-bit fields are full.

use std::io::{self, Read};

use crate::fields::{read_record, Fields};
use crate::name;
use crate::records::{CENTRAL_HEADER, CENTRAL_HEADER_LEN, FLAG_UTF8, SATURATED_32, ZIP64_EXTRA};
use crate::result::{ZipError, ZipResult};
use crate::tail::Directory;

/// One entry as the central directory describes it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) flags: u16,
    pub(crate) method: u16,
    pub(crate) crc32: u32,
    pub(crate) compressed_size: u64,
    pub(crate) size: u64,
    /// The position of its local header in the stream.
    pub(crate) header_at: u64,
}

/// Reads the directory's entries from `reader`, which is at its start;
/// never reads past its stated size, so a wrong count or a truncated
/// directory is an error, and memory is bounded by the directory's size.
pub(crate) fn read_entries<R: Read>(
    reader: &mut R,
    directory: &Directory,
) -> ZipResult<Vec<Entry>> {
    let mut reader = reader.take(directory.size);
    // Grows with the entries actually read (each at least 46 bytes of
    // the directory), whatever the count claims.
    let mut entries = Vec::with_capacity(directory.entries.min(1 << 12) as usize);
    for _ in 0..directory.entries {
        entries.push(read_entry(&mut reader, directory.base)?);
    }
    Ok(entries)
}

fn read_entry<R: Read>(reader: &mut R, base: u64) -> ZipResult<Entry> {
    const TRUNCATED: &str = "central directory truncated";
    let mut fixed = [0; CENTRAL_HEADER_LEN];
    read_record(reader, &mut fixed, TRUNCATED)?;
    let mut fields = Fields::new(&fixed, TRUNCATED);
    if fields.u32()? != CENTRAL_HEADER {
        return Err(ZipError::InvalidArchive(
            "no central directory header where one should be",
        ));
    }
    let _made_by = fields.u16()?;
    let _needed = fields.u16()?;
    let flags = fields.u16()?;
    let method = fields.u16()?;
    let _time_and_date = fields.u32()?;
    let crc32 = fields.u32()?;
    let compressed_size = fields.u32()?;
    let size = fields.u32()?;
    let name_length = usize::from(fields.u16()?);
    let extra_length = usize::from(fields.u16()?);
    let comment_length = u64::from(fields.u16()?);
    let _disk_internal_and_external_attributes = fields.take(8)?;
    let header_offset = fields.u32()?;

    let mut name = vec![0; name_length];
    read_record(reader, &mut name, TRUNCATED)?;
    let mut extra = vec![0; extra_length];
    read_record(reader, &mut extra, TRUNCATED)?;
    if io::copy(&mut reader.by_ref().take(comment_length), &mut io::sink())? != comment_length {
        return Err(ZipError::InvalidArchive(TRUNCATED));
    }

    let mut wide = Wide {
        size: u64::from(size),
        compressed_size: u64::from(compressed_size),
        header_offset: u64::from(header_offset),
    };
    wide.read_zip64_extra(&extra, size, compressed_size, header_offset)?;
    Ok(Entry {
        name: name::decode(&name, flags & FLAG_UTF8 != 0)?,
        flags,
        method,
        crc32,
        compressed_size: wide.compressed_size,
        size: wide.size,
        header_at: base
            .checked_add(wide.header_offset)
            .ok_or(ZipError::InvalidArchive(
                "a local header offset past any archive",
            ))?,
    })
}

/// An entry's sizes and offset, 64 bits wide.
struct Wide {
    size: u64,
    compressed_size: u64,
    header_offset: u64,
}

impl Wide {
    /// Takes from the ZIP64 extra field, in APPNOTE's order, each value
    /// whose 32-bit field is saturated. Extra fields after a malformed one
    /// are ignored (padding), as other readers do.
    fn read_zip64_extra(
        &mut self,
        extra: &[u8],
        size: u32,
        compressed: u32,
        offset: u32,
    ) -> ZipResult<()> {
        const SHORT: &str = "ZIP64 extra field too short";
        let mut fields = Fields::new(extra, SHORT);
        while fields.rest().len() >= 4 {
            let id = fields.u16()?;
            let length = usize::from(fields.u16()?);
            if length > fields.rest().len() {
                break;
            }
            let data = fields.take(length)?;
            if id != ZIP64_EXTRA {
                continue;
            }
            let mut values = Fields::new(data, SHORT);
            if size == SATURATED_32 {
                self.size = values.u64()?;
            }
            if compressed == SATURATED_32 {
                self.compressed_size = values.u64()?;
            }
            if offset == SATURATED_32 {
                self.header_offset = values.u64()?;
            }
            break;
        }
        Ok(())
    }
}

//! Finding the central directory from the end of an archive: the end of
//! central directory record (searched for in the last 64 KiB + 22 bytes,
//! since a comment of up to 65,535 bytes may follow it) and, when a ZIP64
//! locator precedes it, the ZIP64 record it points to.

use std::io::{Read, Seek, SeekFrom};

use crate::fields::{read_record, Fields};
use crate::records::{
    CENTRAL_HEADER_LEN, END_OF_DIRECTORY, END_OF_DIRECTORY_LEN, ZIP64_END_OF_DIRECTORY,
    ZIP64_END_OF_DIRECTORY_LEN, ZIP64_LOCATOR, ZIP64_LOCATOR_LEN,
};
use crate::result::{ZipError, ZipResult};

/// Where the central directory is and what it holds.
#[derive(Debug)]
pub(crate) struct Directory {
    /// The directory's position in the stream.
    pub(crate) start: u64,
    pub(crate) size: u64,
    pub(crate) entries: u64,
    /// What to add to an offset the archive states to get a position in
    /// the stream: the length of anything before the archive (a
    /// self-extracting stub), else 0.
    pub(crate) base: u64,
}

/// The counts, size and offset an end record states, and its position.
struct EndRecord {
    at: u64,
    disk: u32,
    directory_disk: u32,
    entries_here: u64,
    entries: u64,
    size: u64,
    offset: u64,
}

/// Locates the central directory of the archive `reader` holds.
pub(crate) fn find_directory<R: Read + Seek>(reader: &mut R) -> ZipResult<Directory> {
    let end = find_end_record(reader)?;
    let record = match zip64_record(reader, end.at)? {
        Some(record) => record,
        None => end,
    };
    if record.disk != 0 || record.directory_disk != 0 || record.entries_here != record.entries {
        return Err(ZipError::UnsupportedArchive(
            "an archive split over several disks",
        ));
    }
    let stated_end = record.offset.checked_add(record.size);
    let base = stated_end
        .and_then(|stated_end| record.at.checked_sub(stated_end))
        .ok_or(ZipError::InvalidArchive(
            "the central directory overlaps its end record",
        ))?;
    if record.entries > record.size / CENTRAL_HEADER_LEN as u64 {
        return Err(ZipError::InvalidArchive(
            "more entries than the central directory holds",
        ));
    }
    Ok(Directory {
        start: base + record.offset,
        size: record.size,
        entries: record.entries,
        base,
    })
}

fn find_end_record<R: Read + Seek>(reader: &mut R) -> ZipResult<EndRecord> {
    let length = reader.seek(SeekFrom::End(0))?;
    let tail_length = length.min((END_OF_DIRECTORY_LEN + usize::from(u16::MAX)) as u64);
    let tail_start = length - tail_length;
    reader.seek(SeekFrom::Start(tail_start))?;
    let mut tail = vec![0; tail_length as usize];
    read_record(reader, &mut tail, "the archive ended while being read")?;
    let at = locate_end_record(&tail).ok_or(ZipError::InvalidArchive(
        "no end of central directory record",
    ))?;
    let mut fields = Fields::new(&tail[at + 4..], "end of central directory record truncated");
    Ok(EndRecord {
        at: tail_start + at as u64,
        disk: u32::from(fields.u16()?),
        directory_disk: u32::from(fields.u16()?),
        entries_here: u64::from(fields.u16()?),
        entries: u64::from(fields.u16()?),
        size: u64::from(fields.u32()?),
        offset: u64::from(fields.u32()?),
    })
}

/// The last end record signature in `tail` whose comment ends the archive;
/// else the last one whose comment fits (bytes appended after an archive).
fn locate_end_record(tail: &[u8]) -> Option<usize> {
    let signature = END_OF_DIRECTORY.to_le_bytes();
    let last = tail.len().checked_sub(END_OF_DIRECTORY_LEN)?;
    let comment_end = |at: usize| {
        let length = u16::from_le_bytes([tail[at + 20], tail[at + 21]]);
        at + END_OF_DIRECTORY_LEN + usize::from(length)
    };
    let candidates = || (0..=last).rev().filter(|&at| tail[at..at + 4] == signature);
    candidates()
        .find(|&at| comment_end(at) == tail.len())
        .or_else(|| candidates().find(|&at| comment_end(at) <= tail.len()))
}

/// The ZIP64 end of central directory record, if a locator precedes the
/// end record at `end_at`. The record is looked for where the locator
/// says, then right before the locator (an archive with bytes before it).
fn zip64_record<R: Read + Seek>(reader: &mut R, end_at: u64) -> ZipResult<Option<EndRecord>> {
    let Some(locator_at) = end_at.checked_sub(ZIP64_LOCATOR_LEN as u64) else {
        return Ok(None);
    };
    let mut locator = [0; ZIP64_LOCATOR_LEN];
    reader.seek(SeekFrom::Start(locator_at))?;
    read_record(reader, &mut locator, "ZIP64 locator truncated")?;
    let mut fields = Fields::new(&locator, "ZIP64 locator truncated");
    if fields.u32()? != ZIP64_LOCATOR {
        return Ok(None);
    }
    let _record_disk = fields.u32()?;
    let stated_at = fields.u64()?;
    let before_locator = locator_at.checked_sub(ZIP64_END_OF_DIRECTORY_LEN as u64);
    for at in [Some(stated_at), before_locator].into_iter().flatten() {
        let fits = at
            .checked_add(ZIP64_END_OF_DIRECTORY_LEN as u64)
            .is_some_and(|end| end <= locator_at);
        if fits {
            if let Some(record) = read_zip64_record(reader, at)? {
                return Ok(Some(record));
            }
        }
    }
    Err(ZipError::InvalidArchive(
        "no ZIP64 end of central directory record where its locator points",
    ))
}

fn read_zip64_record<R: Read + Seek>(reader: &mut R, at: u64) -> ZipResult<Option<EndRecord>> {
    let mut bytes = [0; ZIP64_END_OF_DIRECTORY_LEN];
    reader.seek(SeekFrom::Start(at))?;
    read_record(
        reader,
        &mut bytes,
        "ZIP64 end of central directory truncated",
    )?;
    let mut fields = Fields::new(&bytes, "ZIP64 end of central directory truncated");
    if fields.u32()? != ZIP64_END_OF_DIRECTORY {
        return Ok(None);
    }
    let _record_size = fields.u64()?;
    let _made_by = fields.u16()?;
    let _needed = fields.u16()?;
    Ok(Some(EndRecord {
        at,
        disk: fields.u32()?,
        directory_disk: fields.u32()?,
        entries_here: fields.u64()?,
        entries: fields.u64()?,
        size: fields.u64()?,
        offset: fields.u64()?,
    }))
}

//! Reading an archive: [`ZipArchive`] holds the central directory's
//! entries, [`ZipFile`] reads one entry's data.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;

use crate::central::{read_entries, Entry};
use crate::compression::CompressionMethod;
use crate::entry_reader::CheckedReader;
use crate::fields::{read_record, Fields};
use crate::name;
use crate::records::{FLAG_ENCRYPTED, LOCAL_HEADER, LOCAL_HEADER_LEN};
use crate::result::{ZipError, ZipResult};
use crate::tail::find_directory;

/// A ZIP archive being read: its entries are known once `new` returns,
/// each is read through [`ZipArchive::by_index`].
pub struct ZipArchive<R> {
    reader: R,
    entries: Vec<Entry>,
    /// Where the central directory starts: no entry's data goes past it.
    data_end: u64,
}

impl<R: Read + Seek> ZipArchive<R> {
    /// Reads the central directory of the archive in `reader`.
    pub fn new(mut reader: R) -> ZipResult<Self> {
        let directory = find_directory(&mut reader)?;
        reader.seek(SeekFrom::Start(directory.start))?;
        let entries = read_entries(&mut reader, &directory)?;
        Ok(ZipArchive {
            reader,
            entries,
            data_end: directory.start,
        })
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at `index`, in the central directory's order, ready to
    /// be read.
    pub fn by_index(&mut self, index: usize) -> ZipResult<ZipFile<'_>> {
        let entry = self.entries.get(index).ok_or(ZipError::FileNotFound)?;
        if entry.flags & FLAG_ENCRYPTED != 0 {
            return Err(ZipError::UnsupportedArchive("encrypted entries"));
        }
        let method = CompressionMethod::from_code(entry.method).ok_or(
            ZipError::UnsupportedArchive("compression methods other than stored and deflate"),
        )?;
        let data_at = data_start(&mut self.reader, entry.header_at)?;
        let data_end = data_at.checked_add(entry.compressed_size);
        if data_end.is_none_or(|end| end > self.data_end) {
            return Err(ZipError::InvalidArchive(
                "an entry's data runs into the central directory",
            ));
        }
        self.reader.seek(SeekFrom::Start(data_at))?;
        let raw = (&mut self.reader as &mut dyn Read).take(entry.compressed_size);
        let reader = CheckedReader::new(raw, method, entry.size, entry.crc32);
        Ok(ZipFile { entry, reader })
    }

    /// The stream the archive was read from.
    pub fn into_inner(self) -> R {
        self.reader
    }
}

/// Where an entry's data starts: after its local header, whose name and
/// extra field may differ in length from the central directory's.
fn data_start<R: Read + Seek>(reader: &mut R, header_at: u64) -> ZipResult<u64> {
    const TRUNCATED: &str = "local header truncated";
    reader.seek(SeekFrom::Start(header_at))?;
    let mut header = [0; LOCAL_HEADER_LEN];
    read_record(reader, &mut header, TRUNCATED)?;
    let mut fields = Fields::new(&header, TRUNCATED);
    if fields.u32()? != LOCAL_HEADER {
        return Err(ZipError::InvalidArchive(
            "no local header where the central directory points",
        ));
    }
    fields.take(22)?;
    let name_length = u64::from(fields.u16()?);
    let extra_length = u64::from(fields.u16()?);
    Ok(header_at + LOCAL_HEADER_LEN as u64 + name_length + extra_length)
}

/// One entry of a [`ZipArchive`]: its name and size, and its data through
/// `Read`. A read fails where the data does not match the entry's size or
/// CRC-32.
pub struct ZipFile<'a> {
    entry: &'a Entry,
    reader: CheckedReader<'a>,
}

impl ZipFile<'_> {
    /// The name the archive stores (a directory's ends with `/`).
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The name as a relative path that cannot leave the directory it is
    /// joined to: no root, drive, `.` or `..`.
    pub fn mangled_name(&self) -> PathBuf {
        name::mangle(&self.entry.name)
    }

    /// The size of the data once decompressed.
    pub fn size(&self) -> u64 {
        self.entry.size
    }

    /// The size of the data as stored.
    pub fn compressed_size(&self) -> u64 {
        self.entry.compressed_size
    }

    pub fn is_dir(&self) -> bool {
        self.entry.name.ends_with('/')
    }
}

impl Read for ZipFile<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.reader.read(buffer)
    }
}

//! Writing an archive: [`ZipWriter`] writes each entry's local header and
//! data as it comes, goes back to fill in the header's CRC-32 and sizes,
//! and ends with the central directory (on `finish`, else when dropped).

use std::io::{self, Seek, SeekFrom, Write};

use flate2::write::DeflateEncoder;
use flate2::Compression;

use crate::compression::CompressionMethod;
use crate::records::{self, EntryRecord, LOCAL_CRC_AT, LOCAL_HEADER_LEN, SATURATED_32};
use crate::result::{ZipError, ZipResult};

/// How [`ZipWriter::start_file`] writes an entry.
#[derive(Clone, Copy, Debug)]
pub struct FileOptions {
    method: CompressionMethod,
    large_file: bool,
}

impl Default for FileOptions {
    /// Deflated, and at most 4 GiB.
    fn default() -> Self {
        FileOptions {
            method: CompressionMethod::Deflated,
            large_file: false,
        }
    }
}

impl FileOptions {
    pub fn compression_method(mut self, method: CompressionMethod) -> Self {
        self.method = method;
        self
    }

    /// Whether the entry may be 4 GiB or more (its local header then
    /// holds its sizes in a ZIP64 extra field). Without it, such an entry
    /// is an error.
    pub fn large_file(mut self, large: bool) -> Self {
        self.large_file = large;
        self
    }
}

/// Where the entry's data goes.
enum Sink<W: Write> {
    Plain(W),
    Deflate(DeflateEncoder<W>),
}

/// The entry being written.
struct Current {
    record: EntryRecord,
    large: bool,
    data_at: u64,
    hasher: crc32fast::Hasher,
}

/// Writes a ZIP archive to `W`; data written through `Write` goes to the
/// entry last started.
pub struct ZipWriter<W: Write + Seek> {
    /// `None` once the archive is finished.
    sink: Option<Sink<W>>,
    current: Option<Current>,
    written: Vec<EntryRecord>,
}

fn finished() -> ZipError {
    ZipError::Io(io::Error::other("the zip archive is already finished"))
}

impl<W: Write + Seek> ZipWriter<W> {
    /// An archive written from `inner`'s current position.
    pub fn new(inner: W) -> Self {
        ZipWriter {
            sink: Some(Sink::Plain(inner)),
            current: None,
            written: Vec::new(),
        }
    }

    /// Ends the entry being written, if any, and starts one named `name`.
    pub fn start_file<S: Into<String>>(&mut self, name: S, options: FileOptions) -> ZipResult<()> {
        let name = name.into();
        if name.len() > usize::from(u16::MAX) {
            return Err(ZipError::InvalidArchive(
                "an entry name longer than 65,535 bytes",
            ));
        }
        let mut inner = self.end_entry()?;
        let header_offset = inner.stream_position()?;
        inner.write_all(&records::local_header(
            &name,
            options.method,
            options.large_file,
        ))?;
        let data_at = inner.stream_position()?;
        self.sink = Some(match options.method {
            CompressionMethod::Stored => Sink::Plain(inner),
            CompressionMethod::Deflated => {
                Sink::Deflate(DeflateEncoder::new(inner, Compression::default()))
            }
        });
        let record = EntryRecord {
            name,
            method: options.method,
            crc32: 0,
            compressed_size: 0,
            size: 0,
            header_offset,
        };
        self.current = Some(Current {
            record,
            large: options.large_file,
            data_at,
            hasher: crc32fast::Hasher::new(),
        });
        Ok(())
    }

    /// Ends the last entry and writes the central directory; the archive
    /// is complete and the writer takes no more entries.
    pub fn finish(&mut self) -> ZipResult<W> {
        let mut inner = self.end_entry()?;
        let directory_start = inner.stream_position()?;
        let mut directory = Vec::new();
        for record in &self.written {
            records::central_header(&mut directory, record);
        }
        inner.write_all(&directory)?;
        let entries = self.written.len() as u64;
        inner.write_all(&records::end_records(
            directory_start,
            directory.len() as u64,
            entries,
        ))?;
        inner.flush()?;
        Ok(inner)
    }

    /// Finishes the entry being written (its compressed data, then its
    /// CRC-32 and sizes in its local header) and hands back the stream,
    /// taken out of `self.sink`, at the end of the entry's data.
    fn end_entry(&mut self) -> ZipResult<W> {
        let mut inner = match self.sink.take().ok_or_else(finished)? {
            Sink::Plain(inner) => inner,
            Sink::Deflate(encoder) => encoder.finish()?,
        };
        let Some(mut current) = self.current.take() else {
            return Ok(inner);
        };
        let end = inner.stream_position()?;
        let record = &mut current.record;
        record.compressed_size = end - current.data_at;
        record.crc32 = current.hasher.finalize();
        let fits = record.size < u64::from(SATURATED_32)
            && record.compressed_size < u64::from(SATURATED_32);
        if !fits && !current.large {
            return Err(ZipError::InvalidArchive(
                "an entry of 4 GiB or more without FileOptions::large_file",
            ));
        }
        let mut fields = Vec::with_capacity(12);
        fields.extend_from_slice(&record.crc32.to_le_bytes());
        if current.large {
            inner.seek(SeekFrom::Start(record.header_offset + LOCAL_CRC_AT))?;
            inner.write_all(&fields)?;
            let extra_data_at = LOCAL_HEADER_LEN + record.name.len() + 4;
            inner.seek(SeekFrom::Start(record.header_offset + extra_data_at as u64))?;
            fields.clear();
            fields.extend_from_slice(&record.size.to_le_bytes());
            fields.extend_from_slice(&record.compressed_size.to_le_bytes());
        } else {
            inner.seek(SeekFrom::Start(record.header_offset + LOCAL_CRC_AT))?;
            fields.extend_from_slice(&(record.compressed_size as u32).to_le_bytes());
            fields.extend_from_slice(&(record.size as u32).to_le_bytes());
        }
        inner.write_all(&fields)?;
        inner.seek(SeekFrom::Start(end))?;
        self.written.push(current.record);
        Ok(inner)
    }
}

impl<W: Write + Seek> Write for ZipWriter<W> {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let Some(current) = self.current.as_mut() else {
            return Err(io::Error::other(
                "no zip entry started: call start_file first",
            ));
        };
        let count = match self.sink.as_mut() {
            Some(Sink::Plain(inner)) => inner.write(buffer)?,
            Some(Sink::Deflate(encoder)) => encoder.write(buffer)?,
            None => return Err(finished().into()),
        };
        current.hasher.update(&buffer[..count]);
        current.record.size += count as u64;
        Ok(count)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.sink.as_mut() {
            Some(Sink::Plain(inner)) => inner.flush(),
            Some(Sink::Deflate(encoder)) => encoder.flush(),
            None => Ok(()),
        }
    }
}

impl<W: Write + Seek> Drop for ZipWriter<W> {
    /// Finishes an archive not finished yet, as zip 0.6 does (tch's
    /// `write_npz` relies on it); an error can only be reported here.
    fn drop(&mut self) {
        if self.sink.is_some() {
            if let Err(error) = self.finish() {
                eprintln!("zip: finishing the archive when its writer was dropped: {error}");
            }
        }
    }
}

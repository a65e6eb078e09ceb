//! An entry's data as it is read: decompressed, counted against the size
//! the central directory states, and checked against its CRC-32 once all
//! of it has been read.

use std::io::{self, Read, Take};

use flate2::read::DeflateDecoder;

use crate::compression::CompressionMethod;

/// The entry's compressed bytes, at most its stated compressed size.
type Raw<'a> = Take<&'a mut dyn Read>;

enum Decoder<'a> {
    Stored(Raw<'a>),
    Deflated(DeflateDecoder<Raw<'a>>),
}

/// Reads an entry's data; a read fails (`InvalidData`) where the data is
/// longer or shorter than the entry's size or its CRC-32 differs.
pub(crate) struct CheckedReader<'a> {
    decoder: Decoder<'a>,
    hasher: crc32fast::Hasher,
    read: u64,
    size: u64,
    crc32: u32,
}

impl<'a> CheckedReader<'a> {
    pub(crate) fn new(raw: Raw<'a>, method: CompressionMethod, size: u64, crc32: u32) -> Self {
        let decoder = match method {
            CompressionMethod::Stored => Decoder::Stored(raw),
            CompressionMethod::Deflated => Decoder::Deflated(DeflateDecoder::new(raw)),
        };
        CheckedReader {
            decoder,
            hasher: crc32fast::Hasher::new(),
            read: 0,
            size,
            crc32,
        }
    }

    fn check_complete(&self) -> io::Result<()> {
        if self.read < self.size {
            return Err(invalid("the entry's data ends before its size"));
        }
        if self.hasher.clone().finalize() != self.crc32 {
            return Err(invalid("the entry's data does not match its CRC-32"));
        }
        Ok(())
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Read for CheckedReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if buffer.is_empty() {
            return Ok(0);
        }
        let count = match &mut self.decoder {
            Decoder::Stored(raw) => raw.read(buffer)?,
            Decoder::Deflated(decoder) => decoder.read(buffer)?,
        };
        if count == 0 {
            self.check_complete()?;
            return Ok(0);
        }
        self.read += count as u64;
        if self.read > self.size {
            return Err(invalid("the entry's data is longer than its size"));
        }
        self.hasher.update(&buffer[..count]);
        // Checked as soon as the last byte is read, for readers that stop
        // at the size (read_exact) rather than at the end of the stream.
        if self.read == self.size {
            self.check_complete()?;
        }
        Ok(count)
    }
}

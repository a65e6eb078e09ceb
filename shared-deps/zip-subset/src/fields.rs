//! Little-endian fields, read off a record's bytes front to back and
//! appended to a record being written. Reading past the end of a record is
//! an error that names it, never a panic.

use std::io::{self, Read};

use crate::result::{ZipError, ZipResult};

/// A cursor over the bytes of one record.
pub(crate) struct Fields<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    /// `what` names the record in the error of a read past its end.
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Fields { bytes, what }
    }

    pub(crate) fn take(&mut self, count: usize) -> ZipResult<&'a [u8]> {
        if count > self.bytes.len() {
            return Err(ZipError::InvalidArchive(self.what));
        }
        let (head, rest) = self.bytes.split_at(count);
        self.bytes = rest;
        Ok(head)
    }

    pub(crate) fn u16(&mut self) -> ZipResult<u16> {
        let bytes = self.take(2)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    pub(crate) fn u32(&mut self) -> ZipResult<u32> {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }

    pub(crate) fn u64(&mut self) -> ZipResult<u64> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    /// The bytes not read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Fills `buffer` from `reader`; a stream that ends first is the invalid
/// archive `what` (a truncated one), not an I/O error.
pub(crate) fn read_record<R: Read + ?Sized>(
    reader: &mut R,
    buffer: &mut [u8],
    what: &'static str,
) -> ZipResult<()> {
    match reader.read_exact(buffer) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            Err(ZipError::InvalidArchive(what))
        }
        Err(error) => Err(ZipError::Io(error)),
    }
}

pub(crate) fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

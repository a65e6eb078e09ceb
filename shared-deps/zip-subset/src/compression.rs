//! The compression methods an entry can use here.

/// How an entry's data is stored. zip 0.6 knows more methods; an archive
/// that uses one of them is refused when that entry is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompressionMethod {
    /// The bytes as they are (method 0).
    Stored,
    /// Raw deflate (method 8), through flate2.
    Deflated,
}

impl CompressionMethod {
    /// The method of an entry's header field, if this crate reads it.
    pub(crate) fn from_code(code: u16) -> Option<Self> {
        match code {
            0 => Some(CompressionMethod::Stored),
            8 => Some(CompressionMethod::Deflated),
            _ => None,
        }
    }

    /// The value of the header field.
    pub(crate) fn code(self) -> u16 {
        match self {
            CompressionMethod::Stored => 0,
            CompressionMethod::Deflated => 8,
        }
    }
}

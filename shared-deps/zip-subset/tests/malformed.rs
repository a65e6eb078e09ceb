//! Archives that are not what they claim: each is an error (a `ZipError`
//! or a failed read), never a panic or an allocation of what a field
//! claims.

mod common;

use std::io::{Cursor, Read};

use common::{noise, read_all, sample_archive};
use zip::result::ZipError;
use zip::write::FileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

fn one_entry(method: CompressionMethod, data: &[u8]) -> Vec<u8> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    writer
        .start_file(
            "entry.bin",
            FileOptions::default().compression_method(method),
        )
        .unwrap();
    std::io::Write::write_all(&mut writer, data).unwrap();
    writer.finish().unwrap().into_inner()
}

/// Where the central directory header of the only entry is.
fn central_header_at(archive: &[u8]) -> usize {
    let signature = 0x0201_4b50u32.to_le_bytes();
    archive
        .windows(4)
        .position(|window| window == signature)
        .unwrap()
}

fn read_entry(archive: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut archive = ZipArchive::new(Cursor::new(archive)).unwrap();
    let mut file = archive.by_index(0).unwrap();
    let mut data = Vec::new();
    file.read_to_end(&mut data)?;
    Ok(data)
}

#[test]
fn a_changed_byte_of_stored_data_fails_its_crc() {
    let mut archive = one_entry(CompressionMethod::Stored, &noise(1, 5000));
    archive[30 + "entry.bin".len() + 2500] ^= 0x10;
    let error = read_entry(&archive).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert!(error.to_string().contains("CRC-32"), "{error}");
}

#[test]
fn a_wrong_crc_in_the_central_directory_is_an_error_deflated_or_stored() {
    for method in [CompressionMethod::Deflated, CompressionMethod::Stored] {
        let mut archive = one_entry(method, &common::text(300));
        let crc_at = central_header_at(&archive) + 16;
        archive[crc_at] ^= 1;
        assert!(read_entry(&archive).is_err(), "{method:?}");

        // Also for a reader that stops at the size rather than at the end.
        let mut zip = ZipArchive::new(Cursor::new(&archive)).unwrap();
        let mut file = zip.by_index(0).unwrap();
        let mut exact = vec![0; file.size() as usize];
        assert!(file.read_exact(&mut exact).is_err(), "{method:?}");
    }
}

#[test]
fn a_size_that_is_not_the_datas_is_an_error() {
    let methods = [CompressionMethod::Deflated, CompressionMethod::Stored];
    for (method, delta) in methods
        .into_iter()
        .flat_map(|method| [(method, 1), (method, -1)])
    {
        let mut archive = one_entry(method, &common::text(300));
        let size_at = central_header_at(&archive) + 24;
        let size = u32::from_le_bytes(archive[size_at..size_at + 4].try_into().unwrap());
        let wrong = (i64::from(size) + delta) as u32;
        archive[size_at..size_at + 4].copy_from_slice(&wrong.to_le_bytes());
        assert!(read_entry(&archive).is_err(), "{method:?} {delta}");
    }
}

#[test]
fn every_truncation_of_an_archive_is_an_error() {
    let archive = one_entry(CompressionMethod::Deflated, &common::text(50));
    let mut three = ZipWriter::new(Cursor::new(Vec::new()));
    for name in ["a", "b", "c"] {
        three.start_file(name, FileOptions::default()).unwrap();
        std::io::Write::write_all(&mut three, &common::text(20)).unwrap();
    }
    let three = three.finish().unwrap().into_inner();
    for archive in [archive, three] {
        for length in 0..archive.len() {
            let result = ZipArchive::new(Cursor::new(&archive[..length]));
            assert!(
                result.is_err(),
                "truncated to {length} of {} bytes",
                archive.len()
            );
        }
    }
}

#[test]
fn data_cut_out_of_the_middle_is_an_error() {
    let archive = sample_archive();
    let mut cut = archive[..1000].to_vec();
    cut.extend_from_slice(&archive[1500..]);
    assert!(read_all(Cursor::new(cut)).is_err());
}

#[test]
fn no_changed_bytes_make_the_reader_panic() {
    let archive = sample_archive();
    let small = one_entry(CompressionMethod::Deflated, &common::text(100));
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..3000 {
        let mut changed = if round % 3 == 0 {
            archive.clone()
        } else {
            small.clone()
        };
        // Most rounds change the central directory and end records, where a
        // change says something other than it should.
        let tail = if round % 2 == 0 {
            changed.len()
        } else {
            200.min(changed.len())
        };
        for _ in 0..1 + next() % 3 {
            let at = changed.len() - 1 - (next() as usize % tail);
            changed[at] ^= 1 << (next() % 8);
        }
        let _ = read_all(Cursor::new(changed));
    }
}

/// An end of central directory record alone, with the given count and
/// directory size (offset 0).
fn end_record(entries: u16, size: u32) -> Vec<u8> {
    let mut out = 0x0605_4b50u32.to_le_bytes().to_vec();
    out.extend_from_slice(&[0, 0, 0, 0]);
    out.extend_from_slice(&entries.to_le_bytes());
    out.extend_from_slice(&entries.to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

#[test]
fn counts_and_sizes_past_the_archive_are_refused_before_allocating() {
    // More entries than the directory's size holds.
    let error = ZipArchive::new(Cursor::new(end_record(u16::MAX, 0)))
        .err()
        .unwrap();
    assert!(matches!(error, ZipError::InvalidArchive(_)), "{error:?}");
    // A directory larger than what precedes the end record.
    let error = ZipArchive::new(Cursor::new(end_record(1, u32::MAX)))
        .err()
        .unwrap();
    assert!(matches!(error, ZipError::InvalidArchive(_)), "{error:?}");

    // A ZIP64 record claiming 2^64 - 1 entries in a directory of 2^63
    // bytes, before a locator and an end record.
    let mut zip64 = 0x0606_4b50u32.to_le_bytes().to_vec();
    zip64.extend_from_slice(&44u64.to_le_bytes());
    zip64.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    zip64.extend_from_slice(&u64::MAX.to_le_bytes());
    zip64.extend_from_slice(&u64::MAX.to_le_bytes());
    zip64.extend_from_slice(&(1u64 << 63).to_le_bytes());
    zip64.extend_from_slice(&0u64.to_le_bytes());
    zip64.extend_from_slice(&0x0706_4b50u32.to_le_bytes());
    zip64.extend_from_slice(&[0, 0, 0, 0]);
    zip64.extend_from_slice(&0u64.to_le_bytes());
    zip64.extend_from_slice(&1u32.to_le_bytes());
    zip64.extend_from_slice(&end_record(u16::MAX, u32::MAX));
    let error = ZipArchive::new(Cursor::new(zip64)).err().unwrap();
    assert!(matches!(error, ZipError::InvalidArchive(_)), "{error:?}");
}

#[test]
fn other_methods_and_encrypted_entries_are_unsupported() {
    let archive = one_entry(CompressionMethod::Stored, b"data");
    let central = central_header_at(&archive);
    for (field, value) in [(10, 12u16), (8, 1u16)] {
        // Method 12 (bzip2) at offset 10, flag bit 0 (encrypted) at 8.
        let mut changed = archive.clone();
        changed[central + field..central + field + 2].copy_from_slice(&value.to_le_bytes());
        let mut zip = ZipArchive::new(Cursor::new(changed)).unwrap();
        let error = zip.by_index(0).err().unwrap();
        assert!(
            matches!(error, ZipError::UnsupportedArchive(_)),
            "{error:?}"
        );
    }
}

#[test]
fn a_central_directory_pointing_at_no_local_header_is_an_error() {
    let mut archive = one_entry(CompressionMethod::Stored, b"data");
    archive[0] = b'X';
    let mut zip = ZipArchive::new(Cursor::new(archive)).unwrap();
    assert!(matches!(
        zip.by_index(0).err().unwrap(),
        ZipError::InvalidArchive(_)
    ));
}

#[test]
fn zip_error_is_what_tch_and_anyhow_need() {
    fn error_for_anyhow<E: std::error::Error + Send + Sync + 'static>(_: &E) {}
    let error = ZipError::from(std::io::Error::other("disk on fire"));
    error_for_anyhow(&error);
    assert_eq!(error.to_string(), "zip: disk on fire");
    assert!(std::error::Error::source(&error).is_some());
    let io: std::io::Error = ZipError::InvalidArchive("what").into();
    assert_eq!(io.kind(), std::io::ErrorKind::InvalidData);
}

//! Archives our writer writes, read back by our reader.

mod common;

use std::fs::File;
use std::io::{Cursor, Read, Write};

use common::{assert_samples, noise, read_all, sample_archive, samples, write_samples};
use zip::result::ZipError;
use zip::write::FileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

#[test]
fn stored_and_deflated_entries_read_back_as_written() {
    let archive = sample_archive();
    let entries = read_all(Cursor::new(&archive)).unwrap();
    assert_samples(&entries, &samples());

    let mut archive = ZipArchive::new(Cursor::new(&archive)).unwrap();
    let text = archive.by_index(5).unwrap();
    assert_eq!(text.name(), "include/text.h");
    assert!(
        text.compressed_size() * 10 < text.size(),
        "text is deflated"
    );
    drop(text);
    let stored = archive.by_index(3).unwrap();
    assert_eq!(stored.compressed_size(), stored.size());
    assert_eq!(
        stored.mangled_name(),
        std::path::PathBuf::from("lib/libtorch_cpu.so")
    );
}

#[test]
fn an_empty_archive_has_no_entries() {
    let archive = ZipWriter::new(Cursor::new(Vec::new()))
        .finish()
        .unwrap()
        .into_inner();
    assert_eq!(
        archive.len(),
        22,
        "only the end of central directory record"
    );
    let archive = ZipArchive::new(Cursor::new(archive)).unwrap();
    assert!(archive.is_empty());
}

#[test]
fn dropping_the_writer_finishes_the_archive_as_tch_write_npz_expects() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("tensors.npz");
    {
        let mut zip = ZipWriter::new(File::create(&path).unwrap());
        let options = FileOptions::default().compression_method(CompressionMethod::Stored);
        for (name, data) in [("a", noise(1, 1000)), ("b", noise(2, 5))] {
            zip.start_file(format!("{name}.npy"), options).unwrap();
            zip.write_all(&data).unwrap();
        }
    }
    let entries = read_all(File::open(&path).unwrap()).unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0], ("a.npy".to_string(), noise(1, 1000)));
    assert_eq!(entries[1], ("b.npy".to_string(), noise(2, 5)));
}

#[test]
fn large_file_entries_carry_their_sizes_in_a_zip64_extra_field() {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = FileOptions::default().large_file(true);
    writer.start_file("big", options).unwrap();
    writer.write_all(&common::text(1000)).unwrap();
    writer
        .start_file(
            "big-stored",
            options.compression_method(CompressionMethod::Stored),
        )
        .unwrap();
    writer.write_all(&noise(3, 1000)).unwrap();
    let archive = writer.finish().unwrap().into_inner();

    // The local header: version 4.5, both sizes 0xFFFFFFFF, the extra
    // field 0x0001 of 16 bytes with the uncompressed size first.
    assert_eq!(&archive[4..6], &[45, 0]);
    assert_eq!(&archive[18..26], &[0xff; 8]);
    assert_eq!(&archive[33..37], &[1, 0, 16, 0]);
    let size = u64::from_le_bytes(archive[37..45].try_into().unwrap());
    assert_eq!(size, common::text(1000).len() as u64);

    let entries = read_all(Cursor::new(archive)).unwrap();
    assert_eq!(entries[0].1, common::text(1000));
    assert_eq!(entries[1].1, noise(3, 1000));
}

fn many_empty_entries(count: usize) -> Vec<u8> {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let options = FileOptions::default().compression_method(CompressionMethod::Stored);
    for index in 0..count {
        writer.start_file(format!("e{index}"), options).unwrap();
    }
    writer.start_file("last", options).unwrap();
    writer.write_all(b"the last one").unwrap();
    writer.finish().unwrap().into_inner()
}

#[test]
fn more_than_65535_entries_are_counted_in_the_zip64_end_records() {
    let archive = many_empty_entries(70_000);
    let zip64_end = 0x0606_4b50u32.to_le_bytes();
    assert!(archive.windows(4).any(|window| window == zip64_end));
    check_many(&archive, 70_001);
}

fn check_many(archive: &[u8], count: usize) {
    let mut archive = ZipArchive::new(Cursor::new(archive)).unwrap();
    assert_eq!(archive.len(), count);
    assert_eq!(archive.by_index(69_999).unwrap().name(), "e69999");
    let mut last = archive.by_index(count - 1).unwrap();
    let mut data = String::new();
    last.read_to_string(&mut data).unwrap();
    assert_eq!(data, "the last one");
}

#[test]
fn an_archive_after_other_bytes_is_read_with_its_offsets_shifted() {
    // A self-extracting archive: the offsets the archive states count from
    // its own start, not the file's.
    for (archive, count) in [(sample_archive(), 0), (many_empty_entries(70_000), 70_001)] {
        let mut shifted = noise(5, 1234);
        shifted.extend_from_slice(&archive);
        if count == 0 {
            assert_samples(&read_all(Cursor::new(shifted)).unwrap(), &samples());
        } else {
            check_many(&shifted, count);
        }
    }
}

#[test]
fn an_index_past_the_last_entry_is_file_not_found() {
    let mut archive = ZipArchive::new(Cursor::new(sample_archive())).unwrap();
    let error = archive.by_index(samples().len()).err().unwrap();
    assert!(matches!(error, ZipError::FileNotFound), "{error:?}");
}

#[test]
fn writing_before_an_entry_or_after_finishing_is_an_error() {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    assert!(writer.write_all(b"x").is_err());
    writer.finish().unwrap();
    let stored = FileOptions::default().compression_method(CompressionMethod::Stored);
    assert!(writer.start_file("late", stored).is_err());
    assert!(writer.finish().is_err());
    assert!(writer.write_all(b"x").is_err());
}

#[test]
fn a_name_longer_than_its_field_is_refused() {
    let mut writer = ZipWriter::new(Cursor::new(Vec::new()));
    let name = "n".repeat(70_000);
    assert!(matches!(
        writer.start_file(name, FileOptions::default()),
        Err(ZipError::InvalidArchive(_))
    ));
    writer.start_file("after", FileOptions::default()).unwrap();
    writer.write_all(b"still fine").unwrap();
    let archive = writer.finish().unwrap().into_inner();
    assert_eq!(
        read_all(Cursor::new(archive)).unwrap(),
        [("after".to_string(), b"still fine".to_vec())]
    );
}

#[test]
fn the_archive_starts_where_the_stream_is() {
    let mut stream = Cursor::new(b"prefix".to_vec());
    stream.set_position(6);
    let archive = write_samples(stream, &samples()).into_inner();
    assert_eq!(&archive[..6], b"prefix");
    assert_samples(&read_all(Cursor::new(archive)).unwrap(), &samples());
}

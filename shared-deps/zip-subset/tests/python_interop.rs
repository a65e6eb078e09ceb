//! Interop with Python's `zipfile`: its archives (deflated, stored, ZIP64)
//! read by our reader, ours read and CRC-checked by it, byte for byte.

mod common;

use std::fs::File;
use std::io::Cursor;
use std::path::Path;

use common::{assert_samples, python, read_all, samples, write_sample_files, write_samples};
use zip::write::FileOptions;
use zip::{CompressionMethod, ZipWriter};

/// Zips the sample files under argv[1] into argv[2], each with the method
/// that follows its name in argv[4:], then a directory entry and a
/// comment. argv[3]
/// "zip64" forces ZIP64 everywhere: each local header (force_zip64), and,
/// with zipfile's limits lowered, the central directory's sizes and
/// offsets and the end records.
const PYTHON_WRITES: &str = r#"
import os, sys, zipfile
root, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "zip64":
    zipfile.ZIP64_LIMIT = 1 << 10
    zipfile.ZIP_FILECOUNT_LIMIT = 3
with zipfile.ZipFile(out, "w") as zf:
    for name, method in zip(sys.argv[4::2], sys.argv[5::2]):
        method = zipfile.ZIP_DEFLATED if method == "deflated" else zipfile.ZIP_STORED
        info = zipfile.ZipInfo(name)
        info.compress_type = method
        with open(os.path.join(root, name), "rb") as source, zf.open(info, "w", force_zip64=(mode == "zip64")) as entry:
            entry.write(source.read())
    zf.writestr("a-directory/", b"")
    zf.comment = b"a comment after the end record"
"#;

fn python_zip(directory: &Path, mode: &str) -> Vec<u8> {
    let out = directory.join(format!("python-{mode}.zip"));
    let mut args = vec![directory, &out, Path::new(mode)];
    for sample in samples() {
        let method = if sample.method == CompressionMethod::Stored {
            "stored"
        } else {
            "deflated"
        };
        args.extend([Path::new(sample.name), Path::new(method)]);
    }
    python(PYTHON_WRITES, &args);
    std::fs::read(out).unwrap()
}

fn check_python_archive(mode: &str) {
    let directory = tempfile::tempdir().unwrap();
    write_sample_files(directory.path(), &samples());
    let archive = python_zip(directory.path(), mode);
    let zip64_end = 0x0606_4b50u32.to_le_bytes();
    let has_zip64_end = archive.windows(4).any(|window| window == zip64_end);
    assert_eq!(has_zip64_end, mode == "zip64");
    let mut entries = read_all(Cursor::new(&archive)).unwrap();
    let directory_entry = entries.pop().unwrap();
    assert_eq!(directory_entry, ("a-directory/".to_string(), Vec::new()));
    assert_samples(&entries, &samples());
}

#[test]
fn python_archives_deflated_and_stored_are_read_byte_for_byte() {
    check_python_archive("plain");
}

#[test]
fn python_zip64_archives_are_read_byte_for_byte() {
    check_python_archive("zip64");
}

/// Opens argv[1], has zipfile check every entry's CRC-32 (testzip), and
/// compares each entry with the file of that name under argv[2]; prints
/// the number of entries.
const PYTHON_READS: &str = r#"
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    assert zf.testzip() is None, zf.testzip()
    for info in zf.infolist():
        if len(sys.argv) > 2:
            with open(os.path.join(sys.argv[2], info.filename), "rb") as source:
                assert zf.read(info) == source.read(), info.filename
    print(len(zf.infolist()))
"#;

#[test]
fn our_archives_are_read_by_python_byte_for_byte() {
    let directory = tempfile::tempdir().unwrap();
    write_sample_files(directory.path(), &samples());
    let path = directory.path().join("ours.zip");
    write_samples(File::create(&path).unwrap(), &samples());
    let count = python(PYTHON_READS, &[&path, directory.path()]);
    assert_eq!(count.trim(), samples().len().to_string());
}

#[test]
fn our_zip64_archives_are_read_by_python() {
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("zip64.zip");
    let mut writer = ZipWriter::new(File::create(&path).unwrap());
    let stored = FileOptions::default().compression_method(CompressionMethod::Stored);
    for index in 0..70_000 {
        writer.start_file(format!("e{index}"), stored).unwrap();
    }
    std::io::Write::write_all(&mut writer, b"data of the last entry").unwrap();
    writer
        .start_file("large-file", FileOptions::default().large_file(true))
        .unwrap();
    std::io::Write::write_all(&mut writer, &common::text(1000)).unwrap();
    drop(writer);
    let count = python(PYTHON_READS, &[&path]);
    assert_eq!(count.trim(), "70001");
}

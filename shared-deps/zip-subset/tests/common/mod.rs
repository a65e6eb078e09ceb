//! What the tests share: sample entries, writing them with our writer,
//! reading an archive back whole, running Python's `zipfile`.

#![allow(dead_code)]

use std::io::{Cursor, Read, Seek, Write};
use std::path::Path;
use std::process::Command;

use zip::write::FileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

/// Bytes that do not compress: xorshift64 from `seed`.
pub fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..length)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Bytes that do: numbered lines of text.
pub fn text(lines: usize) -> Vec<u8> {
    (0..lines)
        .flat_map(|line| format!("line {line}: the quick brown fox\n").into_bytes())
        .collect()
}

/// An entry to write: name, data, method.
pub struct Sample {
    pub name: &'static str,
    pub data: Vec<u8>,
    pub method: CompressionMethod,
}

/// Entries of every kind the tests write: empty, small, larger than one
/// read buffer, compressible and not, stored and deflated, in folders,
/// a name that is not ASCII.
pub fn samples() -> Vec<Sample> {
    use CompressionMethod::{Deflated, Stored};
    vec![
        Sample {
            name: "empty.txt",
            data: Vec::new(),
            method: Stored,
        },
        Sample {
            name: "empty-deflated.txt",
            data: Vec::new(),
            method: Deflated,
        },
        Sample {
            name: "small.txt",
            data: b"hello, zip".to_vec(),
            method: Deflated,
        },
        Sample {
            name: "lib/libtorch_cpu.so",
            data: noise(7, 300_000),
            method: Stored,
        },
        Sample {
            name: "lib/noise-deflated.bin",
            data: noise(11, 100_000),
            method: Deflated,
        },
        Sample {
            name: "include/text.h",
            data: text(40_000),
            method: Deflated,
        },
        Sample {
            name: "na\u{ef}ve/\u{fc}ber.npy",
            data: text(10),
            method: Stored,
        },
    ]
}

/// Writes `samples` with our writer into `out` and finishes it.
pub fn write_samples<W: Write + Seek>(out: W, samples: &[Sample]) -> W {
    let mut writer = ZipWriter::new(out);
    for sample in samples {
        let options = FileOptions::default().compression_method(sample.method);
        writer.start_file(sample.name, options).unwrap();
        // In pieces, as a caller writing a tensor would.
        for piece in sample.data.chunks(40_000) {
            writer.write_all(piece).unwrap();
        }
    }
    writer.finish().unwrap()
}

/// The archive's samples, in memory.
pub fn sample_archive() -> Vec<u8> {
    write_samples(Cursor::new(Vec::new()), &samples()).into_inner()
}

/// Every entry's name and data, read with our reader.
pub fn read_all<R: Read + Seek>(reader: R) -> zip::result::ZipResult<Vec<(String, Vec<u8>)>> {
    let mut archive = ZipArchive::new(reader)?;
    let mut entries = Vec::new();
    for index in 0..archive.len() {
        let mut file = archive.by_index(index)?;
        let mut data = Vec::new();
        file.read_to_end(&mut data)?;
        assert_eq!(data.len() as u64, file.size(), "{}", file.name());
        entries.push((file.name().to_string(), data));
    }
    Ok(entries)
}

/// Asserts that `entries` are `samples`, in order.
pub fn assert_samples(entries: &[(String, Vec<u8>)], samples: &[Sample]) {
    assert_eq!(entries.len(), samples.len());
    for ((name, data), sample) in entries.iter().zip(samples) {
        assert_eq!(name, sample.name);
        assert!(data == &sample.data, "{name}: data differs");
    }
}

/// Writes each sample's data as a file under `directory`.
pub fn write_sample_files(directory: &Path, samples: &[Sample]) {
    for sample in samples {
        let path = directory.join(sample.name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &sample.data).unwrap();
    }
}

/// Runs `script` with python3 and `args`; its standard output.
pub fn python(script: &str, args: &[&Path]) -> String {
    let output = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs (the interop tests need it)");
    assert!(
        output.status.success(),
        "python3 failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

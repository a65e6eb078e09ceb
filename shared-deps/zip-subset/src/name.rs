//! Entry names: decoded from the bytes an archive stores, and made into a
//! relative path that stays under the directory it is joined to.

use std::path::{Component, Path, PathBuf};

use crate::result::{ZipError, ZipResult};

/// Bytes 0x80 to 0xFF of code page 437, the encoding of a name whose
/// UTF-8 flag is not set (APPNOTE, appendix D); 0x00 to 0x7F are ASCII.
const CP437_HIGH: &str = concat!(
    "ÇüéâäàåçêëèïîìÄÅ",
    "ÉæÆôöòûùÿÖÜ¢£¥₧ƒ",
    "áíóúñÑªº¿⌐¬½¼¡«»",
    "░▒▓│┤╡╢╖╕╣║╗╝╜╛┐",
    "└┴┬├─┼╞╟╚╔╩╦╠═╬╧",
    "╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀",
    "αßΓπΣσµτΦΘΩδ∞φε∩",
    "≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u{00a0}",
);

/// The name an entry stores: UTF-8 when its flag says so, else code page
/// 437.
pub(crate) fn decode(raw: &[u8], utf8: bool) -> ZipResult<String> {
    if utf8 || raw.is_ascii() {
        return String::from_utf8(raw.to_vec())
            .map_err(|_| ZipError::InvalidArchive("an entry name flagged UTF-8 is not UTF-8"));
    }
    Ok(raw
        .iter()
        .map(|&byte| match byte {
            0..=0x7f => char::from(byte),
            _ => CP437_HIGH
                .chars()
                .nth(usize::from(byte - 0x80))
                .unwrap_or('?'),
        })
        .collect())
}

/// `name` as a relative path: up to its first NUL, split at `/` and at
/// `\` (the separator of archives made on Windows, which APPNOTE
/// forbids), every root, drive, `.` and `..` dropped.
pub(crate) fn mangle(name: &str) -> PathBuf {
    let name = name.split('\0').next().unwrap_or_default();
    let mut path = PathBuf::new();
    for part in name.split(['/', '\\']) {
        for component in Path::new(part).components() {
            if let Component::Normal(normal) = component {
                path.push(normal);
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mangle_drops_parent_directories_roots_and_dots() {
        assert_eq!(mangle("../../etc/passwd"), PathBuf::from("etc/passwd"));
        assert_eq!(mangle("/abs/x.txt"), PathBuf::from("abs/x.txt"));
        assert_eq!(mangle("a/./b/../c"), PathBuf::from("a/b/c"));
        assert_eq!(mangle("..\\..\\windows\\x"), PathBuf::from("windows/x"));
        assert_eq!(mangle("dir/"), PathBuf::from("dir"));
        assert_eq!(mangle("a\0/../../b"), PathBuf::from("a"));
        assert_eq!(mangle(".."), PathBuf::new());
    }

    #[test]
    fn names_without_the_utf8_flag_are_code_page_437() {
        assert_eq!(decode(b"plain/name.txt", false).unwrap(), "plain/name.txt");
        assert_eq!(
            decode(&[0x80, 0x81, b'x', 0xe1, 0xff], false).unwrap(),
            "\u{c7}\u{fc}x\u{df}\u{a0}"
        );
        assert_eq!(decode("caf\u{e9}".as_bytes(), true).unwrap(), "caf\u{e9}");
        assert!(decode(&[0xff, 0xfe], true).is_err());
    }
}

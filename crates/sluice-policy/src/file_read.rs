//! Reading the files an operator points Sluice at: the config, keys files
//! and Envoy's YAML.
//!
//! A careless operator (or a broken deploy) can point a config's path at
//! something that is not a file: `/dev/zero`, a FIFO nobody writes, a
//! directory, a file of gigabytes. Each read here is bounded:
//!
//! - symbolic links are followed (a Kubernetes config map is a chain of
//!   them), but the target must be a regular file;
//! - the file is opened without blocking (`O_NONBLOCK`: opening a FIFO
//!   with no writer would otherwise wait forever), and checked again once
//!   open, so a file swapped between the two checks is caught;
//! - at most `limit` bytes are read: a larger file is refused, and no more
//!   than `limit + 1` bytes are ever held.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most bytes a config file (TOML or YAML) may hold: far more than any
/// config, far less than memory.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The most bytes a keys file may hold: room for a few million keys.
pub const MAX_KEYS_FILE_BYTES: u64 = 256 << 20;

/// The text of the regular file at `path` (links followed), of at most
/// `limit` bytes. A missing file keeps its [`io::ErrorKind::NotFound`]; a
/// target that is not a regular file, a file over `limit` bytes, or one
/// that is not UTF-8 is an [`io::ErrorKind::InvalidData`] error that says
/// so.
pub fn read_text(path: &Path, limit: u64) -> io::Result<String> {
    let bytes = read_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".to_owned()))
}

/// The bytes of the regular file at `path` (links followed), of at most
/// `limit` bytes; errors as [`read_text`]'s.
pub fn read_bytes(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    // Checked before opening: a FIFO or device is never opened at all.
    regular(&std::fs::metadata(path)?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    regular(&meta)?;
    if meta.len() > limit {
        return Err(too_large(limit));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

/// `Ok` for a regular file; an error naming what it is otherwise.
fn regular(meta: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        return Ok(());
    }
    let what = if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    Err(invalid(format!("it is {what}, not a regular file")))
}

fn too_large(limit: u64) -> io::Error {
    invalid(format!("it is larger than {limit} bytes"))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-file-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    #[test]
    fn a_regular_file_through_a_link_is_read() {
        let file = temp("config.toml");
        std::fs::write(&file, "x = 1\n").unwrap();
        let link = temp("link.toml");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_text(&link, 100).unwrap(), "x = 1\n");
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let zero = read_text(Path::new("/dev/zero"), 100).unwrap_err();
        assert!(zero.to_string().contains("a device"), "{zero}");
        let link = temp("zero.toml");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(
            read_text(&link, 100)
                .unwrap_err()
                .to_string()
                .contains("a device")
        );
        let fifo = temp("fifo.toml");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(
            read_text(&fifo, 100)
                .unwrap_err()
                .to_string()
                .contains("a FIFO")
        );
        let dir = read_text(&std::env::temp_dir(), 100).unwrap_err();
        assert!(dir.to_string().contains("a directory"), "{dir}");
    }

    #[test]
    fn a_file_over_the_limit_is_refused_and_one_at_it_is_read() {
        let file = temp("big.toml");
        std::fs::write(&file, "a".repeat(101)).unwrap();
        let e = read_text(&file, 100).unwrap_err();
        assert!(e.to_string().contains("larger than 100 bytes"), "{e}");
        std::fs::write(&file, "a".repeat(100)).unwrap();
        assert_eq!(read_text(&file, 100).unwrap().len(), 100);
        let missing = read_text(&temp("missing.toml"), 100).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }
}

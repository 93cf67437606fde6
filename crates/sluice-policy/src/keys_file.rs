//! Files of key-to-plan assignments: `[client] keys_file` (written by
//! people) and `[client] runtime_keys_file` (written by Sluice).
//!
//! Two formats, chosen by the file's extension:
//!
//! - `.csv`: one `key,plan` per line; blank lines and lines starting with
//!   `#` are skipped, and so is a first line `key,plan`. The plan is after
//!   the *last* comma, so a key may contain commas.
//! - `.toml`: `"key" = "plan"` lines (a flat table).
//!
//! Errors name the file, line and column.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::config::{ConfigError, Source};

/// One assignment, with where its plan is written (for errors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    /// The client key.
    pub key: String,
    /// The plan's name.
    pub plan: String,
    /// The byte range of the plan in the file.
    pub plan_span: Range<usize>,
}

/// A parsed keys file.
#[derive(Debug, Clone)]
pub struct KeysFile {
    /// The file and its text.
    pub source: Source,
    /// Its entries, in file order.
    pub entries: Vec<KeyEntry>,
}

/// The format of a keys file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysFormat {
    /// `key,plan` lines.
    Csv,
    /// `"key" = "plan"`.
    Toml,
}

impl KeysFormat {
    /// The format of a path, by its extension.
    pub fn of(path: &Path) -> Option<Self> {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("csv") => Some(Self::Csv),
            Some(e) if e.eq_ignore_ascii_case("toml") => Some(Self::Toml),
            _ => None,
        }
    }
}

impl KeysFile {
    /// Reads and parses a keys file. A missing file is an error unless
    /// `missing_ok`, when it reads as empty.
    pub fn read(path: &Path, missing_ok: bool) -> Result<Self, ConfigError> {
        let text = match crate::file_read::read_text(path, crate::file_read::MAX_KEYS_FILE_BYTES) {
            Ok(t) => t,
            Err(e) if missing_ok && e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(ConfigError {
                    file: path.to_owned(),
                    line: 0,
                    column: 0,
                    message: format!("cannot read the keys file: {e}"),
                });
            }
        };
        Self::parse(path, text)
    }

    /// Parses a keys file's text; `path` names it in errors and picks the
    /// format.
    pub fn parse(path: &Path, text: String) -> Result<Self, ConfigError> {
        let source = Source {
            file: path.to_owned(),
            text,
        };
        let entries = match KeysFormat::of(path) {
            Some(KeysFormat::Csv) => parse_csv(&source)?,
            Some(KeysFormat::Toml) => parse_toml(&source)?,
            None => {
                return Err(source.error_at(
                    None,
                    "a keys file must end in `.csv` (key,plan lines) or `.toml` (\"key\" = \"plan\")",
                ));
            }
        };
        Ok(Self { source, entries })
    }
}

fn parse_csv(source: &Source) -> Result<Vec<KeyEntry>, ConfigError> {
    let mut entries = Vec::new();
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    let mut offset = 0;
    let mut first = true;
    for raw in source.text.split_inclusive('\n') {
        let start = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let header = first && trimmed.replace(' ', "").eq_ignore_ascii_case("key,plan");
        first = false;
        if header {
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        let Some((key, plan)) = line.rsplit_once(',') else {
            return Err(source.error_at(
                Some(start + lead..start + lead),
                "expected `key,plan` (a key, a comma, a plan name)",
            ));
        };
        let key_text = key.trim();
        let plan_text = plan.trim();
        let plan_start = start + key.len() + 1 + (plan.len() - plan.trim_start().len());
        if key_text.is_empty() {
            return Err(source.error_at(Some(start + lead..start + lead), "empty key"));
        }
        if plan_text.is_empty() {
            return Err(source.error_at(
                Some(plan_start..plan_start),
                "empty plan name after the comma",
            ));
        }
        if seen.insert(key_text.to_owned(), ()).is_some() {
            return Err(source.error_at(
                Some(start + lead..start + lead),
                "this key is assigned twice in the file",
            ));
        }
        entries.push(KeyEntry {
            key: key_text.to_owned(),
            plan: plan_text.to_owned(),
            plan_span: plan_start..plan_start + plan_text.len(),
        });
    }
    Ok(entries)
}

fn parse_toml(source: &Source) -> Result<Vec<KeyEntry>, ConfigError> {
    let table: BTreeMap<String, Spanned<String>> = toml::from_str(&source.text).map_err(|e| {
        source.error_at(
            Some(e.span().unwrap_or(0..0)),
            format!(
                "{} (expected `\"key\" = \"plan\"` lines)",
                e.message().trim()
            ),
        )
    })?;
    let mut entries: Vec<KeyEntry> = table
        .into_iter()
        .map(|(key, plan)| KeyEntry {
            key,
            plan_span: plan.span(),
            plan: plan.into_inner(),
        })
        .collect();
    entries.sort_by_key(|e| e.plan_span.start);
    Ok(entries)
}

/// Writes assignments to `path` atomically: into a temporary file in the
/// same folder, flushed to disk, then renamed over `path`. A reader sees
/// the old file or the new one, never a half-written one. The format is
/// chosen by the extension (`.toml` or `.csv`).
pub fn write_atomically(
    path: &Path,
    assignments: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    use std::io::Write;
    let text = match KeysFormat::of(path) {
        Some(KeysFormat::Csv) => {
            let mut t = String::from("# Written by Sluice (POST /admin/keys/save).\nkey,plan\n");
            for (key, plan) in assignments {
                if key.contains(['\n', '\r']) || key.trim_start().starts_with('#') {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "a key cannot be written to a CSV file (use a .toml file)",
                    ));
                }
                t.push_str(&format!("{key},{plan}\n"));
            }
            t
        }
        _ => {
            let body = toml::to_string(assignments)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
            format!("# Written by Sluice (POST /admin/keys/save).\n{body}")
        }
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let name = path
        .file_name()
        .map_or_else(|| "keys".into(), |n| n.to_string_lossy().into_owned());
    let tmp: PathBuf = dir
        .unwrap_or(Path::new("."))
        .join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_header_comments_and_commas_in_keys() {
        let f = KeysFile::parse(
            Path::new("k.csv"),
            "# keys\nkey,plan\nalice,pro\n\n  a,b , enterprise \n".into(),
        )
        .unwrap();
        let pairs: Vec<(&str, &str)> = f
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.plan.as_str()))
            .collect();
        assert_eq!(pairs, [("alice", "pro"), ("a,b", "enterprise")]);
        let e = f.source.error_at(Some(f.entries[1].plan_span.clone()), "x");
        assert_eq!((e.line, e.column), (5, 9));
    }

    #[test]
    fn csv_errors_name_line_and_column() {
        let e = KeysFile::parse(Path::new("k.csv"), "alice,pro\n  bob\n".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k.csv:2:3: expected `key,plan` (a key, a comma, a plan name)"
        );
        let e = KeysFile::parse(Path::new("k.csv"), "alice,pro\nalice,free\n".into()).unwrap_err();
        assert_eq!((e.line, e.column), (2, 1));
        let e = KeysFile::parse(Path::new("k.csv"), "alice, \n".into()).unwrap_err();
        assert!(e.to_string().starts_with("k.csv:1:8: empty plan"), "{e}");
        let e = KeysFile::parse(Path::new("k.txt"), String::new()).unwrap_err();
        assert!(e.to_string().contains(".csv"), "{e}");
    }

    #[test]
    fn toml_entries_and_errors() {
        let f = KeysFile::parse(
            Path::new("k.toml"),
            "alice = \"pro\"\n\"b c\" = \"free\"\n".into(),
        )
        .unwrap();
        assert_eq!(f.entries.len(), 2);
        assert_eq!(f.entries[1].key, "b c");
        let e =
            KeysFile::parse(Path::new("k.toml"), "alice = \"pro\"\nbob = 3\n".into()).unwrap_err();
        assert_eq!((e.line, e.column), (2, 7), "{e}");
    }

    #[test]
    fn writes_atomically_and_reads_back() {
        let dir = std::env::temp_dir().join(format!("sluice-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["rt.toml", "rt.csv"] {
            let path = dir.join(name);
            let mut m = BTreeMap::new();
            m.insert("alice".to_owned(), "pro".to_owned());
            m.insert(
                "key with \"quotes\", and commas".to_owned(),
                "free".to_owned(),
            );
            write_atomically(&path, &m).unwrap();
            let back = KeysFile::read(&path, false).unwrap();
            let got: BTreeMap<String, String> =
                back.entries.into_iter().map(|e| (e.key, e.plan)).collect();
            assert_eq!(got, m, "{name}");
        }
        assert!(
            KeysFile::read(&dir.join("missing.toml"), true)
                .unwrap()
                .entries
                .is_empty()
        );
        assert!(KeysFile::read(&dir.join("missing.toml"), false).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

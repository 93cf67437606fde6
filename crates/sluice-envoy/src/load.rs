//! Where configs come from: one YAML file, several, or a directory of
//! them in the reference server's runtime layout (`.../ratelimit/config/`),
//! merged by domain. A domain defined by two files is an error, as in the
//! reference server.
//!
//! A directory is read recursively, in name order, skipping entries whose
//! name starts with `.` (editors' swap files, the temporary files of an
//! atomic rename). Everything read is bounded: at most [`MAX_FILES`] files
//! of at most [`MAX_FILE_BYTES`] each, [`MAX_DEPTH`] directories deep.

use std::path::{Path, PathBuf};

use sluice_store::seam::Store;

use crate::compile::{Loading, RulesError, compile_into};
use crate::rules::Rules;

/// The most files one load reads.
pub const MAX_FILES: usize = 1024;

/// The largest config file read, in bytes.
pub const MAX_FILE_BYTES: u64 = sluice_policy::file_read::MAX_CONFIG_BYTES;

/// The deepest directory read below a configured one.
pub const MAX_DEPTH: usize = 8;

/// The text of every config file of a load, in load order, each with its
/// name: what a reload compares with the last load, and compiles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Texts(pub Vec<(String, String)>);

impl Texts {
    /// Reads every config at `paths` (files, or directories of them).
    pub fn read(paths: &[PathBuf]) -> Result<Self, RulesError> {
        let mut files = Vec::new();
        for path in paths {
            collect(path, 0, &mut files)?;
        }
        let mut texts = Vec::with_capacity(files.len());
        for file in &files {
            let name = file.display().to_string();
            let text = read(file, &name)?;
            texts.push((name, text));
        }
        Ok(Self(texts))
    }
}

impl Rules {
    /// Loads every config at `paths` (files, or directories of them),
    /// creating each rule's limit in `store`.
    pub fn load_all(
        paths: &[PathBuf],
        store: &dyn Store,
        loading: &Loading,
    ) -> Result<Self, RulesError> {
        Self::compile_all(&Texts::read(paths)?, store, loading)
    }

    /// Compiles texts read with [`Texts::read`].
    pub fn compile_all(
        texts: &Texts,
        store: &dyn Store,
        loading: &Loading,
    ) -> Result<Self, RulesError> {
        let mut rules = Rules::default();
        for (name, text) in &texts.0 {
            compile_into(&mut rules, name, text, store, loading)?;
        }
        // Files that define nothing are a mistake or a set caught half
        // written: they must not switch every limit off.
        if rules.domains.is_empty() {
            let files: Vec<&str> = texts.0.iter().map(|(n, _)| n.as_str()).collect();
            return Err(RulesError::Files {
                file: if files.is_empty() {
                    "(no file)".to_owned()
                } else {
                    files.join(", ")
                },
                message: "the configs define no domain; every request would pass unlimited".into(),
            });
        }
        Ok(rules)
    }

    /// Loads one file, or a directory of them.
    pub fn load(path: &Path, store: &dyn Store, loading: &Loading) -> Result<Self, RulesError> {
        Self::load_all(&[path.to_owned()], store, loading)
    }

    /// Compiles one file's YAML text; `file` names it in errors.
    pub fn from_yaml(
        file: &str,
        text: &str,
        store: &dyn Store,
        loading: &Loading,
    ) -> Result<Self, RulesError> {
        let mut rules = Rules::default();
        compile_into(&mut rules, file, text, store, loading)?;
        Ok(rules)
    }
}

/// The files at `path`, a file or a directory `depth` below a configured
/// one, appended to `files` in name order.
fn collect(path: &Path, depth: usize, files: &mut Vec<PathBuf>) -> Result<(), RulesError> {
    let name = || path.display().to_string();
    let meta = std::fs::metadata(path).map_err(|error| RulesError::Read {
        file: name(),
        error,
    })?;
    if !meta.is_dir() {
        if files.len() >= MAX_FILES {
            return Err(RulesError::Files {
                file: name(),
                message: format!("more than {MAX_FILES} config files"),
            });
        }
        files.push(path.to_owned());
        return Ok(());
    }
    if depth > MAX_DEPTH {
        return Err(RulesError::Files {
            file: name(),
            message: format!("directories nested more than {MAX_DEPTH} deep"),
        });
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|error| RulesError::Read {
            file: name(),
            error,
        })?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    entries.sort();
    for entry in entries {
        collect(&entry, depth + 1, files)?;
    }
    Ok(())
}

/// A config file's text: a regular file (links followed) of at most
/// [`MAX_FILE_BYTES`] (see [`sluice_policy::file_read`]).
fn read(file: &Path, name: &str) -> Result<String, RulesError> {
    sluice_policy::file_read::read_text(file, MAX_FILE_BYTES).map_err(|error| RulesError::Read {
        file: name.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-load-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_file_too_large_to_be_a_config_is_refused() {
        let d = dir("large");
        std::fs::write(d.join("big.yaml"), vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        let e = Texts::read(std::slice::from_ref(&d))
            .unwrap_err()
            .to_string();
        assert!(e.contains("big.yaml") && e.contains("larger than"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_are_read_in_name_order_dotfiles_skipped_and_counted() {
        let d = dir("many");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        for name in ["b.yaml", "a.yaml", ".swap.yaml", "sub/c.yaml"] {
            std::fs::write(d.join(name), "domain: x\n").unwrap();
        }
        let texts = Texts::read(std::slice::from_ref(&d)).unwrap();
        let names: Vec<String> = texts
            .0
            .iter()
            .map(|(n, _)| n.rsplit('/').next().unwrap_or(n).to_owned())
            .collect();
        assert_eq!(names, ["a.yaml", "b.yaml", "c.yaml"]);
        for i in 0..MAX_FILES {
            std::fs::write(d.join(format!("f{i:04}.yaml")), "").unwrap();
        }
        let e = Texts::read(std::slice::from_ref(&d))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("more than {MAX_FILES} config files")),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }
}

//! A config file's text ([`Source`]), its parsing, and errors located in
//! it by file, line and column ([`ConfigError`]).

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::Config;

/// A config error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line; 0 when the error has no location (e.g. unreadable file).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong, and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

/// A config's text, kept to turn byte spans into lines and columns.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file name used in messages.
    pub file: PathBuf,
    /// The file's text.
    pub text: String,
}

impl Source {
    /// Reads a config file.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text =
            crate::file_read::read_text(path, crate::file_read::MAX_CONFIG_BYTES).map_err(|e| {
                ConfigError {
                    file: path.to_owned(),
                    line: 0,
                    column: 0,
                    message: format!("cannot read the config: {e}"),
                }
            })?;
        Ok(Self {
            file: path.to_owned(),
            text,
        })
    }

    /// An error at byte range `span` (or at no location, for an empty span
    /// at 0 that stands for a default value).
    pub fn error_at(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        let (line, column) = match span {
            Some(span) => {
                let start = span.start.min(self.text.len());
                let before = &self.text[..start];
                let line = before.matches('\n').count() + 1;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                (line, before[line_start..].chars().count() + 1)
            }
            None => (0, 0),
        };
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            message: message.into(),
        }
    }

    /// Parses the text as a [`Config`].
    pub fn parse(&self) -> Result<Config, ConfigError> {
        toml::from_str(&self.text).map_err(|e| {
            let message = e.message().trim().to_owned();
            self.error_at(Some(e.span().unwrap_or(0..0)), message)
        })
    }
}

//! The sizes issue 13 sets for the code a newcomer reads: no source file
//! over about 500 lines of non-test code, and no function over about 80
//! lines. Read from every crate's `src/` (a file's non-test code is what
//! comes before its first `#[cfg(test)]` at the start of a line; a
//! function runs from its `fn` line to the `}` at the same indentation).
//! The bounds are the issue's own: 500 lines and 80 lines.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
const MAX_FN_LINES: usize = 80;

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `src/` files of every crate of the workspace.
fn sources() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap().flatten() {
        rust_files(&krate.path().join("src"), &mut files);
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
}

/// The lines before the file's test module: the first `#[cfg(test)]` that
/// starts a line and is followed by a `mod` line. (A test-only item earlier
/// in the file, such as a counter, does not end the count.)
fn non_test(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod "))
        .unwrap_or(lines.len());
    lines[..end].to_vec()
}

/// The name and length of each function, where its `fn` line starts one.
fn functions<'a>(lines: &[&'a str]) -> Vec<(&'a str, usize)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let rest = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| trimmed.strip_prefix(p))
            .unwrap_or(trimmed);
        let rest = rest.strip_prefix("async ").unwrap_or(rest);
        let rest = rest.strip_prefix("const ").unwrap_or(rest);
        let Some(signature) = rest.strip_prefix("fn ") else {
            continue;
        };
        let name = signature
            .split(|c: char| !c.is_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let close = format!("{indent}}}");
        if let Some(end) = lines[i + 1..].iter().position(|l| *l == close) {
            out.push((name, end + 2));
        }
    }
    out
}

#[test]
fn source_files_and_functions_stay_small() {
    let mut too_big = Vec::new();
    for file in sources() {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines = non_test(&text);
        if lines.len() > MAX_FILE_LINES {
            too_big.push(format!("{}: {} lines", file.display(), lines.len()));
        }
        for (name, len) in functions(&lines) {
            if len > MAX_FN_LINES {
                too_big.push(format!("{}: fn {name}: {len} lines", file.display()));
            }
        }
    }
    assert!(too_big.is_empty(), "too big:\n{}", too_big.join("\n"));
}

#[test]
fn the_measure_finds_functions_and_test_code() {
    // A test-only item before the test module is counted; the module is not.
    let text = "fn a() {\n    x();\n}\n\n    pub async fn b(\n        y: u8,\n    ) {\n    }\n#[cfg(test)]\nstatic N: u8 = 0;\nfn d() {\n}\n#[cfg(test)]\nmod tests {\nfn c() {\n}\n}\n";
    let lines = non_test(text);
    assert_eq!(lines.len(), 12);
    assert_eq!(functions(&lines), vec![("a", 3), ("b", 4), ("d", 2)]);
}

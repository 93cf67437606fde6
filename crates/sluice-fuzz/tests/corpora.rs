//! Replays every committed fuzz corpus (`fuzz/corpus/<target>/`) through
//! its target function, on stable, so that each input the fuzzers kept
//! (and each crash they found, once fixed) is checked by `cargo test`.

use std::path::PathBuf;

/// Calls `target` on every file in `fuzz/corpus/<name>/`, failing when the
/// folder is missing or empty: a replay of nothing would always pass.
fn replay(name: &str, target: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => panic!("no corpus for `{name}` at {}: {e}", dir.display()),
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| match e {
            Ok(e) => e.path(),
            Err(e) => panic!("cannot list {}: {e}", dir.display()),
        })
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "the corpus of `{name}` at {} is empty",
        dir.display()
    );
    for file in &files {
        let data = match std::fs::read(file) {
            Ok(d) => d,
            Err(e) => panic!("cannot read {}: {e}", file.display()),
        };
        let result = std::panic::catch_unwind(|| target(&data));
        if result.is_err() {
            panic!("`{name}` fails on {}", file.display());
        }
    }
}

macro_rules! corpus_tests {
    ($($target:ident),* $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), sluice_fuzz::$target);
            }
        )*
    };
}

corpus_tests!(
    config_toml,
    envoy_yaml,
    rate,
    forwarded,
    check_json,
    path,
    access_log,
    rls_request,
);

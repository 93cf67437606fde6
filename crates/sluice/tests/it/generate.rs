//! `sluice generate` (hidden, for packagers; `scripts/deb`): the man pages
//! and a shell's completions, written into a folder; and the default config
//! the Debian package ships, which must validate on its own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh, empty folder under the temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir = std::env::temp_dir().join(format!(
            "sluice-generate-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `sluice generate ARGS… DIR`: the files it says it wrote.
fn generate(args: &[&str], dir: &Path) -> Vec<PathBuf> {
    let out = Command::new(crate::common::sluice_binary())
        .arg("generate")
        .args(args)
        .arg(dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    let files: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect();
    for f in &files {
        assert!(
            f.starts_with(dir),
            "{} is outside {}",
            f.display(),
            dir.display()
        );
        assert!(f.is_file(), "{} was not written", f.display());
    }
    files
}

#[test]
fn the_man_pages_document_serve() {
    let tmp = TempDir::new("man");
    let dir = tmp.0.join("man1");
    let pages = generate(&["man"], &dir);
    let main = std::fs::read_to_string(dir.join("sluice.1")).unwrap();
    assert!(main.contains(".TH sluice 1"), "{main}");
    assert!(main.contains("serve"), "{main}");
    assert!(pages.contains(&dir.join("sluice-serve.1")), "{pages:?}");
    let serve = std::fs::read_to_string(dir.join("sluice-serve.1")).unwrap();
    assert!(serve.contains("config"), "{serve}");
    // The hidden subcommand documents nothing.
    assert!(!main.contains("generate"), "{main}");
    assert!(!dir.join("sluice-generate.1").exists());
}

#[test]
fn the_completions_offer_serve() {
    let tmp = TempDir::new("completions");
    let dir = tmp.0.join("completions");
    for (shell, name) in [
        ("bash", "sluice.bash"),
        ("zsh", "_sluice"),
        ("fish", "sluice.fish"),
    ] {
        let files = generate(&["completions", shell], &dir);
        assert_eq!(files, [dir.join(name)], "{shell}");
        let script = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(script.contains("serve"), "{shell}: {script}");
        // serve's --config (fish spells it `-l config`).
        assert!(script.contains("config"), "{shell}: {script}");
        assert!(!script.contains("generate"), "{shell}: {script}");
    }
    let bash = std::fs::read_to_string(dir.join("sluice.bash")).unwrap();
    assert!(bash.contains("complete -F"), "{bash}");
}

#[test]
fn an_unknown_shell_is_refused() {
    let tmp = TempDir::new("unknown-shell");
    let out = Command::new(crate::common::sluice_binary())
        .args(["generate", "completions", "tcsh"])
        .arg(&tmp.0)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tcsh"), "{stderr}");
}

/// `packaging/sluice.toml` is what the Debian package installs as
/// `/etc/sluice/sluice.toml`: it must validate without any other file.
#[test]
fn the_packaged_default_config_is_valid() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/sluice.toml");
    let out = Command::new(crate::common::sluice_binary())
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

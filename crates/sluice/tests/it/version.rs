//! `sluice --version` names the version and the commit it was built from.

#[test]
fn the_version_names_the_commit() {
    let out = std::process::Command::new(crate::common::sluice_binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let expected_start = format!("sluice {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = text
        .strip_prefix(&expected_start)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{text}"));
    // Built in a git checkout (as the tests are), it is HEAD's, short.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match head {
        Some(head) => assert_eq!(commit, head, "{text}"),
        None => assert_eq!(commit, "unknown", "{text}"),
    }
}

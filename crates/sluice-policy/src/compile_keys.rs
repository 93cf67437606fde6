//! The keys a config assigns plans to: its `[keys]`, its `[client]
//! keys_file` and its `runtime_keys_file`, read and checked when a policy
//! is compiled; and the guard that refuses a keys file emptied or gutted
//! in one change.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::compile::config_dir;
use crate::config::{Config, ConfigError, Source};
use crate::keys_file::KeysFile;
use crate::policy::{Policy, RuntimeKeysFile};

/// A keys file read: its path and its number of entries.
pub(crate) type KeysFileRead = Option<(PathBuf, usize)>;

/// The config's `[keys]` and its `[client] keys_file` (resolved against
/// the config's folder), merged: key to plan, and the keys file's path
/// with its number of entries.
pub(crate) fn assignments(
    source: &Source,
    config: &Config,
    has_plan: &dyn Fn(&str) -> bool,
) -> Result<(HashMap<String, String>, KeysFileRead), ConfigError> {
    let mut assignments = HashMap::new();
    for (key, plan) in &config.keys {
        if !has_plan(plan.get_ref()) {
            return Err(source.error_at(
                Some(plan.span()),
                format!("keys: no plan named `{}`", plan.get_ref()),
            ));
        }
        assignments.insert(key.clone(), plan.get_ref().clone());
    }
    let Some(f) = &config.client.keys_file else {
        return Ok((assignments, None));
    };
    let path = config_dir(source).join(f.get_ref());
    let file = KeysFile::read(&path, false).map_err(|e| {
        if e.line == 0 {
            source.error_at(Some(f.span()), format!("client.keys_file: {e}"))
        } else {
            e
        }
    })?;
    for entry in &file.entries {
        if !has_plan(&entry.plan) {
            return Err(file.source.error_at(
                Some(entry.plan_span.clone()),
                format!("no plan named `{}`", entry.plan),
            ));
        }
        assignments.insert(entry.key.clone(), entry.plan.clone());
    }
    Ok((assignments, Some((path, file.entries.len()))))
}

/// Refuses a keys file with no entries, and, on a reload, one whose change
/// loses more than half of the running assignments, unless
/// `client.allow_keys_file_loss`: an emptied or truncated file would move
/// paying keys to the default plan (and loosen stricter plans) without a
/// word, as an emptied config would switch limits off.
pub(crate) fn refuse_keys_loss(
    source: &Source,
    config: &Config,
    assignments: &HashMap<String, String>,
    keys_file: &KeysFileRead,
    running: Option<&Policy>,
) -> Result<(), ConfigError> {
    let (Some(f), Some((path, entries))) = (&config.client.keys_file, keys_file) else {
        return Ok(());
    };
    if config.client.allow_keys_file_loss {
        return Ok(());
    }
    if *entries == 0 {
        return Err(source.error_at(
            Some(f.span()),
            format!(
                "client.keys_file: `{}` has no entries, so every key it assigned would lose its plan; refused (set client.allow_keys_file_loss = true if it is meant to be empty)",
                path.display()
            ),
        ));
    }
    let Some(old) = running.filter(|p| p.keys_file.is_some()) else {
        return Ok(());
    };
    let lost = old
        .assignments
        .keys()
        .filter(|k| !assignments.contains_key(*k))
        .count();
    if lost * 2 > old.assignments.len() {
        return Err(source.error_at(
            Some(f.span()),
            format!(
                "client.keys_file: `{}` lost {lost} of the {} keys assigned now in one change (more than half); refused, the running config stays (set client.allow_keys_file_loss = true if this is meant, or make the change in smaller steps)",
                path.display(),
                old.assignments.len()
            ),
        ));
    }
    Ok(())
}

/// `[client] runtime_keys_file`, resolved against the config's folder and
/// read (plans the policy lacks included: they are ignored while it lacks
/// them).
pub(crate) fn runtime_keys(
    source: &Source,
    config: &Config,
) -> Result<Option<RuntimeKeysFile>, ConfigError> {
    let Some(f) = &config.client.runtime_keys_file else {
        return Ok(None);
    };
    let path = config_dir(source).join(f.get_ref());
    let file = KeysFile::read(&path, true).map_err(|e| {
        if e.line == 0 {
            source.error_at(Some(f.span()), format!("client.runtime_keys_file: {e}"))
        } else {
            e
        }
    })?;
    Ok(Some(RuntimeKeysFile {
        path,
        loaded: file.entries.into_iter().map(|e| (e.key, e.plan)).collect(),
    }))
}

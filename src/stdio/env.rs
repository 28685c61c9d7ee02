//! STUB (replaced by the helper's version).
use crate::error::{Error, Result};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
/// Allowlist.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];
pub(crate) fn child_env(
    inherit_all: bool,
    allow: &[OsString],
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| inherit_all || allow.contains(k))
        .collect();
    for (k, v) in extra {
        out.retain(|(n, _)| n != k);
        out.push((k.clone(), v.clone()));
    }
    out
}
pub(crate) fn resolve_program(
    program: &OsStr,
    path: Option<&OsStr>,
    cwd: Option<&Path>,
) -> Result<PathBuf> {
    let p = Path::new(program);
    if program.to_string_lossy().contains('/') {
        return Ok(match cwd {
            Some(c) if p.is_relative() => c.join(p),
            _ => p.to_path_buf(),
        });
    }
    for dir in std::env::split_paths(path.unwrap_or_default()) {
        let c = dir.join(p);
        if c.is_file() {
            return Ok(c);
        }
    }
    Err(Error::builder(format!(
        "program {:?} not found on PATH",
        program
    )))
}

//! What a stdio server gets from the host: its environment, and which
//! program runs.
//!
//! A host's environment holds its secrets (API keys, tokens), and a host
//! starts third-party servers; so, as both official SDKs do, a server gets
//! only an allowlist of the host's variables plus its entry's `env`, and
//! inheriting everything is an explicit opt-in. The program is resolved
//! here, on the `PATH` the child will get, so that a missing program is a
//! configuration error naming it before anything is spawned.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The host variables a stdio server gets by default: the POSIX list of
/// both official SDKs (Python's `get_default_environment`, TypeScript's
/// `DEFAULT_INHERITED_ENV_VARS`, "inspired by sudo"): enough for a server
/// to find its tools and its home directory, nothing that is usually a
/// secret. The entry's own `env` is set over these.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER"];

/// The path searched when the child gets no `PATH` at all: what glibc's
/// `execvp` uses then (`confstr(_CS_PATH)`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// The child's whole environment: the host's variables named in `allow`
/// (or all of them when `inherit_all`), then `extra` (the entry's `env`)
/// set over them, each name once, in that order.
///
/// An inherited value starting with `()` is skipped, as the SDKs do: it is
/// an exported shell function (`BASH_FUNC_x%%`), code the host's shell
/// meant for itself. `extra` is taken as given.
pub(crate) fn child_env(
    inherit_all: bool,
    allow: &[OsString],
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    child_env_from(std::env::vars_os(), inherit_all, allow, extra)
}

/// [`child_env`] over a given host environment (the tests' fake host: the
/// real one is shared by every test thread, and setting a variable in it
/// races with libc's readers).
fn child_env_from(
    host: impl IntoIterator<Item = (OsString, OsString)>,
    inherit_all: bool,
    allow: &[OsString],
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let inherited = host.into_iter().filter(|(name, value)| {
        (inherit_all || allow.contains(name)) && !value.as_encoded_bytes().starts_with(b"()")
    });
    let mut env: Vec<(OsString, OsString)> = Vec::with_capacity(allow.len() + extra.len());
    for (name, value) in inherited.chain(extra.iter().cloned()) {
        // Linear: a few dozen names at most, and it keeps the order.
        match env.iter_mut().find(|(known, _)| *known == name) {
            Some((_, old)) => *old = value,
            None => env.push((name, value)),
        }
    }
    env
}

/// The `PATH` of an environment built by [`child_env`], if it has one.
pub(crate) fn path_of(env: &[(OsString, OsString)]) -> Option<&OsStr> {
    env.iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_os_str())
}

/// Which file runs for `program`, the way a shell finds it.
///
/// A name containing `/` is used as given, relative to `cwd` when relative
/// (the child runs there). The file found is named by an absolute path. Any other name is searched on `path`, the
/// `PATH` the child gets (not the host's: the child's is what a shell in
/// the child would search), entry by entry: the first entry holding an
/// executable regular file wins; an empty or relative entry is relative
/// to the child's directory (`cwd`, else the host's). With no `PATH` at
/// all, the system default (`/bin:/usr/bin`) is searched, as `execvp` does.
///
/// A missing program, or one that exists but cannot be run, is an
/// [`Error::is_builder`] naming it (and the `PATH` searched): it is the
/// host's configuration, and trying again would fail again, so a
/// supervisor must not retry it in a loop.
pub(crate) fn resolve_program(
    program: &OsStr,
    path: Option<&OsStr>,
    cwd: Option<&Path>,
) -> Result<PathBuf> {
    if program.is_empty() {
        return Err(Error::builder("the stdio server's command is empty"));
    }
    // Absolute, against the host's directory: the child changes to `cwd`
    // before it execs, where a relative path (a relative `cwd` joined, or
    // a relative `PATH` entry) would be read a second time.
    let in_cwd = |candidate: &Path| {
        let joined = match cwd {
            Some(cwd) if candidate.is_relative() => cwd.join(candidate),
            _ => candidate.to_path_buf(),
        };
        std::path::absolute(&joined).unwrap_or(joined)
    };
    if program.as_encoded_bytes().contains(&b'/') {
        let candidate = in_cwd(Path::new(program));
        return match probe(&candidate) {
            Probe::Executable => Ok(candidate),
            Probe::Missing => Err(Error::builder(format!(
                "the program {program:?} was not found (looked for {candidate:?})"
            ))),
            Probe::NotExecutable(why) => Err(Error::builder(format!(
                "the program {program:?} cannot be run: {candidate:?} {why}"
            ))),
        };
    }
    let searched = path.unwrap_or(OsStr::new(DEFAULT_PATH));
    // The first entry that has the name but cannot run it, for the error if
    // no entry can (a shell says "permission denied" then, not "not found").
    let mut unrunnable: Option<(PathBuf, &'static str)> = None;
    for entry in std::env::split_paths(searched) {
        // An empty entry is the working directory, as for `execvp`.
        let dir = if entry.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            entry
        };
        let candidate = in_cwd(&dir.join(program));
        match probe(&candidate) {
            Probe::Executable => return Ok(candidate),
            Probe::Missing => {}
            Probe::NotExecutable(why) => {
                unrunnable.get_or_insert((candidate, why));
            }
        }
    }
    let which = if path.is_some() {
        "PATH"
    } else {
        "the default PATH (the server gets no PATH)"
    };
    Err(Error::builder(match unrunnable {
        Some((candidate, why)) => format!(
            "the program {program:?} cannot be run: {candidate:?} {why}, and no other entry of {which} {searched:?} has it"
        ),
        None => format!("the program {program:?} was not found on {which} {searched:?}"),
    }))
}

/// What is at a candidate path, for [`resolve_program`].
enum Probe {
    /// An executable regular file (or a link to one).
    Executable,
    /// Nothing there (or nothing reachable: a dangling link, an entry that
    /// is not a directory).
    Missing,
    /// Something that cannot be run, and why, in a few words.
    NotExecutable(&'static str),
}

/// Looks at `candidate`, following links, as `execve` would.
fn probe(candidate: &Path) -> Probe {
    match fs::metadata(candidate) {
        Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
            Probe::NotExecutable("is in a directory that cannot be searched")
        }
        Err(_) => Probe::Missing,
        Ok(meta) if meta.is_dir() => Probe::NotExecutable("is a directory"),
        Ok(meta) if !meta.is_file() => Probe::NotExecutable("is not a regular file"),
        // Any execute bit, as a shell's lookup checks; who may use it is
        // the kernel's verdict at exec, reported by the spawn.
        #[cfg(unix)]
        Ok(meta) if std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 == 0 => {
            Probe::NotExecutable("is not executable")
        }
        Ok(_) => Probe::Executable,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A directory of its own under the system's temporary directory,
    /// removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        /// Makes a fresh, uniquely named directory.
        pub(crate) fn new(tag: &str) -> TempDir {
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let name = format!(
                "mcp-scoped-http-{tag}-{}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.subsec_nanos())
            );
            let dir = std::env::temp_dir().join(name);
            fs::create_dir(&dir).expect("a fresh temporary directory");
            TempDir(dir)
        }

        /// Writes a file of `mode` named `name` in the directory.
        pub(crate) fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
            let path = self.0.join(name);
            fs::write(&path, text).expect("write a test file");
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).expect("chmod");
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// Shorthand for an owned name or value.
    fn os(text: &str) -> OsString {
        OsString::from(text)
    }

    /// `PATH` made of the given directories.
    fn path_of_dirs(dirs: &[&Path]) -> OsString {
        let joined: Vec<&[u8]> = dirs.iter().map(|dir| dir.as_os_str().as_bytes()).collect();
        OsString::from_vec(joined.join(&b':'))
    }

    #[test]
    fn the_allowlist_and_extra_reach_the_child_and_nothing_else() {
        let host = || {
            vec![
                (os("HOME"), os("/home/someone")),
                (os("API_KEY"), os("hunter2")),
                (os("ALLOWED"), os("fine")),
                (os("BASH_FUNC_f%%"), os("() { echo hi; }")),
                (os("SHELL_FUNCTION"), os("() { echo hi; }")),
            ]
        };
        let allow = [
            os("ALLOWED"),
            os("SHELL_FUNCTION"),
            os("HOME"),
            os("NOT_SET"),
        ];
        let extra = [
            (os("ALLOWED"), os("overridden")),
            (os("FROM_CONFIG"), os("() a value given is kept")),
        ];
        let env = child_env_from(host(), false, &allow, &extra);
        assert_eq!(
            env,
            vec![
                (os("HOME"), os("/home/someone")),
                (os("ALLOWED"), os("overridden")),
                (os("FROM_CONFIG"), os("() a value given is kept")),
            ],
            "the secret, the shell functions and the unset name stay out"
        );

        let all = child_env_from(host(), true, &[], &extra);
        assert_eq!(
            all,
            vec![
                (os("HOME"), os("/home/someone")),
                (os("API_KEY"), os("hunter2")),
                (os("ALLOWED"), os("overridden")),
                (os("FROM_CONFIG"), os("() a value given is kept")),
            ],
            "inherit_all passes everything but shell functions"
        );

        // The real host: only allowlisted names, PATH among them.
        let defaults: Vec<OsString> = DEFAULT_ENV_ALLOWLIST.iter().map(|name| os(name)).collect();
        let env = child_env(false, &defaults, &[]);
        assert!(
            env.iter()
                .all(|(name, _)| DEFAULT_ENV_ALLOWLIST.iter().any(|allowed| name == *allowed))
        );
        assert_eq!(
            path_of(&env),
            std::env::var_os("PATH").as_deref(),
            "PATH is inherited by default"
        );
    }

    #[test]
    fn a_bare_name_is_searched_on_the_childs_path_in_order() {
        let first = TempDir::new("path-a");
        let second = TempDir::new("path-b");
        // Not executable in the first entry, executable in the second: a
        // shell runs the second.
        first.file("server", "#!/bin/sh\n", 0o644);
        let wanted = second.file("server", "#!/bin/sh\n", 0o755);
        let path = path_of_dirs(&[Path::new("/nonexistent-dir"), &first.0, &second.0]);
        let found = resolve_program(OsStr::new("server"), Some(&path), None).expect("found");
        assert_eq!(found, wanted);

        // A directory of the name is skipped too.
        fs::create_dir(first.0.join("tool")).expect("mkdir");
        let tool = second.file("tool", "#!/bin/sh\n", 0o700);
        assert_eq!(
            resolve_program(OsStr::new("tool"), Some(&path), None).expect("found"),
            tool
        );

        // An empty entry is the child's directory.
        let path = OsString::from("/nonexistent-dir::/also-not-there");
        let found = resolve_program(OsStr::new("server"), Some(&path), Some(&second.0))
            .expect("found in cwd");
        assert_eq!(found, second.0.join("./server"));
    }

    #[test]
    fn a_missing_program_is_a_configuration_error_naming_it_and_the_path() {
        let dir = TempDir::new("path-missing");
        let path = path_of_dirs(&[&dir.0, Path::new("/nonexistent-dir")]);
        let error = resolve_program(OsStr::new("no-such-server-xyz"), Some(&path), None)
            .expect_err("missing");
        assert!(error.is_builder(), "{error}");
        assert!(!error.is_retryable());
        let text = error.to_string();
        assert!(
            text.contains("\"no-such-server-xyz\" was not found on PATH"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent-dir"),
            "the PATH is shown: {text}"
        );

        // Found only where it cannot run: said so.
        dir.file("no-such-server-xyz", "#!/bin/sh\n", 0o600);
        let error = resolve_program(OsStr::new("no-such-server-xyz"), Some(&path), None)
            .expect_err("not executable");
        assert!(error.is_builder());
        assert!(error.to_string().contains("is not executable"), "{error}");

        // No PATH at all: the default is searched, and the message says so.
        let error =
            resolve_program(OsStr::new("no-such-server-xyz"), None, None).expect_err("missing");
        assert!(error.to_string().contains("default PATH"), "{error}");
        assert!(resolve_program(OsStr::new("sh"), None, None).is_ok());

        // Control characters in a name are escaped, not printed.
        let error = resolve_program(OsStr::new("bad\nname\x1b[2J"), Some(&path), None)
            .expect_err("missing");
        assert!(!error.to_string().contains('\n'), "{error}");
        assert!(!error.to_string().contains('\x1b'), "{error}");

        let error = resolve_program(OsStr::new(""), Some(&path), None).expect_err("empty");
        assert!(error.is_builder());
    }

    #[test]
    fn a_name_with_a_slash_is_used_as_given_relative_to_cwd() {
        let dir = TempDir::new("slash");
        let script = dir.file("run.sh", "#!/bin/sh\n", 0o755);
        // Absolute: as given, whatever the PATH.
        let found = resolve_program(script.as_os_str(), Some(OsStr::new("")), None).expect("ok");
        assert_eq!(found, script);
        // Relative: under cwd, never searched on PATH.
        let found = resolve_program(OsStr::new("./run.sh"), None, Some(&dir.0)).expect("ok");
        assert_eq!(found, script);
        // A relative `cwd` too: the path found is absolute, since the child
        // reads it after changing to `cwd`.
        let host = std::env::current_dir().expect("the host's directory");
        let up: PathBuf = host.components().skip(1).map(|_| "..").collect();
        let relative = up.join(dir.0.strip_prefix("/").expect("absolute"));
        let found = resolve_program(OsStr::new("./run.sh"), None, Some(&relative)).expect("ok");
        assert!(found.is_absolute(), "{found:?}");
        assert!(found.is_file(), "{found:?}");
        let error =
            resolve_program(OsStr::new("./sh"), None, Some(&dir.0)).expect_err("not on PATH");
        assert!(error.is_builder());
        assert!(
            error.to_string().contains("\"./sh\" was not found"),
            "{error}"
        );

        let text = dir.file("data.txt", "", 0o644);
        let error = resolve_program(text.as_os_str(), None, None).expect_err("not executable");
        assert!(error.to_string().contains("is not executable"), "{error}");
        let error = resolve_program(dir.0.as_os_str(), None, None).expect_err("a directory");
        assert!(error.to_string().contains("is a directory"), "{error}");
    }
}

//! Builds the stdio watchdog, `src/stdio/watchdog.c`: a small program of
//! its own that the crate embeds and runs beside every stdio server (see
//! `src/stdio/process.rs` for why it is not a fork of the host).

fn main() {
    println!("cargo:rerun-if-changed=src/stdio/watchdog.c");
    #[cfg(feature = "stdio")]
    if std::env::var_os("CARGO_CFG_UNIX").is_some() {
        watchdog();
    }
}

/// Compiles and links the watchdog with the target's C compiler (the one
/// the `cc` crate finds, as for any C a crate builds) into
/// `$OUT_DIR/mcp-watchdog`.
#[cfg(feature = "stdio")]
fn watchdog() {
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("mcp-watchdog");
    let compiler = cc::Build::new()
        .opt_level_str("s")
        .debug(false)
        .warnings(true)
        .extra_warnings(true)
        .get_compiler();
    let mut command = compiler.to_command();
    command
        .arg("src/stdio/watchdog.c")
        .arg("-o")
        .arg(&out)
        .arg("-std=c99");
    let apple = std::env::var("CARGO_CFG_TARGET_VENDOR").is_ok_and(|vendor| vendor == "apple");
    if !apple {
        // No symbols: it is embedded in every binary that has the feature.
        command.arg("-s");
    }
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("running the C compiler ({command:?}): {error}"));
    for line in String::from_utf8_lossy(&output.stderr).lines() {
        println!("cargo:warning=watchdog.c: {line}");
    }
    assert!(
        output.status.success(),
        "compiling src/stdio/watchdog.c failed ({}): {command:?}",
        output.status
    );
}

//! Builds the preload library and embeds it in the `heapdump` executable,
//! so that a `heapdump` copied alone or installed with `cargo install
//! --path crates/cli` can trace programs: `run` writes it to a private
//! per-user cache the first time (see `run::preload_library`).
//!
//! The library is a `cdylib` of this workspace, which a build script
//! cannot depend on directly: it is built by a nested cargo, in a target
//! directory of its own under `OUT_DIR` (so the outer build's lock is not
//! waited for), with the outer build's profile.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let workspace = manifest.parent().and_then(|p| p.parent()).expect("crates/cli lives two levels below the workspace");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let target = out.join("preload-target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "heapdump-preload", "--target-dir"]).arg(&target).current_dir(workspace);
    if release {
        cmd.arg("--release");
    }
    // The outer build's choices of target directory do not apply here.
    cmd.env_remove("CARGO_TARGET_DIR");
    // The library lives inside other programs: a panic in it aborts there
    // and then, it never unwinds into the host (panic = "abort" for this
    // cdylib alone: a profile cannot set it per package).
    cmd.env("CARGO_PROFILE_RELEASE_PANIC", "abort").env("CARGO_PROFILE_DEV_PANIC", "abort");
    let status = cmd.status().expect("running cargo to build the preload library");
    assert!(status.success(), "building libheapdump_preload.so for embedding failed");
    let so = target.join(if release { "release" } else { "debug" }).join("libheapdump_preload.so");
    assert!(so.exists(), "{} was not built", so.display());
    println!("cargo:rustc-env=HEAPDUMP_EMBEDDED_PRELOAD={}", so.display());
    for dir in ["crates/preload", "crates/heapdump", "crates/format"] {
        println!("cargo:rerun-if-changed={}", workspace.join(dir).display());
    }
    println!("cargo:rerun-if-changed={}", workspace.join("Cargo.lock").display());
    println!("cargo:rerun-if-changed=build.rs");
}

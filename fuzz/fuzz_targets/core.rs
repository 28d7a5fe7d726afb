//! Feeds arbitrary bytes, as a core file, to `heapdump core`'s reader
//! (crates/attach: the ELF headers, PT_LOAD segments, NT_PRSTATUS,
//! NT_PRPSINFO and NT_FILE notes, then glibc's heap walked in the
//! segments): it must never panic, hang or allocate what the file does not
//! hold, and a dump it writes must read back.
//!
//! The bytes go through a file (in /dev/shm when there is one), as
//! `heapdump core` takes them: the reader maps its input.
#![no_main]

use heapdump_format::Mode;
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let d = base.join(format!("heapdump-fuzz-core-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let (core, out) = (dir().join("core"), dir().join("out.hdump"));
    std::fs::write(&core, data).unwrap();
    let _ = std::fs::remove_file(&out);
    if heapdump_attach::core(&core, None, Mode::Full, &out).is_ok() {
        let bytes = std::fs::read(&out).unwrap();
        let dump = heapdump_format::Dump::parse(&bytes).expect("the dump written from a core reads back");
        for r in dump.records() {
            r.expect("every record of the dump written from a core reads back");
        }
    }
});
